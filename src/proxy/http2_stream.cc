// One HTTP/2 request stream as an Exchange (see http2_stream.h).
#include "proxy/http2_stream.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "proxy/attempt_loop.h"
#include "proxy/http2_connection.h"
#include "proxy/response_relay.h"
#include "proxy/runtime.h"

namespace heft::proxy {
using namespace std::string_view_literals;
namespace {

// Fields HTTP/2 does not carry (RFC 9113 8.2.2): never sent to the client,
// whatever header_down says.
bool connection_specific(std::string_view name) {
  for (std::string_view banned : {"connection"sv, "keep-alive"sv, "proxy-connection"sv, "transfer-encoding"sv,
                                  "upgrade"sv, "te"sv})
    if (iequals(name, banned)) return true;
  return false;
}

nghttp2_nv nv(const std::string& text, const std::array<uint32_t, 4>& span) {
  auto* base = reinterpret_cast<uint8_t*>(const_cast<char*>(text.data()));
  return nghttp2_nv{base + span[0], base + span[2], span[1], span[3], NGHTTP2_NV_FLAG_NONE};
}

ssize_t pull_body(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags, nghttp2_data_source* source,
                  void*) {
  auto* stream = static_cast<Http2Stream*>(source->ptr);
  bool end = false, deferred = false;
  const std::size_t n = stream->pull(buf, length, end, deferred);
  if (end) *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (deferred) return NGHTTP2_ERR_DEFERRED;
  return static_cast<ssize_t>(n);
}

}  // namespace

Http2Stream::Http2Stream(Http2Connection& connection, int32_t stream_id)
    : Exchange(connection.w, connection.local_port, connection.client_ip), conn(connection), id(stream_id),
      signal_(connection.w.io) {
  client_tls = connection.client_tls;
  arena_.reset(arena_bytes_.data());
  head_.emplace(ArenaAllocator<char>(arena_));
  head_->version(20);
}

Http2Stream::~Http2Stream() {
  response_.reset();
  head_.reset();  // its fields may be in the arena
}

bool Http2Stream::add_field(std::string_view name, std::string_view value) {
  header_bytes_ += name.size() + value.size() + 32;
  if (header_bytes_ > Http2Limits::max_header_list) {
    head_too_large = true;
    return false;
  }
  if (!name.empty() && name.front() == ':') {
    // nghttp2 checked the pseudo-header rules already (RFC 9113 8.3.1): each once, none unknown.
    if (name == ":method") head_->method_string(value);
    else if (name == ":path") head_->target(value);
    else if (name == ":authority") authority_.assign(value);
    return true;
  }
  if (name == "cookie") {
    // Crumbs joined into one field for HTTP/1.1 (RFC 9113 8.2.3).
    if (!cookies_.empty()) cookies_.append("; ");
    cookies_.append(value);
    return true;
  }
  if (name == "content-length") {
    uint64_t length = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc{} && end == value.data() + value.size()) content_length_ = length;
  }
  if (name == "host" && !authority_.empty()) return true;  // :authority wins (RFC 9113 8.3.1)
  head_->insert(name, value);
  return true;
}

bool Http2Stream::add_trailer_field(std::string_view name, std::string_view value) {
  header_bytes_ += name.size() + value.size() + 32;
  return header_bytes_ <= Http2Limits::max_header_list;
}

void Http2Stream::head_complete(bool ended) {
  if (!authority_.empty()) {
    head_->erase(http::field::host);
    head_->insert(http::field::host, authority_);
  }
  if (!cookies_.empty()) head_->insert(http::field::cookie, cookies_);
  end_with_head_ = ended;
  body_end_ = ended;
  if (ended) content_length_ = content_length_.value_or(0);
}

void Http2Stream::body_data(std::string_view bytes) {
  if (!task_running) {  // the response is done: what still comes is not read
    nghttp2_session_consume_connection(conn.session, bytes.size());
    return;
  }
  if (body_taken_ == body_.size()) {
    body_.clear();
    body_taken_ = 0;
  }
  body_.append(bytes);
  wake();
}

void Http2Stream::body_ended() {
  body_end_ = true;
  wake();
}

void Http2Stream::closed() {
  nghttp2_open = false;
  // Bytes the client sent and nobody will take still count in the connection's window.
  if (body_taken_ < body_.size()) nghttp2_session_consume_connection(conn.session, body_.size() - body_taken_);
  body_taken_ = body_.size();
  if (!eof_given_ && !(no_body_ && head_out_)) {
    reset_ = true;
    if (serving()) client_left();  // the backend's work is cut short
  }
  wake();
}

Task<void> Http2Stream::wait() {
  signal_.expires_at(Clock::time_point::max());
  co_await signal_.async_wait(use_task);
}

// ---- The body source.

