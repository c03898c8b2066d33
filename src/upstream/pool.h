// A pool of backends at run time: the balancer snapshot plus the state that
// the data plane feeds back (passive failures, active health, counters).
//
// Snapshots: a Pool publishes an immutable PoolSnapshot; workers read it
// without locks (snapshot() only compares a version number in the steady
// state) and keep a shared_ptr to it for the life of a request, so the backend
// a request is using stays valid across a reload. update() builds the next
// snapshot from the old one: backends with the same name keep their live state
// (active counts, failure counts, health, smooth-WRR current weights).
//
// Time: nothing here reads a clock. Callers pass `now` (steady time), so the
// simulator can drive the same code on virtual time.
//
// Failure semantics (max_fails / fail_timeout, a sliding window): the backend
// is out for fail_timeout as soon as max_fails failed attempts fall within the
// last fail_timeout (nginx's own count only restarts after a success, so
// spaced-out failures add up there; here a failure older than fail_timeout no
// longer counts). When the out period has passed, the backend is available
// again on trial, to the first pick or tick() that sees the time: the pick
// that chooses it sends it one request and holds it out meanwhile (as nginx
// does; unless no other backend is available), a failure puts it out again
// at once, a success clears its failures and ends the hold; a trial with no
// outcome within fail_timeout is tried again. A pool with a
// single backend never takes it out and its failures change nothing but
// failures_total (nginx: a lone peer is never unavailable; its effective
// weight would only mislead). max_fails 0 disables the accounting. A
// backend out when update() makes it the only one, or its max_fails 0, is
// back at once (a returning backend: slow start from the next tick).
//
// Dynamic weights (slow start, adaptive; rules in upstream/weights.h): each
// backend's factor lives in its BackendState; a snapshot balances by the
// factors in force when it was built. Pool::tick(now), called periodically
// from one thread, advances ramps and adaptive evaluations and publishes a new
// snapshot only when some balance weight changed. The data plane feeds
// adaptive weights with PoolSnapshot::record_response (lock-free).
// Contract: with slow_start set, a backend that an active check brings back
// (set_healthy(i, true, now), clear_passive) becomes available in the snapshot
// the next tick() publishes, already at the ramp's floor; so a Pool with
// slow start must be ticked (the proxy does every 250 ms). One whose passive
// out period has passed is available at once instead (its trial must not wait
// for a tick: with every backend out, the pool would answer 503 meanwhile), its
// ramp starting then; until that tick it is balanced by its old factor, damped
// by the effective-weight dip of its failures (weighted_round_robin, least_conn).
// Every Pool should be ticked: tick() also ends passed out periods, so that
// an idle pool does not report a backend out for good.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "heft/balance/balancer.h"
#include "upstream/latency.h"
#include "upstream/place_queue.h"
#include "upstream/weights.h"

namespace heft::upstream {

using TimePoint = std::chrono::steady_clock::time_point;
using std::chrono::milliseconds;

// A backend of a running pool: what the balancer knows of it (its name, the
// dial address as configured, e.g. "app-1:3000"; weight, backup, down,
// max_fails, max_conns: the configuration's own values, handed down whole)
// and what the pool adds.
struct BackendConfig : balance::BackendSpec {
  std::string address;  // where to connect ("10.0.0.5:3000"); may equal name
  // The name's further addresses, in resolver order: tried in turn when a
  // connection to `address` fails at once (localhost as ::1 and 127.0.0.1,
  // with the backend listening on one of them; Caddy's dialer does the same).
  std::vector<std::string> other_addresses;
  milliseconds fail_timeout{10000};
  milliseconds slow_start{0};  // 0 = no slow start
};

// What a Pool is built from. The configuration's reverse_proxy
// (config::ProxyConfig) holds the same policy, BackendSpecs and
// AdaptiveOptions, which proxy::make_pool_config() hands over whole.
struct PoolConfig {
  std::string name;  // for logs and metrics
  balance::PolicyOptions policy;
  std::vector<BackendConfig> backends;
  AdaptiveOptions adaptive;
  // Slots of the per-response counters (BackendState::slot): one per worker
  // thread that records responses. Fixed for a backend's life (a backend
  // carried into a new snapshot keeps the slots it was created with).
  unsigned counter_slots = 1;
};

// The counters every response writes (record_response), one slot per worker.
// A slot is a cache line of its own that one worker writes: two workers
// writing one shared counter would pass its cache line back and forth on
// every response. Readers add the slots up (BackendState's totals).
struct alignas(64) ResponseCounters {
  std::atomic<uint64_t> requests{0};  // attempts sent to the backend
  std::atomic<uint64_t> responses{0};
  std::atomic<uint64_t> responses_5xx{0};
  // Response times (kLatencyBucketsMs, not cumulative; the last bucket is +Inf).
  std::atomic<uint64_t> latency_buckets[kLatencyBuckets] = {};
  // Adaptive accumulators for the current interval (drained by Pool::tick).
  std::atomic<uint64_t> interval_count{0};
  std::atomic<uint64_t> interval_errors{0};
  std::atomic<uint64_t> interval_latency_us{0};
};

// The times of a backend's recent failed attempts, oldest first: those within
// fail_timeout of the latest, at most max_fails of them (the window max_fails
// is judged on). Memory grows with the failures actually in the window, not
// with max_fails (which may be up to 1000000).
class RecentFailures {
 public:
  // Records a failure at `now` and returns how many fall within `window`
  // before it (inclusive), counting at most `limit` (>= 1).
  uint32_t add(TimePoint now, milliseconds window, uint32_t limit);
  // How many of those are still within `window` of `now` (for display: the
  // count falls to 0 once the window has passed the latest failure).
  uint32_t count(TimePoint now, milliseconds window) const;
  void clear() {
    times_.clear();
    first_ = 0;
  }

