// What heft does with a client's bytes, up to the point where a request would
// be forwarded: src/proxy/session.cc's steps, called as the session calls
// them (scan_request_head, parse_request_head, body_from_buffer, and the
// request plan's target and Host checks), with the socket replaced by an
// input delivered a few octets per read. Used by the request fuzz targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/block_buffer.h"
#include "proxy/field_arena.h"

namespace heft::fuzz {

// The client's side of the connection: `input`, `step` octets per read.
class ClientBytes {
 public:
  ClientBytes(std::string_view input, std::size_t step) : input_(input), step_(step ? step : 1) {}
  // Appends the next read to `buffer`; false at the end of the input (or
  // when the buffer is full: the session's read fails then too).
  bool read_into(proxy::BlockBuffer& buffer);
  std::size_t delivered() const { return at_; }

 private:
  std::string_view input_;
  std::size_t step_;
  std::size_t at_ = 0;
};

struct RequestOutcome {
  enum Kind {
    closed,      // the input ended before a whole head (or with none)
    refused,     // the head or the request plan was refused: `status`, connection closed
    body_error,  // the body was malformed, or ended early (`reason`)
    complete     // head and body read; the next request starts after `consumed`
  };
  Kind kind = closed;
  unsigned status = 0;
  std::string reason;
  bool chunked = false;
  std::uint64_t length = 0;  // the Content-Length when not chunked (0: none)
  std::string body;          // the body octets read (chunk framing removed)
  std::size_t consumed = 0;  // input octets this request took, empty lines before it included
  std::string method, target, host;
  unsigned version = 0;
};

// One request from `client`, what `in` holds first. `body_capacity`: the
// most body octets one read of a body piece takes (the session's 64 KiB, or
// less to try the parser's need_buffer path).
RequestOutcome read_request(proxy::BlockBuffer& in, ClientBytes& client, proxy::FieldArena& arena,
                            std::size_t body_capacity);

}  // namespace heft::fuzz