Task<BodyPiece> Http2Stream::read_body(char* out, std::size_t capacity) {
  for (;;) {
    if (body_taken_ < body_.size()) {
      const std::size_t n = std::min(capacity, body_.size() - body_taken_);
      std::memcpy(out, body_.data() + body_taken_, n);
      body_taken_ += n;
      // Taken: the client may send as much again (WINDOW_UPDATE).
      nghttp2_session_consume(conn.session, id, n);
      conn.notify_output();
      co_return BodyPiece{error_code{}, n};
    }
    if (body_end_) co_return BodyPiece{error_code{}, 0};
    if (timed_out) co_return BodyPiece{asio::error::timed_out, 0};
    if (reset_ || !nghttp2_open || conn.transport_failed()) co_return BodyPiece{asio::error::connection_reset, 0};
    co_await wait();
  }
}

Task<bool> Http2Stream::send_continue() {
  static char name[] = ":status", value[] = "100";
  const nghttp2_nv status{reinterpret_cast<uint8_t*>(name), reinterpret_cast<uint8_t*>(value), 7, 3, NGHTTP2_NV_FLAG_NONE};
  if (!nghttp2_open || nghttp2_submit_headers(conn.session, NGHTTP2_FLAG_NONE, id, nullptr, &status, 1, nullptr) != 0)
    co_return false;
  conn.notify_output();
  co_return true;
}

// ---- The response sink.

void Http2Stream::add_response_field(std::string_view name, std::string_view value) {
  const auto at = static_cast<uint32_t>(response_text_.size());
  for (char c : name) response_text_.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
  const auto value_at = static_cast<uint32_t>(response_text_.size());
  response_text_.append(value);
  response_spans_.push_back({at, static_cast<uint32_t>(name.size()), value_at, static_cast<uint32_t>(value.size())});
}

void Http2Stream::begin_response(const ResponseParser& response, const config::ProxyConfig& pool, bool) {
  response_text_.clear();
  response_spans_.clear();
  char digits[24];
  add_response_field(":status", std::string_view(digits, fmt::format_to(digits, "{}", response.status()) - digits));
  no_body_ = response.is_done();  // HEAD, 204, 304
  for_each_forwarded_field(response, pool, connection_lines_, w.date.value(),
                           [this](std::string_view name, std::string_view value) {
                             if (!connection_specific(name)) add_response_field(name, value);
                           },
                           route_state_.response_ops);
  if (!no_body_ && !response.chunked() && response.content_length())
    add_response_field("content-length",
                       std::string_view(digits, fmt::format_to(digits, "{}", *response.content_length()) - digits));
  head_submitted_ = false;
}

bool Http2Stream::submit_head() {
  std::vector<nghttp2_nv> fields;
  fields.reserve(response_spans_.size());
  for (const auto& span : response_spans_) fields.push_back(nv(response_text_, span));
  nghttp2_data_provider provider;
  provider.source.ptr = this;
  provider.read_callback = pull_body;
  head_submitted_ = true;
  return nghttp2_submit_response(conn.session, id, fields.data(), fields.size(), no_body_ ? nullptr : &provider) == 0;
}

bool Http2Stream::send_body(std::string_view piece, bool last, SendResult& result) {
  result = SendResult{};
  if (reset_ || !nghttp2_open || conn.transport_failed()) {
    result.ec = asio::error::connection_reset;
    return true;
  }
  out_ = piece;
  out_done_ = 0;
  out_last_ = last;
  if (!head_submitted_) {
    if (!submit_head()) {
      result.ec = asio::error::connection_reset;
      return true;
    }
  } else if (std::exchange(deferred_, false)) {
    nghttp2_session_resume_data(conn.session, id);
  }
  conn.notify_output();
  return false;
}

std::size_t Http2Stream::pull(uint8_t* out, std::size_t length, bool& end, bool& deferred) {
  const std::size_t n = std::min(length, out_.size() - out_done_);
  if (n > 0) std::memcpy(out, out_.data() + out_done_, n);
  out_done_ += n;
  if (out_done_ == out_.size()) {
    wake();  // the relay may read the next piece
    if (out_last_) {
      end = eof_given_ = true;
    } else if (n == 0) {
      deferred = deferred_ = true;
    }
  }
  return n;
}

Task<void> Http2Stream::finish_send(SendResult& result) {
  for (;;) {
    const bool done = no_body_ ? head_out_ : out_done_ == out_.size() && (!out_last_ || eof_given_);
    if (done) {
      result.head_sent = true;
      result.body_sent = out_.size();
      co_return;
    }
    if (timed_out || reset_ || !nghttp2_open || conn.transport_failed()) {
      result.ec = timed_out ? error_code(asio::error::timed_out) : error_code(asio::error::connection_reset);
      result.head_sent = head_out_;
      result.body_sent = out_done_;
      co_return;
    }
    co_await wait();
  }
}

