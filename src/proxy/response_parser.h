// The parser of a backend's response. Two ways through one interface:
//
// * The common case — a whole head in the buffer, status 2xx–5xx, HTTP/1.0 or
//   1.1, a single plain Content-Length (or no body: HEAD, 204, 304), no
//   Transfer-Encoding / Upgrade / Proxy-Connection, no obs-fold, every octet
//   valid — is parsed by heft itself in one pass (parse_simple_head()), and
//   the body is then a count of octets. Beast's tokenizer and field handling
//   took ~2,600 user-space instructions for a 4-field head, a fifth of what a
//   proxied request cost (callgrind; mostly per-octet loops); this path
//   takes ~1,150 (BENCHMARKS.md, "Where heft's user time goes").
// * Everything else goes to Beast's HTTP/1.1 parser (basic_parser: status
//   line, fields, Content-Length / chunked, limits), so anything unusual —
//   chunked bodies, bodies delimited by close, interim 1xx, lists in
//   Content-Length, malformed heads and their errors — behaves as it does
//   with Beast alone. The fast path accepts only heads that Beast accepts and
//   gives the same results for them (differential test:
//   tests/proxy/response_parser_test.cc). One exception to Beast: a head with
//   both Transfer-Encoding and Content-Length, which Beast refuses, is read
//   without its Content-Length (read_without_length()).
//
// Both read a response head more leniently than Beast alone, as nginx and
// HAProxy do (a backend's 502 would be retried on every backend and counted
// against each): a line may end in a bare LF (RFC 9112 2.2), a status line
// may end right after its code (an empty reason), and a control character
// other than CR, LF and NUL in a reason or field value is kept as received
// (RFC 9110 5.5). For Beast, such a head is rewritten into a copy it
// accepts (CRLF, the SP, the controls masked) and the controls are put back
// into the values it reports; it is given whole heads only (see put()).
//
// Either way the fields are kept as a flat list instead of Beast's
// basic_fields: the proxy walks them once to build the head it forwards and
// looks two of them up.
//
// The body is not copied: after put(), body() is the piece of body octets
// (chunk framing removed) that put() found, a view into the bytes given to
// put(), valid until the caller overwrites those bytes. One piece per put():
// a second piece ends the put with error::need_buffer (as a full
// http::buffer_body would); clear_body() before the next put().
//
// Thread safety: one parser belongs to one session (one worker thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/optional/optional.hpp>

#include "proxy/field_arena.h"
#include "net/http_chars.h"

namespace heft::proxy {

class ResponseParser final : private boost::beast::http::basic_parser<false> {
  using base = boost::beast::http::basic_parser<false>;

 public:
  using field = boost::beast::http::field;
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

  struct Field {
    // The names the proxy acts on (hop-by-hop and framing: Connection,
    // Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade,
    // Content-Length) and Date (added when missing) as Beast's field enum;
    // field::unknown for all others.
    field name;
    uint32_t name_at = 0;  // offsets into the parser's copy of the head
    uint32_t name_size = 0;
    uint32_t value_at = 0;
    uint32_t value_size = 0;
  };

  explicit ResponseParser(FieldArena& arena)
      : arena_(&arena), store_(ArenaAllocator<char>(arena)), fields_(ArenaAllocator<Field>(arena)) {
    store_.reserve(768);
    fields_.reserve(16);
  }

  // Consumes a head (whole, or nothing: need_more) or one piece of body; as
  // basic_parser::put with eager(false).
  std::size_t put(boost::asio::const_buffer buffer, error_code& ec);
  void put_eof(error_code& ec);

  bool is_header_done() const { return simple_ || base::is_header_done(); }
  bool is_done() const { return simple_ ? remaining_ == 0 : base::is_done(); }
  // False also after a head whose Content-Length was dropped (length_dropped()).
  // RFC 9112 9.3: "close" ends the connection, HTTP/1.0's too, where Beast
  // lets a "keep-alive" beside it win (close_on_http10_).
  bool keep_alive() const {
    return simple_ ? simple_keep_alive_ : base::keep_alive() && !length_dropped_ && !close_on_http10_;
  }
  bool chunked() const { return simple_ ? false : base::chunked(); }
  boost::optional<std::uint64_t> content_length() const {
    if (!simple_) return base::content_length();
    if (!has_length_) return boost::none;
    return length_;
  }

