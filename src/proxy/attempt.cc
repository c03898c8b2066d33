// One attempt on one backend (see attempt.h).
#include "proxy/attempt.h"

#include <array>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>

#include "proxy/response_relay.h"
#include "proxy/runtime.h"

namespace heft::proxy {
namespace {

// Whether a backend not yet tried could take the request (a pick may still
// refuse it; this only says whether one is worth asking for).
bool untried_available(const upstream::PoolSnapshot& snapshot, const balance::TriedSet& tried) {
  for (uint32_t j = 0; j < snapshot.size(); ++j)
    if (!tried.contains(j) && snapshot.available(j)) return true;
  return false;
}

// One deadline per exchange: while the body streams, it is the client's
// idle_timeout during each read from the client and send_timeout during each
// write to the backend; once the body is out, read_timeout for the response
// (nginx's proxy_read_timeout starts when the request has been sent).
Task<error_code> send_rest_of_body(Exchange& ex, UpstreamConnection& conn, bool chunked, bool& client_failed,
                                   const config::ProxyConfig& pool) {
  set_nodelay_once(conn.socket, conn.nodelay);  // the body goes out in writes after the head's
  // Its own buffer: scratch() is used by the response side at the same time.
  auto piece = std::make_unique<char[]>(kChunk);
  std::array<char, 24> size_line;
  while (!ex.body_done()) {
    ex.arm(ex.config_->idle_timeout);
    auto [ec, got] = co_await ex.read_body(piece.get(), kChunk);
    if (ec) {
      if (!is_parse_error(ec) && !ex.body_abandoned_) client_failed = true;
      co_return ec;
    }
    std::array<asio::const_buffer, 4> buffers;
    std::size_t count = 0;
    if (chunked && got > 0) buffers[count++] = asio::buffer(size_line.data(), chunk_line(size_line.data(), got));
    if (got > 0) buffers[count++] = asio::buffer(piece.get(), got);
    if (chunked && got > 0) buffers[count++] = asio::buffer("\r\n", 2);
    if (chunked && ex.body_done()) buffers[count++] = asio::buffer("0\r\n\r\n", 5);
    if (count == 0) continue;
    ex.arm(pool.send_timeout);
    auto [write_ec, n] = co_await asio::async_write(conn.socket, std::span(buffers.data(), count), use_task);
    if (write_ec) co_return write_ec;
  }
  ex.arm(pool.read_timeout);
  co_return error_code{};
}

// attempt() once the request head is out and the request body is not all
// in: the rest is relayed while the response may already be coming.
Task<AttemptResult> attempt_streaming_body(Exchange& ex, std::unique_ptr<UpstreamConnection>& conn,
                                           ResponseParser& response, const config::ProxyConfig& pool, bool upgrade,
                                           IdleList& idle_list) {
  using namespace asio::experimental::awaitable_operators;
  bool client_failed = false;
  error_code body_ec;
  auto send_body = [&]() -> Task<void> {
    body_ec = co_await send_rest_of_body(ex, *conn, ex.upstream_chunked_, client_failed, pool);
    // The body is out and the head not in: the client is watched from
    // now on, as for a buffered body (relay_response() stops it).
    if (!body_ec && !client_failed && !response.is_header_done()) ex.watch_client_from(coarse_now());
    if (body_ec) {
      // Unblock the response side, whether its read is pending or not
      // started yet (a bad chunk found without waiting): after a
      // shutdown every read ends at once.
      ex.request_body_failed_ = true;
      error_code ignored;
      conn->socket.shutdown(Socket::shutdown_both, ignored);
      ex.cancel_io(conn->socket);
    }
  };
  AttemptResult result;
  ex.body_abandoned_ = false;
  ex.request_body_failed_ = false;
  auto receive = [&]() -> Task<void> {
    result = co_await relay_response(ex, *conn, response, pool, upgrade);
    if (result.outcome == Outcome::done && !ex.body_done()) {
      // Answered before the body ended: stop relaying it (the client
      // connection closes, lingering), and free the body side's waits.
      ex.body_abandoned_ = true;
      error_code ignored;
      conn->socket.shutdown(Socket::shutdown_both, ignored);
      ex.cancel_io(conn->socket);
      ex.cancel_client();
    }
  };
  co_await (send_body() && receive());
  ex.unwatch_client();
  // A 101 once the streamed body had ended: the attempt loop splices it.
  if (std::exchange(ex.tunnel_pending_, false)) {
    ex.tunnel_ = std::move(conn);
    co_return result;
  }
  if (client_failed) co_return AttemptResult{Outcome::client_gone};
  if (body_ec && (result.outcome == Outcome::error || result.outcome == Outcome::timeout))
    ex.failure("sending the request body", body_ec);  // the stage for the log; the outcome stands
  // The client's body (a bad chunk, a bad trailer): not the backend's
  // fault, whether its answer had started, ended or not come (the attempt loop
  // answers 400 only if no response head went out).
  if (is_parse_error(body_ec)) co_return AttemptResult{Outcome::bad_request_body};
  if (result.outcome == Outcome::done) {
    result.keep_alive = result.keep_alive && ex.body_done();
    if (conn->socket.is_open() && reusable_after(response) && !body_ec &&
        conn->buffer.size() == 0 && idle_list.size() < pool.keepalive)
      park(ex.w, idle_list, std::move(conn), pool.keepalive_timeout);
  }
  co_return result;
}

}  // namespace

Task<AttemptResult> attempt(Exchange& ex, const SiteRoute& route, WorkerSite& site,
                            const upstream::PoolSnapshot& snapshot, uint32_t backend, const balance::TriedSet& tried,
                            bool last_chance, bool upgrade) {
  const config::ProxyConfig& pool = route.site.proxy;
  ex.ignore_client_abort_ = pool.ignore_client_abort;
  // `backend` indexes this request's snapshot; the site's endpoints may follow
  // another request's since (a change published while this one read its body).
  ex.w.prepare_site(site, snapshot);
  IdleList& idle_list = *site.idle[backend];
  const tcp::endpoint endpoint = site.endpoints[backend];  // a copy: others may re-prepare the site meanwhile
  // A stale pooled connection may have taken the request before it closed:
  // replayed only if it may run twice (nginx, RFC 9112 9.3.1.1: a
  // non-idempotent request is not retried once sent, unless next_upstream
  // says non_idempotent).
  const bool replayable =
      ex.body_done() && (idempotent(ex.request().method()) || pool.next_upstream.non_idempotent);
  for (int fresh = 0; fresh < 2; ++fresh) {
    if (ex.client_closed_) co_return AttemptResult{Outcome::client_gone};  // found while a stale connection failed
    std::unique_ptr<UpstreamConnection> conn;
    if (fresh == 0) conn = take_idle_connection(ex.w, idle_list);
    const bool reused = conn != nullptr;
    if (!conn) {
      if (fresh == 0) fresh = 1;  // a new connection: no second fresh try
      conn = std::make_unique<UpstreamConnection>(ex.w.io, ex.w.blocks);
      error_code open_ec;
      conn->socket.open(endpoint.protocol(), open_ec);
      // Out of descriptors while idle connections hold some: one of them goes instead.
      while (open_ec && out_of_descriptors(open_ec) && close_oldest_idle_connection(ex.w)) {
        open_ec.clear();
        conn->socket.open(endpoint.protocol(), open_ec);
      }
      // Non-blocking for send_now() and read_response_head()'s read. Set before the
      // connect, which then needs no ioctl of its own (after it, a second).
      if (!open_ec) conn->socket.non_blocking(true, open_ec);
      if (open_ec) {
        ex.failure_stage_ = "opening a socket";
        ex.failure_ec_ = open_ec;
        ex.failure_timed_out_ = false;
        co_return AttemptResult{Outcome::local_error};
      }
      ex.upstream = &conn->socket;
      ex.arm(pool.connect_timeout);
      error_code ec = start_connect(conn->socket, endpoint);
      // Refused (or unreachable): the name's other addresses, in turn,
      // within the same connect_timeout.
      const std::vector<std::string>& others = snapshot.backend(backend).other_addresses;
      for (std::size_t k = 0;; ++k) {
        if (ec == asio::error::would_block) {  // the handshake goes on
          std::tie(ec) = co_await conn->socket.async_wait(Socket::wait_write, use_task);
          if (!ec) ec = connect_error(conn->socket);
        }
        if (!ec || ex.timed_out || ex.client_closed_ || k == others.size()) break;
        error_code ignored;
        conn->socket.close(ignored);
        const tcp::endpoint next = backend_endpoint(others[k]);
        conn->socket.open(next.protocol(), open_ec);
        if (!open_ec) conn->socket.non_blocking(true, open_ec);
        if (open_ec) break;
        ec = start_connect(conn->socket, next);
      }
      if (ec) co_return ex.failure(ex.kConnecting, ec);
    }
    ex.upstream = &conn->socket;

    // Head and the buffered body in one write.
    ex.arm(pool.send_timeout);
    std::array<char, 24> size_line;
    std::array<asio::const_buffer, 4> buffers{asio::buffer(ex.up_head_.view()), asio::const_buffer{},
                                              asio::const_buffer{}, asio::const_buffer{}};
    std::size_t count = 1;
    if (!ex.body_prefix_.empty()) {
      if (ex.upstream_chunked_) buffers[count++] = asio::buffer(size_line.data(), chunk_line(size_line.data(), ex.body_prefix_.size()));
      buffers[count++] = asio::buffer(ex.body_prefix_);
      if (ex.upstream_chunked_) buffers[count++] = asio::buffer("\r\n", 2);
    }
    // One send takes a head and a small body whole. A read right after it
    // would find nothing yet, so read_response_head() waits for readability first
    // (wait_first).
    std::span<asio::const_buffer> out(buffers.data(), count);
    error_code write_ec = send_now(conn->socket, out);
    const bool sent_now = !write_ec && out.empty();
    if (!write_ec && !sent_now) {
      set_nodelay_once(conn->socket, conn->nodelay);  // the rest is a second write
      std::tie(write_ec, std::ignore) = co_await asio::async_write(conn->socket, out, use_task);
    }
    if (write_ec) {
      if (reused && replayable && !ex.timed_out) continue;  // stale pooled connection: once more, fresh
      co_return ex.failure("sending the request", write_ec);
    }

    // A member, not a local: a coroutine frame holding a parser is too big
    // for Asio's per-thread frame recycling and would cost a malloc per attempt.
    ResponseParser& response = ex.response_.emplace(ex.arena_);
    prepare_response(response, ex.request().method() == http::verb::head);

    // Stream the rest of the body while the response may already be coming
    // (an echoing backend answers as it reads). Its own coroutine: its
    // lambdas and awaiters would make this frame too big for Asio to recycle.
    if (!ex.body_done()) co_return co_await attempt_streaming_body(ex, conn, response, pool, upgrade, idle_list);

    // Response head (1xx other than 101 are skipped).
    ex.arm(pool.read_timeout);
    bool received = false;
    ReadyWatch* wait_in = sent_now ? &ex.w.ready_watch : nullptr;  // the first head only
    ex.watch_client_from(coarse_now());
    // The sweep watches for a hung backend meanwhile (exchange.h); it may
    // end the wait when the loop would try another backend after a timeout.
    ex.wait_for_head(snapshot, backend, replayable && !last_chance && pool.next_upstream.timeout, coarse_now());
    for (;;) {
      error_code ec = co_await read_response_head(*conn, response, received, std::exchange(wait_in, nullptr));
      if (ec) {
        ex.unwatch_client();
        ex.head_wait_over();
        if (ex.head_abandoned_) co_return ex.failure("waiting for the response head (hung or out of service)", ec);
        if (reused && !received && replayable && !ex.timed_out &&
            (ec == asio::error::eof || ec == asio::error::connection_reset))
          break;  // stale pooled connection
        co_return ex.failure("reading the response head", ec);
      }
      if (is_interim(response)) {
        ex.unwatch_client();  // no check during the relay's write
        ex.head_retryable_ = false;  // once relayed, no other backend may answer
        if (!co_await relay_interim(ex, response, pool))
          co_return AttemptResult{Outcome::client_gone};
        ex.arm(pool.read_timeout);  // the timeout runs between reads: an interim response is one
        ex.watch_client_from(coarse_now());
        continue;
      }
      break;
    }
    ex.unwatch_client();
    ex.head_wait_over();
    if (!response.is_header_done()) continue;  // retry on a fresh connection
    if (error_code bad = unusable_head(response, upgrade)) co_return ex.failure("reading the response head", bad);
    const unsigned status = response.status();
    const config::NextUpstream& next = pool.next_upstream;
    const bool failure_status = (status == 500 && next.http_500) || (status == 502 && next.http_502) ||
                                (status == 503 && next.http_503) || (status == 504 && next.http_504);
    // A listed status goes to the next backend only if there is one to try
    // (down, drained, out members are not): else the client gets this answer, body and all.
    if (failure_status && !last_chance && !ex.interim_relayed_ && untried_available(snapshot, tried))
      co_return AttemptResult{Outcome::bad_status, status};
    AttemptResult result = co_await relay_response(ex, *conn, response, pool, upgrade);
    if (std::exchange(ex.tunnel_pending_, false)) ex.tunnel_ = std::move(conn);
    else if (result.outcome == Outcome::done && conn->socket.is_open() && reusable_after(response) &&
             conn->buffer.size() == 0 && status != 101 && idle_list.size() < pool.keepalive)
      park(ex.w, idle_list, std::move(conn), pool.keepalive_timeout);
    result.failed = result.outcome == Outcome::done && failure_status;
    if (result.outcome == Outcome::done) result.status = status;
    co_return result;
  }
  co_return ex.failure("reading the response head", asio::error::eof);  // closed on a fresh connection too
}

}  // namespace heft::proxy