 private:
  std::vector<TimePoint> times_;  // [first_, end) are in the window
  size_t first_ = 0;
};

// Run-time state of one backend that outlives snapshots.
struct BackendState {
  explicit BackendState(unsigned counter_slots = 1)
      : slots(std::max(1u, counter_slots)), counters(std::make_unique<ResponseCounters[]>(slots)) {}

  // The counter slot of worker `worker`.
  ResponseCounters& slot(unsigned worker) const { return counters[worker < slots ? worker : worker % slots]; }
  // A counter's total over the slots; `counter` picks it from a slot.
  template <class Pick>
  uint64_t total(Pick counter) const {
    uint64_t sum = 0;
    for (unsigned k = 0; k < slots; ++k) sum += counter(counters[k]).load(std::memory_order_relaxed);
    return sum;
  }
  uint64_t requests_total() const { return total([](auto& c) -> auto& { return c.requests; }); }
  uint64_t responses_total() const { return total([](auto& c) -> auto& { return c.responses; }); }
  uint64_t responses_5xx_total() const { return total([](auto& c) -> auto& { return c.responses_5xx; }); }
  uint64_t latency_bucket(size_t bucket) const {
    return total([bucket](auto& c) -> auto& { return c.latency_buckets[bucket]; });
  }
  // The current adaptive interval's totals, taken (the slots are left at zero).
  struct IntervalSums {
    uint64_t count = 0, errors = 0, latency_us = 0;
  };
  IntervalSums drain_interval() {
    IntervalSums sums;
    for (unsigned k = 0; k < slots; ++k) {
      sums.count += counters[k].interval_count.exchange(0, std::memory_order_relaxed);
      sums.errors += counters[k].interval_errors.exchange(0, std::memory_order_relaxed);
      sums.latency_us += counters[k].interval_latency_us.exchange(0, std::memory_order_relaxed);
    }
    return sums;
  }

  // Passive failure accounting, guarded by mu.
  std::mutex mu;
  RecentFailures recent_failures;
  TimePoint out_since{};  // when it was taken out: the period is fail_timeout (as configured now) from then
  TimePoint out_until{};
  bool out = false;        // taken out by passive failures
  // Back after fail_timeout, on trial. Written under mu; atomic so that
  // report_success(), called for every response, can skip the lock (shared
  // by all workers) when no trial is running.
  std::atomic<bool> trial{false};
  // Active health (set by health checks; true when none run).
  std::atomic<bool> healthy{true};
  // A rebuild dropped the backend from the pool. Snapshots that still list it
  // (requests in flight) then leave the policy's availability flag alone: a
  // backend added back under its name shares that flag (its in-flight count
  // is carried, Balancer) with a state of its own, which decides it.
  std::atomic<bool> removed{false};
  // Counters for /metrics and /reverse_proxy/upstreams (the per-response
  // ones are in `counters`).
  std::atomic<uint64_t> failures_total{0};
  std::atomic<uint64_t> health_changes_total{0};
  const unsigned slots;
  const std::unique_ptr<ResponseCounters[]> counters;
  // The weight factor in force (slow start x adaptive), read by snapshots.
  std::atomic<double> factor{1.0};
  // Set when the backend comes back into service; Pool::tick starts its ramp
  // at returned_at (steady ticks; 0 = at the tick itself).
  std::atomic<bool> returned{false};
  std::atomic<int64_t> returned_at{0};
  // Owned by Pool::tick (under its lock).
  bool ramping = false;
  TimePoint ramp_start{};
  double ramp = 1.0;
  double adaptive = 1.0;
  double ewma_latency_ms = -1;  // < 0: no history
  double baseline_latency_ms = -1;  // its own recent latency (a slow EWMA; weights.h); < 0: none yet
  bool above_baseline = false;      // the last judgement found it above its baseline limit
  double ewma_error = -1;
  unsigned recover_hold = 1, clean_intervals = 0, full_intervals = 0;
  // Intervals with too few responses to fold, carried into the next.
  IntervalSums carried{};
  unsigned carried_intervals = 0;
  bool last_up = false;
  RecentLatency recent_latency;  // for the stall limit
  // The stall limit in force (latency.h; 0: none), set by Pool::tick and
  // read by the workers' sweeps; stalls_total counts the requests that
  // waited past it.
  std::atomic<int64_t> stall_limit_ms{0};
  std::atomic<uint64_t> stalls_total{0};
};

class PoolSnapshot {
 public:
  PoolSnapshot(const PoolConfig& config, const PoolSnapshot* previous);

