// The attempt loop (see attempt_loop.h).
#include "proxy/attempt_loop.h"

#include <algorithm>
#include <limits>

#include <boost/asio/post.hpp>

#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/attempt.h"
#include "proxy/request_plan.h"
#include "proxy/runtime.h"

namespace heft::proxy {
using namespace std::string_view_literals;
namespace {

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

// HTTP/1.1 to the access log for any 1.x above 1.0 (served as 1.1), else by major.
const char* protocol_name(unsigned version) {
  if (version >= 20) return "HTTP/2.0";
  return version >= 11 ? "HTTP/1.1" : "HTTP/1.0";
}

}  // namespace

void record_attempt(Exchange& ex, const SiteRoute& route, const upstream::PoolSnapshot& snapshot, uint32_t i,
                    const AttemptResult& result, Clock::time_point start, Clock::time_point end) {
  // The backend's latency: to its response head (none: the whole attempt).
  const bool got_head = ex.response_head_at_ != Clock::time_point{};
  const auto to_head = (got_head ? ex.response_head_at_ : end) - start;
  const bool reached_backend = result.outcome != Outcome::client_gone &&
                               result.outcome != Outcome::bad_request_body && result.outcome != Outcome::local_error;
  if (reached_backend) {
    // Per-backend counters and adaptive weights: status as the client would see it.
    const int status = result.outcome == Outcome::timeout ? 504
                       : result.outcome == Outcome::error ? 502
                       : result.outcome == Outcome::bad_status || result.outcome == Outcome::broken
                           ? static_cast<int>(result.status)
                           : static_cast<int>(result.status ? result.status : 200);
    const bool ok = result.outcome == Outcome::done && !result.failed;
    snapshot.record_response(i, to_head, status, ok, ex.w.index);
  }
  // Passive failures (max_fails / fail_timeout).
  switch (result.outcome) {
    case Outcome::done:
      if (result.failed) snapshot.report_failure(i, end);
      else snapshot.report_success(i);
      break;
    case Outcome::broken:
      // Not a failure of the backend, which answered (nginx finalizes such
      // a request without NGX_PEER_FAILED, and its peer counts as working).
      snapshot.report_success(i);
      break;
    case Outcome::bad_status:
    case Outcome::error: snapshot.report_failure(i, end); break;
    case Outcome::timeout:
      if (!ex.stall_counted_) snapshot.report_failure(i, end);  // counted once, when it stalled
      break;
    case Outcome::local_error:
      snapshot.uncount_request(i, ex.w.index);  // nothing reached the backend
      break;
    case Outcome::client_gone:
    case Outcome::bad_request_body: break;
  }
  // Metrics and the access log: the backend's answer, or why the attempt failed.
  const double seconds = std::chrono::duration<double>(end - start).count();
  ex.record_.upstream_response_time = seconds;
  ex.record_.upstream_header_time = got_head ? std::chrono::duration<double>(to_head).count() : -1;
  const std::string& name = snapshot.backend(i).name;
  const std::string& server = route.server_label;
  const std::string& site_label = route.site_label;
  switch (result.outcome) {
    case Outcome::done:
      observe::record_upstream(ex.w.index, server, site_label, name, static_cast<int>(result.status), seconds);
      if (result.failed) observe::record_failure(ex.w.index, server, site_label, name, "status");
      ex.record_.status = result.status;
      break;
    case Outcome::bad_status:
      observe::record_upstream(ex.w.index, server, site_label, name, static_cast<int>(result.status), seconds);
      observe::record_failure(ex.w.index, server, site_label, name, "status");
      break;
    case Outcome::broken:
      // Answered (the head reached the client), then cut: both counted.
      observe::record_upstream(ex.w.index, server, site_label, name, static_cast<int>(result.status), seconds);
      observe::record_failure(ex.w.index, server, site_label, name, "broken");
      break;
    case Outcome::error: observe::record_failure(ex.w.index, server, site_label, name, "error"); break;
    case Outcome::timeout: observe::record_failure(ex.w.index, server, site_label, name, "timeout"); break;
    case Outcome::client_gone:
    case Outcome::bad_request_body:
    case Outcome::local_error: break;
  }
}

void finish_request(Exchange& ex) {
  const RequestHead* req_ptr = ex.end_request();
  const SiteRoute* route = ex.current_route_;
  if (!req_ptr || !route) return;  // recorded already, or no site on the port at all
  // nginx's 499: the connection ended before any response head went out.
  const int status = ex.record_.status ? static_cast<int>(ex.record_.status) : 499;
  const double seconds = std::chrono::duration<double>(Clock::now() - ex.request_start_).count();
  observe::record_request(ex.w.index, route->server_label, status, seconds);
  if (!route->log) return;
  const double wall_start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - seconds;
  const RequestHead& req = *req_ptr;
  route->log->write({wall_start, ex.client_ip, std::string(req.method_string()), std::string(ex.routed_host_),
                     std::string(req.target()), protocol_name(req.version()), ex.record_.upstream,
                     status, seconds, ex.record_.size, ex.record_.tries, ex.record_.queued,
                     ex.record_.upstream_header_time, ex.record_.upstream_response_time,
                     access_log_tls(ex.client_tls)});
}

const SiteRoute* port_site(const WorkerRoutes& routes, uint16_t local_port) {
  if (const SiteRoute* r = routes.table->route(local_port, "")) return r;
  auto it = routes.table->by_port.find(local_port);
  return it == routes.table->by_port.end() || it->second.empty() ? nullptr : &routes.table->sites[it->second.front()];
}

namespace {

// wait_for_place() without the record of how long it took.
Task<std::optional<uint32_t>> wait_in_queue(Exchange& ex, WorkerSite& site,
                                            std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                            const balance::PickContext& ctx, const config::ProxyConfig& pool,
                                            bool& full, Clock::time_point deadline);

// Waits in the pool's queue until a backend has room, at most the pool's
// queue_timeout; `snapshot` becomes the pool's current one. The chosen
// backend, counted as acquire() counts it; nullopt when the queue was full
// or the time ran out (`full` set), or nothing is available any more.
Task<std::optional<uint32_t>> wait_for_place(Exchange& ex, WorkerSite& site,
                                                      std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                                      const balance::PickContext& ctx, const config::ProxyConfig& pool,
                                                      bool& full) {
  const auto since = Clock::now();
  std::optional<uint32_t> pick = co_await wait_in_queue(ex, site, snapshot, ctx, pool, full, since + pool.queue_timeout);
  ex.record_.queued = std::chrono::duration<double>(Clock::now() - since).count();  // the access log's `queued`
  co_return pick;
}

Task<std::optional<uint32_t>> wait_in_queue(Exchange& ex, WorkerSite& site,
                                                     std::shared_ptr<const upstream::PoolSnapshot>& snapshot,
                                                     const balance::PickContext& ctx, const config::ProxyConfig& pool,
                                                     bool& full, Clock::time_point deadline) {
  const std::shared_ptr<upstream::PlaceQueue> places = snapshot->places();
  auto wait = std::make_shared<PlaceWait>(ex.w.io.get_executor());
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
    ex.queue_wait_ = wait.get();
    ex.ignore_client_abort_ = pool.ignore_client_abort;
    ex.watch_client_from(Clock::now());
    co_await wait->timer.async_wait(use_task);
    ex.queue_wait_ = nullptr;
    ex.unwatch_client();
    if (ex.client_closed_) {
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

}  // namespace

Task<bool> serve(Exchange& ex) {
  std::shared_ptr<WorkerRoutes> routes = ex.w.current_routes();
  const RequestHead& req = ex.request();
  RequestPlan plan = plan_request(ex, req, *routes);
  if (!plan.route && !plan.connect && !plan.bad_target && !ex.w.dropped_port_routes.empty()) {
    // The port is no longer served (a reload since this connection came):
    // the routes it came under answer, as an old nginx worker would.
    if (auto dropped = ex.w.dropped_port_routes.find(ex.local_port);
        dropped != ex.w.dropped_port_routes.end() && !routes->table->by_port.count(ex.local_port)) {
      routes = dropped->second;
      ex.port_dropped_ = true;
      plan = plan_request(ex, req, *routes);
    }
  }
  ex.config_ = &routes->table->config;
  const SiteRoute* route = plan.route;
  ex.current_routes_ = routes;  // keeps `route` alive until finish_request(ex)
  // A request refused before routing (CONNECT, a bad target, no site: 404)
  // is counted and logged under the port's site.
  ex.current_route_ = route ? route : port_site(*routes, ex.local_port);
  if (plan.connect) {
    static observe::LogLimit connects("501 for CONNECT", observe::LogLevel::info);
    if (connects.admit()) observe::info("501 from {}: CONNECT is not supported", ex.client_ip);
    ex.refuse(501, "501 CONNECT is not supported\n", false);
    co_return false;
  }
  if (plan.bad_target) {
    static observe::LogLimit bad_targets("400 from clients: bad targets or hosts", observe::LogLevel::info);
    if (bad_targets.admit()) observe::info("400 from {}: {}", ex.client_ip, plan.bad_target);
    ex.refuse(400, "400 Bad Request\n", false);
    co_return false;
  }
  // The client's protocol read its Connection semantics (HTTP/1.x: the
  // close / keep-alive tokens and the version's default).
  const bool client_keep_alive = ex.client_keep_alive(plan.keep_alive);
  if (!route) {
    // Unread body bytes would be read as the next request: close instead.
    ex.refuse(404, "404 no site for this host\n", client_keep_alive && ex.body_done());
    co_return client_keep_alive && ex.body_done();
  }
  if (plan.expectation_failed) {
    ex.refuse(417, "417 Expectation Failed\n", false);
    co_return false;
  }
  if (plan.respond) {
    // Unread body bytes would be read as the next request: close instead.
    const bool keep = client_keep_alive && ex.body_done() && !plan.respond_close;
    ex.respond(plan.respond, keep);
    co_return keep;
  }
  const config::ProxyConfig& pool = route->site.proxy;
  WorkerSite& site = routes->sites[route->index];
  // Replaced only by a wait for a place (wait_for_place()), before any attempt.
  std::shared_ptr<const upstream::PoolSnapshot> snapshot = site.cache.get();

  // Buffer the start of the body: small bodies are then complete (retryable and
  // fully validated before any byte reaches a backend).
  ex.body_prefix_.clear();
  const bool body_to_read = !ex.body_done();
  if (body_to_read) {
    if (plan.expect_continue) {
      ex.arm(ex.config_->idle_timeout);
      const bool told = co_await ex.send_continue();  // not inside the if: see relay_interim()
      if (!told) co_return false;
    }
    const std::size_t limit = std::max<std::size_t>(pool.retry_body_limit, 1);
    while (!ex.body_done() && ex.body_prefix_.size() < limit) {
      ex.arm(ex.config_->idle_timeout);
      std::size_t want = std::min(kChunk, limit - ex.body_prefix_.size());
      auto [ec, got] = co_await ex.read_body(ex.scratch(), want);
      if (ec) {
        if (is_parse_error(ec)) {
          static observe::LogLimit bad_bodies("400 from clients: bad request bodies", observe::LogLevel::info);
          if (bad_bodies.admit()) observe::info("400 from {}: bad body: {}", ex.client_ip, ec.message());
          ex.refuse(400, "400 Bad Request\n", false);
        } else if (ex.timed_out) {
          ex.refuse(408, "408 Request Timeout\n", false);
        }
        co_return false;
      }
      ex.body_prefix_.append(ex.scratch(), got);
    }
  }
  const bool body_complete = ex.body_done();
  ex.upstream_chunked_ = false;
  if (body_complete) {
    if (!ex.body_prefix_.empty() || ex.body_declared()) {
      ex.up_head_.append("Content-Length: "sv);
      ex.up_head_.number(ex.body_prefix_.size());
      ex.up_head_.append("\r\n"sv);
    }
  } else if (ex.body_unsized()) {
    ex.up_head_.append("Transfer-Encoding: chunked\r\n"sv);
    ex.upstream_chunked_ = true;
  } else {
    // The value, not the field: a list of it ("5, 5") goes on as one (RFC 9110 8.6).
    ex.up_head_.append("Content-Length: "sv);
    ex.up_head_.number(ex.body_length());
    ex.up_head_.append("\r\n"sv);
  }
  ex.up_head_.append("\r\n"sv);

  // Attempts, nginx's proxy_next_upstream way.
  balance::PickContext ctx;
  ctx.random = ex.w.next_random();
  ctx.key_hash = plan.key_hash;
  balance::TriedSet tried;
  ctx.tried = &tried;
  const config::NextUpstream& next = pool.next_upstream;
  const bool method_retryable = idempotent(req.method()) || next.non_idempotent;
  ex.interim_relayed_ = false;
  // The first attempt starts once the buffered body is in: a slow client's
  // upload is not the backend's latency (nginx's $upstream_response_time and
  // next_upstream_timeout start at the upstream too). A streamed body's
  // upload overlaps the attempt and counts.
  const auto started = body_to_read ? Clock::now() : ex.request_start_;
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
      pick = co_await wait_for_place(ex, site, snapshot, ctx, pool, full);
      if (ex.client_closed_) co_return false;  // it left while waiting: a 499 in the log
    }
    if (!pick) {
      if (tried.empty() && full && pool.queue > 0) {
        static observe::LogLimit queue_full("503: queue full or timed out", observe::LogLevel::warn);
        if (queue_full.admit())
          observe::warn("503 {} {}: no backend had room within queue_timeout, or the queue was full",
                        req.method_string(), req.target());
        ex.refuse(503, "503 every backend is at its max_conns and the queue is full or timed out\n",
               client_keep_alive && body_complete);
      } else if (tried.empty() && full) {
        // nginx answers 502 here (no live upstreams); HAProxy queues and
        // then answers 503. Every backend is busy, none failed: a 503.
        static observe::LogLimit all_full("503: every backend at its max_conns", observe::LogLevel::warn);
        if (all_full.admit())
          observe::warn("503 {} {}: every backend is at its max_conns", req.method_string(), req.target());
        ex.refuse(503, "503 every backend is at its max_conns\n", client_keep_alive && body_complete);
      } else if (tried.empty()) {
        static observe::LogLimit none_available("503: no available backend", observe::LogLevel::warn);
        if (none_available.admit())
          observe::warn("503 {} {}: no available backend", req.method_string(), req.target());
        ex.refuse(503, "503 no available backend\n", client_keep_alive && body_complete);
      } else {
        unsigned status = last_status ? last_status : 502;
        ex.refuse_status(status, client_keep_alive && body_complete);
      }
      co_return client_keep_alive && body_complete && !ex.closing();
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
    snapshot->count_request(i, ex.w.index);
    // Where the request is, for the log (a stop may cut it during the attempt).
    ex.record_.tries = tries;
    ex.record_.upstream = snapshot->backend(i).name;
    AttemptResult result;
    const auto attempt_start = now;
    ex.response_head_at_ = {};
    ex.stall_counted_ = false;
    ex.head_abandoned_ = false;
    result = co_await attempt(ex, *route, site, *snapshot, i, tried, !more_allowed, plan.upgrade);
    if (!ex.tunnel_) active.reset();
    const auto attempt_end = Clock::now();
    record_attempt(ex, *route, *snapshot, i, result, attempt_start, attempt_end);
    ex.upstream = nullptr;
    ex.head_wait_over();
    const std::string& name = snapshot->backend(i).name;
    switch (result.outcome) {
      case Outcome::done:
        if (ex.tunnel_) {
          // Counted and logged at the switch (docs/admin.md); then the tunnel.
          finish_request(ex);
          co_await ex.splice(*ex.tunnel_);
          ex.tunnel_.reset();
          co_return false;
        }
        co_return result.keep_alive && !ex.closing();
      case Outcome::client_gone: co_return false;
      case Outcome::local_error:
        // nginx answers 500 when socket() fails and does not mark the peer.
        // The connection closes: one descriptor fewer.
        static observe::LogLimit no_socket("500: no connection to a backend", observe::LogLevel::warn);
        if (no_socket.admit())
          observe::warn("500 {} {}: no connection to backend {} ({}); not counted against it", req.method_string(),
                        req.target(), name, ex.failure_reason());
        ex.refuse(500, "500 Internal Server Error\n", false);
        co_return false;
      case Outcome::bad_request_body:
        if (ex.record_.status) {
          // The response had started (an echoing backend): nothing can be
          // said inside it; the connection is cut, as for a broken response.
          static observe::LogLimit late_bad_bodies("bad request bodies during a response", observe::LogLevel::info);
          if (late_bad_bodies.admit())
            observe::info("{} from {}: bad request body during the response; connection closed", ex.record_.status,
                          ex.client_ip);
          co_return false;
        }
        static observe::LogLimit bad_bodies("400 from clients: bad request bodies", observe::LogLevel::info);
        if (bad_bodies.admit()) observe::info("400 from {}: bad request body", ex.client_ip);
        ex.refuse(400, "400 Bad Request\n", false);
        co_return false;
      case Outcome::broken:
        // The response had started: nothing to retry, the client sees a cut.
        static observe::LogLimit mid_response("backends failing mid-response", observe::LogLevel::warn);
        if (mid_response.admit())
          observe::warn("{} {}: backend {} {} mid-response ({})", req.method_string(), req.target(), name,
                        ex.failure_timed_out_ ? "timed out" : "failed", ex.failure_reason());
        co_return false;
      case Outcome::bad_status:
        last_status = result.status;
        if (in_time(attempt_end)) continue;  // attempt() forwards it itself when no retry is allowed
        // The time ran out during this attempt: its status (the response itself is spent).
        ex.refuse_status(last_status, client_keep_alive && body_complete);
        co_return client_keep_alive && body_complete && !ex.closing();
      case Outcome::error:
      case Outcome::timeout: {
        const bool timeout = result.outcome == Outcome::timeout;
        last_status = timeout ? 504 : 502;
        static observe::LogLimit attempts_failed("backend attempts failed or timed out", observe::LogLevel::warn);
        if (attempts_failed.admit())
          observe::warn("{} {}: backend {} {} ({})", req.method_string(), req.target(), name,
                        timeout ? "timed out" : "failed", ex.failure_reason());
        // A failed connect sent nothing: any method, any body (the streamed
        // rest is still unread) may go on to the next backend (nginx retries
        // a POST then too; once sent, it does not).
        const bool unsent = ex.failure_stage_ == ex.kConnecting;
        if ((more_allowed || (more_possible && unsent)) && !ex.interim_relayed_ && in_time(attempt_end) &&
            (timeout ? next.timeout : next.error))
          continue;
        ex.refuse_status(last_status, client_keep_alive && ex.body_done());
        co_return client_keep_alive && ex.body_done() && !ex.closing();
      }
    }
  }
}

}  // namespace heft::proxy
