// HTTP/1.1 message I/O (see http_io.h).
#include "proxy/http_io.h"

namespace heft::proxy {

// Reads more bytes from `socket` into `buffer`.
Task<error_code> read_more(Socket& socket, BlockBuffer& buffer) {
  const auto room = buffer.prepare(kReadSize);
  if (room.size() == 0) co_return http::error::buffer_overflow;  // a head or chunk line fills the block
  auto [ec, n] = co_await socket.async_read_some(room, use_task);
  buffer.commit(n);
  co_return ec;
}

// Whether `bytes` hold a line ended by a bare LF. Beast's chunk parser waits
// for a CRLF after a chunk size or trailer that a bare LF ended, until the
// timeout; heft refuses them as it refuses bare LFs in heads.
bool has_bare_lf(std::string_view bytes) {
  for (std::size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] == '\n' && bytes[i - 1] != '\r') return true;
  return false;
}

}  // namespace heft::proxy