  // A response to HEAD: no body whatever the head says.
  void skip(bool v) { base::skip(v); }
  bool skip() const { return base::skip(); }
  void header_limit(std::uint32_t v) {
    header_limit_ = v;
    base::header_limit(v);
  }
  void body_limit(std::uint64_t v) {
    body_limit_ = v;
    base::body_limit(v);
  }

  // The head had Transfer-Encoding and Content-Length: the length was dropped
  // (it is not among fields()) and the body is framed by the coding.
  bool length_dropped() const { return length_dropped_; }

  // True when heft's own head parser took this response (for tests).
  bool took_simple_path() const { return simple_; }

  FieldArena& arena() const { return *arena_; }
  unsigned status() const { return status_; }
  std::string_view reason() const { return text(reason_at_, reason_size_); }
  const std::vector<Field, ArenaAllocator<Field>>& fields() const { return fields_; }
  std::string_view name(const Field& f) const { return text(f.name_at, f.name_size); }
  std::string_view value(const Field& f) const { return text(f.value_at, f.value_size); }
  // The first field called `name` (one of those listed at Field), or "".
  std::string_view value(field name) const {
    for (const Field& f : fields_)
      if (f.name == name) return value(f);
    return {};
  }

  std::string_view body() const { return body_; }
  void clear_body() { body_ = {}; }

 private:
  // heft's own parse of a head at the start of [p, p + n): taken (the head
  // was the common case and is kept; `used` is its size), incomplete (no
  // empty line yet; nothing kept) or not simple (Beast's; nothing kept).
  enum class Simple { taken, incomplete, not_simple };
  Simple parse_simple_head(const char* p, std::size_t n, std::size_t& used);
  std::size_t put_simple_body(boost::asio::const_buffer buffer, error_code& ec);
  // The first bytes for Beast: a whole head (as it came, or rewritten), or
  // as much as shows a line Beast refuses.
  std::size_t put_head_to_beast(const char* p, std::size_t n, error_code& ec);
  // What of [p, p + n) Beast may have now: nothing yet (wait), the bytes as
  // they are, or the first `size` of them rewritten (lenient_); too_large
  // when a head heft has to rewrite does not end within the header limit,
  // refused (refused_) for a status line Beast would refuse.
  enum class Handoff { wait, as_is, rewritten, too_large, refused };
  Handoff scan_for_beast(const char* p, std::size_t n, std::size_t& size);
  // Whether [line, stop) (a whole line's content, its line end left out; a
  // status line Beast takes) is a line Beast refuses; notes in lenient_ what
  // it accepts only rewritten.
  bool bad_line_for_beast(const char* p, const char* line, const char* stop);
  // Gives Beast the head in rewritten_ (whole, or up to a line it refuses).
  void put_rewritten(error_code& ec);
  // Into rewritten_->head: the first `size` octets of the `seen` at p, rewritten.
  void rewrite_for_beast(const char* p, std::size_t size, std::size_t seen);
  // After Beast refused a framing field of the whole head `head` (CRLF
  // lines, as Beast had it): reads it again without its Content-Length when
  // it has Transfer-Encoding too; false (the refusal stands) when not.
  bool read_without_length(std::string_view head, error_code& ec);
  // Puts the controls rewrite_for_beast() masked back into a copy at `at` in
  // store_ of `text` (a view into rewritten_ or not).
  void restore_controls(string_view text, uint32_t at);
  void forget_head() {
    store_.clear();
    fields_.clear();
    status_ = 0;
    reason_at_ = reason_size_ = 0;
  }

