// An HTTP/1.1 client connection (see http1_session.h).
#include "proxy/http1_session.h"

#include <malloc.h>
#include <sys/socket.h>

#include <algorithm>
#include <limits>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/attempt_loop.h"
#include "proxy/header_rules.h"
#include "proxy/request_head.h"
#include "proxy/response_relay.h"
#include "proxy/runtime.h"

namespace heft::proxy {
using namespace std::string_view_literals;
namespace {

// The start of HTTP/2's connection preface (RFC 9113 3.4): an HTTP/1.1 scan
// reads it as a request line of version 2.0 (505).
constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n";
// write_tls() copies buffers up to one TLS record's worth into one write.
constexpr std::size_t kTlsRecordBytes = 16 * 1024;
// How long a closing connection drains what its client still sends (linger()).
constexpr std::chrono::milliseconds kLingeringTime{5000};
// A client connection idle this long gives back its buffers and waits for
// readability without one (docs/proxy.md: memory per idle connection).
constexpr auto kParkAfter = std::chrono::milliseconds(500);
// How often spare I/O blocks unused since the last look are unmapped.
constexpr auto kTrimInterval = std::chrono::milliseconds(250);

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

}  // namespace

Http1Session::Http1Session(Worker& worker, Socket socket, uint16_t port, std::string ip, bool resumed)
    : Exchange(worker, port, std::move(ip)),
      plain_(std::move(socket)),
      client(plain_),
      in_(worker.blocks, FieldArena::kBytes) {
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

Http1Session::Http1Session(Worker& worker, std::unique_ptr<TlsStream> stream, uint16_t port, std::string ip,
                           ClientTls tls)
    : Exchange(worker, port, std::move(ip)),
      plain_(worker.io),
      tls_(std::move(stream)),
      tls_info_(std::move(tls)),
      client(tls_->next_layer()),
      in_(worker.blocks, FieldArena::kBytes) {
  self = w.sessions.insert(w.sessions.end(), this);
  client_tls = &tls_info_;
  nodelay_ = true;  // set for the handshake
}

Http1Session::~Http1Session() {
  response_.reset();  // its fields may live in in_'s tail, given back below
  w.sessions.erase(self);
  ++w.sessions_ended_since_trim;
  if (handed_to_park_) return;  // still open, now counted by the parked connection
  w.proxy.open_connections.fetch_sub(1, std::memory_order_relaxed);
  observe::connection_closed();
}

bool Http1Session::closing() const {
  return w.draining || port_dropped_ ||
         (!w.unserved_ports.empty() &&
          std::find(w.unserved_ports.begin(), w.unserved_ports.end(), local_port) != w.unserved_ports.end());
}

void Http1Session::check_client(Clock::time_point now) {
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
  client_left();
}

void Http1Session::cut() {
  if (!serving()) return;
  static observe::LogLimit cuts("requests cut by the end of the grace period", observe::LogLevel::warn);
  if (cuts.admit()) observe::warn("{} {}: cut by the end of the grace period", request().method_string(), request().target());
  finish_request(*this);
}

Task<int> Http1Session::read_head(bool first, std::size_t& skip, std::size_t& size) {
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
      std::tie(ec, n) = co_await on_client([&](auto& stream) { return stream.async_read_some(room, use_task); });
    }
    // Over TLS a short read says nothing of the socket: OpenSSL may hold
    // decrypted bytes, so the ReadyWatch is for plain connections only.
    client_drained_ = !ec && n < room.size() && !tls_;
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
        static observe::LogLimit malformed("400 from clients: malformed request heads", observe::LogLevel::info);
        if (malformed.admit()) observe::info("400 from {}: {}", client_ip, scan.reason);
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
    error_code ec = co_await on_client([&](auto& stream) { return read_more(stream, in_); });
    if (ec) co_return timed_out ? 408 : -1;
  }
}

Task<void> Http1Session::send_status(unsigned status, bool keep_alive) {
  const std::string text = fmt::format("{} {}\n", status, status_text(status));
  co_await send_error(status, text, keep_alive);
}

