// Active health checks and the dynamic-weight ticker, off the request path.
//
// A HealthChecker owns one thread with its own event loop. For every pool
// whose configuration sets `health_uri`, each backend is probed once per
// `health_interval`, spread over the interval (backend k of n starts at
// k/n x interval when it is first checked; a reload does not restart it,
// see set_pools()): GET health_uri on the backend's address (or health_port),
// with health_headers, within health_timeout. A probe passes when the status
// matches health_status (default any 2xx; "200", "2xx", "200-299") and, if
// health_body is set, the body matches that ECMAScript regular expression.
// health_passes consecutive passes make an unhealthy backend healthy again,
// health_fails consecutive failures make a healthy one unhealthy (defaults 1
// and 1). A passing probe also ends a passive 'out' state (the active check
// brings a backend back). Transitions are audited (observe/audit.h) and counted
// (BackendState::health_changes_total, and heft_upstream_health_changes_total,
// which a reload never resets).
//
// With `tick_pools`, every 250 ms the same thread also calls Pool::tick(now)
// on every pool (slow start, adaptive weights, passed out periods) and audits and counts the
// decisions; off when the proxy ticks its pools itself.
//
// Thread safety: the constructor, set_pools() and stop() are for one
// controlling thread; the log sink is called from the checker's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model.h"
#include "upstream/pool.h"

namespace heft::health {

// True if `status` matches `pattern`: "" (any 2xx), "200", "2xx" or "200-299".
bool status_matches(std::string_view pattern, int status);

// Consecutive-result hysteresis for one backend (pure).
struct HealthCounter {
  uint32_t passes = 0;  // consecutive passes so far
  uint32_t fails = 0;   // consecutive failures so far
  // Records one probe; returns the new health if it should change, given the
  // current health and the thresholds.
  std::optional<bool> record(bool pass, bool healthy, uint32_t need_passes, uint32_t need_fails);
};

struct PoolTarget {
  std::string label;  // for logs, e.g. "site0"
  std::shared_ptr<upstream::Pool> pool;
  config::PoolConfig config;  // health_* options
  // The pool's labels in /metrics (observe/metrics.h), where its health
  // changes and weight decisions are counted.
  std::string server;
  std::string site;
};

class HealthChecker {
 public:
  using LogSink = std::function<void(const std::string& line)>;
  static constexpr std::chrono::milliseconds kTickInterval{250};

  // Starts the thread. Every event is an audit entry, which writes heft's log
  // line; `log`, if given, also receives its text.
  explicit HealthChecker(LogSink log = nullptr, bool tick_pools = false);
  ~HealthChecker();  // stop()
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // The pools to check and tick (at start and after every reload). A backend
  // that stays (same pool object, same name) with the same probe settings
  // (address, health_* options) keeps its probe schedule and consecutive
  // counts, and a probe of it in flight still counts; a new backend, or one
  // whose settings changed, starts afresh (k/n x interval from now, no counts).
  void set_pools(std::vector<PoolTarget> pools);

  // Stops probing and ticking and joins the thread.
  void stop();

  // Probes done so far, passed and failed.
  uint64_t checks_passed() const;
  uint64_t checks_failed() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace heft::health