  std::string_view text(uint32_t at, uint32_t size) const { return {store_.data() + at, size}; }
  uint32_t keep(std::string_view s) {
    const auto at = static_cast<uint32_t>(store_.size());
    store_.append(s.data(), s.size());
    return at;
  }

  // Beast's callbacks, for the heads it parses.
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int version, error_code&) override {
    status_ = static_cast<unsigned>(code);
    http10_ = version < 11;
    close_on_http10_ = false;
    reason_at_ = keep(reason);
    reason_size_ = static_cast<uint32_t>(reason.size());
    if (rewritten_ && !rewritten_->retained.empty()) restore_controls(reason, reason_at_);
  }
  void on_field_impl(field name, string_view name_string, string_view value, error_code&) override {
    Field f{proxy_field(name)};
    f.name_at = keep(name_string);
    f.name_size = static_cast<uint32_t>(name_string.size());
    f.value_at = keep(value);
    f.value_size = static_cast<uint32_t>(value.size());
    if (rewritten_ && !rewritten_->retained.empty()) restore_controls(value, f.value_at);
    fields_.push_back(f);
    // Beast reads Proxy-Connection as Connection too; so does this.
    if (http10_ && (name == field::connection || name == field::proxy_connection) &&
        has_token({value.data(), value.size()}, "close"))
      close_on_http10_ = true;
  }
  static field proxy_field(field name);
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code& ec) override { return take(body, ec); }
  // Beast lets any octet through in a quoted extension value (buffer_parsing.h).
  void on_chunk_header_impl(std::uint64_t, string_view extensions, error_code& ec) override {
    for (char c : extensions)
      if (!is_field_text(c)) ec = boost::beast::http::error::bad_chunk_extension;
  }
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override { return take(body, ec); }
  void on_finish_impl(error_code&) override {}

  std::size_t take(string_view body, error_code& ec) {
    if (!body_.empty()) {  // the piece taken earlier in this put() goes out first
      ec = boost::beast::http::error::need_buffer;
      return 0;
    }
    body_ = {body.data(), body.size()};
    return body.size();
  }

  FieldArena* arena_;
  unsigned status_ = 0;
  uint32_t reason_at_ = 0, reason_size_ = 0;
  std::basic_string<char, std::char_traits<char>, ArenaAllocator<char>> store_;
  std::vector<Field, ArenaAllocator<Field>> fields_;
  std::string_view body_;

  // heft's own path (simple_): framing of a head parse_simple_head() took.
  bool simple_ = false;
  bool tried_simple_ = false;  // given to Beast
  unsigned attempts_ = 0;      // heft's parse of an incomplete head, repeated a few times at most
  bool simple_keep_alive_ = false;
  bool http10_ = false;            // Beast's path: the status line's version
  bool close_on_http10_ = false;   // Beast's path: an HTTP/1.0 head's Connection lists close
  bool has_length_ = false;
  std::uint64_t length_ = 0;
  std::uint64_t remaining_ = 0;  // body octets still to come
  std::uint32_t header_limit_ = 8192;  // Beast's default
  std::uint64_t body_limit_ = 8 * 1024 * 1024;  // Beast's default for responses

  // Beast's path: the head is scanned (scan_for_beast()) until it is whole.
  bool beast_fed_ = false;  // Beast has had bytes
  uint32_t scan_at_ = 0;    // the first line not scanned whole yet
  uint32_t fields_at_ = 0;  // where the line after the status line starts (0: not scanned yet)
  bool lenient_ = false;    // the head needs rewriting for Beast
  bool length_dropped_ = false;  // see length_dropped()
  boost::beast::http::error refused_{};
  // The rewritten head, and the controls masked in it: offset, octet. Only
  // for the rare heads that need it (heap memory), so that making a parser
  // for every response costs no more.
  struct Rewritten {
    std::string head;
    std::vector<std::pair<uint32_t, char>> retained;
  };
  std::unique_ptr<Rewritten> rewritten_;
};

}  // namespace heft::proxy
