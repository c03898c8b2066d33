// Octet classes of HTTP/1.1 heads, shared by heft's own head parsers
// (request_head.cc, response_parser.cc).
#pragma once

#include <array>
#include <string_view>

namespace heft::proxy {

namespace http_chars_detail {
constexpr std::array<bool, 256> make_tchar() {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> make_field_text() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = (c >= 0x20 && c != 0x7f) || c == '\t';
  return t;
}
}  // namespace http_chars_detail

// tchar (RFC 9110 5.6.2): the octets of methods and field names.
inline constexpr std::array<bool, 256> kTchar = http_chars_detail::make_tchar();
// Octets of a field value or reason phrase: VCHAR, obs-text, SP, HTAB (all
// but the controls other than HTAB, and DEL).
inline constexpr std::array<bool, 256> kFieldText = http_chars_detail::make_field_text();

inline bool is_tchar(char c) { return kTchar[static_cast<unsigned char>(c)]; }
inline bool is_field_text(char c) { return kFieldText[static_cast<unsigned char>(c)]; }

}  // namespace heft::proxy