Task<void> Http1Session::send_error(unsigned status, std::string_view text, bool keep_alive) {
  record_.status = status;
  record_.size = text.size();
  down_head_.clear();
  // heft is the origin of these: a Date, as RFC 9110 6.6.1 asks of an origin with a clock.
  down_head_.append(fmt::format("HTTP/1.1 {} {}\r\n{}Content-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{}",
                                status, status_text(status), w.date.line(), text.size(),
                                keep_alive ? "" : "Connection: close\r\n", text));
  arm(std::chrono::milliseconds(10000));
  before_client_write();
  co_await on_client([&](auto& stream) { return asio::async_write(stream, asio::buffer(down_head_.view()), use_task); });
}

Task<void> Http1Session::send_own(unsigned status, bool keep_alive) {
  const bool no_body = status == 204 || status == 304 || (status >= 100 && status < 200);
  const bool head_only = no_body || request().method() == http::verb::head;
  const bool typed = own_body_.empty() || has_field_line(own_fields_, "content-type");
  record_.status = status;
  record_.size = head_only ? 0 : own_body_.size();
  down_head_.clear();
  // Any status a route may give (200..599): Beast's reason phrases.
  const std::string_view reason = http::obsolete_reason(http::int_to_status(status));
  down_head_.append(fmt::format("HTTP/1.1 {} {}\r\n{}{}{}", status, reason.starts_with('<') ? "Status" : reason,
                                w.date.line(), own_fields_,
                                typed ? "" : "Content-Type: text/plain; charset=utf-8\r\n"));
  if (!no_body) down_head_.append(fmt::format("Content-Length: {}\r\n", own_body_.size()));
  down_head_.append(keep_alive ? "\r\n" : "Connection: close\r\n\r\n");
  if (!head_only) down_head_.append(own_body_);
  arm(std::chrono::milliseconds(10000));
  before_client_write();
  co_await on_client([&](auto& stream) { return asio::async_write(stream, asio::buffer(down_head_.view()), use_task); });
}

void Http1Session::record_refused_head(unsigned status) {
  const std::shared_ptr<WorkerRoutes> routes = w.current_routes();
  const SiteRoute* route = port_site(*routes, local_port);
  if (!route) return;
  const double seconds = std::chrono::duration<double>(coarse_now() - head_started_).count();
  observe::record_request(w.index, route->server_label, static_cast<int>(status), seconds);
  if (!route->log) return;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  route->log->write({now - seconds, client_ip, "", "", "", "", "", static_cast<int>(status), seconds, record_.size, 0,
                     -1, -1, -1, access_log_tls(client_tls)});
}

Task<void> Http1Session::run() {
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
    if (status == 505 && in_.size() >= kH2Preface.size() && std::string_view(in_.bytes(), kH2Preface.size()) == kH2Preface &&
        w.current_routes()->table->speaks_h2c(local_port)) {
      // HTTP/2 with prior knowledge on a listener that speaks h2c: the
      // connection, and what was read of it, goes to an HTTP/2 connection
      // (counted open by it from now).
      handed_to_park_ = true;
      disarm();
      w.ready_watch.forget(client.native_handle(), client_watched_);
      start_http2(w, std::move(client), local_port, std::move(client_ip), std::string(in_.bytes(), in_.size()));
      co_return;
    }
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
      static observe::LogLimit refused("400 from clients: heads the parser refused", observe::LogLevel::info);
      if (refused.admit()) observe::info("400 from {}: {}", client_ip, ec.message());
      co_await send_error(400, "400 Bad Request\n", false);
      record_refused_head(400);
      break;
    }
    record_ = RequestRecord{};
    current_route_ = nullptr;
    parser_ = &parser;
    request_ = &parser.get();
    request_start_ = Clock::now();
    bool keep_alive = co_await serve(*this);
    if (refusal_.status) {
      const Refusal refusal = std::exchange(refusal_, Refusal{});
      if (refusal.own) co_await send_own(refusal.status, refusal.keep_alive);
      else if (refusal.text.empty()) co_await send_status(refusal.status, refusal.keep_alive);
      else co_await send_error(refusal.status, refusal.text, refusal.keep_alive);
    }
    finish_request(*this);
    current_routes_.reset();
    unread = !parser.is_done();
    parser_ = nullptr;
    if (!keep_alive || closing()) break;
  }
  if ((unread || in_.size() > 0) && client.is_open() && !w.draining) co_await linger();
  disarm();
  error_code ignored;
  client.close(ignored);
}

