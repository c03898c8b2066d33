#include "rfc9112_model.h"

#include <algorithm>

namespace heft::fuzz::rfc9112 {
namespace {

bool is_hexdig(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
unsigned hex_value(char c) {
  if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
  return static_cast<unsigned>(c - 'A' + 10);
}
bool is_ws(char c) { return c == ' ' || c == '\t'; }
// RFC 5234 VCHAR, and RFC 9110 obs-text.
bool is_vchar_or_obs(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x21 && u <= 0x7e) || u >= 0x80;
}
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// A cursor over the body that says "incomplete" when it runs out.
struct Cursor {
  std::string_view s;
  std::size_t at = 0;
  bool more() const { return at < s.size(); }
  char peek() const { return s[at]; }
};

enum class Step { ok, bad, incomplete };

// CRLF at the cursor.
Step crlf(Cursor& c) {
  if (!c.more()) return Step::incomplete;
  if (c.peek() != '\r') return Step::bad;
  ++c.at;
  if (!c.more()) return Step::incomplete;
  if (c.peek() != '\n') return Step::bad;
  ++c.at;
  return Step::ok;
}

// chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ), up to the CRLF.
Step chunk_ext(Cursor& c) {
  for (;;) {
    std::size_t at = c.at;
    while (at < c.s.size() && is_ws(c.s[at])) ++at;
    if (at == c.s.size()) return Step::incomplete;
    if (c.s[at] != ';') {
      // Whitespace is BWS only before a ';'; the line must end here.
      if (at != c.at) return Step::bad;
      return Step::ok;
    }
    c.at = at + 1;
    while (c.more() && is_ws(c.peek())) ++c.at;
    std::size_t name = c.at;
    while (c.more() && is_token_char(c.peek())) ++c.at;
    if (!c.more()) return Step::incomplete;
    if (c.at == name) return Step::bad;
    at = c.at;
    while (at < c.s.size() && is_ws(c.s[at])) ++at;
    if (at == c.s.size()) return Step::incomplete;
    if (c.s[at] != '=') continue;  // the next extension or the line's end (no trailing BWS then)
    c.at = at + 1;
    while (c.more() && is_ws(c.peek())) ++c.at;
    if (!c.more()) return Step::incomplete;
    if (c.peek() == '"') {
      ++c.at;
      for (;;) {
        if (!c.more()) return Step::incomplete;
        const char ch = c.peek();
        const auto u = static_cast<unsigned char>(ch);
        if (ch == '"') {
          ++c.at;
          break;
        }
        if (ch == '\\') {
          ++c.at;
          if (!c.more()) return Step::incomplete;
          const char q = c.peek();
          if (!(q == '\t' || q == ' ' || is_vchar_or_obs(q))) return Step::bad;
          ++c.at;
          continue;
        }
        if (!(ch == '\t' || ch == ' ' || u == 0x21 || (u >= 0x23 && u <= 0x5b) || (u >= 0x5d && u <= 0x7e) || u >= 0x80))
          return Step::bad;
        ++c.at;
      }
    } else {
      const std::size_t value = c.at;
      while (c.more() && is_token_char(c.peek())) ++c.at;
      if (!c.more()) return Step::incomplete;
      if (c.at == value) return Step::bad;
    }
  }
}

// trailer-section = *( field-line CRLF ), then the final CRLF. A field line
// may go on over lines (obs-fold = CRLF 1*( SP / HTAB )): RFC 9112 5.2 lets
// a server replace each fold with spaces instead of refusing the message, and
// heft (Beast) does so in trailers, which it never forwards; heads, which it
// forwards, are refused with one.
Step trailer_section(Cursor& c) {
  for (;;) {
    if (!c.more()) return Step::incomplete;
    if (c.peek() == '\r') return crlf(c);
    const std::size_t name = c.at;
    while (c.more() && is_token_char(c.peek())) ++c.at;
    if (!c.more()) return Step::incomplete;
    if (c.at == name || c.peek() != ':') return Step::bad;
    ++c.at;
    for (;;) {
      // field-value with OWS around it: any of HTAB, SP, VCHAR, obs-text.
      while (c.more() && (is_ws(c.peek()) || is_vchar_or_obs(c.peek()))) ++c.at;
      if (Step s = crlf(c); s != Step::ok) return s;
      if (!c.more()) return Step::incomplete;
      if (!is_ws(c.peek())) break;  // no fold: the next field line or the end
    }
  }
}

}  // namespace

bool is_token_char(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char); }

