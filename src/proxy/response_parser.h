// The parser of a backend's response: Beast's HTTP/1.1 tokenizer and framing
// (basic_parser: status line, fields, Content-Length / chunked, limits), with
// the fields kept as a flat list instead of Beast's basic_fields. The proxy
// only walks the fields once to build the head it forwards and looks two of
// them up; the ordered set and per-field nodes basic_fields maintains cost
// more than that (callgrind: 2 % of a proxied request's user-space
// instructions went with them).
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
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "proxy/field_arena.h"

namespace heft::proxy {

class ResponseParser final : public boost::beast::http::basic_parser<false> {
 public:
  using field = boost::beast::http::field;
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

  struct Field {
    field name;            // field::unknown for names Beast does not know
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

  FieldArena& arena() const { return *arena_; }
  unsigned status() const { return status_; }
  std::string_view reason() const { return text(reason_at_, reason_size_); }
  const std::vector<Field, ArenaAllocator<Field>>& fields() const { return fields_; }
  std::string_view name(const Field& f) const { return text(f.name_at, f.name_size); }
  std::string_view value(const Field& f) const { return text(f.value_at, f.value_size); }
  // The first field called `name`, or "" (as basic_fields::operator[]).
  std::string_view value(field name) const {
    for (const Field& f : fields_)
      if (f.name == name) return value(f);
    return {};
  }

  std::string_view body() const { return body_; }
  void clear_body() { body_ = {}; }

 private:
  std::string_view text(uint32_t at, uint32_t size) const { return {store_.data() + at, size}; }
  uint32_t keep(string_view s) {
    const auto at = static_cast<uint32_t>(store_.size());
    store_.append(s.data(), s.size());
    return at;
  }

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int, error_code&) override {
    status_ = static_cast<unsigned>(code);
    reason_at_ = keep(reason);
    reason_size_ = static_cast<uint32_t>(reason.size());
  }
  void on_field_impl(field name, string_view name_string, string_view value, error_code&) override {
    Field f{name};
    f.name_at = keep(name_string);
    f.name_size = static_cast<uint32_t>(name_string.size());
    f.value_at = keep(value);
    f.value_size = static_cast<uint32_t>(value.size());
    fields_.push_back(f);
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code& ec) override { return take(body, ec); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
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
};

}  // namespace heft::proxy
