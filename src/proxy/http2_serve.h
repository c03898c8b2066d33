// serve_http2(): an HTTP/2 connection (http2_connection.h) over any client
// stream with Asio's async_read_some / async_write_some and a lowest_layer()
// to close: the plain socket of an h2c listener, or a TLS stream whose ALPN
// chose "h2". One coroutine reads the client's frames into nghttp2, another
// writes what nghttp2 has to send; the connection ends once both are done.
//
// Thread safety: runs on the worker's thread, as its streams do.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>

#include "proxy/http2_connection.h"

namespace heft::proxy {

namespace http2_detail {

template <class Stream>
Task<void> read_frames(Http2Connection& conn, Stream& stream) {
  std::array<char, 16 * 1024> buffer;
  bool failed = false;  // the client is gone (as opposed to a session that wants no more)
  while (conn.wants_read()) {
    auto [ec, n] = co_await stream.async_read_some(boost::asio::buffer(buffer), use_task);
    if (n > 0 && !conn.receive(std::string_view(buffer.data(), n))) break;
    if (ec) {
      failed = true;
      break;
    }
  }
  conn.reader_finished(failed);
  // What the client still sends is read and dropped until it closes (or the
  // linger deadline closes it): closed with input unread, the kernel would
  // reset the connection and could destroy the GOAWAY on its way.
  while (!failed) {
    auto [ec, n] = co_await stream.async_read_some(boost::asio::buffer(buffer), use_task);
    failed = ec.failed();
  }
}

template <class Stream>
Task<void> write_frames(Http2Connection& conn, Stream& stream) {
  std::string out;
  for (;;) {
    out.clear();
    if (!conn.produce(out)) conn.transport_ended();
    if (!out.empty()) {
      conn.write_started();
      auto [ec, n] = co_await boost::asio::async_write(stream, boost::asio::buffer(out), use_task);
      conn.write_finished();
      if (ec) conn.transport_ended();
      continue;
    }
    if (conn.over()) break;
    if (out.capacity() > 16 * 1024) std::string().swap(out);  // an idle connection keeps no large buffer
    co_await conn.wait_for_output();
  }
  if (conn.transport_failed()) {
    conn.close_transport();  // the reader, if still waiting, ends too
  } else {
    boost::system::error_code ignored;
    stream.lowest_layer().shutdown(boost::asio::socket_base::shutdown_send, ignored);
    conn.linger();
  }
}

}  // namespace http2_detail

// Serves HTTP/2 on `stream` (accepted on local port `port`) to its end.
// `received`: bytes read from it already (the connection preface, when
// a plain listener told HTTP/2 from HTTP/1.1 by them). The caller counts the
// connection open (Proxy::Impl::open_connections, observe::connection_opened)
// before; it is counted closed when this returns. For TLS, once ALPN chose
// "h2" (tls_accept.cc), with `tls` what its handshake settled (outliving the call).
template <class Stream>
Task<void> serve_http2(Worker& worker, Stream& stream, uint16_t port, std::string client_ip,
                       std::string_view received, const ClientTls* tls = nullptr) {
  using namespace boost::asio::experimental::awaitable_operators;
  Http2Connection conn(worker, port, std::move(client_ip), [&stream] {
    boost::system::error_code ignored;
    stream.lowest_layer().close(ignored);
  });
  conn.client_tls = tls;
  if (!conn.start()) {
    conn.close_transport();
    co_return;
  }
  if (!received.empty()) conn.receive(received);
  co_await (http2_detail::read_frames(conn, stream) && http2_detail::write_frames(conn, stream));
}

}  // namespace heft::proxy
