// A reference model of HTTP/1.1 message framing, written from RFC 9112 (6.3
// message body length, 7.1 chunked transfer coding) and RFC 9110 (5.6
// tokens and lists, 8.6 Content-Length), plus heft's documented stricter
// rules (docs/proxy.md, "Strict request heads"). Deliberately independent of
// heft's code: the fuzz targets check that heft never frames a message
// differently. Slow and plain; for tests only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heft::fuzz::rfc9112 {

// RFC 9110 5.6.2: tchar.
bool is_token_char(char c);
bool is_token(std::string_view s);

// A chunked body (RFC 9112 7.1) at the start of `bytes`.
struct ChunkedBody {
  enum Status {
    complete,    // `body` decoded; the message ends after `consumed` octets
    bad,         // no chunked body starts so (whatever follows)
    incomplete   // a valid beginning: the rest has not come
  };
  Status status = incomplete;
  std::string body;
  std::size_t consumed = 0;
  std::string why;  // for bad: what is wrong where
};
// heft is stricter than the grammar in one way: a chunk size must fit in 64
// bits (a larger one is bad, as no body that long can come). Lines end in
// CRLF only (a bare LF is bad: RFC 9112 2.2 lets a recipient accept one, heft
// refuses it in requests and in chunk lines of responses).
ChunkedBody decode_chunked(std::string_view bytes);

// The framing of a request (RFC 9112 6.3) from its header fields as written
// (name, value after the colon, untrimmed), heft's rules included.
struct Framing {
  enum Kind { reject, sized, chunked };
  Kind kind = sized;
  std::uint64_t length = 0;
  std::string why;  // for reject
};
Framing request_framing(const std::vector<std::pair<std::string, std::string>>& fields, bool http10);

}  // namespace heft::fuzz::rfc9112