ChunkedBody decode_chunked(std::string_view bytes) {
  ChunkedBody out;
  Cursor c{bytes};
  const auto stop = [&](Step s, const char* why) {
    out.status = s == Step::bad ? ChunkedBody::bad : ChunkedBody::incomplete;
    if (s == Step::bad) out.why = std::string(why) + " at octet " + std::to_string(c.at);
    return out;
  };
  for (;;) {
    // chunk-size = 1*HEXDIG, within 64 bits
    const std::size_t size_at = c.at;
    std::uint64_t size = 0;
    bool overflow = false;
    while (c.more() && is_hexdig(c.peek())) {
      if (size >> 60) overflow = true;
      size = size << 4 | hex_value(c.peek());
      ++c.at;
    }
    if (!c.more()) return stop(overflow ? Step::bad : Step::incomplete, "chunk size beyond 64 bits");
    if (c.at == size_at) return stop(Step::bad, "no chunk size");
    if (overflow) return stop(Step::bad, "chunk size beyond 64 bits");
    if (Step s = chunk_ext(c); s != Step::ok) return stop(s, "bad chunk extension");
    if (Step s = crlf(c); s != Step::ok) return stop(s, "chunk line without CRLF");
    if (size == 0) {
      if (Step s = trailer_section(c); s != Step::ok) return stop(s, "bad trailer section");
      out.status = ChunkedBody::complete;
      out.consumed = c.at;
      return out;
    }
    if (bytes.size() - c.at < size) return stop(Step::incomplete, "");
    out.body.append(bytes.substr(c.at, size));
    c.at += size;
    if (Step s = crlf(c); s != Step::ok) return stop(s, "chunk data without CRLF");
  }
}

Framing request_framing(const std::vector<std::pair<std::string, std::string>>& fields, bool http10) {
  Framing f;
  const auto reject = [&](std::string why) {
    f.kind = Framing::reject;
    f.why = std::move(why);
    return f;
  };
  std::vector<std::string_view> encodings;  // Transfer-Encoding lines
  std::optional<std::string> length;        // the Content-Length as written, all elements equal
  for (const auto& [name, value] : fields) {
    const std::string n = lower(name);
    if (n == "transfer-encoding") {
      encodings.push_back(trim(value));
    } else if (n == "content-length") {
      // RFC 9110 8.6: Content-Length = 1*DIGIT; RFC 9112 6.3 (5): a list of
      // identical values may be taken as one; anything else is an
      // unrecoverable error. heft: elements compared as written.
      std::string_view list = value;
      for (;;) {
        const std::size_t comma = list.find(',');
        const std::string_view item = trim(list.substr(0, comma));
        if (item.empty() || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return reject("Content-Length not digits");
        if (length && *length != item) return reject("differing Content-Length");
        length = std::string(item);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    }
  }
  if (!encodings.empty()) {
    // RFC 9112 6.3 (3) lets TE override CL; heft refuses both (6.1: "ought
    // to be handled as an error"), TE on HTTP/1.0 (6.1), any coding but a
    // single chunked (it cannot decode others), and a second TE line.
    if (length) return reject("Transfer-Encoding with Content-Length");
    if (http10) return reject("Transfer-Encoding on HTTP/1.0");
    if (encodings.size() > 1) return reject("two Transfer-Encoding lines");
    if (lower(encodings.front()) != "chunked") return reject("a transfer coding other than chunked");
    f.kind = Framing::chunked;
    return f;
  }
  if (length) {
    // heft: at most 18 digits (no body that long can come, and every such
    // value fits in 64 bits).
    if (length->size() > 18) return reject("Content-Length of more than 18 digits");
    std::uint64_t v = 0;
    for (char c : *length) v = v * 10 + static_cast<std::uint64_t>(c - '0');
    f.length = v;
  }
  // RFC 9112 6.3 (6): a request with neither has no body.
  return f;
}

}  // namespace heft::fuzz::rfc9112
