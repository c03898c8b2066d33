#include "proxy/request_head.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "net/http_chars.h"

namespace heft::proxy {
namespace {

HeadScan bad(const char* reason) {
  HeadScan s;
  s.status = HeadScan::bad_request;
  s.reason = reason;
  return s;
}

enum class RequestLine { valid, malformed, fragment, version_not_supported };

RequestLine check_request_line(std::string_view line, bool& http10) {
  std::size_t sp1 = line.find(' ');
  if (sp1 == 0 || sp1 == std::string_view::npos) return RequestLine::malformed;
  for (std::size_t i = 0; i < sp1; ++i)
    if (!is_tchar(line[i])) return RequestLine::malformed;
  std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return RequestLine::malformed;
  // No fragment: a client never sends one (RFC 9112 3.2), and a backend
  // or cache may split the path at it differently than heft routes it
  // (HAProxy refuses it since CVE-2023-45539).
  bool fragment = false;
  for (std::size_t i = sp1 + 1; i < sp2; ++i) {
    auto u = static_cast<unsigned char>(line[i]);
    if (u <= 0x20 || u == 0x7f) return RequestLine::malformed;
    fragment |= u == '#';
  }
  std::string_view version = line.substr(sp2 + 1);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !is_digit(version[5]) || version[6] != '.' ||
      !is_digit(version[7]) || version[5] == '0')
    return RequestLine::malformed;
  // A later major version over HTTP/1.1's syntax is refused as nginx does
  // (505); a later 1.x minor is HTTP/1.1 to us (RFC 9110 2.5).
  if (version[5] != '1') return RequestLine::version_not_supported;
  if (fragment) return RequestLine::fragment;
  http10 = version[7] == '0';
  return RequestLine::valid;
}

// A whole request line: refused (414, 400, 505), or `incomplete` when it is
// valid. The request line is judged once whole, not when the head is: a line
// without a version ("GET /x") waited for header_timeout and got 408
// (HAProxy answers 400 at once).
HeadScan judge_request_line(std::string_view line, std::size_t skip, const HeadLimits& limits, bool& http10) {
  if (line.size() > limits.max_request_line) return HeadScan{HeadScan::uri_too_long, skip, 0, "request line too long"};
  switch (check_request_line(line, http10)) {
    case RequestLine::valid: break;
    case RequestLine::malformed: return bad("malformed request line");
    case RequestLine::fragment: return bad("fragment in the request target");
    case RequestLine::version_not_supported:
      return HeadScan{HeadScan::version_not_supported, skip, 0, "HTTP version not supported"};
  }
  return HeadScan{HeadScan::incomplete, skip, 0, ""};
}

}  // namespace

