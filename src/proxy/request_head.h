// Strict scanning of a raw HTTP/1.1 request head (RFC 9112) before anything is
// parsed or forwarded: heft never forwards a request whose framing another
// server could read differently (request smuggling).
//
// Pure functions on bytes; no I/O, no state; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace heft::proxy {

struct HeadLimits {
  std::size_t max_request_line = 8 * 1024;  // longer -> 414
  std::size_t max_head = 32 * 1024;         // longer -> 431
};

struct HeadScan {
  enum Status {
    incomplete,       // no end of head yet, within limits: read more
    complete,         // a valid head of head_size bytes (after skip leading CRLFs)
    bad_request,      // 400: malformed or ambiguous
    uri_too_long,          // 414
    header_too_large,      // 431
    version_not_supported  // 505: HTTP/2.0 and later majors in HTTP/1.1's syntax
  };
  Status status = incomplete;
  std::size_t skip = 0;       // empty lines before the request line (RFC 9112 2.2 allows them)
  std::size_t head_size = 0;  // bytes of the head after `skip`, final CRLFCRLF included
  const char* reason = "";    // why a bad_request (for the log)
  // HTTP/1.2 to 1.9: where (after `skip`) the minor digit is, which the
  // caller sets to '1' (served as HTTP/1.1, RFC 9110 2.5); 0 for 1.0 and 1.1.
  std::size_t later_minor_at = 0;
};

// Scans `bytes` (everything received so far on the connection). Checks the
// request-line syntax once that line is whole, and on a complete head: header
// names are tokens (so whitespace before the colon and obs-fold fail); no
// control characters (except HTAB in values) and no bare CR or bare LF
// anywhere; Content-Length is digits (a line of it or a list of it) and every
// value is equal; Transfer-Encoding is exactly `chunked`, once, never with
// Content-Length, never on HTTP/1.0; HTTP/1.1 has exactly one Host.
HeadScan scan_request_head(std::string_view bytes, const HeadLimits& limits = {});

// A request target in absolute-form (`GET http://host:port/path?q HTTP/1.1`,
// RFC 9112 3.2.2), split so heft routes by its authority, as the backend
// would, and forwards the origin-form that a client must send an origin server
// (RFC 9112 3.2.1) with that authority as Host.
struct AbsoluteTarget {
  enum Status {
    not_absolute,  // origin-form ("/...") or asterisk-form ("*")
    absolute,      // authority and path are set
    bad            // 400: not http/https, or an empty or userinfo@ authority
  };
  Status status = not_absolute;
  std::string_view authority;  // host[:port]
  std::string_view path;       // the rest: "", "/...", or "?..." (origin-form then needs a leading "/")
  const char* reason = "";
};

AbsoluteTarget split_absolute_target(std::string_view target);

// Why `host` (a Host value or an absolute target's authority: host[:port])
// is not one (400), or null. A host is a name of letters, digits and
// - . _ ~ ! $ & ' ( ) * + , ; = % (RFC 3986 reg-name) without a leading dot
// or "..", or a bracketed IPv6 literal; a port is 1-5 digits up to 65535, or
// empty after the colon (RFC 3986 port = *DIGIT).
// Spaces, "/", "\", "@" and control bytes are refused, as nginx refuses them.
const char* host_problem(std::string_view host);

}  // namespace heft::proxy
