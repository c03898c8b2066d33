// One attempt on one backend: a pooled connection (or a new one, trying the
// name's other addresses when one refuses), the request head and buffered
// body in one write, the rest of a streamed body relayed while the response
// may already be coming, the response head (interim responses relayed),
// then the response relay. A stale pooled connection that fails before any
// answer is replaced by a fresh one once, when the request may run twice.
#pragma once

#include <cstdint>

#include <boost/beast/http/verb.hpp>

#include "heft/balance/balancer.h"
#include "proxy/exchange.h"

namespace heft::upstream {
class PoolSnapshot;
}

namespace heft::proxy {

struct WorkerSite;

// Whether a request may run twice (RFC 9110 9.2.2: not POST, PATCH, LOCK, CONNECT).
inline bool idempotent(boost::beast::http::verb method) {
  using boost::beast::http::verb;
  switch (method) {
    case verb::post:
    case verb::patch:
    case verb::lock:
    case verb::connect: return false;
    default: return true;
  }
}

// One attempt of ex's request on `backend` of `snapshot` (route's pool).
// `last_chance`: no other backend will be tried, so a status next_upstream
// lists is relayed, not retried. `upgrade`: the client asked to switch protocols.
Task<AttemptResult> attempt(Exchange& ex, const SiteRoute& route, WorkerSite& site,
                            const upstream::PoolSnapshot& snapshot, uint32_t backend, const balance::TriedSet& tried,
                            bool last_chance, bool upgrade);

}  // namespace heft::proxy