  const PoolConfig& config() const { return config_; }
  size_t size() const { return config_.backends.size(); }
  const BackendConfig& backend(uint32_t i) const { return config_.backends[i]; }
  balance::Balancer& balancer() const { return *balancer_; }
  BackendState& state(uint32_t i) const { return *states_[i]; }
  balance::BackendLive& live(uint32_t i) const { return balancer_->live(i); }
  // Requests waiting for a place while every backend is full (max_conns);
  // one queue for the pool, carried from snapshot to snapshot.
  const std::shared_ptr<PlaceQueue>& places() const { return places_; }
  uint64_t version() const { return version_; }

  // Chooses a backend for one attempt, first returning backends whose
  // fail_timeout has passed (as of `now`) to service on trial: such a backend
  // may be the one this pick chooses, slow start or not.
  std::optional<uint32_t> pick(const balance::PickContext& ctx, TimePoint now) const;
  // pick() that also counts the request on the chosen backend, passing over
  // backends at their max_conns (Balancer::acquire; `full` as there). The
  // request ends with balancer().end_request(). Inline: every request of the
  // proxy and the simulator takes this path.
  std::optional<uint32_t> acquire(const balance::PickContext& ctx, TimePoint now, bool* full) const {
    if (now.time_since_epoch().count() >= next_return_.load(std::memory_order_relaxed)) [[unlikely]]
      return_expired(now);
    const std::optional<uint32_t> chosen = balancer_->acquire(ctx, full);
    if (chosen && states_[*chosen]->trial.load(std::memory_order_relaxed)) [[unlikely]]
      hold_trial(*chosen, now);
    return chosen;
  }
  // Returns backends whose out period has passed (as of `now`) to service on
  // trial, scanning them all (pick() calls it only when next_return_ says one
  // may be due; Pool::tick() always).
  void return_expired(TimePoint now) const;
  // The pick of backend i found it on trial: holds it out while that trial
  // runs (see pool.cc).
  void hold_trial(uint32_t i, TimePoint now) const;
  // Tells this snapshot's policy of availability changed through an older
  // snapshot (Balancer::sync_availability; Pool::tick() calls it); wakes the
  // queue when a backend became available that way.
  void sync_availability() const {
    if (balancer_->sync_availability()) places_->wake_all();
  }
  // Backend i just became available: wakes as many waiting requests as it
  // has free places (all of them when it has no max_conns), as HAProxy's
  // queue hands a server that comes up its share at once instead of waiting
  // for the next request to end.
  void wake_for_return(uint32_t i) const;

  // Outcome of an attempt (per next_upstream: errors, timeouts, listed statuses).
  void report_failure(uint32_t i, TimePoint now) const;
  // Backend i's failed attempts within its fail_timeout before `now`, at
  // most max_fails (the upstreams view's `fails`, as Caddy's counts down).
  uint32_t recent_fails(uint32_t i, TimePoint now) const;
  void report_success(uint32_t i) const {
    if (states_[i]->trial.load(std::memory_order_relaxed)) [[unlikely]]
      settle_trial(i);  // (the usual case: no trial to settle, and no lock)
  }

  // Active health check result.
  void set_healthy(uint32_t i, bool healthy) const;
  // The same at `now`: a backend that becomes healthy again starts its slow start then.
  void set_healthy(uint32_t i, bool healthy, TimePoint now) const;
  // A passing active check: a backend out by passive failures comes back at
  // once (the active check brings it back), one on trial is settled as by a
  // success. True if it was out.
  bool clear_passive(uint32_t i, TimePoint now) const;
  bool passive_out(uint32_t i) const;

  // An attempt sent to backend i by worker `worker` (requests_total). Lock-free.
  void count_request(uint32_t i, unsigned worker = 0) const {
    states_[i]->slot(worker).requests.fetch_add(1, std::memory_order_relaxed);
  }
  // Takes back count_request() for an attempt that never reached the backend
  // (heft could not open a socket for it).
  void uncount_request(uint32_t i, unsigned worker = 0) const {
    states_[i]->slot(worker).requests.fetch_sub(1, std::memory_order_relaxed);
  }
  // One response from backend i (or a failed attempt: status 502/504), for
  // adaptive weights and the per-backend counters, recorded in the slot of
  // `worker`. `ok` = not an error by the pool's rules (a 5xx or a transport
  // failure is an error). Lock-free.
  void record_response(uint32_t i, std::chrono::nanoseconds duration, int status, bool ok,
                       unsigned worker = 0) const;

