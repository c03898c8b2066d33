// A chunked body as it came over the wire, for tests of how heft and the
// demo backend frame one: the data chunks' sizes in order, their data joined,
// whether the last chunk (size 0) came, and what followed it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace heft::test {

struct ChunkedBody {
  std::vector<std::size_t> sizes;  // of the data chunks, in order (not the last chunk's 0)
  std::string data;                // their data, joined
  bool ended = false;              // the last chunk came (and the CRLF ending its empty trailer)
  bool framed = true;              // every chunk's data was followed by CRLF
  std::string rest;                // what follows the last chunk, or an unfinished line
};

// Reads chunks from `wire` (the bytes after the head) while whole lines come.
// A size line that is not hex throws, as std::stoul does.
inline ChunkedBody decode_chunked(std::string_view wire) {
  ChunkedBody out;
  for (std::size_t eol; (eol = wire.find("\r\n")) != std::string_view::npos;) {
    const std::size_t size = std::stoul(std::string(wire.substr(0, eol)), nullptr, 16);
    if (size > 0) {
      out.sizes.push_back(size);
      out.data += wire.substr(eol + 2, size);
    }
    if (wire.substr(std::min(wire.size(), eol + 2 + size), 2) != "\r\n") out.framed = false;
    wire.remove_prefix(std::min(wire.size(), eol + 2 + size + 2));
    if (size == 0) {
      out.ended = true;
      break;
    }
  }
  out.rest = wire;
  return out;
}

}  // namespace heft::test
