// Octet classes and list syntax of HTTP/1.1 heads, shared by heft's own head
// parsers (proxy/request_head.cc, proxy/response_parser.cc), the request path
// and the admin API (If-Match lists).
//
// Names live in heft::net, an inline namespace of heft: code anywhere in heft
// calls them unqualified.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <boost/beast/core/string.hpp>

namespace heft {
inline namespace net {

namespace http_chars_detail {
// ASCII letters and digits, and the octets of `others`.
constexpr std::array<bool, 256> alnum_and(std::string_view others) {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (char c : others) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> make_field_text() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = (c >= 0x20 && c != 0x7f) || c == '\t';
  return t;
}
}  // namespace http_chars_detail

// tchar (RFC 9110 5.6.2): the octets of methods and field names.
inline constexpr std::array<bool, 256> kTchar = http_chars_detail::alnum_and("!#$%&'*+-.^_`|~");
// Octets of a field value or reason phrase: VCHAR, obs-text, SP, HTAB (all
// but the controls other than HTAB, and DEL).
inline constexpr std::array<bool, 256> kFieldText = http_chars_detail::make_field_text();

// The octets of a Host's name (RFC 3986 reg-name: unreserved, sub-delims and
// the % of pct-encoded), ASCII only whatever the locale.
inline constexpr std::array<bool, 256> kHostNameChar = http_chars_detail::alnum_and("-._~!$&'()*+,;=%");

inline bool is_tchar(char c) { return kTchar[static_cast<unsigned char>(c)]; }
inline bool is_host_name_char(char c) { return kHostNameChar[static_cast<unsigned char>(c)]; }
inline bool is_field_text(char c) { return kFieldText[static_cast<unsigned char>(c)]; }
inline bool is_ows(char c) { return c == ' ' || c == '\t'; }

inline std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && is_ows(v.front())) v.remove_prefix(1);
  while (!v.empty() && is_ows(v.back())) v.remove_suffix(1);
  return v;
}

// `name` equals `lower` (given in lower case) ignoring ASCII case: only
// `name` is folded, half the work of a general case-insensitive compare.
inline bool lower_equals(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    if (c != lower[i]) return false;
  }
  return true;
}

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A Content-Length value as heft accepts it: 1 to 18 digits (so no overflow
// to check), nothing else. False, `out` untouched, for anything other.
inline bool plain_length(std::string_view v, std::uint64_t& out) {
  if (v.empty() || v.size() > 18) return false;
  std::uint64_t n = 0;
  for (char c : v) {
    if (!is_digit(c)) return false;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = n;
  return true;
}

// Calls visit(item) for each element of a comma-separated list (RFC 9110
// 5.6.1), OWS around it trimmed, empty elements included; returns false as
// soon as visit does, true after the last element.
template <class Visit>
bool each_list_item(std::string_view list, Visit visit) {
  for (;;) {
    const std::size_t comma = list.find(',');
    if (!visit(trim_ows(list.substr(0, comma)))) return false;
    if (comma == std::string_view::npos) return true;
    list.remove_prefix(comma + 1);
  }
}

// True if the comma-separated list `list` contains `token` (case-insensitive).
inline bool has_token(std::string_view list, std::string_view token) {
  return !each_list_item(list, [token](std::string_view item) { return !boost::beast::iequals(item, token); });
}

}  // namespace net
}  // namespace heft