  // The weight factor (slow start x adaptive) this snapshot balances backend i by.
  double factor(uint32_t i) const { return factors_[i]; }
  // The effective weight in configured units (the policy's, scaled back), for display.
  double display_effective_weight(uint32_t i) const;

  // True when the backend may receive requests (not out, healthy, not down, weight > 0).
  bool available(uint32_t i) const;
  // True when neither passive failures nor active checks keep the backend out,
  // whatever its weight: a drained (weight 0) or `down` backend can be healthy.
  bool healthy(uint32_t i) const;
  // Why the backend does or does not take requests, nginx Plus's "state":
  // "down" (configured), "drained" (weight 0), "out" (passive failures),
  // "unhealthy" (active checks) or "up".
  const char* state_name(uint32_t i) const;

 private:
  // Tells the policy whether backend i is available now; `wake`: and wakes
  // the queue if it became so (not while a snapshot is built: see pool.cc).
  void refresh_availability(uint32_t i, bool wake = true) const;
  // report_success() of a backend on trial: the trial succeeded.
  void settle_trial(uint32_t i) const;
  // Backend i was just taken out (under its lock) until `until`: the next
  // return is due by then, and the policy stops picking it.
  void announce_out(uint32_t i, TimePoint until) const;

  PoolConfig config_;
  std::unique_ptr<balance::Balancer> balancer_;
  std::vector<std::shared_ptr<BackendState>> states_;
  std::shared_ptr<PlaceQueue> places_;
  std::vector<double> factors_;
  uint64_t version_ = 0;
  // Earliest out_until among backends that are out (ns since epoch); INT64_MAX if none.
  mutable std::atomic<int64_t> next_return_{INT64_MAX};
  mutable std::mutex return_mu_;
};

class Pool {
 public:
  explicit Pool(const PoolConfig& config);

  // The current snapshot (takes a short lock; workers use CachedSnapshot).
  std::shared_ptr<const PoolSnapshot> snapshot() const;
  // Changes whenever a new snapshot is published.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  // Builds and publishes the next snapshot, carrying state over. Backends
  // added to the pool start a slow start (when configured).
  void update(const PoolConfig& config);

  // Returns backends whose out period has passed, advances slow-start ramps
  // and, every adaptive interval, the adaptive factors, as of `now`; publishes
  // a new snapshot when a balance weight changed. Returns the decisions made
  // (for the log). Call from one thread, a few times a second (e.g. every 250 ms).
  std::vector<WeightEvent> tick(TimePoint now);

  // Decisions made so far, by reason (for metrics).
  uint64_t decisions(WeightReason reason) const {
    return decisions_[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }

 private:
  // Publishes a new snapshot of the current configuration; returns the
  // snapshot it replaced and the new one.
  std::pair<std::shared_ptr<const PoolSnapshot>, std::shared_ptr<const PoolSnapshot>> republish();

  mutable std::mutex mu_;  // guards current_
  std::shared_ptr<const PoolSnapshot> current_;
  std::atomic<uint64_t> version_{0};
  std::mutex tick_mu_;  // one tick at a time; guards the fields below and BackendState's tick-owned fields
  std::optional<TimePoint> next_evaluation_;
  milliseconds evaluation_interval_{0};  // the adaptive interval next_evaluation_ was set with
  std::atomic<uint64_t> decisions_[kWeightReasons] = {};
};

// A worker thread's view of a pool: one atomic load per use in the steady
// state; the lock is taken only when a new snapshot was published.
// The pointer get() returns shares ownership through a holder of this cache's
// own (std::shared_ptr's aliasing constructor), so the copies a worker's
// requests take count references on a control block only that worker touches,
// not on the snapshot's, which every worker would pass back and forth.
// Copies must stay on the cache's thread.
class CachedSnapshot {
 public:
  explicit CachedSnapshot(const Pool& pool) : pool_(&pool) {}
  const std::shared_ptr<const PoolSnapshot>& get() {
    uint64_t v = pool_->version();
    if (!snapshot_ || v != version_) {
      auto holder = std::make_shared<const std::shared_ptr<const PoolSnapshot>>(pool_->snapshot());
      snapshot_ = std::shared_ptr<const PoolSnapshot>(holder, holder->get());
      version_ = snapshot_->version();
    }
    return snapshot_;
  }

 private:
  const Pool* pool_;
  uint64_t version_ = 0;
  std::shared_ptr<const PoolSnapshot> snapshot_;
};

}  // namespace heft::upstream
