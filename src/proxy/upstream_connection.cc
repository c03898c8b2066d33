// Connections to backends (see upstream_connection.h).
#include "proxy/upstream_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "net/http_chars.h"
#include "proxy/http_io.h"
#include "proxy/runtime.h"

namespace heft::proxy {
namespace {

// Whether a pooled connection got bytes nobody asked for, an end or an error
// since it was pooled (then it must be closed). A peek (one syscall) only when
// the ReadyWatch reported something, the socket is not watched, its last read
// filled the buffer, or `peek_anyway`.
bool idle_connection_spoilt(Worker& w, UpstreamConnection& conn, bool peek_anyway) {
  const int fd = conn.socket.native_handle();
  const bool news = w.ready_watch.take_ready_now(fd, conn.watched) || !conn.watched || conn.maybe_more;
  if (!news && !peek_anyway) return false;
  char probe;
  const ssize_t n = ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    conn.maybe_more = false;
    return false;
  }
  return true;
}

}  // namespace

// The newest idle connection of `list` that is still clean, or null. A pooled
// connection must stay silent until it is used again: bytes that came after
// its last response (an origin answering twice, or a body longer than its
// Content-Length) would be read as the next request's response, maybe
// another client's, and an end means the origin closed it. Its socket stays
// in the worker's ReadyWatch, which remembers any arrival (and a close) that
// no wait took, so a peek (one syscall) is needed only when it reported one,
// when the socket is not watched, when its last read filled the buffer (more
// may have been there already), or after a quiet second. nginx closes a
// pooled connection as soon as it turns readable. One idle past its
// keepalive_timeout is closed too, not used (the sweep may not have come yet).
std::unique_ptr<UpstreamConnection> take_idle_connection(Worker& w, IdleList& list) {
  const Clock::time_point now = coarse_now();
  while (!list.empty()) {
    std::unique_ptr<UpstreamConnection> conn = std::move(list.back());
    list.pop_back();
    conn->leave_idle_order();
    if (now >= conn->idle_deadline) continue;  // closed with `conn`
    // Bytes that came during the reactor's current batch are not reported yet
    // (nginx's close handler has the same window). Peeking at every reuse
    // would close it at a syscall per request: measured, a peek for each
    // connection pooled before the current 4 ms tick already added 0.3 recvfrom
    // per request under load. A quiet second is the backstop.
    if (!idle_connection_spoilt(w, *conn, now - conn->idle_since >= std::chrono::seconds(1))) return conn;
    // Bytes nobody asked for, an end or an error: closed with `conn`.
  }
  return nullptr;
}

// Connects a non-blocking socket to `endpoint`: no error once connected,
// would_block while the handshake goes on (then wait for writability and ask
// connect_error()), else the connect's error. Asio's async_connect always
// waits for writability (an EPOLL_CTL_MOD and a trip through the reactor),
// then calls poll() and getsockopt(SO_ERROR), where on loopback and near
// backends the handshake is over by the time connect() returns EINPROGRESS.
// A send of nothing says so in one (0: connected; EAGAIN: still connecting;
// else the connect's error, as a later send would report it).
error_code start_connect(Socket& socket, const tcp::endpoint& endpoint) {
  const int fd = socket.native_handle();
  if (::connect(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) == 0) return {};
  // EINTR: the connect goes on in the background, as with EINPROGRESS.
  if (errno != EINPROGRESS && errno != EINTR) return error_code(errno, asio::error::get_system_category());
  if (::send(fd, nullptr, 0, MSG_NOSIGNAL | MSG_DONTWAIT) == 0) return {};
  if (errno == EAGAIN || errno == EWOULDBLOCK) return asio::error::would_block;
  return error_code(errno, asio::error::get_system_category());
}

// The outcome of a connect that was pending once its socket turned writable.
error_code connect_error(Socket& socket) {
  int error = 0;
  socklen_t size = sizeof error;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
  return error ? error_code(error, asio::error::get_system_category()) : error_code{};
}


// Keeps a finished upstream connection for reuse, until `timeout` (the
// pool's keepalive_timeout; 0: until the backend closes it); a draining worker
// closes it, as it does one to a backend that a reload removed meanwhile.
void park(Worker& w, IdleList& list, std::unique_ptr<UpstreamConnection> conn, std::chrono::milliseconds timeout) {
  if (w.draining || list.retired) return;
  conn->idle_since = coarse_now();
  conn->idle_deadline = timeout.count() == 0 ? Clock::time_point::max() : conn->idle_since + timeout;
  conn->maybe_more = conn->buffer.last_read_filled();
  IdleOrder& order = w.idle_order;
  conn->order = &order;
  conn->list = &list;
  conn->older = order.newest;
  (order.newest ? order.newest->newer : order.oldest) = conn.get();
  order.newest = conn.get();
  ++order.count;
  list.push_back(std::move(conn));
  while (order.count > order.cap && close_oldest_idle_connection(w)) {
  }
}

bool close_oldest_idle_connection(Worker& w) {
  UpstreamConnection* oldest = w.idle_order.oldest;
  if (!oldest) return false;
  // A backend's list is in the order its connections were pooled: the
  // worker's oldest is its list's first.
  IdleList& list = *oldest->list;
  const auto it = std::find_if(list.begin(), list.end(), [&](const auto& conn) { return conn.get() == oldest; });
  if (it == list.end()) {
    oldest->leave_idle_order();  // not reached: an idle connection is in its list
    return true;
  }
  list.erase(it);  // closed, and out of the order, with the connection
  return true;
}

