#include "proxy/response_parser.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "proxy/http_chars.h"

namespace heft::proxy {
namespace {

namespace http = boost::beast::http;

// The first octet at or after `p` that is not text (a control other than
// HTAB, or DEL: normally the CR ending the line), or `end`. Eight octets at a
// time: a word with no octet below 0x20 and none equal to 0x7f is all text
// (obs-text, 0x80 and up, included); a word with one is looked at octet by octet.
const char* end_of_text(const char* p, const char* end) {
  constexpr std::uint64_t k01 = 0x0101010101010101ULL, k20 = 0x2020202020202020ULL, k7f = 0x7f7f7f7f7f7f7f7fULL,
                          k80 = 0x8080808080808080ULL;
  while (end - p >= 8) {
    std::uint64_t x;
    std::memcpy(&x, p, 8);
    const std::uint64_t del = x ^ k7f;
    const std::uint64_t found = (((x - k20) & ~x) | ((del - k01) & ~del)) & k80;
    if (found) {
      // The lowest flagged octet is a real one (a false flag needs a borrow
      // from a real one below it). Little-endian: the lowest octet is the
      // first; elsewhere the octet-by-octet loop below finds it.
      if constexpr (std::endian::native == std::endian::little) {
        p += std::countr_zero(found) / 8;
        if (*p != '\t') return p;
      }
      break;
    }
    p += 8;
  }
  for (; p < end; ++p)
    if (!kFieldText[static_cast<unsigned char>(*p)]) return p;
  return end;
}

// Branch-free, eight octets a round: names are short and almost always valid.
bool all_tchar(const char* p, const char* end) {
  const auto t = [](const char* c) { return static_cast<unsigned>(kTchar[static_cast<unsigned char>(*c)]); };
  unsigned ok = 1;
  for (; end - p >= 8; p += 8) ok &= t(p) & t(p + 1) & t(p + 2) & t(p + 3) & t(p + 4) & t(p + 5) & t(p + 6) & t(p + 7);
  for (; p < end; ++p) ok &= t(p);
  return ok != 0;
}

// Field names the proxy acts on, by length first (most names match none).
http::field classify(std::string_view name) {
  using http::field;
  switch (name.size()) {
    case 2: return lower_equals(name, "te") ? field::te : field::unknown;
    case 7:
      if (lower_equals(name, "upgrade")) return field::upgrade;
      return lower_equals(name, "trailer") ? field::trailer : field::unknown;
    case 10:
      if (lower_equals(name, "connection")) return field::connection;
      return lower_equals(name, "keep-alive") ? field::keep_alive : field::unknown;
    case 14: return lower_equals(name, "content-length") ? field::content_length : field::unknown;
    case 16: return lower_equals(name, "proxy-connection") ? field::proxy_connection : field::unknown;
    case 17: return lower_equals(name, "transfer-encoding") ? field::transfer_encoding : field::unknown;
    default: return field::unknown;
  }
}

// The tokens of a Connection value: close and keep-alive noted; false for
// what Beast should see (upgrade, or anything not a plain token list).
bool simple_connection(std::string_view list, bool& close, bool& keep_alive) {
  return each_list_item(list, [&](std::string_view item) {
    for (char c : item)
      if (!is_tchar(c)) return false;
    if (lower_equals(item, "close")) close = true;
    else if (lower_equals(item, "keep-alive")) keep_alive = true;
    else if (lower_equals(item, "upgrade")) return false;
    return true;
  });
}

}  // namespace

http::field ResponseParser::proxy_field(field name) {
  switch (name) {
    case field::te:
    case field::trailer:
    case field::upgrade:
    case field::connection:
    case field::keep_alive:
    case field::proxy_connection:
    case field::transfer_encoding:
    case field::content_length: return name;
    default: return field::unknown;
  }
}

std::size_t ResponseParser::put(boost::asio::const_buffer buffer, error_code& ec) {
  if (simple_) return put_simple_body(buffer, ec);
  if (refused_) return put_without_length(buffer, 0, ec);  // waiting for the rest of the head
  if (!tried_simple_ && !base::is_header_done()) {
    // A head that comes in many pieces is parsed anew each time: after a
    // few, Beast (which resumes where it stopped) takes it.
    std::size_t used = 0;
    const Simple parsed = parse_simple_head(static_cast<const char*>(buffer.data()), buffer.size(), used);
    if (parsed != Simple::taken) forget_head();
    switch (parsed) {
      case Simple::taken:
        simple_ = true;
        ec = {};
        return used;
      case Simple::incomplete:
        if (++attempts_ < 4) {
          ec = http::error::need_more;  // as Beast: nothing consumed until the head is whole
          return 0;
        }
        [[fallthrough]];
      case Simple::not_simple: tried_simple_ = true; break;
    }
  }
  const std::size_t used = base::put(buffer, ec);
  if ((ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length ||
       ec == http::error::multiple_content_length) &&
      !base::is_header_done() && !length_dropped_) {
    refused_ = ec;
    return put_without_length(buffer, used, ec);
  }
  return used;
}

// Beast refuses a head with both Transfer-Encoding and Content-Length (as a
// request's must be refused). For a response RFC 9112 6.3 says the coding
// overrides the length, and an intermediary that forwards it removes the
// Content-Length first: nginx 1.22 and HAProxy 2.6 forward such a body
// chunked. So the head is read again without its Content-Length lines (and
// their obs-fold continuations); the connection is not kept (keep_alive()),
// since such a message "ought to be handled as an error" (the origin and heft
// may disagree about where it ends). A rare head: the copy and the parser
// built anew cost nothing on the common path. `used`: what Beast took of
// `buffer` before refusing a field (refused_), or 0 when the rest of the head
// was awaited; the refusal stands when the head has no such pair.
std::size_t ResponseParser::put_without_length(boost::asio::const_buffer buffer, std::size_t used, error_code& ec) {
  // Beast takes the status line, then each field, as soon as they are whole
  // (over several puts), and stops before the field it refuses: what it took
  // is written anew from what it reported, the rest of the head follows, once
  // it is all there (a field after the refused one may be the coding).
  const std::string_view rest =
      std::string_view(static_cast<const char*>(buffer.data()), buffer.size()).substr(std::min(used, buffer.size()));
  const std::size_t end = rest.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    ec = rest.size() >= header_limit_ ? error_code(http::error::header_limit) : error_code(http::error::need_more);
    return used;
  }
  const std::string_view head = rest.substr(0, end + 4);
  std::string kept;
  kept.reserve(store_.size() + 8 * fields_.size() + head.size() + 32);
  kept.append(version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ").append(std::to_string(status_)).append(" ");
  kept.append(reason()).append("\r\n");
  bool coding = false, length = false;
  for (const Field& f : fields_) {
    length = length || f.name == field::content_length;
    coding = coding || f.name == field::transfer_encoding;
    if (f.name != field::content_length) kept.append(name(f)).append(": ").append(value(f)).append("\r\n");
  }
  bool dropping = false;
  for (std::size_t at = 0; at < head.size();) {
    const std::size_t next = head.find("\r\n", at) + 2;  // the head ends with CRLF CRLF
    const std::string_view line = head.substr(at, next - at);
    if (line.size() <= 2) {
      dropping = false;  // the empty line
    } else if (!is_ows(line.front())) {  // else an obs-fold line, which goes with its field
      const std::string_view line_name = line.substr(0, line.find(':'));
      dropping = lower_equals(line_name, "content-length");
      length = length || dropping;
      coding = coding || lower_equals(line_name, "transfer-encoding");
    }
    if (!dropping) kept.append(line);
    at = next;
  }
  if (!coding || !length) {
    ec = std::exchange(refused_, {});
    return used;
  }
  // A parser as new (Beast's stops at its first error), with this one's settings.
  FieldArena& arena = *arena_;
  const std::uint32_t head_limit = header_limit_;
  const std::uint64_t body_max = body_limit_;
  const bool head_request = base::skip();
  this->~ResponseParser();
  new (this) ResponseParser(arena);
  header_limit(head_limit);
  body_limit(body_max);
  base::skip(head_request);
  tried_simple_ = true;
  length_dropped_ = true;
  const std::size_t parsed = base::put(boost::asio::buffer(kept), ec);
  if (!ec && parsed != kept.size()) ec = http::error::bad_transfer_encoding;  // not reached: the head is whole
  return ec ? used : used + head.size();
}

std::size_t ResponseParser::put_simple_body(boost::asio::const_buffer buffer, error_code& ec) {
  ec = {};
  if (remaining_ == 0) return 0;
  if (!body_.empty()) {
    ec = http::error::need_buffer;
    return 0;
  }
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, buffer.size()));
  if (n == 0) {
    ec = http::error::need_more;
    return 0;
  }
  body_ = {static_cast<const char*>(buffer.data()), n};
  remaining_ -= n;
  return n;
}