HeadScan scan_request_head(std::string_view bytes, const HeadLimits& limits) {
  // Leading empty lines are ignored (RFC 9112 2.2).
  std::size_t skip = 0;
  while (skip + 1 < bytes.size() && bytes[skip] == '\r' && bytes[skip + 1] == '\n') skip += 2;
  std::string_view data = bytes.substr(skip);

  // Find the end of the head line by line (memchr: a head is scanned on
  // every read until complete), rejecting bare CR / bare LF on the way.
  std::size_t end = std::string_view::npos;
  std::size_t first_line_end = std::string_view::npos;
  bool http10 = false;
  const char* p = data.data();
  for (std::size_t line = 0;;) {
    const auto* lf = static_cast<const char*>(std::memchr(p + line, '\n', data.size() - line));
    if (!lf) {
      // An unfinished line: a CR in it may only be its last byte (LF to come).
      const auto* cr = static_cast<const char*>(std::memchr(p + line, '\r', data.size() - line));
      if (cr && cr != p + data.size() - 1) return bad("bare CR");
      break;
    }
    const std::size_t i = static_cast<std::size_t>(lf - p);
    if (i == line || p[i - 1] != '\r') return bad("bare LF");
    if (std::memchr(p + line, '\r', i - 1 - line)) return bad("bare CR");
    if (first_line_end == std::string_view::npos) {
      // The request line is judged as soon as it is whole, before the lines
      // after it: the answer must not depend on how many of those came in
      // the same read (a later major version got 505 when the line came
      // alone, 400 when a bad line came with it).
      first_line_end = i - 1;
      if (const HeadScan refused = judge_request_line(data.substr(0, first_line_end), skip, limits, http10);
          refused.status != HeadScan::incomplete)
        return refused;
    }
    if (i - 1 == line && line > 0) {  // the empty line after the fields
      end = i + 1;
      break;
    }
    line = i + 1;
  }
  if (first_line_end == std::string_view::npos && data.size() > limits.max_request_line)
    return HeadScan{HeadScan::uri_too_long, skip, 0, "request line too long"};
  if (end == std::string_view::npos) {
    if (data.size() > limits.max_head) return HeadScan{HeadScan::header_too_large, skip, 0, "header too large"};
    return HeadScan{HeadScan::incomplete, skip, 0, ""};
  }
  if (end > limits.max_head) return HeadScan{HeadScan::header_too_large, skip, 0, "header too large"};

  // Header fields: one per line up to the empty line.
  std::size_t pos = first_line_end + 2;
  int hosts = 0, transfer_encodings = 0;
  bool have_length = false;
  std::string_view length;
  while (pos < end - 2) {
    std::size_t eol = data.find("\r\n", pos);
    std::string_view line = data.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.front() == ' ' || line.front() == '\t') return bad("obs-fold");
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad("header line without a name");
    for (std::size_t i = 0; i < colon; ++i)
      if (!is_tchar(line[i])) return bad("invalid character in a header name");
    std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    for (char c : value)
      if (!is_field_text(c)) return bad("control character in a header value");
    value = trim_ows(value);
    if (lower_equals(name, "content-length")) {
      // A list of one value repeated is that value, as the same value on
      // several lines is (RFC 9110 8.6); anything else is refused. Each
      // element must be plain digits: no empty element, no sign, and
      // compared as written, so "05, 5" differs.
      const char* problem = nullptr;
      each_list_item(value, [&](std::string_view item) {
        std::uint64_t ignored;
        if (!plain_length(item, ignored)) problem = "malformed Content-Length";
        else if (have_length && item != length) problem = "differing Content-Length";
        have_length = true;
        length = item;
        return !problem;
      });
      if (problem) return bad(problem);
    } else if (lower_equals(name, "transfer-encoding")) {
      ++transfer_encodings;
      if (!lower_equals(value, "chunked")) return bad("Transfer-Encoding other than chunked");
    } else if (lower_equals(name, "host")) {
      ++hosts;
    }
  }
  if (transfer_encodings > 1) return bad("repeated Transfer-Encoding");
  if (transfer_encodings && have_length) return bad("Content-Length with Transfer-Encoding");
  if (transfer_encodings && http10) return bad("Transfer-Encoding on HTTP/1.0");
  if (!http10 && hosts != 1) return bad("HTTP/1.1 without exactly one Host");
  if (http10 && hosts > 1) return bad("several Host fields");
  HeadScan scan{HeadScan::complete, skip, end, ""};
  if (!http10 && data[first_line_end - 1] != '1') scan.later_minor_at = first_line_end - 1;
  return scan;
}

AbsoluteTarget split_absolute_target(std::string_view target) {
  AbsoluteTarget t;
  if (target.empty() || target.front() == '/' || target == "*") return t;
  t.status = AbsoluteTarget::bad;
  const std::size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) {
    t.reason = "request target is neither a path nor an absolute URI";
    return t;
  }
  const std::string_view scheme = target.substr(0, scheme_end);
  if (!lower_equals(scheme, "http") && !lower_equals(scheme, "https")) {
    t.reason = "absolute URI scheme other than http or https";
    return t;
  }
  const std::string_view rest = target.substr(scheme_end + 3);
  // (A '#' was refused with the request line.)
  const std::size_t authority_end = std::min(rest.find_first_of("/?"), rest.size());
  t.authority = rest.substr(0, authority_end);
  t.path = rest.substr(authority_end);
  // RFC 9110 4.2.1: an http URI with an empty host is invalid; 4.2.4: userinfo
  // is deprecated and a way to disguise the host a request goes to.
  if (t.authority.empty() || t.authority.front() == ':') {
    t.reason = "absolute URI without a host";
    return t;
  }
  if (t.authority.find('@') != std::string_view::npos) {
    t.reason = "absolute URI with userinfo";
    return t;
  }
  t.status = AbsoluteTarget::absolute;
  return t;
}

const char* host_problem(std::string_view host) {
  std::string_view name = host;
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const std::size_t close = host.find(']');
    if (close == std::string_view::npos) return "bad Host: an unclosed IPv6 literal";
    if (close == 1) return "bad Host: an empty IPv6 literal";
    for (char c : host.substr(1, close - 1))
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) return "bad Host: not an IPv6 literal";
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') return "bad Host: bytes after the IPv6 literal";
      port = host.substr(close + 2);  // may be empty (RFC 3986: port = *DIGIT)
    }
    name = {};
  } else if (const std::size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);  // may be empty, as nginx and Caddy accept
    if (name.empty()) return "bad Host: no host name before the port";  // nginx: 400
  }
  if (!port.empty()) {
    if (port.size() > 5) return "bad Host: not a port";
    unsigned value = 0;
    for (char c : port) {
      if (!is_digit(c)) return "bad Host: not a port";
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) return "bad Host: a port outside 1-65535";
  }
  if (!name.empty() && name.front() == '.') return "bad Host: a leading dot";
  char previous = 0;
  for (char c : name) {
    if (!is_host_name_char(c)) return "bad Host: a character no host name has";
    if (c == '.' && previous == '.') return "bad Host: \"..\"";
    previous = c;
  }
  return nullptr;
}

}  // namespace heft::proxy
