// The attempt loop: serves one request of an Exchange — plans it, refuses
// what cannot be served, buffers the start of its body (so a small body can
// be retried), then picks a backend, waits for a place in the pool's queue
// when every backend is at its max_conns, makes an attempt, and retries on
// another backend by nginx's proxy_next_upstream rules. Each attempt leaves
// one record, which feeds the pool's counters and passive-failure
// accounting, the metrics and the access log alike.
#pragma once

#include <cstdint>

#include "proxy/exchange.h"

namespace heft::upstream {
class PoolSnapshot;
}

namespace heft::proxy {

// Serves the exchange's current request up to the end of its response (or
// the refusal it noted: ex.refusal_, which the client connection sends).
// True when the client connection may carry another request.
Task<bool> serve(Exchange& ex);

// Records the exchange's current request, however it ended (metrics, access
// log): with the status whose head was sent, else 499 (nothing was: the
// client went away first, or the stop's grace period ended). Once per request.
void finish_request(Exchange& ex);

// The site a request refused before routing is counted and logged under:
// the port's site for any host or its default, else its first (nginx logs
// such requests in the default server's log).
const SiteRoute* port_site(const WorkerRoutes& routes, uint16_t local_port);

// One attempt's record: the pool learns the backend's latency (to its
// response head) and status for adaptive weights and its counters, and the
// outcome for passive failures (max_fails); the metrics and the access log
// learn the same attempt.
void record_attempt(Exchange& ex, const SiteRoute& route, const upstream::PoolSnapshot& snapshot, uint32_t backend,
                    const AttemptResult& result, Clock::time_point start, Clock::time_point end);

}  // namespace heft::proxy