Task<void> Http1Session::linger() {
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

// ---- The body source: the request parser over the connection's buffer.

Task<BodyPiece> Http1Session::read_body(char* out, std::size_t capacity) {
  client_drained_ = false;  // the body is read through Asio
  return on_client([&](auto& stream) { return read_body_piece(stream, in_, *parser_, out, capacity); });
}

Task<bool> Http1Session::send_continue() {
  if (request().version() < 11) co_return true;  // HTTP/1.0 has no interim responses
  before_client_write();
  auto [ec, n] = co_await on_client(
      [](auto& stream) { return asio::async_write(stream, asio::buffer("HTTP/1.1 100 Continue\r\n\r\n", 25), use_task); });
  co_return !ec;
}

bool Http1Session::client_keep_alive(std::optional<bool> from_connection_field) {
  // The parser read every Connection field already (close / keep-alive
  // tokens and the version's default).
  client_keep_alive_ = from_connection_field.value_or(parser_->keep_alive());
  return client_keep_alive_;
}

// ---- The response sink: HTTP/1.1 framing.

void Http1Session::begin_response(const ResponseParser& response, const config::ProxyConfig& pool, bool switching) {
  const unsigned status = response.status();
  const bool client_http11 = request().version() >= 11;
  // A response that starts before the request body ended (an early 413, an
  // echo) ends the connection: the rest of the body may never be read
  // (RFC 9112 9.6), so the head says so.
  bool keep_alive = client_keep_alive_ && !closing() && !switching && body_done();
  const bool no_body = response.is_done();  // HEAD, 204, 304 (length known to be 0 or skipped)
  framing_ = Framing::sized;
  if (!no_body) {
    if (response.chunked()) framing_ = client_http11 ? Framing::chunked : Framing::until_close;
    else if (response.content_length()) framing_ = Framing::sized;
    else framing_ = client_http11 ? Framing::chunked : Framing::until_close;
  }
  if (framing_ == Framing::until_close) keep_alive = false;
  response_keep_alive_ = keep_alive;

  down_head_.clear();
  down_head_.append("HTTP/1.1 "sv);
  down_head_.number(status);
  down_head_.append(" "sv).append(response.reason()).append("\r\n"sv);
  for_each_forwarded_field(response, pool, connection_lines_, w.date.value(),
                           [this](std::string_view name, std::string_view value) { down_head_.field(name, value); },
                           route_state_.response_ops);
  if (switching) {
    down_head_.append("Connection: upgrade\r\n"sv);
    down_head_.field("Upgrade", response.value(http::field::upgrade));
  }
  if (no_body && response.chunked() && client_http11 && status != 204 && status != 304) {
    down_head_.append("Transfer-Encoding: chunked\r\n"sv);  // a HEAD of what a GET would get chunked
  } else if (!no_body) {
    if (framing_ == Framing::chunked) {
      down_head_.append("Transfer-Encoding: chunked\r\n"sv);
    } else if (framing_ == Framing::sized) {
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
  head_pending_ = true;
}

bool Http1Session::send_body(std::string_view piece, bool last, SendResult& result) {
  std::size_t count = 0;
  const bool chunked = framing_ == Framing::chunked;
  head_bytes_ = 0;
  before_body_ = 0;  // bytes ahead of the body piece: the head, a chunk-size line
  piece_size_ = piece.size();
  if (std::exchange(head_pending_, false)) {
    send_buffers_[count++] = asio::buffer(down_head_.view());
    head_bytes_ = down_head_.size();
  }
  if (!piece.empty()) {
    if (chunked) send_buffers_[count++] = asio::buffer(size_line_.data(), chunk_line(size_line_.data(), piece.size()));
    before_body_ = asio::buffer_size(std::span(send_buffers_.data(), count));
    send_buffers_[count++] = asio::buffer(piece.data(), piece.size());
    if (chunked) send_buffers_[count++] = asio::buffer("\r\n", 2);
  }
  if (last && chunked) send_buffers_[count++] = asio::buffer("0\r\n\r\n", 5);
  result = SendResult{};
  if (count == 0) return true;
  before_client_write();
  unsent_ = std::span(send_buffers_.data(), count);
  send_total_ = asio::buffer_size(unsent_);
  if (tls_) {  // no synchronous send through OpenSSL: finish_send() writes it all
    send_written_ = 0;
    return false;
  }
  const error_code ec = send_now(client, unsent_);
  send_written_ = ec ? 0 : send_total_ - asio::buffer_size(unsent_);
  if (!ec && !unsent_.empty()) return false;  // finish_send() writes the rest
  result.ec = ec;
  account(result, send_written_);
  return true;
}

Task<void> Http1Session::finish_send(SendResult& result) {
  error_code ec;
  std::size_t n = 0;
  if (tls_) std::tie(ec, n) = co_await write_tls(unsent_);
  else std::tie(ec, n) = co_await asio::async_write(client, unsent_, use_task);
  result.ec = ec;
  account(result, send_written_ + n);
}

Task<std::tuple<error_code, std::size_t>> Http1Session::write_tls(std::span<const asio::const_buffer> buffers) {
  const std::size_t total = asio::buffer_size(buffers);
  if (buffers.size() > 1 && total <= kTlsRecordBytes) {
    tls_out_.clear();
    for (const asio::const_buffer& buffer : buffers) tls_out_.append(static_cast<const char*>(buffer.data()), buffer.size());
    co_return co_await asio::async_write(*tls_, asio::buffer(tls_out_), use_task);
  }
  co_return co_await asio::async_write(*tls_, buffers, use_task);
}

void Http1Session::account(SendResult& result, std::size_t written) const {
  result.head_sent = head_bytes_ > 0 && written >= head_bytes_;
  result.body_sent = written > before_body_ ? std::min(piece_size_, written - before_body_) : 0;
}

// An interim response reaches an HTTP/1.1 client as the backend sent it,
// less hop-by-hop fields (RFC 9110 15.2: a proxy forwards 1xx it did not ask
// for; 103 Early Hints lets a browser preload while the backend works), then
// the parser is reset for the next head. A 100 is dropped: heft answers a
// client's Expect itself and does not pass it on. HTTP/1.0 clients get none
// (RFC 9110 15.2). header_down is for final responses only. False when the
// client is gone.
Task<bool> Http1Session::send_interim(const ResponseParser& response) {
  if (response.status() == 100 || request().version() < 11) co_return true;
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
  before_client_write();
  interim_relayed_ = true;
  auto [ec, n] = co_await on_client(
      [&](auto& stream) { return asio::async_write(stream, asio::buffer(down_head_.view()), use_task); });
  co_return !ec;
}

Task<bool> Http1Session::send_switch() {
  head_pending_ = false;
  before_client_write();
  auto [ec, n] = co_await on_client(
      [&](auto& stream) { return asio::async_write(stream, asio::buffer(down_head_.view()), use_task); });
  co_return !ec;
}

Task<void> Http1Session::splice(UpstreamConnection& conn) {
  using namespace asio::experimental::awaitable_operators;
  disarm();
  set_nodelay_once(client, nodelay_);  // a tunnel: every write may be small
  set_nodelay_once(conn.socket, conn.nodelay);
  error_code ec;
  // Bytes already read past the heads belong to the tunnel.
  if (conn.buffer.size() > 0) {
    std::tie(ec, std::ignore) =
        co_await on_client([&](auto& stream) { return asio::async_write(stream, conn.buffer.data(), use_task); });
    conn.buffer.consume(conn.buffer.size());
    if (ec) co_return;
  }
  if (in_.size() > 0) {
    std::tie(ec, std::ignore) = co_await asio::async_write(conn.socket, in_.data(), use_task);
    in_.consume(in_.size());
    if (ec) co_return;
  }
  auto pump = [](auto& from, auto& to) -> Task<void> {
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
    to.lowest_layer().shutdown(Socket::shutdown_send, ignored);
  };
  if (tls_) co_await (pump(*tls_, conn.socket) || pump(conn.socket, *tls_));
  else co_await (pump(client, conn.socket) || pump(conn.socket, client));
  error_code ignored;
  conn.socket.close(ignored);
}

namespace {
Task<void> run_session(std::unique_ptr<Http1Session> session) { co_await session->run(); }
}  // namespace

void start_session(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip) {
  asio::co_spawn(worker.io,
                 run_session(std::make_unique<Http1Session>(worker, std::move(socket), local_port, std::move(client_ip), false)),
                 asio::detached);
}

void start_tls_session(Worker& worker, std::unique_ptr<TlsStream> stream, uint16_t local_port, std::string client_ip,
                       ClientTls tls) {
  asio::co_spawn(worker.io,
                 run_session(std::make_unique<Http1Session>(worker, std::move(stream), local_port,
                                                            std::move(client_ip), std::move(tls))),
                 asio::detached);
  worker.wake_sweep();
}

void resume_session(Worker& w, Socket socket, uint16_t local_port, std::string client_ip,
                    Clock::time_point head_deadline) {
  auto session = std::make_unique<Http1Session>(w, std::move(socket), local_port, std::move(client_ip), true);
  session->first_head_deadline = head_deadline;
  asio::co_spawn(w.io, run_session(std::move(session)), asio::detached);
}

void parked_connection_closed(Worker& w) {
  w.proxy.open_connections.fetch_sub(1, std::memory_order_relaxed);
  observe::connection_closed();
}

void sweep_timeouts(Worker& worker, Clock::time_point now) {
  for (Http1Session* s : worker.sessions) {
    if (now >= s->deadline) {
      s->expire();
      continue;
    }
    if (s->head_pool_)
      s->check_stall(now);
    // A TLS connection is not parked: its TLS state stays with it (OpenSSL
    // releases its buffers when idle: SSL_MODE_RELEASE_BUFFERS).
    if (s->idle && !s->park_requested && !s->tls() && now - s->idle_since >= kParkAfter) s->request_park();
    else if (now >= s->next_client_check && s->head_wait_since != Clock::time_point::max()) s->check_client(now);
  }
  if (!worker.h2_connections.empty()) sweep_http2(worker, now);
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

void forget_dropped_ports(Worker& worker) {
  std::erase_if(worker.dropped_port_routes, [&](const auto& entry) {
    return std::none_of(worker.sessions.begin(), worker.sessions.end(),
                        [&](const Http1Session* s) { return s->local_port == entry.first; }) &&
           !http2_on_port(worker, entry.first);
  });
}

void close_idle_sessions(Worker& worker, uint16_t port) {
  for (Http1Session* s : worker.sessions)
    if (s->idle && s->local_port == port) s->cancel_client();
  worker.parking->close_port(port);
  go_away_http2(worker, port);
}

void cut_requests(Worker& worker) {
  for (Http1Session* s : worker.sessions) s->cut();
  cut_http2(worker);
}

void close_idle_sessions(Worker& worker) {
  for (Http1Session* s : worker.sessions) {
    if (!s->idle && !s->lingering) continue;
    s->cancel_client();
  }
  worker.parking->close_all();
  go_away_http2(worker);
}

}  // namespace heft::proxy
