// HTTP/1.1 message I/O shared by the client side (request bodies, an
// HTTP/1.1 client's connection) and the upstream side (response heads and
// bodies): reading body pieces through a parser (the steps without I/O are
// in buffer_parsing.h), chunk framing, and synchronous sends that leave the
// rest to Asio.
//
// Thread safety: everything here works on one worker's sockets and buffers,
// on that worker's thread.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <fmt/format.h>

#include "proxy/block_buffer.h"
#include "proxy/buffer_parsing.h"
#include "proxy/field_arena.h"
#include "proxy/io_types.h"
#include "proxy/response_parser.h"

namespace heft::proxy {

namespace http = boost::beast::http;
using boost::system::error_code;

using Request = RequestParser::value_type;
// A request's head as every stage after the client connection sees it,
// whatever protocol brought it.
using RequestHead = http::request_header<http::basic_fields<ArenaAllocator<char>>>;

inline constexpr std::size_t kChunk = 64 * 1024;     // body pieces relayed at once
inline constexpr std::size_t kReadSize = 64 * 1024;  // bytes asked per socket read
static_assert(kChunk == BlockPool::kBlockSize, "a body piece is one whole block");

// A malformed message (as opposed to a connection that ended or failed).
inline bool is_parse_error(const error_code& ec) {
  return ec.category() == error_code(http::error::partial_message).category() && ec != http::error::partial_message;
}

// Reads more bytes from `stream` (a Socket, or a TlsStream over one) into `buffer`.
template <typename Stream>
Task<error_code> read_more(Stream& stream, BlockBuffer& buffer) {
  const auto room = buffer.prepare(kReadSize);
  if (room.size() == 0) co_return http::error::buffer_overflow;  // a head or chunk line fills the block
  auto [ec, n] = co_await stream.async_read_some(room, use_task);
  buffer.commit(n);
  co_return ec;
}

// Reads the next piece of body: for a request at most `capacity` bytes into
// `out`, for a response into parser.body(). Returns the byte count; 0 with
// parser.is_done() at the end.
template <typename Stream, typename Parser>
Task<BodyPiece> read_body_piece(Stream& socket, BlockBuffer& buffer, Parser& parser, char* out,
                                std::size_t capacity) {
  body_into(parser, out, capacity);
  for (;;) {
    if (auto piece = body_from_buffer(buffer, parser, capacity)) co_return *piece;
    error_code ec = co_await read_more(socket, buffer);
    if (ec == boost::asio::error::eof) {
      // What the last read brought, then the end: bytes the parser cannot
      // use yet (a chunk's CRLF waiting for the next size line) will never
      // be completed, and another read would wait out the timeout.
      if (auto piece = body_from_buffer(buffer, parser, capacity)) co_return *piece;
      error_code eof_ec;
      parser.put_eof(eof_ec);
      std::size_t got = body_got(parser, capacity);
      if (eof_ec) co_return BodyPiece{eof_ec, got};
      co_return BodyPiece{error_code{}, got};
    }
    if (ec) co_return BodyPiece{ec, body_got(parser, capacity)};
  }
}

// A chunk-size line for `size` bytes, into `out` (>= 20 bytes); returns its length.
inline std::size_t chunk_line(char* out, std::size_t size) {
  auto end = fmt::format_to(out, "{:x}\r\n", size);
  return static_cast<std::size_t>(end - out);
}

// What is left of `buffers` once `n` bytes of them were written: whole
// buffers dropped, the first remaining one advanced (in place).
inline std::span<boost::asio::const_buffer> unwritten(std::span<boost::asio::const_buffer> buffers, std::size_t n) {
  std::size_t i = 0;
  while (i < buffers.size() && n >= buffers[i].size()) n -= buffers[i++].size();
  buffers = buffers.subspan(i);
  if (!buffers.empty()) buffers[0] += n;
  return buffers;
}

// One synchronous send of `out` on a socket in non-blocking mode; `out` is left
// holding what was not sent (a full send buffer is would_block, not an error),
// for Asio's composed write to finish. Asio's own asynchronous write completes
// through the scheduler even when its send succeeds at once: a queue round
// trip and a resumption per write.
inline error_code send_now(Socket& socket, std::span<boost::asio::const_buffer>& out) {
  error_code ec;
  const std::size_t n = socket.write_some(out, ec);
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) return {};
  if (!ec) out = unwritten(out, n);
  return ec;
}

}  // namespace heft::proxy