// An interim response other than 100 (heft answers Expect itself) goes out
// as a HEADERS frame without END_STREAM (RFC 9113 8.1), e.g. 103 Early Hints.
Task<bool> Http2Stream::send_interim(const ResponseParser& response) {
  if (response.status() == 100) co_return true;
  if (!nghttp2_open || reset_) co_return false;
  response_text_.clear();
  response_spans_.clear();
  char digits[8];
  add_response_field(":status", std::string_view(digits, fmt::format_to(digits, "{}", response.status()) - digits));
  const std::string_view extras = connection_extras(connection_list(response, connection_lines_));
  for (const ResponseParser::Field& field : response.fields()) {
    const std::string_view name = response.name(field);
    if (is_hop_by_hop(field.name) || named_by_connection(extras, name) || connection_specific(name)) continue;
    add_response_field(name, response.value(field));
  }
  std::vector<nghttp2_nv> fields;
  for (const auto& span : response_spans_) fields.push_back(nv(response_text_, span));
  if (nghttp2_submit_headers(conn.session, NGHTTP2_FLAG_NONE, id, nullptr, fields.data(), fields.size(), nullptr) != 0)
    co_return false;
  interim_relayed_ = true;
  conn.notify_output();
  co_return true;
}

// ---- The request's life.

Task<void> Http2Stream::send_refusal(const Refusal& refusal) {
  if (refusal.own) {
    co_await send_own(refusal.status);
    co_return;
  }
  refusal_body_ = refusal.text.empty() ? fmt::format("{} {}\n", refusal.status, "error") : std::string(refusal.text);
  if (refusal.text.empty()) {
    static constexpr std::pair<unsigned, std::string_view> kReasons[] = {
        {400, "Bad Request"}, {404, "Not Found"}, {408, "Request Timeout"}, {413, "Content Too Large"},
        {417, "Expectation Failed"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
        {502, "Bad Gateway"}, {503, "Service Unavailable"}, {504, "Gateway Timeout"}};
    for (auto [status, reason] : kReasons)
      if (status == refusal.status) refusal_body_ = fmt::format("{} {}\n", status, reason);
  }
  response_text_.clear();
  response_spans_.clear();
  char digits[24];
  add_response_field(":status", std::string_view(digits, fmt::format_to(digits, "{}", refusal.status) - digits));
  add_response_field("content-type", "text/plain");
  add_response_field("content-length",
                     std::string_view(digits, fmt::format_to(digits, "{}", refusal_body_.size()) - digits));
  add_response_field("date", w.date.value());
  no_body_ = false;
  head_submitted_ = false;
  record_.status = refusal.status;
  record_.size = refusal_body_.size();
  arm(std::chrono::milliseconds(10000));
  SendResult sent;
  if (!send_body(refusal_body_, true, sent)) co_await finish_send(sent);
}

// A route's own answer (respond, redir): its fields ("Name: value\r\n"
// lines, connection-specific ones dropped) and its body, none where the
// status or a HEAD request allows none.
Task<void> Http2Stream::send_own(unsigned status) {
  const bool head_only = status == 204 || status == 304 || request().method() == http::verb::head;
  refusal_body_ = head_only ? std::string() : own_body_;
  response_text_.clear();
  response_spans_.clear();
  char digits[24];
  add_response_field(":status", std::string_view(digits, fmt::format_to(digits, "{}", status) - digits));
  bool typed = false;
  for (std::string_view rest = own_fields_; !rest.empty();) {
    const std::size_t end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    if (connection_specific(name)) continue;
    typed = typed || iequals(name, "content-type");
    add_response_field(name, value);
  }
  if (!typed && !own_body_.empty()) add_response_field("content-type", "text/plain; charset=utf-8");
  if (status != 204 && status != 304)
    add_response_field("content-length",
                       std::string_view(digits, fmt::format_to(digits, "{}", own_body_.size()) - digits));
  add_response_field("date", w.date.value());
  no_body_ = false;
  head_submitted_ = false;
  record_.status = status;
  record_.size = refusal_body_.size();
  arm(std::chrono::milliseconds(10000));
  SendResult sent;
  if (!send_body(refusal_body_, true, sent)) co_await finish_send(sent);
}

void Http2Stream::end_stream_state() {
  if (!nghttp2_open || conn.transport_failed()) return;
  if (!(head_submitted_ && (no_body_ || eof_given_))) {
    // A response cut short (a backend's body failed, a timeout): the client
    // must not take it for whole.
    nghttp2_submit_rst_stream(conn.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
    conn.notify_output();
  }
}

void Http2Stream::response_sent() {
  head_out_ = true;
  wake();
  // The response is whole but the request body still comes: the client may
  // stop sending it (RFC 9113 8.1). Only now: a reset queued earlier would
  // overtake the response's last DATA frames.
  if (!body_end_) nghttp2_submit_rst_stream(conn.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
}

Task<void> Http2Stream::run() {
  // Reset before its task ran (a client's cancel, a rapid reset): nothing to serve, nothing to log.
  if (reset_ || !nghttp2_open || conn.transport_failed()) co_return;
  record_ = RequestRecord{};
  request_start_ = Clock::now();
  request_ = &*head_;
  co_await serve(*this);
  if (refusal_.status) {
    const Refusal refusal = std::exchange(refusal_, Refusal{});
    if (nghttp2_open && !reset_ && !head_submitted_) co_await send_refusal(refusal);
  }
  finish_request(*this);
  current_routes_.reset();
  disarm();
  end_stream_state();
}

void Http2Stream::cut() {
  if (!serving()) return;
  finish_request(*this);
}

}  // namespace heft::proxy
