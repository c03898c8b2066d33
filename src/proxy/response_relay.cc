// The response relay (see response_relay.h).
#include "proxy/response_relay.h"

#include <cstring>

#include "proxy/runtime.h"

namespace heft::proxy {

Task<bool> relay_interim(Exchange& ex, ResponseParser& response, const config::ProxyConfig& pool) {
  ex.arm(pool.send_timeout);
  // Not `if (!co_await ex.send_interim(...))`: GCC 12 compiled that into a
  // frame resumed at an invalid suspension point (SIGILL) once the relay of
  // a 103 suspended.
  const bool sent = co_await ex.send_interim(response);
  if (!sent) co_return false;
  reset_after_interim(response);
  co_return true;
}

Task<AttemptResult> relay_response(Exchange& ex, UpstreamConnection& conn, ResponseParser& response,
                                   const config::ProxyConfig& pool, bool upgrade) {
  if (!response.is_header_done()) {
    // (A streamed body's head: the client is watched once the body is out;
    // see attempt().)
    ex.arm(pool.read_timeout);
    bool received = false;
    for (;;) {
      error_code ec = co_await read_response_head(conn, response, received, nullptr);
      if (ec) {
        ex.unwatch_client();
        co_return ex.failure("reading the response head", ec);
      }
      if (is_interim(response)) {
        const bool watched = ex.head_wait_since != Clock::time_point::max();
        ex.unwatch_client();  // no check during the relay's write
        if (!co_await relay_interim(ex, response, pool)) co_return AttemptResult{Outcome::client_gone};
        ex.arm(pool.read_timeout);  // the timeout runs between reads: an interim response is one
        if (watched) ex.watch_client_from(coarse_now());
        continue;
      }
      break;
    }
    ex.unwatch_client();
    if (error_code bad = unusable_head(response, upgrade)) co_return ex.failure("reading the response head", bad);
    // A switch while the request body still streams: the client's next
    // bytes would be body and tunnel at once. A 502, as for a 101 nobody asked for.
    if (upgrade && response.status() == 101 && !ex.body_done())
      co_return ex.failure("reading the response head", http::error::bad_status);
  }
  ex.response_head_at_ = Clock::now();
  const unsigned status = response.status();
  const bool switching = status == 101 && upgrade;
  ex.begin_response(response, pool, switching);

  if (switching) {
    ex.arm(pool.send_timeout);
    // (Two statements: GCC 12 resumed a frame wrongly after `if (!co_await
    // ex.virtual_call())`; see relay_interim().)
    const bool sent = co_await ex.send_switch();
    if (!sent) co_return AttemptResult{Outcome::client_gone};
    // The tunnel runs once the switch is recorded and logged (the attempt
    // loop), so its lifetime is not counted as the backend's response time
    // (the request body has ended: a switch before is refused above).
    ex.tunnel_pending_ = true;
    co_return AttemptResult{Outcome::done, 101, false};
  }

  // Body: the head goes out with the first piece (one write for small responses).
  bool head_pending = true;
  for (;;) {
    std::size_t got = 0;
    const char* piece = nullptr;
    bool cut = false;
    if (!response.is_done()) {
      ex.arm(pool.read_timeout);
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
      // out in one send as one piece, as nginx re-chunks what it read.
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
        AttemptResult failed = ex.failure("reading the response body", ec);
        if (failed.outcome == Outcome::client_gone || (head_pending && ex.request_body_failed_)) co_return failed;
        cut = true;
      }
    }
    const bool last = !cut && response.is_done();
    if (head_pending || got > 0 || last) {
      ex.arm(pool.send_timeout);
      SendResult sent;
      if (!ex.send_body(std::string_view(piece, got), last, sent)) co_await ex.finish_send(sent);
      // For the log, what reached the client, however it ends (nginx's
      // $status and $body_bytes_sent): the head once whole, the body bytes written.
      if (sent.head_sent) ex.record_.status = status;
      ex.record_.size += sent.body_sent;
      if (sent.ec) co_return AttemptResult{cut ? Outcome::broken : Outcome::client_gone, status};
    }
    head_pending = false;
    if (cut) co_return AttemptResult{Outcome::broken, status};
    if (last) break;
  }
  ex.disarm();
  co_return AttemptResult{Outcome::done, status, ex.response_keeps_connection()};
}

}  // namespace heft::proxy
