// Connections to backends: opening them without a trip through the reactor,
// keeping the idle ones per backend address, finding out whether an idle one
// is still clean before it is used again, and reading a response head from one.
//
// Thread safety: a connection and its idle list belong to one worker thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "proxy/block_buffer.h"
#include "proxy/io_types.h"
#include "proxy/response_parser.h"

namespace heft::proxy {

class ReadyWatch;
struct Worker;
struct IdleList;
struct UpstreamConnection;

// A worker's idle upstream connections across all its backends, from the
// least recently used: each backend's list alone cannot bound them, and a
// pool of thousands of backends would keep one per backend until the
// descriptors run out. At `cap` the least recently used one is closed
// (nginx's per-worker `keepalive` cache does the same), and a socket that
// cannot be opened for want of descriptors closes one and tries again.
struct IdleOrder {
  UpstreamConnection* oldest = nullptr;
  UpstreamConnection* newest = nullptr;
  std::size_t count = 0;
  std::size_t cap = std::numeric_limits<std::size_t>::max();
};

// An idle, reusable connection to a backend.
struct UpstreamConnection {
  UpstreamConnection(boost::asio::io_context& io, BlockPool& blocks) : socket(io), buffer(blocks) {}
  ~UpstreamConnection() { leave_idle_order(); }
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;
  Socket socket;
  BlockBuffer buffer;  // keeps its block while idle: upstream connections are few and reused at once
  std::chrono::steady_clock::time_point idle_since{};  // when it was last put back in the idle list
  // When its pool's keepalive_timeout ends that idle time (max: never). Kept
  // per connection: sites whose pools differ share a backend's idle list.
  std::chrono::steady_clock::time_point idle_deadline = std::chrono::steady_clock::time_point::max();
  bool watched = false;  // in the worker's ReadyWatch
  // Pooled after a read that filled its room: bytes may have followed the
  // response unseen by the ReadyWatch (see take_idle_connection()).
  bool maybe_more = false;
  // TCP_NODELAY is set (set_nodelay_once()): only before a request's second
  // write. A request that goes out in one write never waits for Nagle: by
  // then the backend has acknowledged everything sent before (its response did).
  bool nodelay = false;

  // Its place in the worker's IdleOrder while it is idle (order null: not idle).
  IdleOrder* order = nullptr;
  IdleList* list = nullptr;
  UpstreamConnection* older = nullptr;
  UpstreamConnection* newer = nullptr;
  void leave_idle_order() {
    if (!order) return;
    (older ? older->newer : order->oldest) = newer;
    (newer ? newer->older : order->newest) = older;
    --order->count;
    order = nullptr;
    list = nullptr;
    older = newer = nullptr;
  }
};

// Sets TCP_NODELAY on `socket` unless `set` says it is already (a syscall:
// client and upstream connections pay it only before a second write).
inline void set_nodelay_once(Socket& socket, bool& set) {
  if (set) return;
  boost::system::error_code ignored;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
  set = true;
}

struct IdleList : std::vector<std::unique_ptr<UpstreamConnection>> {
  // No site uses this backend address since a reload: a connection finishing
  // its request here is closed, not pooled (the list stays, as requests begun
  // before the reload hold it).
  bool retired = false;
};

// Connects a non-blocking socket to `endpoint`: no error once connected,
// would_block while the handshake goes on (then wait for writability and ask
// connect_error()), else the connect's error.
boost::system::error_code start_connect(Socket& socket, const boost::asio::ip::tcp::endpoint& endpoint);
// The outcome of a connect that was pending once its socket turned writable.
boost::system::error_code connect_error(Socket& socket);

// Keeps a finished upstream connection for reuse, until `timeout` (the
// pool's keepalive_timeout; 0: until the backend closes it); a draining worker
// closes it, as it does one to a backend that a reload removed meanwhile.
void park(Worker& w, IdleList& list, std::unique_ptr<UpstreamConnection> conn, std::chrono::milliseconds timeout);
// The newest idle connection of `list` that is still clean, or null.
std::unique_ptr<UpstreamConnection> take_idle_connection(Worker& w, IdleList& list);
// Closes the worker's least recently used idle upstream connection; false
// when it has none.
bool close_oldest_idle_connection(Worker& w);
// Whether `ec` says the process (or the system) is out of descriptors.
bool out_of_descriptors(const boost::system::error_code& ec);

// Feeds the connection's buffer to `parser` until its header is done, reading
// when needed; `received` is set once any byte came. `wait_in`: the request
// went out just now by a synchronous send, so wait in that ReadyWatch first.
Task<boost::system::error_code> read_response_head(UpstreamConnection& conn, ResponseParser& parser, bool& received,
                                                   ReadyWatch* wait_in);
// A 1xx other than 101 is an interim response (RFC 9110 15.2).
bool is_interim(const ResponseParser& response);
// After an interim response: parse the next head (of the same request: a
// HEAD's body is still skipped).
void reset_after_interim(ResponseParser& response);
// The response's Connection field: several lines are one list (RFC 9110
// 5.3), joined into `joined` only then.
std::string_view connection_list(const ResponseParser& response, std::string& joined);
// A final response head heft must not forward, as an error for the
// attempt's log; none when it may be forwarded.
boost::system::error_code unusable_head(const ResponseParser& response, bool upgrade_asked);
// Whether the connection may carry the next request once this response is done.
bool reusable_after(const ResponseParser& response);

}  // namespace heft::proxy