void ResponseParser::put_eof(error_code& ec) {
  // An end before the head is whole is a truncated message. Beast alone
  // would call it complete when no byte had reached it yet (a head heft's own
  // path was still waiting to finish): a response with status 0.
  if (!is_header_done()) {
    ec = http::error::partial_message;
    return;
  }
  if (!simple_) return base::put_eof(ec);
  // The length was known: an end before it is a truncated message.
  ec = remaining_ == 0 ? error_code{} : error_code(http::error::partial_message);
}

ResponseParser::Simple ResponseParser::parse_simple_head(const char* const p, const std::size_t n,
                                                          std::size_t& used) {
  // Nothing goes past the header limit: Beast reports a head that does.
  const char* const end = p + std::min<std::size_t>(n, header_limit_);
  const Simple short_of_end = n < header_limit_ ? Simple::incomplete : Simple::not_simple;

  // Status line: HTTP/1.x SP 3DIGIT SP reason CRLF, a final status.
  if (end - p < 13) return std::memcmp(p, "HTTP/1.", std::min<std::size_t>(n, 7)) == 0 ? short_of_end : Simple::not_simple;
  if (std::memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ') return Simple::not_simple;
  // proxy:: — basic_parser has a private is_digit of its own.
  if (!proxy::is_digit(p[9]) || !proxy::is_digit(p[10]) || !proxy::is_digit(p[11]) || p[12] != ' ')
    return Simple::not_simple;
  const bool http11 = p[7] == '1';
  const unsigned status = static_cast<unsigned>((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
  if (status < 200 || status > 599) return Simple::not_simple;  // interim and odd codes: Beast
  const char* q = end_of_text(p + 13, end);
  if (end - q < 2) return short_of_end;
  if (q[0] != '\r' || q[1] != '\n') return Simple::not_simple;
  const auto offset = [p](const char* at) { return static_cast<uint32_t>(at - p); };
  reason_at_ = 13;
  reason_size_ = offset(q) - 13;
  q += 2;

  bool close = false, keep_alive = false;
  has_length_ = false;
  for (;;) {
    // The empty line, or field-name ":" OWS field-value OWS CRLF.
    if (end - q < 2) return short_of_end;
    if (q[0] == '\r') {
      if (q[1] != '\n') return Simple::not_simple;
      q += 2;
      break;
    }
    const char* name_begin = q;
    const auto* colon = static_cast<const char*>(std::memchr(q, ':', static_cast<std::size_t>(end - q)));
    q = colon ? colon : end;
    if (!all_tchar(name_begin, q)) return Simple::not_simple;
    if (!colon) return short_of_end;
    if (q == name_begin) return Simple::not_simple;
    const std::string_view name(name_begin, static_cast<std::size_t>(q - name_begin));
    ++q;
    while (q < end && is_ows(*q)) ++q;
    const char* value_begin = q;
    q = end_of_text(q, end);
    if (end - q < 3) return short_of_end;  // CR LF and the next line's first octet
    if (q[0] != '\r' || q[1] != '\n') return Simple::not_simple;
    const char* value_end = q;
    while (value_end > value_begin && is_ows(value_end[-1])) --value_end;
    q += 2;
    if (is_ows(*q)) return Simple::not_simple;  // obs-fold: Beast joins the lines

    const field f = classify(name);
    const std::string_view value(value_begin, static_cast<std::size_t>(value_end - value_begin));
    switch (f) {
      case field::content_length:  // plain digits; Beast also takes lists of equal values
        if (has_length_ || !plain_length(value, length_)) return Simple::not_simple;
        has_length_ = true;
        break;
      case field::connection:
        if (!simple_connection(value, close, keep_alive)) return Simple::not_simple;
        break;
      case field::proxy_connection:  // Beast reads it as Connection
      case field::transfer_encoding:
      case field::upgrade: return Simple::not_simple;
      default: break;
    }
    Field kept{f};
    kept.name_at = offset(name_begin);
    kept.name_size = static_cast<uint32_t>(name.size());
    kept.value_at = offset(value_begin);
    kept.value_size = static_cast<uint32_t>(value.size());
    fields_.push_back(kept);
  }

  // Framing, as Beast's finish_header(): no body for HEAD, 204 and 304
  // whatever Content-Length says; otherwise the length (a body delimited by
  // the connection's close goes to Beast).
  if (base::skip() || status == 204 || status == 304) remaining_ = 0;
  else if (has_length_ && length_ <= body_limit_) remaining_ = length_;
  else return Simple::not_simple;
  simple_keep_alive_ = http11 ? !close : keep_alive;
  status_ = status;
  used = static_cast<std::size_t>(q - p);
  store_.assign(p, used);  // the offsets above are into this copy
  return Simple::taken;
}

}  // namespace heft::proxy
