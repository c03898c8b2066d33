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

}  // namespace heft::proxy
