// One client connection: reads requests (strictly, see request_head.h), routes
// them to a site, lets the site's balancer pick a backend, forwards over a
// pooled keep-alive upstream connection and streams both bodies with bounded
// memory. Retries follow nginx's proxy_next_upstream rules.
//
// Thread safety: a Session lives on its worker's thread only. Timeouts: one
// deadline per session, checked by the worker's sweep (no timer per operation).
#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <span>

#include <malloc.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "heft/balance/hash.h"
#include "proxy/buffer_parsing.h"
#include "proxy/field_arena.h"
#include "proxy/head_builder.h"
#include "proxy/http_chars.h"
#include "proxy/request_head.h"
#include "proxy/response_parser.h"
#include "observe/metrics.h"
#include "proxy/runtime.h"

namespace heft::proxy {
using namespace std::string_view_literals;
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Request = RequestParser::value_type;

constexpr std::size_t kChunk = 64 * 1024;     // body pieces relayed at once
// How long a closing connection drains what its client still sends (linger()).
constexpr std::chrono::milliseconds kLingeringTime{5000};
static_assert(kChunk == BlockPool::kBlockSize, "scratch() hands out whole blocks");
constexpr std::size_t kReadSize = 64 * 1024;  // bytes asked per socket read
// A client connection idle this long gives back its buffers and waits for
// readability without one (docs/proxy.md: memory per idle connection).
constexpr auto kParkAfter = std::chrono::milliseconds(500);
// A request waiting this long for its response head has its client checked
// (and then every kClientCheckEvery) for a close: nginx notices at once
// through an event; a check by the sweep costs nothing for the fast answers
// that are nearly all of them.
constexpr auto kClientCheckAfter = std::chrono::milliseconds(250);
constexpr auto kClientCheckEvery = std::chrono::milliseconds(500);
// How often spare I/O blocks unused since the last look are unmapped.
constexpr auto kTrimInterval = std::chrono::milliseconds(250);

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

// Beast names known fields when it parses them, so the check is a switch.
bool is_hop_by_hop(http::field name) {
  switch (name) {
    case http::field::te:
    case http::field::trailer:
    case http::field::upgrade:
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::transfer_encoding:
    case http::field::content_length:  // framing is rewritten
      return true;
    default: return false;
  }
}

// The Connection header's tokens other than close / keep-alive / upgrade:
// fields it names are hop-by-hop too. Usually there are none, and then no
// field needs the check.
std::string_view connection_extras(std::string_view connection) {
  const bool none = each_list_item(connection, [](std::string_view item) {
    return item.empty() || iequals(item, "close") || iequals(item, "keep-alive") || iequals(item, "upgrade");
  });
  return none ? std::string_view{} : connection;
}

bool named_by_connection(std::string_view extras, std::string_view name) {
  return !extras.empty() && has_token(extras, name);
}

// Whether a backend not yet tried could take the request (a pick may still
// refuse it; this only says whether one is worth asking for).
bool untried_available(const upstream::PoolSnapshot& snapshot, const balance::TriedSet& tried) {
  for (uint32_t j = 0; j < snapshot.size(); ++j)
    if (!tried.contains(j) && snapshot.available(j)) return true;
  return false;
}

bool idempotent(http::verb method) {
  switch (method) {
    case http::verb::post:
    case http::verb::patch:
    case http::verb::lock:
    case http::verb::connect: return false;
    default: return true;
  }
}

std::string_view cookie_value(std::string_view cookies, std::string_view name) {
  while (!cookies.empty()) {
    std::size_t semi = cookies.find(';');
    std::string_view pair = cookies.substr(0, semi);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name && pair[name.size()] == '=')
      return pair.substr(name.size() + 1);
    if (semi == std::string_view::npos) break;
    cookies.remove_prefix(semi + 1);
  }
  return {};
}

const char* status_text(unsigned status) {
  switch (status) {
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

// Whether an op sets or removes `name`: the message's own field is dropped
// then (the ops apply after it, in order).
bool overridden(const std::vector<config::HeaderOp>& ops, std::string_view name) {
  for (const auto& op : ops)
    if (op.op != config::HeaderOp::add && iequals(op.name, name)) return true;
  return false;
}

// Whether any op (add, set or remove) is about `name`.
bool names_field(const std::vector<config::HeaderOp>& ops, std::string_view name) {
  for (const auto& op : ops)
    if (iequals(op.name, name)) return true;
  return false;
}

void append_ops(HeadBuilder& out, const std::vector<config::HeaderOp>& ops) {
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].op == config::HeaderOp::remove) continue;
    // Ops apply in order: a later set or remove of the field undoes this one.
    bool undone = false;
    for (std::size_t later = k + 1; later < ops.size() && !undone; ++later)
      undone = ops[later].op != config::HeaderOp::add && iequals(ops[later].name, ops[k].name);
    if (!undone) out.field(ops[k].name, ops[k].value);
  }
}

// Reads more bytes from `socket` into `buffer`.
Task<error_code> read_more(Socket& socket, BlockBuffer& buffer) {
  const auto room = buffer.prepare(kReadSize);
  if (room.size() == 0) co_return http::error::buffer_overflow;  // a head or chunk line fills the block
  auto [ec, n] = co_await socket.async_read_some(room, use_task);
  buffer.commit(n);
  co_return ec;
}

