// A client connection on a TLS port: the handshake, then the hand-off to the
// protocol ALPN chose (runtime.h's start_tls_connection()).
//
// The handshake has its own timer (header_timeout, the time a client has to
// send its first request head): a session and its sweep only exist once the
// protocol is known. A client that sends something other than a ClientHello
// fails the handshake: the connection is closed, logged at a limited rate.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/http2_serve.h"
#include "proxy/runtime.h"
#include "proxy/tls_server.h"

namespace heft::proxy {
using boost::system::error_code;
namespace {

Task<void> handshake_and_serve(Worker& w, std::unique_ptr<TlsStream> stream, uint16_t port, std::string ip,
                               std::shared_ptr<TlsServer> server) {
  using namespace asio::experimental::awaitable_operators;
  Timer timer(w.io, w.current_routes()->table->config.header_timeout);
  // `server` (held to the end of this frame) outlives the handshake that calls its SNI callback.
  auto done = co_await (stream->async_handshake(TlsStream::server, use_task) || timer.async_wait(use_task));
  error_code ec = done.index() == 0 ? std::get<0>(std::get<0>(done)) : error_code(asio::error::timed_out);
  if (ec) {
    static observe::LogLimit failed("TLS handshakes that failed", observe::LogLevel::info);
    if (failed.admit()) observe::info("TLS handshake with {} failed: {}", ip, ec.message());
    error_code ignored;
    stream->next_layer().close(ignored);
    w.proxy.open_connections.fetch_sub(1, std::memory_order_relaxed);  // counted open in start_tls_connection()
    observe::connection_closed();
    co_return;
  }
  ClientTls tls = describe_handshake(*stream);
  // The hand-off by protocol: "h2" to the HTTP/2 front end (offered where
  // the server speaks h2); "http/1.1", or a client that asked for none, to HTTP/1.1.
  if (tls.alpn == "h2") {
    w.wake_sweep();
    co_await serve_http2(w, *stream, port, std::move(ip), {}, &tls);
    co_return;
  }
  start_tls_session(w, std::move(stream), port, std::move(ip), std::move(tls));
}

}  // namespace

void start_tls_connection(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip,
                          std::shared_ptr<TlsServer> server) {
  // Counted open from here, as a plain connection is from its session.
  worker.proxy.open_connections.fetch_add(1, std::memory_order_relaxed);
  observe::connection_opened();
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // handshake messages are small and answered at once
  auto stream = std::make_unique<TlsStream>(std::move(socket), server->context());
  asio::co_spawn(worker.io,
                 handshake_and_serve(worker, std::move(stream), local_port, std::move(client_ip), std::move(server)),
                 asio::detached);
}

}  // namespace heft::proxy
