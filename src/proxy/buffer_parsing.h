// The steps of reading an HTTP/1.1 message that need no I/O: what the
// client and upstream connections do with the bytes a buffer holds, apart
// from the reads that fill it. Kept apart so that the fuzz targets (fuzz/)
// run exactly this code on their inputs.
//
// Thread safety: plain functions on the caller's parser and buffer.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include "proxy/block_buffer.h"
#include "proxy/field_arena.h"
#include "proxy/response_parser.h"

namespace heft::proxy {

// A client's request: fields in the session's arena, body octets copied into
// memory the session lends (body_into()).
using RequestParser = boost::beast::http::parser<true, boost::beast::http::buffer_body, ArenaAllocator<char>>;

// Parses the request head scan_request_head() accepted: `size` bytes at
// `head` (after its skipped empty lines), `later_minor_at` from that scan
// (HTTP/1.2–1.9 are rewritten in place to 1.1: Beast takes 1.0 and 1.1 only).
// Sets heft's limits and leaves the parser eager for the body, with chunk
// extensions checked (chunk_extensions_are_text()). `used`: the
// bytes Beast took. An error (Beast's, or partial_message when the head was
// not all taken) means a 400.
boost::system::error_code parse_request_head(RequestParser& parser, char* head, std::size_t size,
                                             std::size_t later_minor_at, std::size_t& used);

// Whether a chunk's extensions (Beast's on_chunk_header, `;name=value...`)
// hold only text: Beast checks their grammar but lets any octet through in a
// quoted value (RFC 9112 7.1.1: qdtext and quoted-pair exclude the controls
// other than HTAB, and DEL), so a control there would be accepted.
bool chunk_extensions_are_text(std::string_view extensions);

// Sets up a parser for a backend's response head: heft's head limit, no body
// limit (bodies are streamed), and for a HEAD request no body to read.
void prepare_response(ResponseParser& response, bool head_request);

// The largest response head heft reads.
inline constexpr std::size_t kMaxResponseHead = 64 * 1024;

// Feeds `buffer` to `parser` until its head is done: no error when it is, an
// error when the head is bad or too large, nothing when more bytes must be
// read first.
std::optional<boost::system::error_code> response_head_from_buffer(BlockBuffer& buffer, ResponseParser& parser);

// Whether `bytes` hold a line ended by a bare LF. Beast's chunk parser waits
// for a CRLF after a chunk size or trailer that a bare LF ended, until the
// timeout; heft refuses them as it refuses bare LFs in heads.
bool has_bare_lf(std::string_view bytes);

// Where body octets go: a request's are copied into the caller's memory
// (buffer_body); a response's stay where they were read (ResponseParser::body()).
inline void body_into(RequestParser& parser, char* out, std::size_t capacity) {
  auto& body = parser.get().body();
  body.data = out;
  body.size = capacity;
}
inline std::size_t body_got(RequestParser& parser, std::size_t capacity) {
  return capacity - parser.get().body().size;
}
inline void body_into(ResponseParser& parser, char*, std::size_t) { parser.clear_body(); }
inline std::size_t body_got(ResponseParser& parser, std::size_t) { return parser.body().size(); }

using BodyPiece = std::pair<boost::system::error_code, std::size_t>;

// The part of reading a body piece that needs no I/O: feeds `parser` what
// `buffer` holds (after body_into). A result when there is one (a piece, the
// end, an error); nothing when more bytes must be read first.
template <typename Parser>
std::optional<BodyPiece> body_from_buffer(BlockBuffer& buffer, Parser& parser, std::size_t capacity) {
  namespace http = boost::beast::http;
  for (;;) {
    if (parser.is_done()) return BodyPiece{boost::system::error_code{}, body_got(parser, capacity)};
    if (buffer.size() == 0) return std::nullopt;
    boost::system::error_code ec;
    std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    std::size_t got = body_got(parser, capacity);
    if (ec == http::error::need_buffer) ec = {};
    if (ec && ec != http::error::need_more) return BodyPiece{ec, got};
    if (got > 0 || parser.is_done()) return BodyPiece{boost::system::error_code{}, got};
    if (ec || used == 0) {
      // Stuck on framing (chunk size, the CRLF after a chunk, trailers):
      // whole lines in what is left mean one ended by a bare LF.
      if (used == 0 && has_bare_lf({static_cast<const char*>(buffer.data().data()), buffer.size()}))
        return BodyPiece{http::error::bad_chunk, got};
      return std::nullopt;
    }
  }
}

}  // namespace heft::proxy