// Feeds the connection's buffer to `parser` until its header is done, reading
// when needed. `wait_in`: the request went out just now by a synchronous
// send, so the answer is not here yet: wait in the worker's ReadyWatch (no
// syscall per wait), then read, instead of Asio's read, which tries a recv
// first (EAGAIN), or Asio's wait, which re-arms with EPOLL_CTL_MOD. The
// connection was drained when it was pooled, and take_idle_connection()
// made sure nothing came while it was, so an edge-triggered wait misses
// nothing: a response that beat the wait was reported already and is remembered.
Task<error_code> read_header(UpstreamConnection& conn, ResponseParser& parser, bool& received, ReadyWatch* wait_in) {
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

// Reads the next piece of body: for a request at most `capacity` bytes into
// `out`, for a response into parser.body(). Returns the byte count; 0 with
// parser.is_done() at the end.
template <typename Parser>
Task<BodyPiece> read_body_piece(Socket& socket, BlockBuffer& buffer, Parser& parser, char* out,
                                std::size_t capacity) {
  body_into(parser, out, capacity);
  for (;;) {
    if (auto piece = body_from_buffer(buffer, parser, capacity)) co_return *piece;
    error_code ec = co_await read_more(socket, buffer);
    if (ec == asio::error::eof) {
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
std::size_t chunk_line(char* out, std::size_t size) {
  auto end = fmt::format_to(out, "{:x}\r\n", size);
  return static_cast<std::size_t>(end - out);
}

// What is left of `buffers` once `n` bytes of them were written: whole
// buffers dropped, the first remaining one advanced (in place).
std::span<asio::const_buffer> unwritten(std::span<asio::const_buffer> buffers, std::size_t n) {
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
error_code send_now(Socket& socket, std::span<asio::const_buffer>& out) {
  error_code ec;
  const std::size_t n = socket.write_some(out, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) return {};
  if (!ec) out = unwritten(out, n);
  return ec;
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

// A malformed message (as opposed to a connection that ended or failed).
bool is_parse_error(const error_code& ec) {
  return ec.category() == error_code(http::error::partial_message).category() && ec != http::error::partial_message;
}

// Keeps a finished upstream connection for reuse, until `timeout` (the
// pool's keepalive_timeout; 0: until the backend closes it); a draining worker
// closes it, as it does one to a backend that a reload removed meanwhile.
void park(Worker& w, IdleList& list, std::unique_ptr<UpstreamConnection> conn, std::chrono::milliseconds timeout) {
  if (w.draining || list.retired) return;
  conn->idle_since = coarse_now();
  conn->idle_deadline = timeout.count() == 0 ? Clock::time_point::max() : conn->idle_since + timeout;
  conn->maybe_more = conn->buffer.last_read_filled();
  list.push_back(std::move(conn));
}

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

// A request is at backend `index` (its active count, read by least_conn and p2c
// and limited by max_conns): the pick counted it, the guard ends it, and the
// place it frees goes to the request waiting longest in the pool's queue.
struct ActiveGuard {
  ActiveGuard(balance::Balancer& b, uint32_t i, upstream::PlaceQueue* q) : balancer(b), index(i), places(q) {}
  ~ActiveGuard() {
    balancer.end_request(index);
    if (places && places->size() > 0) [[unlikely]]
      places->wake_one();
  }
  balance::Balancer& balancer;
  uint32_t index;
  upstream::PlaceQueue* places;
};

// A request waiting in a pool's PlaceQueue: its timer is the wait, and a
// freed place cancels it from whichever worker freed it (posted to the
// waiter's own executor). Shared with the posted wake-ups, which may outlive
// the wait.
struct PlaceWait {
  explicit PlaceWait(const Executor& executor) : timer(executor) {}
  Timer timer;
  bool woken = false;
};

}  // namespace

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

class Session {
 public:
  // A new connection (counted open here), or one resumed from parking
  // (counted since it was accepted).
  Session(Worker& worker, Socket socket, uint16_t port, std::string ip, bool resumed)
      : w(worker), client(std::move(socket)), local_port(port), client_ip(std::move(ip)) {
    self = w.sessions.insert(w.sessions.end(), this);
    // Synchronous sends (send_now()) must return would_block, never wait.
    // The ioctl is the one Asio would make before the first async operation
    // anyway.
    error_code ignored;
    client.non_blocking(true, ignored);
    if (resumed) {
      resumed_ = true;
      nodelay_ = true;  // set before parking
      return;
    }
    w.proxy.open_connections.fetch_add(1, std::memory_order_relaxed);
    observe::connection_opened();
  }
  ~Session() {
    if (scratch_) w.blocks.put(scratch_);
    w.sessions.erase(self);
    ++w.sessions_ended_since_trim;
    if (handed_to_park_) return;  // still open, now counted by the parked connection
    w.proxy.open_connections.fetch_sub(1, std::memory_order_relaxed);
    observe::connection_closed();
  }

  Task<void> run();
  // nginx's lingering close, for a connection that ends with client input
  // unread (an answered request whose body did not all come): closing then
  // would make the kernel reset the connection, which can destroy the response
  // still on its way. So the sending side is shut (a FIN after the response)
  // and what the client still sends is read and dropped, for kLingeringTime at most.
  Task<void> linger();

  // Called by the sweep for a connection idle since kParkAfter: its pending
  // read is cancelled and read_head() parks it (buffers released).
  void request_park() {
    park_requested = true;
    cancel_client();
  }
  // Called by the sweep for a request waiting for its response head since
  // kClientCheckAfter: a client that closed its connection (or half-closed
  // it, as nginx counts it) gets no answer, so the backend's connection is
  // closed to end its work and the request is logged 499 (nginx's
  // "client prematurely closed connection, so upstream connection is closed
  // too"). A peek: pipelined bytes waiting are no close.
  void check_client(Clock::time_point now) {
    // A whole request pipelined after this one, read already: the client
    // waits for its answer (a close after it shows when it is written).
    // Empty lines or the start of a head are no such request.
    if (in_.size() > 0 && scan_request_head({in_.bytes(), in_.size()}).status != HeadScan::incomplete) {
      next_client_check = now + kClientCheckEvery;
      return;
    }
    char byte;
    const ssize_t n = ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
      next_client_check = now + kClientCheckEvery;
      return;
    }
    client_closed_ = true;
    unwatch_client();
    if (upstream) cancel_io(*upstream);
    if (queue_wait_) queue_wait_->timer.cancel();  // it gives up its place in the queue
  }
  // Called by the sweep when the deadline passed: aborts whatever is pending.
  void expire() {
    timed_out = true;
    deadline = Clock::time_point::max();
    cancel_client();
    if (upstream) cancel_io(*upstream);
  }
  void cancel_client() { cancel_io(client); }
  // Called when the stop's grace period ends, right before the worker stops
  // for good: the request in flight, if any, is recorded as it stands.
  void cut() {
    if (!current_parser_) return;
    const auto& req = current_parser_->get();
    fmt::print(stderr, "heft: {} {}: cut by the end of the grace period\n", req.method_string(), req.target());
    finish_request();
  }
  // Aborts a socket's pending operation, in Asio or in the ReadyWatch.
  void cancel_io(Socket& socket) {
    error_code ignored;
    socket.cancel(ignored);
    w.ready_watch.cancel(socket.native_handle());
  }

  Worker& w;
  Socket client;
  uint16_t local_port;
  // Whether the connection ends after the current request: the worker drains,
  // or a reload stopped serving the port it came in on.
  bool closing() const {
    return w.draining || port_dropped_ ||
           (!w.unserved_ports.empty() &&
            std::find(w.unserved_ports.begin(), w.unserved_ports.end(), local_port) != w.unserved_ports.end());
  }
  // A reload stopped serving local_port while a request was on its way here
  // (see Worker::dropped_port_routes): served, then the connection ends.
  bool port_dropped_ = false;
  std::string client_ip;
  std::list<Session*>::iterator self;
  Clock::time_point deadline = Clock::time_point::max();
  bool timed_out = false;
  bool idle = false;  // waiting for a request, nothing received: drain may close it
  bool lingering = false;  // in linger(): drain may close it too
  bool park_requested = false;  // the sweep cancelled the idle read to park the connection
  Clock::time_point idle_since{};
  Socket* upstream = nullptr;
  // Since when the request waits for its response head (max: it does not),
  // and when the sweep looks at the client next (check_client()).
  Clock::time_point head_wait_since = Clock::time_point::max();
  Clock::time_point next_client_check{};
  // A connection resumed from parking before its first request: when that
  // request's header timeout ends (it runs from the connection).
  Clock::time_point first_head_deadline = Clock::time_point::max();

 private:
  // check_client() found the client gone: the attempt ends as client_gone.
  bool client_closed_ = false;
  // The wait for a place in the pool's queue under way (wait_in_queue()), if any.
  PlaceWait* queue_wait_ = nullptr;
  // The request waits for its response head from `since` on: the sweep
  // checks its client (check_client()) once it has waited kClientCheckAfter.
  void watch_client_from(Clock::time_point since) {
    if (ignore_client_abort_) return;
    head_wait_since = since;
    next_client_check = since + kClientCheckAfter;
  }
  void unwatch_client() { head_wait_since = Clock::time_point::max(); }
  bool ignore_client_abort_ = false;  // the current request's pool says so
  // local_error: heft could not open a socket (out of descriptors, memory):
  // nothing the backend did, so neither counted against it nor retried.
  // broken: the body failed (an error, a timeout, a bad chunk) after the head
  // was accepted: the client gets the head and a cut body, nothing is retried.
  enum class Outcome { done, error, timeout, bad_status, client_gone, bad_request_body, broken, local_error };
  struct AttemptResult {
    Outcome outcome = Outcome::error;
    unsigned status = 0;     // bad_status, broken: the backend's status
    bool keep_alive = false;  // done: whether the client connection continues
    bool failed = false;      // done, but with a status next_upstream counts as a failure
  };
  // Why the last attempt failed, for the error log (nginx names the stage and
  // the system's reason). Members, not part of AttemptResult: they are read
  // only on failure and would otherwise grow handle()'s coroutine frame.
  const char* failure_stage_ = "";
  static constexpr const char* kConnecting = "connecting";  // the stage at which nothing was sent
  // An interim response of this request reached the client: bytes of this
  // backend's answer went out, so no other backend may answer it (HAProxy
  // alike), or the client would get one backend's hints and another's response.
  bool interim_relayed_ = false;
  error_code failure_ec_;
  // The deadline ended the attempt (kept apart from timed_out, which the
  // next arm() clears: a cut response writes its held head first).
  bool failure_timed_out_ = false;
  // When this attempt's response head was received (forward_response()), or
  // none: the backend's latency for adaptive weights and the per-backend
  // histogram is the time to its head (nginx's $upstream_header_time,
  // HAProxy's Tr), not the whole relay — a large download to a slow client
  // or an event stream open for minutes is not a slow backend.
  Clock::time_point response_head_at_{};
  // An error or timeout (whichever the deadline says) at `stage`.
  AttemptResult failure(const char* stage, error_code ec) {
    if (client_closed_) return AttemptResult{Outcome::client_gone};
    failure_stage_ = stage;
    failure_ec_ = ec;
    failure_timed_out_ = timed_out;
    return AttemptResult{timed_out ? Outcome::timeout : Outcome::error};
  }
  // The reason the error log gives: "connecting: Connection refused", "reading the response head".
  std::string failure_reason() const {
    if (failure_timed_out_ || !failure_ec_) return failure_stage_;
    return fmt::format("{}: {}", failure_stage_, failure_ec_.message());
  }

  void arm(std::chrono::milliseconds timeout) {
    deadline = coarse_now() + timeout;
    timed_out = false;
  }
  void disarm() { deadline = Clock::time_point::max(); }
  // Nagle holds a write back only while an earlier one is unacknowledged, so
  // the first write on a connection never waits: TCP_NODELAY (a syscall) is
  // set before the second, as nginx does for keep-alive connections. A
  // connection that gets one response and closes never pays for it.
  void before_client_write() {
    if (nodelay_ || client_writes_++ == 0) return;
    set_nodelay_once(client, nodelay_);
  }
  bool nodelay_ = false;
  bool resumed_ = false;  // back from parking
  // A switched (101) connection: forward_response() sets tunnel_pending_,
  // attempt() moves the connection to tunnel_, handle() splices it.
  bool tunnel_pending_ = false;
  std::unique_ptr<UpstreamConnection> tunnel_;
  std::size_t later_minor_at_ = 0;  // read_head()'s HeadScan::later_minor_at
  // The client's last read came back short (the socket was drained then), so
  // the next one may wait in the ReadyWatch; any other read of the client
  // (bodies) clears it.
  bool client_drained_ = false;
  bool client_watched_ = false;  // in the worker's ReadyWatch
  unsigned client_writes_ = 0;
  bool client_keep_alive_ = false;  // the current request's Connection: semantics (handle())
  char* scratch() {
    if (!scratch_) scratch_ = w.blocks.get();
    return scratch_;
  }

  Task<int> read_head(bool first, std::size_t& skip, std::size_t& size);
  bool handed_to_park_ = false;
  Task<void> send_error(unsigned status, std::string_view text, bool keep_alive);
  // send_error() with the body "<status> <reason>\n". Its own coroutine, so the
  // text is not a temporary in the caller's frame.
  Task<void> send_status(unsigned status, bool keep_alive);
  // A response heft answers with itself (an error), which handle() only
  // notes and run() sends once handle() has returned: a co_await per refusal
  // kept each awaiter and its arguments in handle()'s coroutine frame, which
  // grew past the 1,020 bytes Asio recycles, and every request then paid a
  // malloc and a free for it (and evicted another frame from the cache).
  struct Refusal {
    unsigned status = 0;  // 0: none
    std::string_view text;  // a literal; empty: "<status> <reason>" (send_status())
    bool keep_alive = false;
  };
  Refusal refusal_;
  void refuse(unsigned status, std::string_view text, bool keep_alive) { refusal_ = {status, text, keep_alive}; }
  void refuse_status(unsigned status, bool keep_alive) { refusal_ = {status, {}, keep_alive}; }
  Task<bool> handle(RequestParser& parser);
  // Waits in the pool's queue until a backend has room, at most the pool's
  // queue_timeout; `snapshot` becomes the pool's current one. The chosen
  // backend, counted as acquire() counts it; nullopt when the queue was full
  // or the time ran out (`full` set), or nothing is available any more.
  Task<std::optional<uint32_t>> wait_for_place(WorkerSite& site,
                                               std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                               const balance::PickContext& ctx, const config::PoolConfig& pool,
                                               bool& full);
  // wait_for_place() without the record of how long it took.
  Task<std::optional<uint32_t>> wait_in_queue(WorkerSite& site,
                                              std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                              const balance::PickContext& ctx, const config::PoolConfig& pool,
                                              bool& full, Clock::time_point deadline);
  // What handle() decides from the request head before its first wait, and
  // the backend's request head (up_head_) built. A plain function so that its
  // locals stay off handle()'s coroutine frame: Asio recycles frames of up to
  // 1,020 bytes and sends larger ones to malloc on every request.
  struct RequestPlan {
    const SiteRoute* route = nullptr;  // none: 404
    const char* bad_target = nullptr;  // 400: why
    uint64_t key_hash = 0;             // for a hash policy
    bool upgrade = false;
    bool expect_continue = false;
    bool expectation_failed = false;  // 417
    bool connect = false;             // 501: CONNECT
    // Beast reads a Proxy-Connection field as Connection; nginx and HAProxy
    // ignore it. And for HTTP/1.0 it lets "keep-alive" win over "close".
    // Set (from Connection alone) only then: with a Proxy-Connection, or on
    // HTTP/1.0.
    std::optional<bool> keep_alive;
  };
  RequestPlan plan_request(const Request& req, const WorkerRoutes& routes);
  std::string origin_form_;  // an absolute-form target's origin-form (plan_request)
  std::string connection_lines_;  // several Connection lines joined (plan_request, then forward_response)
  // The host the current request was routed by (plan_request), for the access
  // log: an absolute-form target's authority, else the Host field. A view into
  // the request head, which lives until finish_request().
  std::string_view routed_host_;
  Task<AttemptResult> attempt(const SiteRoute& route, WorkerSite& site, const upstream::PoolSnapshot& snapshot,
                              uint32_t backend, const balance::TriedSet& tried, RequestParser& parser,
                              bool last_chance, bool upgrade);
  Task<AttemptResult> attempt_streaming_body(std::unique_ptr<UpstreamConnection>& conn, ResponseParser& response,
                                             const SiteRoute& route, RequestParser& parser, bool upgrade,
                                             IdleList& idle_list);
  Task<AttemptResult> forward_response(UpstreamConnection& conn, ResponseParser& response,
                                       const SiteRoute& route, RequestParser& parser, bool upgrade);
  Task<error_code> send_rest_of_body(UpstreamConnection& conn, RequestParser& parser, bool chunked,
                                     bool& client_failed, const config::PoolConfig& pool);
  Task<void> splice(UpstreamConnection& conn);
  Task<bool> relay_interim(ResponseParser& response, bool client_http11, const config::PoolConfig& pool);

  BlockBuffer in_{w.blocks, FieldArena::kBytes};
  FieldArena arena_;  // the fields of the current request and response, in in_'s reserved tail
  std::optional<ResponseParser> response_;  // the current attempt's response (see attempt())
  HeadBuilder up_head_;    // request head for the backend (reused)
  HeadBuilder down_head_;  // response head for the client (reused)
  std::string body_prefix_;  // request body buffered for retries (reused)
  char* scratch_ = nullptr;  // a block of w.blocks (kChunk bytes), taken on first use
  // The response was complete while the request body was still coming (a
  // backend answering early, e.g. 413): the rest of the body is not relayed.
  bool body_abandoned_ = false;
  // Sending the streamed request body failed (the client left, a bad chunk,
  // the backend): the upstream connection was shut for that, so a failed
  // body read that follows is no fault of the response.
  bool request_body_failed_ = false;
  const config::Config* config_ = nullptr;
  // What the access log and request metrics say of the current request.
  struct RequestRecord {
    unsigned status = 0;  // of the response head that reached the client connection; 0: none did (yet)
    std::string upstream;
    unsigned tries = 0;
    uint64_t size = 0;  // response body bytes written to the client connection
    double queued = -1;  // seconds waited in the pool's queue; < 0: did not wait
    // The last attempt's time to the backend's response head and to its end; < 0: none.
    double upstream_header_time = -1, upstream_response_time = -1;
  };
  RequestRecord record_;
  std::shared_ptr<const WorkerRoutes> current_routes_;
  const SiteRoute* current_route_ = nullptr;
  // The request being handled (its head names it in the log); null between requests.
  const RequestParser* current_parser_ = nullptr;
  // Records the current request, however it ended (metrics, access log):
  // with the status whose head was sent, else 499 (nothing was: the client
  // went away first, or the stop's grace period ended). Once per request.
  void finish_request();
  // The site a request that was refused before routing is counted and logged
  // under: the port's site for any host or its default, else its first
  // (nginx logs such requests in the default server's log).
  const SiteRoute* port_site(const WorkerRoutes& routes) const;
  // Counts and logs a request refused while its head was read (no parsed
  // request: method and URI stay empty in the log).
  void record_refused_head(unsigned status);
  Clock::time_point head_started_{};  // read_head(): when the current head's header_timeout began (coarse clock)
  Clock::time_point request_start_{};  // when the current request's head was complete
  bool upstream_chunked_ = false;  // request body sent chunked (streamed, size unknown)
};

// 0: a head is in in_ at [skip, skip+size). -1: the connection is done (closed,
// idle timeout, draining). -2: idle long enough to be parked (the sweep asked).
// Otherwise an HTTP status to answer before closing.
Task<int> Session::read_head(bool first, std::size_t& skip, std::size_t& size) {
  // Looked up after every wait, never held across one: a reload meanwhile
  // frees the route table this session saw last (nothing here holds it).
  const auto config = [this]() -> const config::Config& { return w.current_routes()->table->config; };
  // header_timeout runs from the connection for its first request (nginx's
  // client_header_timeout), from the first byte for a keep-alive one (the
  // wait before it is idle_timeout's).
  const bool header_clock_running = first && in_.size() == 0;
  if (in_.size() == 0) {
    if (closing()) co_return -1;
    idle = true;
    idle_since = coarse_now();
    const config::Config& timeouts = config();  // not held across the wait below
    arm(first ? timeouts.header_timeout : timeouts.idle_timeout);
    if (first) {
      deadline = std::min(deadline, first_head_deadline);  // a parked connection's clock runs from its accept
      head_started_ = deadline - timeouts.header_timeout;
    }
    // Inline rather than read_more(): one coroutine frame less per request
    // (the buffer is empty, so it has room). After a drained read the next
    // request is waited for in the ReadyWatch: Asio's read would try a recv
    // first, which finds nothing while the client reads our response.
    const auto room = in_.prepare(kReadSize);
    error_code ec;
    std::size_t n = 0;
    if (client_drained_) {
      const int fd = client.native_handle();
      ReadyWatch& watch = w.ready_watch;
      if (!watch.take_ready(fd, client_watched_))
        std::tie(ec) = co_await watch.async_wait(fd, client_watched_, use_task);
      if (!ec) n = client.read_some(room, ec);  // non-blocking socket: never waits
      if (ec == asio::error::would_block || ec == asio::error::try_again)  // a stale event
        std::tie(ec, n) = co_await client.async_read_some(room, use_task);
    } else {
      std::tie(ec, n) = co_await client.async_read_some(room, use_task);
    }
    client_drained_ = !ec && n < room.size();
    in_.commit(n);
    idle = false;
    if (ec == asio::error::operation_aborted && park_requested && !timed_out && !closing()) co_return -2;
    park_requested = false;
    if (ec || in_.size() == 0) co_return -1;
  }
  // Where header_timeout's clock started (set above for a first request): a
  // refused head's duration runs from there (nginx's $request_time from the
  // first bytes), not 0.
  if (!header_clock_running) {
    const std::chrono::milliseconds header_timeout = config().header_timeout;
    arm(header_timeout);
    head_started_ = deadline - header_timeout;
  }
  for (;;) {
    std::string_view bytes(in_.bytes(), in_.size());
    HeadScan scan = scan_request_head(bytes);
    switch (scan.status) {
      case HeadScan::complete:
        skip = scan.skip;
        size = scan.head_size;
        later_minor_at_ = scan.later_minor_at;
        co_return 0;
      case HeadScan::bad_request:
        fmt::print(stderr, "heft: 400 from {}: {}\n", client_ip, scan.reason);
        co_return 400;
      case HeadScan::uri_too_long: co_return 414;
      case HeadScan::header_too_large: co_return 431;
      case HeadScan::version_not_supported: co_return 505;
      case HeadScan::incomplete:
        // Empty lines before the request line are dropped as they come: a
        // client sending many would otherwise fill the buffer (closed
        // without an answer); header_timeout still bounds the wait.
        in_.consume(scan.skip);
        break;
    }
    client_drained_ = false;
    error_code ec = co_await read_more(client, in_);
    if (ec) co_return timed_out ? 408 : -1;
  }
}

Task<void> Session::send_status(unsigned status, bool keep_alive) {
  const std::string text = fmt::format("{} {}\n", status, status_text(status));
  co_await send_error(status, text, keep_alive);
}

Task<void> Session::send_error(unsigned status, std::string_view text, bool keep_alive) {
  record_.status = status;
  record_.size = text.size();
  down_head_.clear();
  // heft is the origin of these: a Date, as RFC 9110 6.6.1 asks of an origin with a clock.
  down_head_.append(fmt::format("HTTP/1.1 {} {}\r\n{}Content-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{}",
                                status, status_text(status), w.date.line(), text.size(),
                                keep_alive ? "" : "Connection: close\r\n", text));
  arm(std::chrono::milliseconds(10000));
  before_client_write();
  co_await asio::async_write(client, asio::buffer(down_head_.view()), use_task);
}

void Session::finish_request() {
  const RequestParser* parser = std::exchange(current_parser_, nullptr);
  const SiteRoute* route = current_route_;
  if (!parser || !route) return;  // recorded already, or no site on the port at all
  // nginx's 499: the connection ended before any response head went out.
  const int status = record_.status ? static_cast<int>(record_.status) : 499;
  const double seconds = std::chrono::duration<double>(Clock::now() - request_start_).count();
  observe::record_request(w.index, route->server_label, status, seconds);
  if (!route->log) return;
  const double wall_start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - seconds;
  const auto& req = parser->get();
  route->log->write({wall_start, client_ip, std::string(req.method_string()), std::string(routed_host_),
                     std::string(req.target()), req.version() >= 11 ? "HTTP/1.1" : "HTTP/1.0", record_.upstream,
                     status, seconds, record_.size, record_.tries, record_.queued,
                     record_.upstream_header_time, record_.upstream_response_time});
}

const SiteRoute* Session::port_site(const WorkerRoutes& routes) const {
  if (const SiteRoute* r = routes.table->route(local_port, "")) return r;
  auto it = routes.table->by_port.find(local_port);
  return it == routes.table->by_port.end() || it->second.empty() ? nullptr : &routes.table->sites[it->second.front()];
}

void Session::record_refused_head(unsigned status) {
  const std::shared_ptr<WorkerRoutes> routes = w.current_routes();
  const SiteRoute* route = port_site(*routes);
  if (!route) return;
  const double seconds = std::chrono::duration<double>(coarse_now() - head_started_).count();
  observe::record_request(w.index, route->server_label, static_cast<int>(status), seconds);
  if (!route->log) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  route->log->write({now - seconds, client_ip, "", "", "", "", "", static_cast<int>(status), seconds, record_.size, 0});
}

Task<void> Session::run() {
  // A connection back from parking has had a request already, unless it
  // carries its first request's header deadline.
  bool first = !resumed_ || first_head_deadline != Clock::time_point::max();
  bool unread = false;  // the last request's body was not read to its end
  for (;;) {
    std::size_t skip = 0, size = 0;
    const bool no_request_yet = std::exchange(first, false);
    int status = co_await read_head(no_request_yet, skip, size);
    if (status == -2) {
      // Nothing of this session is needed until the next request: keep only
      // the socket (docs/proxy.md, idle connections).
      set_nodelay_once(client, nodelay_);  // the resumed session's first write is not the first
      handed_to_park_ = true;
      w.ready_watch.forget(client.native_handle(), client_watched_);
      const bool v6 = client_ip.find(':') != std::string::npos;
      if (!w.parking->park(std::move(client), Parking::Entry{local_port, v6, std::move(client_ip), deadline, no_request_yet}))
        parked_connection_closed(w);
      co_return;
    }
    if (status < 0) break;
    if (status > 0) {
      co_await send_status(static_cast<unsigned>(status), false);
      record_refused_head(static_cast<unsigned>(status));
      break;
    }
    response_.reset();
    arena_.reset(in_.tail());  // nothing of the last request is alive
    RequestParser parser(std::piecewise_construct, std::make_tuple(), std::make_tuple(ArenaAllocator<char>(arena_)));
    std::size_t used = 0;
    const error_code ec = parse_request_head(parser, in_.bytes() + skip, size, later_minor_at_, used);
    in_.consume(skip + used);
    if (ec) {
      fmt::print(stderr, "heft: 400 from {}: {}\n", client_ip, ec.message());
      co_await send_error(400, "400 Bad Request\n", false);
      record_refused_head(400);
      break;
    }
    record_ = RequestRecord{};
    current_route_ = nullptr;
    current_parser_ = &parser;
    request_start_ = Clock::now();
    bool keep_alive = co_await handle(parser);
    if (refusal_.status) {
      const Refusal refusal = std::exchange(refusal_, Refusal{});
      if (refusal.text.empty()) co_await send_status(refusal.status, refusal.keep_alive);
      else co_await send_error(refusal.status, refusal.text, refusal.keep_alive);
    }
    finish_request();
    current_routes_.reset();
    unread = !parser.is_done();
    if (!keep_alive || closing()) break;
  }
  if ((unread || in_.size() > 0) && client.is_open() && !w.draining) co_await linger();
  disarm();
  error_code ignored;
  client.close(ignored);
}

Task<void> Session::linger() {
  error_code ec;
  client.shutdown(Socket::shutdown_send, ec);
  if (ec) co_return;
  arm(kLingeringTime);
  lingering = true;
  for (;;) {
    auto [read_ec, n] = co_await client.async_read_some(asio::buffer(scratch(), kChunk), use_task);
    if (read_ec || w.draining) break;
  }
  lingering = false;
}

Session::RequestPlan Session::plan_request(const Request& req, const WorkerRoutes& routes) {
  RequestPlan plan;
  // The fields decided on, in one walk over the list (the first of each, as
  // basic_fields' operator[] would give, without its four lookups).
  std::string_view host, connection, upgrade_value;
  bool joined_connection = false, proxy_connection = false, continue_expected = false, other_expectation = false;
  for (const auto& field : req) {
    switch (field.name()) {
      case http::field::host: if (host.empty()) host = field.value(); break;
      case http::field::proxy_connection: proxy_connection = true; break;
      case http::field::connection:
        if (connection.empty()) {
          connection = field.value();
        } else if (!field.value().empty()) {  // several lines are one list (RFC 9110 5.3): rare
          if (!joined_connection) connection_lines_.assign(connection);
          joined_connection = true;
          connection_lines_.append(", ").append(field.value());
          connection = connection_lines_;
        }
        break;
      case http::field::upgrade: if (upgrade_value.empty()) upgrade_value = field.value(); break;
      case http::field::expect:  // several lines are one list (RFC 9110 5.3); empty members add nothing
        each_list_item(field.value(), [&](std::string_view item) {
          if (iequals(item, "100-continue")) continue_expected = true;
          else if (!item.empty()) other_expectation = true;
          return true;
        });
        break;
      default: break;
    }
  }
  routed_host_ = host;  // for the access log, also of a request refused below
  // "close" ends the connection whatever else the list says; HTTP/1.0 needs
  // "keep-alive" besides (RFC 9112 9.3).
  if (proxy_connection || req.version() < 11)
    plan.keep_alive = !has_token(connection, "close") && (req.version() >= 11 || has_token(connection, "keep-alive"));
  if (req.method() == http::verb::connect) {
    plan.connect = true;  // a tunnel to an authority: a forward proxy's job, not heft's
    return plan;
  }
  // An absolute-form target names the host itself, and the Host field is then
  // ignored (RFC 9112 3.2.2): routed by it, forwarded in origin-form with it as
  // Host, so heft and the backend agree on where the request goes.
  std::string_view target = req.target();
  const AbsoluteTarget absolute = split_absolute_target(target);
  if (absolute.status == AbsoluteTarget::bad) {
    plan.bad_target = absolute.reason;
    return plan;
  }
  if (target == "*" && req.method() != http::verb::options) {  // RFC 9112 3.2.4 (nginx: 400)
    plan.bad_target = "asterisk-form request target with a method other than OPTIONS";
    return plan;
  }
  if (absolute.status == AbsoluteTarget::absolute) {
    host = absolute.authority;
    if (absolute.path.empty() && req.method() == http::verb::options) {
      origin_form_ = "*";  // RFC 9112 3.2.4
    } else {
      origin_form_.assign(absolute.path.empty() || absolute.path.front() == '?' ? "/" : "");
      origin_form_.append(absolute.path);
    }
    target = origin_form_;
  }
  if (!host.empty()) {
    if (const char* problem = host_problem(host)) {
      plan.bad_target = problem;
      return plan;
    }
  }
  routed_host_ = host;
  plan.route = routes.table->route(local_port, host);
  if (!plan.route) return plan;
  const config::PoolConfig& pool = plan.route->site.proxy;
  const std::string_view extras = connection_extras(connection);
  // Upgrade in an HTTP/1.0 request is ignored (RFC 9110 7.8). So is an
  // upgrade to h2c (cleartext HTTP/2, deprecated by RFC 9113 3.1): once
  // tunnelled, its streams would reach the backend past heft's routing,
  // balancing and header rules ("h2c smuggling"); nghttpx and mitmproxy drop
  // it too. The request goes on as a plain one.
  plan.upgrade = !upgrade_value.empty() && req.version() >= 11 && has_token(connection, "upgrade") &&
                 !has_token(upgrade_value, "h2c");
  // Any expectation besides 100-continue cannot be met: 417.
  plan.expectation_failed = other_expectation;
  plan.expect_continue = continue_expected && !other_expectation;
  if (pool.policy == balance::PolicyKind::hash) {
    std::string_view key;
    switch (pool.hash_key.kind) {
      case config::HashKey::client_ip: key = client_ip; break;
      case config::HashKey::header: key = req[pool.hash_key.name]; break;
      case config::HashKey::cookie:
        for (auto [at, end] = req.equal_range(http::field::cookie); at != end && key.empty(); ++at)
          key = cookie_value(at->value(), pool.hash_key.name);
        break;
      case config::HashKey::uri: key = target; break;
      case config::HashKey::none: key = client_ip; break;
    }
    // A request without the key (no such header or cookie) is placed at
    // random, in proportion to the weights, instead of all such requests
    // hashing "" to one backend (HAProxy balances them round robin, Caddy at random).
    plan.key_hash = key.empty() ? w.next_random() : balance::hash_key(key);
  }

  // The request head for the backend: same for every attempt.
  up_head_.clear();
  up_head_.append(req.method_string()).append(" "sv).append(target).append(" HTTP/1.1\r\n"sv);
  std::string_view forwarded_for;
  std::string forwarded_for_lines;  // several X-Forwarded-For lines are one list (RFC 9110 5.3)
  for (const auto& field : req) {
    std::string_view name = field.name_string();
    if (field.name() == http::field::host) {
      // The target's authority instead, or the site's name for an empty
      // Host (added below). Never removed by being named in Connection: a
      // request must reach the backend with the host it was routed by.
      if (absolute.status == AbsoluteTarget::absolute || field.value().empty()) continue;
    } else if (is_hop_by_hop(field.name()) || named_by_connection(extras, name)) {
      continue;
    }
    if (field.name() == http::field::expect) continue;
    if (name.size() > 2 && (name[0] == 'x' || name[0] == 'X') && name[1] == '-') {
      if (iequals(name, "x-forwarded-for")) {
        if (forwarded_for.empty()) {
          forwarded_for = field.value();
        } else if (!field.value().empty()) {
          if (forwarded_for_lines.empty()) forwarded_for_lines = forwarded_for;
          forwarded_for_lines.append(", ").append(field.value());
          forwarded_for = forwarded_for_lines;
        }
        continue;
      }
      if (iequals(name, "x-forwarded-proto") || iequals(name, "x-forwarded-host") || iequals(name, "x-real-ip"))
        continue;
    }
    if (!pool.header_up.empty() && overridden(pool.header_up, name)) continue;
    up_head_.field(name, field.value());
  }
  if ((host.empty() || absolute.status == AbsoluteTarget::absolute) && !overridden(pool.header_up, "host")) {
    up_head_.field("Host", !host.empty() ? host : std::string_view(plan.route->default_host));
  }
  // heft's own forwarding fields, unless header_up sets or removes them
  // (e.g. X-Forwarded-Proto https behind a TLS terminator).
  const auto ours = [&](std::string_view name) { return pool.header_up.empty() || !overridden(pool.header_up, name); };
  if (ours("x-forwarded-for")) {
    up_head_.append("X-Forwarded-For: "sv);
    if (!forwarded_for.empty()) up_head_.append(forwarded_for).append(", "sv);
    up_head_.append(client_ip).append("\r\n"sv);
  }
  if (ours("x-forwarded-proto")) up_head_.append("X-Forwarded-Proto: http\r\n"sv);
  // None asked for (HTTP/1.0 without Host): none.
  if (!host.empty() && ours("x-forwarded-host")) up_head_.field("X-Forwarded-Host", host);
  if (ours("x-real-ip")) up_head_.field("X-Real-IP", client_ip);
  append_ops(up_head_, pool.header_up);
  if (plan.upgrade) {
    up_head_.append("Connection: upgrade\r\n"sv);
    up_head_.field("Upgrade", upgrade_value);
  }
  return plan;
}

Task<std::optional<uint32_t>> Session::wait_for_place(WorkerSite& site,
                                                      std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                                      const balance::PickContext& ctx, const config::PoolConfig& pool,
                                                      bool& full) {
  const auto since = Clock::now();
  std::optional<uint32_t> pick = co_await wait_in_queue(site, snapshot, ctx, pool, full, since + pool.queue_timeout);
  record_.queued = std::chrono::duration<double>(Clock::now() - since).count();  // the access log's `queued`
  co_return pick;
}

Task<std::optional<uint32_t>> Session::wait_in_queue(WorkerSite& site,
                                                     std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                                     const balance::PickContext& ctx, const config::PoolConfig& pool,
                                                     bool& full, Clock::time_point deadline) {
  const std::shared_ptr<upstream::PlaceQueue> places = snapshot->places();
  auto wait = std::make_shared<PlaceWait>(client.get_executor());
  bool front = false;  // a woken request whose place was taken keeps its turn
  for (;;) {
    wait->woken = false;
    bool first = false;
    auto place = places->join(
        pool.queue,
        [wait] {
          asio::post(wait->timer.get_executor(), [wait] {
            wait->woken = true;
            wait->timer.cancel();
          });
        },
        front, &first);
    if (!place) {
      full = true;  // the queue is full
      co_return std::nullopt;
    }
    bool busy = false;
    if (first) {
      // First in line: a place may have freed between the caller's pick and
      // the join (its wake-up found nobody), so pick again before waiting.
      // (Behind others it waits its turn: their wake-ups come first.)
      if (auto pick = snapshot->acquire(ctx, Clock::now(), &busy)) {
        if (!places->leave(*place)) places->wake_one();  // woken meanwhile: pass it on
        co_return pick;
      }
      if (!busy) co_return std::nullopt;  // nothing available any more: no place will free
    }
    wait->timer.expires_at(deadline);
    // A client that closes while its request waits gives up its place (as
    // HAProxy's abortonclose), instead of holding it until a backend does
    // the work for nobody; `ignore_client_abort on` keeps it waiting.
    queue_wait_ = wait.get();
    ignore_client_abort_ = pool.ignore_client_abort;
    watch_client_from(Clock::now());
    co_await wait->timer.async_wait(use_task);
    queue_wait_ = nullptr;
    unwatch_client();
    if (client_closed_) {
      if (!places->leave(*place)) places->wake_one();  // woken meanwhile: pass it on
      co_return std::nullopt;
    }
    if (!wait->woken && places->leave(*place)) {
      full = true;  // the time ran out
      places->note_timeout();
      co_return std::nullopt;
    }
    // Woken (a wake-up may also have crossed the deadline): the pool as it is now.
    snapshot = site.cache.get();
    busy = false;
    if (auto pick = snapshot->acquire(ctx, Clock::now(), &busy)) co_return pick;
    if (!busy) co_return std::nullopt;
    if (Clock::now() >= deadline) {
      places->wake_one();  // the place this wake-up stood for, unused
      full = true;
      places->note_timeout();
      co_return std::nullopt;
    }
    front = true;
  }
}

Task<bool> Session::handle(RequestParser& parser) {
  std::shared_ptr<WorkerRoutes> routes = w.current_routes();
  auto& req = parser.get();
  RequestPlan plan = plan_request(req, *routes);
  if (!plan.route && !plan.connect && !plan.bad_target && !w.dropped_port_routes.empty()) {
    // The port is no longer served (a reload since this connection came):
    // the routes it came under answer, as an old nginx worker would.
    if (auto dropped = w.dropped_port_routes.find(local_port);
        dropped != w.dropped_port_routes.end() && !routes->table->by_port.count(local_port)) {
      routes = dropped->second;
      port_dropped_ = true;
      plan = plan_request(req, *routes);
    }
  }
  config_ = &routes->table->config;
  const SiteRoute* route = plan.route;
  current_routes_ = routes;  // keeps `route` alive until finish_request()
  // A request refused before routing (CONNECT, a bad target, no site: 404)
  // is counted and logged under the port's site.
  current_route_ = route ? route : port_site(*routes);
  if (plan.connect) {
    fmt::print(stderr, "heft: 501 from {}: CONNECT is not supported\n", client_ip);
    refuse(501, "501 CONNECT is not supported\n", false);
    co_return false;
  }
  if (plan.bad_target) {
    fmt::print(stderr, "heft: 400 from {}: {}\n", client_ip, plan.bad_target);
    refuse(400, "400 Bad Request\n", false);
    co_return false;
  }
  // The parser read every Connection field already (close / keep-alive tokens
  // and the version's default).
  bool client_keep_alive = plan.keep_alive.value_or(parser.keep_alive());
  client_keep_alive_ = client_keep_alive;
  if (!route) {
    // Unread body bytes would be read as the next request: close instead.
    refuse(404, "404 no site for this host\n", client_keep_alive && parser.is_done());
    co_return client_keep_alive && parser.is_done();
  }
  if (plan.expectation_failed) {
    refuse(417, "417 Expectation Failed\n", false);
    co_return false;
  }
  const config::PoolConfig& pool = route->site.proxy;
  WorkerSite& site = routes->sites[route->index];
  // Replaced only by a wait for a place (wait_for_place()), before any attempt.
  std::shared_ptr<const upstream::PoolSnapshot> snapshot = site.cache.get();

  // Buffer the start of the body: small bodies are then complete (retryable and
  // fully validated before any byte reaches a backend).
  body_prefix_.clear();
  const bool body_to_read = !parser.is_done();
  if (body_to_read) {
    client_drained_ = false;  // the body is read through Asio
    if (plan.expect_continue && req.version() >= 11) {
      arm(config_->idle_timeout);
      before_client_write();
      auto [ec, n] = co_await asio::async_write(client, asio::buffer("HTTP/1.1 100 Continue\r\n\r\n", 25),
                                                use_task);
      if (ec) co_return false;
    }
    const std::size_t limit = std::max<std::size_t>(pool.retry_body_limit, 1);
    while (!parser.is_done() && body_prefix_.size() < limit) {
      arm(config_->idle_timeout);
      std::size_t want = std::min(kChunk, limit - body_prefix_.size());
      auto [ec, got] = co_await read_body_piece(client, in_, parser, scratch(), want);
      if (ec) {
        if (is_parse_error(ec)) {
          fmt::print(stderr, "heft: 400 from {}: bad body: {}\n", client_ip, ec.message());
          refuse(400, "400 Bad Request\n", false);
        } else if (timed_out) {
          refuse(408, "408 Request Timeout\n", false);
        }
        co_return false;
      }
      body_prefix_.append(scratch(), got);
    }
  }
  const bool body_complete = parser.is_done();
  upstream_chunked_ = false;
  if (body_complete) {
    if (!body_prefix_.empty() || req.has_content_length() || req.chunked()) {
      up_head_.append("Content-Length: "sv);
      up_head_.number(body_prefix_.size());
      up_head_.append("\r\n"sv);
    }
  } else if (req.chunked()) {
    up_head_.append("Transfer-Encoding: chunked\r\n"sv);
    upstream_chunked_ = true;
  } else {
    // The value, not the field: a list of it ("5, 5") goes on as one (RFC 9110 8.6).
    up_head_.append("Content-Length: "sv);
    up_head_.number(parser.content_length().value_or(0));
    up_head_.append("\r\n"sv);
  }
  up_head_.append("\r\n"sv);

  // Attempts, nginx's proxy_next_upstream way.
  balance::PickContext ctx;
  ctx.random = w.next_random();
  ctx.key_hash = plan.key_hash;
  balance::TriedSet tried;
  ctx.tried = &tried;
  const config::NextUpstream& next = pool.next_upstream;
  const bool method_retryable = idempotent(req.method()) || next.non_idempotent;
  interim_relayed_ = false;
  // The first attempt starts once the buffered body is in: a slow client's
  // upload is not the backend's latency (nginx's $upstream_response_time and
  // next_upstream_timeout start at the upstream too). A streamed body's
  // upload overlaps the attempt and counts.
  const auto started = body_to_read ? Clock::now() : request_start_;
  // nginx's next_upstream_timeout: no attempt starts once it has passed.
  const auto in_time = [&](Clock::time_point at) {
    return pool.next_upstream_timeout.count() == 0 || at - started < pool.next_upstream_timeout;
  };
  unsigned tries = 0;
  unsigned last_status = 0;
  for (;;) {
    const auto now = tries == 0 ? started : Clock::now();
    bool full = false;
    std::optional<uint32_t> pick;
    // Requests waiting for a place go first: a newcomer queues behind them
    // (as HAProxy's), or it would take the places freed for them.
    // Only a first attempt waits.
    const bool may_queue = pool.queue > 0 && tried.empty();
    const bool queue_ahead = may_queue && snapshot->places()->size() > 0;
    if (!queue_ahead) [[likely]]
      pick = snapshot->acquire(ctx, now, &full);
    if (!pick && may_queue && (full || queue_ahead)) {
      // Every backend is at its max_conns: wait for a place (nginx Plus's queue).
      full = false;
      pick = co_await wait_for_place(site, snapshot, ctx, pool, full);
      if (client_closed_) co_return false;  // it left while waiting: a 499 in the log
    }
    if (!pick) {
      if (tried.empty() && full && pool.queue > 0) {
        fmt::print(stderr, "heft: 503 {} {}: no backend had room within queue_timeout, or the queue was full\n",
                   req.method_string(), req.target());
        refuse(503, "503 every backend is at its max_conns and the queue is full or timed out\n",
               client_keep_alive && body_complete);
      } else if (tried.empty() && full) {
        // nginx answers 502 here (no live upstreams); HAProxy queues and
        // then answers 503. Every backend is busy, none failed: a 503.
        fmt::print(stderr, "heft: 503 {} {}: every backend is at its max_conns\n", req.method_string(),
                   req.target());
        refuse(503, "503 every backend is at its max_conns\n", client_keep_alive && body_complete);
      } else if (tried.empty()) {
        fmt::print(stderr, "heft: 503 {} {}: no available backend\n", req.method_string(), req.target());
        refuse(503, "503 no available backend\n", client_keep_alive && body_complete);
      } else {
        unsigned status = last_status ? last_status : 502;
        refuse_status(status, client_keep_alive && body_complete);
      }
      co_return client_keep_alive && body_complete && !closing();
    }
    const uint32_t i = *pick;
    // A tunnel (WebSocket) keeps its backend counted active while it runs,
    // as nginx's least_conn counts an upgraded connection.
    // Its end wakes a queued request even if the request began before a
    // reload gave the pool its queue.
    std::optional<ActiveGuard> active(std::in_place, snapshot->balancer(), i, snapshot->places().get());
    tried.add(i);
    ++tries;
    const bool more_possible = !next.off && (pool.next_upstream_tries == 0 || tries < pool.next_upstream_tries) &&
                               in_time(now) && tried.size() < snapshot->size();
    const bool more_allowed = more_possible && method_retryable && body_complete;
    snapshot->count_request(i, w.index);
    // Where the request is, for the log (a stop may cut it during the attempt).
    record_.tries = tries;
    record_.upstream = snapshot->backend(i).name;
    AttemptResult result;
    const auto attempt_start = now;
    response_head_at_ = {};
    result = co_await attempt(*route, site, *snapshot, i, tried, parser, !more_allowed, plan.upgrade);
    if (!tunnel_) active.reset();
    const auto attempt_end = Clock::now();
    // The backend's latency: to its response head (none: the whole attempt).
    const bool got_head = response_head_at_ != Clock::time_point{};
    const auto to_head = (got_head ? response_head_at_ : attempt_end) - attempt_start;
    {
      // Per-backend counters and adaptive weights: status as the client would see it.
      int status = result.outcome == Outcome::timeout ? 504
                   : result.outcome == Outcome::error ? 502
                   : result.outcome == Outcome::bad_status || result.outcome == Outcome::broken
                       ? static_cast<int>(result.status)
                       : static_cast<int>(result.status ? result.status : 200);
      bool ok = result.outcome == Outcome::done && !result.failed;
      if (result.outcome != Outcome::client_gone && result.outcome != Outcome::bad_request_body &&
          result.outcome != Outcome::local_error)
        snapshot->record_response(i, to_head, status, ok, w.index);
    }
    upstream = nullptr;
    const std::string& name = snapshot->backend(i).name;
    {
      // Metrics and the access log: the backend's answer, or why the attempt failed.
      const double seconds = std::chrono::duration<double>(attempt_end - attempt_start).count();
      record_.upstream_response_time = seconds;
      record_.upstream_header_time = got_head ? std::chrono::duration<double>(to_head).count() : -1;
      const std::string& server = route->server_label;
      const std::string& site_label = route->site_label;
      switch (result.outcome) {
        case Outcome::done:
          observe::record_upstream(w.index, server, site_label, name, static_cast<int>(result.status), seconds);
          if (result.failed) observe::record_failure(w.index, server, site_label, name, "status");
          record_.status = result.status;
          break;
        case Outcome::bad_status:
          observe::record_upstream(w.index, server, site_label, name, static_cast<int>(result.status), seconds);
          observe::record_failure(w.index, server, site_label, name, "status");
          break;
        case Outcome::broken:
          // Answered (the head reached the client), then cut: both counted.
          observe::record_upstream(w.index, server, site_label, name, static_cast<int>(result.status), seconds);
          observe::record_failure(w.index, server, site_label, name, "broken");
          break;
        case Outcome::error: observe::record_failure(w.index, server, site_label, name, "error"); break;
        case Outcome::timeout: observe::record_failure(w.index, server, site_label, name, "timeout"); break;
        case Outcome::client_gone:
        case Outcome::bad_request_body:
        case Outcome::local_error: break;
      }
    }
    switch (result.outcome) {
      case Outcome::done:
        if (result.failed) snapshot->report_failure(i, Clock::now());
        else snapshot->report_success(i);
        if (tunnel_) {
          // Counted and logged at the switch (docs/admin.md); then the tunnel.
          finish_request();
          co_await splice(*tunnel_);
          tunnel_.reset();
          co_return false;
        }
        co_return result.keep_alive && !closing();
      case Outcome::client_gone: co_return false;
      case Outcome::local_error:
        // nginx answers 500 when socket() fails and does not mark the peer.
        // The connection closes: one descriptor fewer.
        snapshot->uncount_request(i, w.index);  // nothing reached the backend
        fmt::print(stderr, "heft: 500 {} {}: no connection to backend {} ({}); not counted against it\n",
                   req.method_string(), req.target(), name, failure_reason());
        refuse(500, "500 Internal Server Error\n", false);
        co_return false;
      case Outcome::bad_request_body:
        if (record_.status) {
          // The response had started (an echoing backend): nothing can be
          // said inside it; the connection is cut, as for a broken response.
          fmt::print(stderr, "heft: {} from {}: bad request body during the response; connection closed\n",
                     record_.status, client_ip);
          co_return false;
        }
        fmt::print(stderr, "heft: 400 from {}: bad request body\n", client_ip);
        refuse(400, "400 Bad Request\n", false);
        co_return false;
      case Outcome::broken:
        // The response had started: nothing to retry, the client sees a cut.
        // Not a failure of the backend, which answered (nginx finalizes such
        // a request without NGX_PEER_FAILED, and its peer counts as working).
        snapshot->report_success(i);
        fmt::print(stderr, "heft: {} {}: backend {} {} mid-response ({})\n", req.method_string(), req.target(), name,
                   failure_timed_out_ ? "timed out" : "failed", failure_reason());
        co_return false;
      case Outcome::bad_status:
        snapshot->report_failure(i, Clock::now());
        last_status = result.status;
        if (in_time(attempt_end)) continue;  // attempt() forwards it itself when no retry is allowed
        // The time ran out during this attempt: its status (the response itself is spent).
        refuse_status(last_status, client_keep_alive && body_complete);
        co_return client_keep_alive && body_complete && !closing();
      case Outcome::error:
      case Outcome::timeout: {
        const bool timeout = result.outcome == Outcome::timeout;
        snapshot->report_failure(i, Clock::now());
        last_status = timeout ? 504 : 502;
        fmt::print(stderr, "heft: {} {}: backend {} {} ({})\n", req.method_string(), req.target(), name,
                   timeout ? "timed out" : "failed", failure_reason());
        // A failed connect sent nothing: any method, any body (the streamed
        // rest is still unread) may go on to the next backend (nginx retries
        // a POST then too; once sent, it does not).
        const bool unsent = failure_stage_ == kConnecting;
        if ((more_allowed || (more_possible && unsent)) && !interim_relayed_ && in_time(attempt_end) &&
            (timeout ? next.timeout : next.error))
          continue;
        refuse_status(last_status, client_keep_alive && parser.is_done());
        co_return client_keep_alive && parser.is_done() && !closing();
      }
    }
  }
}

Task<Session::AttemptResult> Session::attempt(const SiteRoute& route, WorkerSite& site,
                                              const upstream::PoolSnapshot& snapshot, uint32_t backend,
                                              const balance::TriedSet& tried, RequestParser& parser,
                                              bool last_chance, bool upgrade) {
  const config::PoolConfig& pool = route.site.proxy;
  ignore_client_abort_ = pool.ignore_client_abort;
  // `backend` indexes this request's snapshot; the site's endpoints may follow
  // another request's since (a change published while this one read its body).
  w.prepare_site(site, snapshot);
  IdleList& idle_list = *site.idle[backend];
  const tcp::endpoint endpoint = site.endpoints[backend];  // a copy: others may re-prepare the site meanwhile
  // A stale pooled connection may have taken the request before it closed:
  // replayed only if it may run twice (nginx, RFC 9112 9.3.1.1: a
  // non-idempotent request is not retried once sent, unless next_upstream
  // says non_idempotent).
  const bool replayable =
      parser.is_done() && (idempotent(parser.get().method()) || pool.next_upstream.non_idempotent);
  for (int fresh = 0; fresh < 2; ++fresh) {
    if (client_closed_) co_return AttemptResult{Outcome::client_gone};  // found while a stale connection failed
    std::unique_ptr<UpstreamConnection> conn;
    if (fresh == 0) conn = take_idle_connection(w, idle_list);
    const bool reused = conn != nullptr;
    if (!conn) {
      if (fresh == 0) fresh = 1;  // a new connection: no second fresh try
      conn = std::make_unique<UpstreamConnection>(w.io, w.blocks);
      error_code open_ec;
      conn->socket.open(endpoint.protocol(), open_ec);
      // Non-blocking for send_now() and read_header()'s read. Set before the
      // connect, which then needs no ioctl of its own (after it, a second).
      if (!open_ec) conn->socket.non_blocking(true, open_ec);
      if (open_ec) {
        failure_stage_ = "opening a socket";
        failure_ec_ = open_ec;
        failure_timed_out_ = false;
        co_return AttemptResult{Outcome::local_error};
      }
      upstream = &conn->socket;
      arm(pool.connect_timeout);
      error_code ec = start_connect(conn->socket, endpoint);
      // Refused (or unreachable): the name's other addresses, in turn,
      // within the same connect_timeout.
      const std::vector<std::string>& others = snapshot.backend(backend).other_addresses;
      for (std::size_t k = 0;; ++k) {
        if (ec == asio::error::would_block) {  // the handshake goes on
          std::tie(ec) = co_await conn->socket.async_wait(Socket::wait_write, use_task);
          if (!ec) ec = connect_error(conn->socket);
        }
        if (!ec || timed_out || client_closed_ || k == others.size()) break;
        error_code ignored;
        conn->socket.close(ignored);
        const tcp::endpoint next = backend_endpoint(others[k]);
        conn->socket.open(next.protocol(), open_ec);
        if (!open_ec) conn->socket.non_blocking(true, open_ec);
        if (open_ec) break;
        ec = start_connect(conn->socket, next);
      }
      if (ec) co_return failure(kConnecting, ec);
    }
    upstream = &conn->socket;

    // Head and the buffered body in one write.
    arm(pool.send_timeout);
    std::array<char, 24> size_line;
    std::array<asio::const_buffer, 4> buffers{asio::buffer(up_head_.view()), asio::const_buffer{},
                                              asio::const_buffer{}, asio::const_buffer{}};
    std::size_t count = 1;
    if (!body_prefix_.empty()) {
      if (upstream_chunked_) buffers[count++] = asio::buffer(size_line.data(), chunk_line(size_line.data(), body_prefix_.size()));
      buffers[count++] = asio::buffer(body_prefix_);
      if (upstream_chunked_) buffers[count++] = asio::buffer("\r\n", 2);
    }
    // One send takes a head and a small body whole. A read right after it
    // would find nothing yet, so read_header() waits for readability first
    // (wait_first).
    std::span<asio::const_buffer> out(buffers.data(), count);
    error_code write_ec = send_now(conn->socket, out);
    const bool sent_now = !write_ec && out.empty();
    if (!write_ec && !sent_now) {
      set_nodelay_once(conn->socket, conn->nodelay);  // the rest is a second write
      std::tie(write_ec, std::ignore) = co_await asio::async_write(conn->socket, out, use_task);
    }
    if (write_ec) {
      if (reused && replayable && !timed_out) continue;  // stale pooled connection: once more, fresh
      co_return failure("sending the request", write_ec);
    }

    // A member, not a local: a coroutine frame holding a parser is too big
    // for Asio's per-thread frame recycling and would cost a malloc per attempt.
    ResponseParser& response = response_.emplace(arena_);
    prepare_response(response, parser.get().method() == http::verb::head);

    // Stream the rest of the body while the response may already be coming
    // (an echoing backend answers as it reads). Its own coroutine: its
    // lambdas and awaiters would make this frame too big for Asio to recycle.
    if (!parser.is_done())
      co_return co_await attempt_streaming_body(conn, response, route, parser, upgrade, idle_list);

    // Response head (1xx other than 101 are skipped).
    arm(pool.read_timeout);
    bool received = false;
    ReadyWatch* wait_in = sent_now ? &w.ready_watch : nullptr;  // the first head only
    watch_client_from(coarse_now());
    for (;;) {
      error_code ec = co_await read_header(*conn, response, received, std::exchange(wait_in, nullptr));
      if (ec) {
        unwatch_client();
        if (reused && !received && replayable && !timed_out &&
            (ec == asio::error::eof || ec == asio::error::connection_reset))
          break;  // stale pooled connection
        co_return failure("reading the response head", ec);
      }
      if (is_interim(response)) {
        unwatch_client();  // no check during the relay's write
        if (!co_await relay_interim(response, parser.get().version() >= 11, pool))
          co_return AttemptResult{Outcome::client_gone};
        arm(pool.read_timeout);  // the timeout runs between reads: an interim response is one
        watch_client_from(coarse_now());
        continue;
      }
      break;
    }
    unwatch_client();
    if (!response.is_header_done()) continue;  // retry on a fresh connection
    if (error_code bad = unusable_head(response, upgrade)) co_return failure("reading the response head", bad);
    const unsigned status = response.status();
    const config::NextUpstream& next = pool.next_upstream;
    const bool failure_status = (status == 500 && next.http_500) || (status == 502 && next.http_502) ||
                                (status == 503 && next.http_503) || (status == 504 && next.http_504);
    // A listed status goes to the next backend only if there is one to try
    // (down, drained, out members are not): else the client gets this answer, body and all.
    if (failure_status && !last_chance && !interim_relayed_ && untried_available(snapshot, tried))
      co_return AttemptResult{Outcome::bad_status, status};
    AttemptResult result = co_await forward_response(*conn, response, route, parser, upgrade);
    if (std::exchange(tunnel_pending_, false)) tunnel_ = std::move(conn);
    else if (result.outcome == Outcome::done && conn->socket.is_open() && reusable_after(response) &&
             conn->buffer.size() == 0 && status != 101 && idle_list.size() < pool.keepalive)
      park(w, idle_list, std::move(conn), pool.keepalive_timeout);
    result.failed = result.outcome == Outcome::done && failure_status;
    if (result.outcome == Outcome::done) result.status = status;
    co_return result;
  }
  co_return failure("reading the response head", asio::error::eof);  // closed on a fresh connection too
}

// attempt() once the request head is out and the request body is not all
// in: the rest is relayed while the response may already be coming.
Task<Session::AttemptResult> Session::attempt_streaming_body(std::unique_ptr<UpstreamConnection>& conn,
                                                              ResponseParser& response, const SiteRoute& route,
                                                              RequestParser& parser, bool upgrade,
                                                              IdleList& idle_list) {
  const config::PoolConfig& pool = route.site.proxy;
  using namespace asio::experimental::awaitable_operators;
  bool client_failed = false;
  error_code body_ec;
  auto send_body = [&]() -> Task<void> {
    body_ec = co_await send_rest_of_body(*conn, parser, upstream_chunked_, client_failed, pool);
    // The body is out and the head not in: the client is watched from
    // now on, as for a buffered body (forward_response() stops it).
    if (!body_ec && !client_failed && !response.is_header_done()) watch_client_from(coarse_now());
    if (body_ec) {
      // Unblock the response side, whether its read is pending or not
      // started yet (a bad chunk found without waiting): after a
      // shutdown every read ends at once.
      request_body_failed_ = true;
      error_code ignored;
      conn->socket.shutdown(Socket::shutdown_both, ignored);
      cancel_io(conn->socket);
    }
  };
  AttemptResult result;
  body_abandoned_ = false;
  request_body_failed_ = false;
  auto receive = [&]() -> Task<void> {
    result = co_await forward_response(*conn, response, route, parser, upgrade);
    if (result.outcome == Outcome::done && !parser.is_done()) {
      // Answered before the body ended: stop relaying it (the client
      // connection closes, lingering), and free the body side's waits.
      body_abandoned_ = true;
      error_code ignored;
      conn->socket.shutdown(Socket::shutdown_both, ignored);
      cancel_io(conn->socket);
      cancel_client();
    }
  };
  co_await (send_body() && receive());
  unwatch_client();
  // A 101 once the streamed body had ended: handle() splices it.
  if (std::exchange(tunnel_pending_, false)) {
    tunnel_ = std::move(conn);
    co_return result;
  }
  if (client_failed) co_return AttemptResult{Outcome::client_gone};
  if (body_ec && (result.outcome == Outcome::error || result.outcome == Outcome::timeout))
    failure("sending the request body", body_ec);  // the stage for the log; the outcome stands
  // The client's body (a bad chunk, a bad trailer): not the backend's
  // fault, whether its answer had started, ended or not come (handle()
  // answers 400 only if no response head went out).
  if (is_parse_error(body_ec)) co_return AttemptResult{Outcome::bad_request_body};
  if (result.outcome == Outcome::done) {
    result.keep_alive = result.keep_alive && parser.is_done();
    if (conn->socket.is_open() && reusable_after(response) && !body_ec &&
        conn->buffer.size() == 0 && idle_list.size() < pool.keepalive)
      park(w, idle_list, std::move(conn), pool.keepalive_timeout);
  }
  co_return result;
}

// One deadline per session: while the body streams, it is the client's
// idle_timeout during each read from the client and send_timeout during each
// write to the backend; once the body is out, read_timeout for the response
// (nginx's proxy_read_timeout starts when the request has been sent).
Task<error_code> Session::send_rest_of_body(UpstreamConnection& conn, RequestParser& parser, bool chunked,
                                            bool& client_failed, const config::PoolConfig& pool) {
  set_nodelay_once(conn.socket, conn.nodelay);  // the body goes out in writes after the head's
  // Its own buffer: scratch() is used by the response side at the same time.
  auto piece = std::make_unique<char[]>(kChunk);
  std::array<char, 24> size_line;
  while (!parser.is_done()) {
    arm(config_->idle_timeout);
    auto [ec, got] = co_await read_body_piece(client, in_, parser, piece.get(), kChunk);
    if (ec) {
      if (!is_parse_error(ec) && !body_abandoned_) client_failed = true;
      co_return ec;
    }
    std::array<asio::const_buffer, 4> buffers;
    std::size_t count = 0;
    if (chunked && got > 0) buffers[count++] = asio::buffer(size_line.data(), chunk_line(size_line.data(), got));
    if (got > 0) buffers[count++] = asio::buffer(piece.get(), got);
    if (chunked && got > 0) buffers[count++] = asio::buffer("\r\n", 2);
    if (chunked && parser.is_done()) buffers[count++] = asio::buffer("0\r\n\r\n", 5);
    if (count == 0) continue;
    arm(pool.send_timeout);
    auto [write_ec, n] = co_await asio::async_write(conn.socket, std::span(buffers.data(), count), use_task);
    if (write_ec) co_return write_ec;
  }
  arm(pool.read_timeout);
  co_return error_code{};
}

Task<Session::AttemptResult> Session::forward_response(UpstreamConnection& conn, ResponseParser& response,
                                                       const SiteRoute& route, RequestParser& parser,
                                                       bool upgrade) {
  const config::PoolConfig& pool = route.site.proxy;
  if (!response.is_header_done()) {
    // (A streamed body's head: the client is watched once the body is out;
    // see attempt().)
    arm(pool.read_timeout);
    bool received = false;
    for (;;) {
      error_code ec = co_await read_header(conn, response, received, nullptr);
      if (ec) {
        unwatch_client();
        co_return failure("reading the response head", ec);
      }
      if (is_interim(response)) {
        const bool watched = head_wait_since != Clock::time_point::max();
        unwatch_client();  // no check during the relay's write
        if (!co_await relay_interim(response, parser.get().version() >= 11, pool))
          co_return AttemptResult{Outcome::client_gone};
        arm(pool.read_timeout);  // the timeout runs between reads: an interim response is one
        if (watched) watch_client_from(coarse_now());
        continue;
      }
      break;
    }
    unwatch_client();
    if (error_code bad = unusable_head(response, upgrade)) co_return failure("reading the response head", bad);
    // A switch while the request body still streams: the client's next
    // bytes would be body and tunnel at once. A 502, as for a 101 nobody asked for.
    if (upgrade && response.status() == 101 && !parser.is_done())
      co_return failure("reading the response head", http::error::bad_status);
  }
  response_head_at_ = Clock::now();
  const auto& req = parser.get();
  const unsigned status = response.status();
  const bool switching = status == 101 && upgrade;
  const bool client_http11 = req.version() >= 11;
  // A response that starts before the request body ended (an early 413, an
  // echo) ends the connection: the rest of the body may never be read
  // (RFC 9112 9.6), so the head says so.
  bool keep_alive = client_keep_alive_ && !closing() && !switching && parser.is_done();
  const bool no_body = response.is_done();  // HEAD, 204, 304 (length known to be 0 or skipped)
  enum { sized, chunked, until_close } framing = sized;
  if (!no_body) {
    if (response.chunked()) framing = client_http11 ? chunked : until_close;
    else if (response.content_length()) framing = sized;
    else framing = client_http11 ? chunked : until_close;
  }
  if (framing == until_close) keep_alive = false;

  down_head_.clear();
  down_head_.append("HTTP/1.1 "sv);
  down_head_.number(status);
  down_head_.append(" "sv).append(response.reason()).append("\r\n"sv);
  const std::string_view extras = connection_extras(connection_list(response, connection_lines_));
  bool length_sent = false;
  bool date_sent = false;
  for (const ResponseParser::Field& field : response.fields()) {
    std::string_view name = response.name(field);
    if (no_body && field.name == http::field::content_length) {
      // A HEAD's or 304's length says what a GET would get: kept, once. A 204 has none (RFC 9110 8.6).
      // As the number the parser read: a list of one value repeated ('5, 5',
      // which the parser takes) must not be forwarded as such (RFC 9110 8.6).
      if (status != 204 && !std::exchange(length_sent, true)) {
        if (const auto length = response.content_length()) {
          down_head_.append("Content-Length: "sv);
          down_head_.number(*length);
          down_head_.append("\r\n"sv);
        } else {
          down_head_.field(name, response.value(field));
        }
      }
      continue;
    }
    if (is_hop_by_hop(field.name) || named_by_connection(extras, name)) continue;
    if (!pool.header_down.empty() && overridden(pool.header_down, name)) continue;
    date_sent |= field.name == http::field::date;
    down_head_.field(name, response.value(field));
  }
  append_ops(down_head_, pool.header_down);
  // A response without a Date gets one (RFC 9110 6.6.1: a recipient with a
  // clock adds it to a response it forwards; nginx does), unless header_down
  // names Date: then the configuration decides.
  if (!date_sent && !names_field(pool.header_down, "Date")) down_head_.append(w.date.line());
  if (switching) {
    down_head_.append("Connection: upgrade\r\n"sv);
    down_head_.field("Upgrade", response.value(http::field::upgrade));
  }
  if (no_body && response.chunked() && client_http11 && status != 204 && status != 304) {
    down_head_.append("Transfer-Encoding: chunked\r\n"sv);  // a HEAD of what a GET would get chunked
  } else if (!no_body) {
    if (framing == chunked) down_head_.append("Transfer-Encoding: chunked\r\n"sv);
    else if (framing == sized) {
      down_head_.append("Content-Length: "sv);
      down_head_.number(*response.content_length());
      down_head_.append("\r\n"sv);
    }
  }
  if (!switching) {
    if (!keep_alive) down_head_.append("Connection: close\r\n"sv);
    else if (!client_http11) down_head_.append("Connection: keep-alive\r\n"sv);
  }
  down_head_.append("\r\n"sv);

  if (switching) {
    arm(pool.send_timeout);
    before_client_write();
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(down_head_.view()), use_task);
    if (ec) co_return AttemptResult{Outcome::client_gone};
    // The tunnel runs once the switch is recorded and logged (handle()),
    // so its lifetime is not counted as the backend's response time (the
    // request body has ended: a switch before is refused above).
    tunnel_pending_ = true;
    co_return AttemptResult{Outcome::done, 101, false};
  }

  // Body: head goes out with the first piece (one write for small responses).
  bool head_pending = true;
  std::array<char, 24> size_line;
  for (;;) {
    std::size_t got = 0;
    const char* piece = nullptr;
    bool cut = false;
    if (!response.is_done()) {
      arm(pool.read_timeout);
      // The piece stays in conn.buffer, untouched until the next read there,
      // which comes after it is written. A small body is usually there
      // already: then no coroutine is started for it.
      body_into(response, nullptr, kChunk);
      std::optional<BodyPiece> ready = body_from_buffer(conn.buffer, response, kChunk);
      auto [ec, n] = ready ? *ready : co_await read_body_piece(conn.socket, conn.buffer, response, nullptr, kChunk);
      piece = response.body().data();
      got = n;
      // The further chunks conn.buffer holds join this one: each is moved
      // down over the chunk framing before it (parsed, so free), and all go
      // out in one send as one chunk, as nginx re-chunks what it read.
      // Relayed chunk by chunk, a backend's 1 KiB chunks cost a send each.
      while (!ec && got > 0 && !response.is_done() && conn.buffer.size() > 0) {
        body_into(response, nullptr, kChunk);
        std::optional<BodyPiece> more = body_from_buffer(conn.buffer, response, kChunk);
        if (!more) break;  // the rest of a chunk or its framing is still to come
        std::tie(ec, n) = *more;
        if (n == 0) continue;  // the last chunk, or an error
        std::memmove(conn.buffer.writable(piece) + got, response.body().data(), n);
        got += n;
      }
      if (ec) {
        // The head was accepted: this backend's answer is the client's (nginx's
        // next_upstream covers the head only; a body's timeout or error ends the
        // request without NGX_PEER_FAILED). What came goes out, the held head
        // included, so the client sees the backend's status; then the
        // connection closes: a sized or chunked body is visibly cut.
        AttemptResult failed = failure("reading the response body", ec);
        if (failed.outcome == Outcome::client_gone || (head_pending && request_body_failed_)) co_return failed;
        cut = true;
      }
    }
    const bool last = !cut && response.is_done();
    std::array<asio::const_buffer, 5> buffers;
    std::size_t count = 0;
    std::size_t before_body = 0;  // bytes ahead of the body piece: the head, a chunk-size line
    if (head_pending) buffers[count++] = asio::buffer(down_head_.view());
    if (got > 0) {
      if (framing == chunked) buffers[count++] = asio::buffer(size_line.data(), chunk_line(size_line.data(), got));
      before_body = asio::buffer_size(std::span(buffers.data(), count));
      buffers[count++] = asio::buffer(piece, got);
      if (framing == chunked) buffers[count++] = asio::buffer("\r\n", 2);
    }
    if (last && framing == chunked) buffers[count++] = asio::buffer("0\r\n\r\n", 5);
    if (count > 0) {
      arm(pool.send_timeout);
      before_client_write();
      std::span<asio::const_buffer> out(buffers.data(), count);
      const std::size_t total = asio::buffer_size(out);
      error_code ec = send_now(client, out);
      std::size_t written = ec ? 0 : total - asio::buffer_size(out);
      if (!ec && !out.empty()) {
        std::size_t n = 0;
        std::tie(ec, n) = co_await asio::async_write(client, out, use_task);
        written += n;
      }
      // For the log, what reached the client connection, however it ends
      // (nginx's $status and $body_bytes_sent): the head once whole, the
      // body bytes written.
      if (head_pending && written >= down_head_.view().size()) record_.status = status;
      if (written > before_body) record_.size += std::min(got, written - before_body);
      if (ec) co_return AttemptResult{cut ? Outcome::broken : Outcome::client_gone, status};
    }
    head_pending = false;
    if (cut) co_return AttemptResult{Outcome::broken, status};
    if (last) break;
  }
  disarm();
  co_return AttemptResult{Outcome::done, status, keep_alive};
}

// An interim response reaches an HTTP/1.1 client as the backend sent it,
// less hop-by-hop fields (RFC 9110 15.2: a proxy forwards 1xx it did not ask
// for; 103 Early Hints lets a browser preload while the backend works), then
// the parser is reset for the next head. A 100 is dropped: heft answers a
// client's Expect itself and does not pass it on. HTTP/1.0 clients get none
// (RFC 9110 15.2). header_down is for final responses only. False when the
// client is gone.
Task<bool> Session::relay_interim(ResponseParser& response, bool client_http11, const config::PoolConfig& pool) {
  if (response.status() != 100 && client_http11) {
    down_head_.clear();
    down_head_.append("HTTP/1.1 "sv);
    down_head_.number(response.status());
    down_head_.append(" "sv).append(response.reason()).append("\r\n"sv);
    const std::string_view extras = connection_extras(connection_list(response, connection_lines_));
    for (const ResponseParser::Field& field : response.fields()) {
      const std::string_view name = response.name(field);
      if (is_hop_by_hop(field.name) || named_by_connection(extras, name)) continue;
      down_head_.field(name, response.value(field));
    }
    down_head_.append("\r\n"sv);
    arm(pool.send_timeout);
    before_client_write();
    interim_relayed_ = true;
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(down_head_.view()), use_task);
    if (ec) co_return false;
  }
  reset_after_interim(response);
  co_return true;
}

Task<void> Session::splice(UpstreamConnection& conn) {
  using namespace asio::experimental::awaitable_operators;
  disarm();
  set_nodelay_once(client, nodelay_);  // a tunnel: every write may be small
  set_nodelay_once(conn.socket, conn.nodelay);
  error_code ec;
  // Bytes already read past the heads belong to the tunnel.
  if (conn.buffer.size() > 0) {
    std::tie(ec, std::ignore) = co_await asio::async_write(client, conn.buffer.data(), use_task);
    conn.buffer.consume(conn.buffer.size());
    if (ec) co_return;
  }
  if (in_.size() > 0) {
    std::tie(ec, std::ignore) = co_await asio::async_write(conn.socket, in_.data(), use_task);
    in_.consume(in_.size());
    if (ec) co_return;
  }
  auto pump = [](Socket& from, Socket& to) -> Task<void> {
    std::array<char, 16 * 1024> buffer;
    for (;;) {
      auto [ec, n] = co_await from.async_read_some(asio::buffer(buffer), use_task);
      if (n > 0) {
        auto [write_ec, written] = co_await asio::async_write(to, asio::buffer(buffer.data(), n), use_task);
        if (write_ec) break;
      }
      if (ec) break;
    }
    error_code ignored;
    to.shutdown(Socket::shutdown_send, ignored);
  };
  co_await (pump(client, conn.socket) || pump(conn.socket, client));
  error_code ignored;
  conn.socket.close(ignored);
}

namespace {
Task<void> run_session(std::unique_ptr<Session> session) { co_await session->run(); }
}  // namespace

void start_session(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip) {
  asio::co_spawn(worker.io,
                 run_session(std::make_unique<Session>(worker, std::move(socket), local_port, std::move(client_ip), false)),
                 asio::detached);
}

void resume_session(Worker& w, Socket socket, uint16_t local_port, std::string client_ip,
                    Clock::time_point head_deadline) {
  auto session = std::make_unique<Session>(w, std::move(socket), local_port, std::move(client_ip), true);
  session->first_head_deadline = head_deadline;
  asio::co_spawn(w.io, run_session(std::move(session)), asio::detached);
}

void parked_connection_closed(Worker& w) {
  w.proxy.open_connections.fetch_sub(1, std::memory_order_relaxed);
  observe::connection_closed();
}

void sweep_timeouts(Worker& worker, Clock::time_point now) {
  for (Session* s : worker.sessions) {
    if (now >= s->deadline) s->expire();
    else if (s->idle && !s->park_requested && now - s->idle_since >= kParkAfter) s->request_park();
    else if (now >= s->next_client_check && s->head_wait_since != Clock::time_point::max()) s->check_client(now);
  }
  // Four times a second: unmap spare I/O blocks, and once sessions have ended
  // (closed or parked: freed in the middle of the heap, where free() keeps
  // pages resident) hand whole free pages back. Connections parked after
  // kParkAfter give their memory back within about half a second more.
  if (now - worker.last_trim >= kTrimInterval) {
    worker.last_trim = now;
    worker.blocks.trim(32);
    if (worker.sessions_ended_since_trim >= 32) {
      worker.sessions_ended_since_trim = 0;
      malloc_trim(0);
    }
  }
  worker.parking->sweep(now);
}

void sweep_idle_upstream_connections(Worker& worker, Clock::time_point now) {
  for (auto& [endpoint, list] : worker.idle)
    std::erase_if(list, [&](const std::unique_ptr<UpstreamConnection>& conn) {
      return now >= conn->idle_deadline || idle_connection_spoilt(worker, *conn, false);
    });
}

void forget_dropped_ports(Worker& worker) {
  std::erase_if(worker.dropped_port_routes, [&](const auto& entry) {
    return std::none_of(worker.sessions.begin(), worker.sessions.end(),
                        [&](const Session* s) { return s->local_port == entry.first; });
  });
}

void close_idle_sessions(Worker& worker, uint16_t port) {
  for (Session* s : worker.sessions)
    if (s->idle && s->local_port == port) s->cancel_client();
  worker.parking->close_port(port);
}

void cut_requests(Worker& worker) {
  for (Session* s : worker.sessions) s->cut();
}

void close_idle_sessions(Worker& worker) {
  for (Session* s : worker.sessions) {
    if (!s->idle && !s->lingering) continue;
    s->cancel_client();
  }
  worker.parking->close_all();
}

}  // namespace heft::proxy
