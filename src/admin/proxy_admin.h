// The admin API wired to a running Proxy: what `heft run` starts beside the
// data plane. Builds AdminHooks over the proxy's public interface only:
//   apply      → config::resolve + Proxy::reload (counted in heft_config_reloads_total)
//   upstreams  → per-backend state from the pools (Caddy's fields + heft's)
//   metrics    → observe::render_metrics with the pools' gauges
//   stop       → Proxy::shutdown(grace_period)
//   tick       → samples request counters each second for `share` (last minute)
//
// Threads: start() and the destructor are for the controlling thread; the
// hooks run on the admin thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "admin/admin_server.h"
#include "observe/metrics.h"

namespace heft::proxy {
class Proxy;
}
namespace heft::upstream {
struct BackendState;
class PoolSnapshot;
}  // namespace heft::upstream

namespace heft::admin {

// Per-backend request counts over the last minute, sampled once a second.
// The samples of a backend are those of its counters: its BackendState,
// which a pool keeps while the backend stays (a reload that moves its site
// to another index included) and starts afresh, at 0, when the backend is
// added again or its site gets a new pool. A backend state new since the
// last sample has all of its requests in the window.
class ShareTracker {
 public:
  // Records the counters now (call about once a second).
  void sample(proxy::Proxy& proxy);
  // Requests to the backend with counters `state` in the last minute (since
  // the oldest kept sample); `total_now` is its counter now.
  uint64_t recent(const upstream::BackendState& state, uint64_t total_now) const;

 private:
  static constexpr size_t kSamples = 61;  // one a second: a minute of deltas
  struct Ring {
    uint64_t values[kSamples] = {};
    size_t next = 0, filled = 0;
  };
  // By the counters' address. The snapshots sampled last keep those states
  // alive, so no other state can take an address here until the next sample
  // drops the rings of states gone by then.
  std::unordered_map<const upstream::BackendState*, Ring> rings_;
  std::vector<std::shared_ptr<const upstream::PoolSnapshot>> sampled_;
};

// GET /reverse_proxy/upstreams: one object per backend of every site.
nlohmann::json upstreams_json(proxy::Proxy& proxy, const ShareTracker& shares);
// The pools' gauges for /metrics.
std::vector<observe::UpstreamGauge> upstream_gauges(proxy::Proxy& proxy, const config::Config& running);
// The queues' gauges for /metrics: pools that have a `queue`.
std::vector<observe::QueueGauge> queue_gauges(proxy::Proxy& proxy, const config::Config& running);

class ProxyAdmin {
 public:
  // Starts the admin API for `proxy` (its running config says where), or
  // returns null when the config disables it. `state_path` empty = no
  // autosave. `instance` is what GET /heft/instance answers. Throws
  // std::runtime_error if it cannot listen.
  static std::unique_ptr<ProxyAdmin> start(proxy::Proxy& proxy, std::string state_path,
                                           nlohmann::json instance = nlohmann::json::object());
  // start() without serving yet: bound (or thrown), requests wait until serve().
  static std::unique_ptr<ProxyAdmin> listen(proxy::Proxy& proxy, std::string state_path,
                                            nlohmann::json instance = nlohmann::json::object());
  void serve() { server_->serve(); }
  ~ProxyAdmin();
  uint16_t port() const { return server_->port(); }
  // Puts `next` in service through the admin transaction (validate, apply,
  // autosave), so the API's tree follows SIGHUP reloads; `source` names it
  // in the warnings of what it undoes and in the audit trail. False + `error` if refused.
  bool load(const config::Config& next, std::string& error, const std::string& source) {
    return server_->load(next, error, source);
  }

 private:
  ProxyAdmin() = default;
  ShareTracker shares_;
  std::unique_ptr<AdminServer> server_;
};

}  // namespace heft::admin
