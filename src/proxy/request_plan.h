// The request plan: what the proxy decides from a request's head before it
// waits for anything — the site that answers it (by port and Host, or an
// absolute-form target's authority), whether it is refused outright, the
// hash key for a hash policy, and the head sent to the backend (hop-by-hop
// fields dropped, forwarding fields added, the site's header_up applied).
// Whatever protocol the client speaks, the backend gets HTTP/1.1.
#pragma once

#include <cstdint>
#include <optional>

#include "proxy/exchange.h"

namespace heft::proxy {

struct RequestPlan {
  const SiteRoute* route = nullptr;  // none: 404
  // The site's routes answer it themselves (a static_response, or Caddy's
  // empty 200 when no handler answered): status, fields and body in
  // ex.own_fields_ and ex.own_body_.
  unsigned respond = 0;
  bool respond_close = false;
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

// Plans `req` on `routes` for `ex`, building ex.up_head_ (and the plan's
// other products in `ex`). A plain function, not a coroutine: its locals stay
// off the attempt loop's coroutine frame, which Asio recycles only up to
// about a kilobyte.
RequestPlan plan_request(Exchange& ex, const RequestHead& req, const WorkerRoutes& routes);

}  // namespace heft::proxy