bool out_of_descriptors(const error_code& ec) {
  return ec == boost::system::errc::too_many_files_open || ec == boost::system::errc::too_many_files_open_in_system;
}

// A 1xx other than 101 is an interim response (RFC 9110 15.2).
bool is_interim(const ResponseParser& response) {
  const unsigned status = response.status();
  return status >= 100 && status < 200 && status != 101;
}

// After an interim response: parse the next head (of the same request: a
// HEAD's body is still skipped).
void reset_after_interim(ResponseParser& response) {
  FieldArena& arena = response.arena();
  const bool head_request = response.skip();
  response.~ResponseParser();
  new (&response) ResponseParser(arena);
  prepare_response(response, head_request);
}

// The response's Connection field: several lines are one list (RFC 9110
// 5.3), joined into `joined` only then.
std::string_view connection_list(const ResponseParser& response, std::string& joined) {
  std::string_view first;
  bool several = false;
  for (const ResponseParser::Field& field : response.fields()) {
    if (field.name != http::field::connection) continue;
    const std::string_view value = response.value(field);
    if (first.empty()) {
      first = value;
    } else if (!value.empty()) {
      if (!std::exchange(several, true)) joined.assign(first);
      joined.append(", ").append(value);
    }
  }
  return several ? std::string_view(joined) : first;
}

// A final response head heft must not forward (nothing of it was sent yet):
// a status below 100, a transfer coding other than chunked, which would reach the client
// unlabelled once heft re-frames the body (nginx: "upstream sent unknown
// Transfer-Encoding", 502), or a 101 the client did not ask for (RFC 9110
// 15.2.2). An error for the attempt's log, or none.
error_code unusable_head(const ResponseParser& response, bool upgrade_asked) {
  // A status below 100 has no meaning (RFC 9110 15) and no three-digit form once relayed.
  if (response.status() < 100 || (response.status() == 101 && !upgrade_asked)) return http::error::bad_status;
  for (const ResponseParser::Field& field : response.fields()) {
    if (field.name != http::field::transfer_encoding) continue;
    if (!lower_equals(trim_ows(response.value(field)), "chunked")) return http::error::bad_transfer_encoding;
  }
  return {};
}

// Whether the connection may carry the next request once this response is
// done. Not after a 204 that announces a body (a Content-Length above 0 or a
// Transfer-Encoding, both forbidden there: RFC 9110 8.6, RFC 9112 6.1): heft
// reads none, but the backend may still send it, a moment later, and the next
// request on the connection (maybe another client's) would read those bytes
// as its response. A 304's or a HEAD response's length is the GET's, as usual.
bool reusable_after(const ResponseParser& response) {
  if (!response.keep_alive() || !response.is_done()) return false;
  return response.status() != 204 || (!response.chunked() && response.content_length().value_or(0) == 0);
}

// Feeds the connection's buffer to `parser` until its header is done, reading
// when needed. `wait_in`: the request went out just now by a synchronous
// send, so the answer is not here yet: wait in the worker's ReadyWatch (no
// syscall per wait), then read, instead of Asio's read, which tries a recv
// first (EAGAIN), or Asio's wait, which re-arms with EPOLL_CTL_MOD. The
// connection was drained when it was pooled, and take_idle_connection()
// made sure nothing came while it was, so an edge-triggered wait misses
// nothing: a response that beat the wait was reported already and is remembered.
Task<error_code> read_response_head(UpstreamConnection& conn, ResponseParser& parser, bool& received, ReadyWatch* wait_in) {
  Socket& socket = conn.socket;
  BlockBuffer& buffer = conn.buffer;
  for (;;) {
    if (auto done = response_head_from_buffer(buffer, parser)) co_return *done;
    const auto room = buffer.prepare(kReadSize);
    if (room.size() == 0) co_return http::error::header_limit;
    // Read here, not through read_more(): a coroutine frame and a resumption
    // less on every response.
    error_code ec;
    std::size_t n = 0;
    if (wait_in && buffer.size() == 0) {
      ReadyWatch& watch = *std::exchange(wait_in, nullptr);
      const int fd = socket.native_handle();
      if (!watch.take_ready(fd, conn.watched)) std::tie(ec) = co_await watch.async_wait(fd, conn.watched, use_task);
      if (!ec) n = socket.read_some(room, ec);  // non-blocking socket: never waits
      if (ec == asio::error::would_block || ec == asio::error::try_again) continue;  // a stale event
    } else {
      std::tie(ec, n) = co_await socket.async_read_some(room, use_task);
    }
    buffer.commit(n);
    if (buffer.size() > 0) received = true;
    if (ec) {
      if (ec == asio::error::eof && received) {
        error_code eof_ec;
        parser.put_eof(eof_ec);
        if (!eof_ec && parser.is_header_done()) co_return error_code{};
      }
      co_return ec;
    }
  }
}

void sweep_idle_upstream_connections(Worker& worker, Clock::time_point now) {
  for (auto& [endpoint, list] : worker.idle)
    std::erase_if(list, [&](const std::unique_ptr<UpstreamConnection>& conn) {
      return now >= conn->idle_deadline || idle_connection_spoilt(worker, *conn, false);
    });
}

}  // namespace heft::proxy
