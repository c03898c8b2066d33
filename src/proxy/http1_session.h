// An HTTP/1.1 client connection: reads requests strictly (request_head.h),
// one at a time, each served by the stages after it through the Exchange
// interface this class implements; keeps the connection between requests
// (parking it without buffers when idle), answers heft's own errors, and
// frames responses for HTTP/1.1 or 1.0 (chunked, sized or close-delimited).
// The only HTTP/1-specific part of the request path besides the upstream
// side, which speaks HTTP/1.1 to every backend.
//
// Thread safety: a session lives on its worker's thread only. Timeouts: one
// deadline per session, checked by the worker's sweep (no timer per operation).
#pragma once

#include <array>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "proxy/exchange.h"
#include "proxy/tls_server.h"

namespace heft::proxy {

class Http1Session final : public Exchange {
  // Declared first: `client` refers to one of them. Over TLS every read and
  // write goes through tls_ (on_client()); over plain TCP through the
  // socket, with the fast paths TLS cannot take (synchronous sends, the
  // ReadyWatch, parking).
  Socket plain_;
  std::unique_ptr<TlsStream> tls_;
  ClientTls tls_info_;

 public:
  // A new connection (counted open here), or one resumed from parking
  // (counted since it was accepted).
  Http1Session(Worker& worker, Socket socket, uint16_t port, std::string ip, bool resumed);
  // A connection whose TLS handshake is done (counted open since it was accepted).
  Http1Session(Worker& worker, std::unique_ptr<TlsStream> stream, uint16_t port, std::string ip, ClientTls tls);
  ~Http1Session() override;

  Task<void> run();

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
  void check_client(Clock::time_point now);
  // Called when the stop's grace period ends, right before the worker stops
  // for good: the request in flight, if any, is recorded as it stands.
  void cut();

  // The client's TCP connection (under tls_ over TLS): for what is not a
  // read or a write of the byte stream (peeks, options, shutdown, close).
  Socket& client;
  bool tls() const { return tls_ != nullptr; }
  std::list<Http1Session*>::iterator self;
  bool idle = false;            // waiting for a request, nothing received: drain may close it
  bool lingering = false;       // in linger(): drain may close it too
  bool park_requested = false;  // the sweep cancelled the idle read to park the connection
  Clock::time_point idle_since{};
  // A connection resumed from parking before its first request: when that
  // request's header timeout ends (it runs from the connection).
  Clock::time_point first_head_deadline = Clock::time_point::max();

  // ---- Exchange.
  bool body_done() const override { return parser_->is_done(); }
  bool body_unsized() const override { return parser_->get().chunked(); }
  uint64_t body_length() const override { return parser_->content_length().value_or(0); }
  bool body_declared() const override { return parser_->get().has_content_length() || parser_->get().chunked(); }
  Task<BodyPiece> read_body(char* out, std::size_t capacity) override;
  Task<bool> send_continue() override;
  void begin_response(const ResponseParser& response, const config::ProxyConfig& pool, bool switching) override;
  bool response_keeps_connection() const override { return response_keep_alive_; }
  bool send_body(std::string_view piece, bool last, SendResult& result) override;
  Task<void> finish_send(SendResult& result) override;
  Task<bool> send_interim(const ResponseParser& response) override;
  Task<bool> send_switch() override;
  Task<void> splice(UpstreamConnection& conn) override;
  bool client_keep_alive(std::optional<bool> from_connection_field) override;
  bool closing() const override;
  void cancel_client() override { cancel_io(client); }

 private:
  // `op` applied to the client's byte stream: the TLS stream, else the socket.
  template <typename Op>
  auto on_client(Op&& op) {
    return tls_ ? op(*tls_) : op(client);
  }
  // Writes `buffers` to the client over TLS: several small ones are copied
  // into one first (a TLS record each would cost a record's overhead and a
  // syscall each).
  Task<std::tuple<error_code, std::size_t>> write_tls(std::span<const boost::asio::const_buffer> buffers);

  // 0: a head is in in_ at [skip, skip+size). -1: the connection is done
  // (closed, idle timeout, draining). -2: idle long enough to be parked (the
  // sweep asked). Otherwise an HTTP status to answer before closing.
  Task<int> read_head(bool first, std::size_t& skip, std::size_t& size);
  // nginx's lingering close, for a connection that ends with client input
  // unread (an answered request whose body did not all come): closing then
  // would make the kernel reset the connection, which can destroy the response
  // still on its way. So the sending side is shut (a FIN after the response)
  // and what the client still sends is read and dropped, for a while.
  Task<void> linger();
  Task<void> send_error(unsigned status, std::string_view text, bool keep_alive);
  // send_error() with the body "<status> <reason>\n". Its own coroutine, so the
  // text is not a temporary in the caller's frame.
  Task<void> send_status(unsigned status, bool keep_alive);
  // A route's own answer (own_fields_, own_body_), as Caddy's static_response
  // sends it: a body gets Content-Type text/plain unless the route set one;
  // a HEAD gets the head alone.
  Task<void> send_own(unsigned status, bool keep_alive);
  // Counts and logs a request refused while its head was read (no parsed
  // request: method and URI stay empty in the log).
  void record_refused_head(unsigned status);
  // Nagle holds a write back only while an earlier one is unacknowledged, so
  // the first write on a connection never waits: TCP_NODELAY (a syscall) is
  // set before the second, as nginx does for keep-alive connections. A
  // connection that gets one response and closes never pays for it.
  void before_client_write() {
    if (nodelay_ || client_writes_++ == 0) return;
    set_nodelay_once(client, nodelay_);
  }
  // What a write achieved, from the bytes written of `total` (the head and
  // `before_body_` bytes of framing ahead of the body piece).
  void account(SendResult& result, std::size_t written) const;

  BlockBuffer in_;
  RequestParser* parser_ = nullptr;  // the current request's (it lives in run()'s frame)
  HeadBuilder down_head_;            // response head for the client (reused)
  bool handed_to_park_ = false;
  bool nodelay_ = false;
  bool resumed_ = false;  // back from parking
  std::size_t later_minor_at_ = 0;  // read_head()'s HeadScan::later_minor_at
  // The client's last read came back short (the socket was drained then), so
  // the next one may wait in the ReadyWatch; any other read of the client
  // (bodies) clears it.
  bool client_drained_ = false;
  bool client_watched_ = false;  // in the worker's ReadyWatch
  unsigned client_writes_ = 0;
  bool client_keep_alive_ = false;  // the current request's Connection semantics
  Clock::time_point head_started_{};  // read_head(): when the current head's header_timeout began (coarse clock)

  // The response being framed: chunked (HTTP/1.1, length unknown), sized, or
  // delimited by the connection's close (HTTP/1.0, length unknown).
  enum class Framing { sized, chunked, until_close } framing_ = Framing::sized;
  bool response_keep_alive_ = false;
  bool head_pending_ = false;  // down_head_ waits for the first send_body()
  // A send_body() that finish_send() completes.
  std::array<boost::asio::const_buffer, 5> send_buffers_;
  std::span<boost::asio::const_buffer> unsent_;
  std::array<char, 24> size_line_;
  std::size_t send_total_ = 0, send_written_ = 0, head_bytes_ = 0, before_body_ = 0, piece_size_ = 0;
  std::string tls_out_;  // write_tls()'s coalescing buffer
};

}  // namespace heft::proxy
