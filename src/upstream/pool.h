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
// Failure semantics (nginx's max_fails / fail_timeout): a failed attempt counts
// towards max_fails within a fail_timeout window; at max_fails the backend is
// out for fail_timeout, then gets one trial request: another failure puts it
// out again at once, a success clears its failures. A pool with a single
// backend never takes it out. max_fails 0 disables the accounting.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "heft/balance/balancer.h"

namespace heft::upstream {

using TimePoint = std::chrono::steady_clock::time_point;
using std::chrono::milliseconds;

struct BackendConfig {
  std::string name;     // identity: the dial address as configured ("app-1:3000")
  std::string address;  // where to connect ("10.0.0.5:3000"); may equal name
  uint32_t weight = 1;
  uint32_t max_fails = 1;
  milliseconds fail_timeout{10000};
  bool backup = false;
  bool down = false;
};

struct PoolConfig {
  std::string name;  // for logs and metrics
  balance::PolicyOptions policy;
  std::vector<BackendConfig> backends;
};

// Run-time state of one backend that outlives snapshots.
struct BackendState {
  // Passive failure accounting, guarded by mu.
  std::mutex mu;
  uint32_t fails = 0;
  TimePoint window_start{};
  TimePoint out_until{};
  bool out = false;        // taken out by passive failures
  bool trial = false;      // back after fail_timeout, on trial
  // Active health (set by health checks; true when none run).
  std::atomic<bool> healthy{true};
  // Counters for /metrics and /reverse_proxy/upstreams.
  std::atomic<uint64_t> requests_total{0};
  std::atomic<uint64_t> failures_total{0};
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
  uint64_t version() const { return version_; }

  // Chooses a backend for one attempt, first returning backends whose
  // fail_timeout has passed (as of `now`) to service on trial.
  std::optional<uint32_t> pick(const balance::PickContext& ctx, TimePoint now) const;

  // Outcome of an attempt (per next_upstream: errors, timeouts, listed statuses).
  void report_failure(uint32_t i, TimePoint now) const;
  void report_success(uint32_t i) const;

  // Active health check result.
  void set_healthy(uint32_t i, bool healthy) const;

  // True when the backend may receive requests (not out, healthy, not down, weight > 0).
  bool available(uint32_t i) const;

 private:
  void refresh_availability(uint32_t i) const;
  void return_expired(TimePoint now) const;

  PoolConfig config_;
  std::unique_ptr<balance::Balancer> balancer_;
  std::vector<std::shared_ptr<BackendState>> states_;
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

  // Builds and publishes the next snapshot, carrying state over.
  void update(const PoolConfig& config);

 private:
  mutable std::mutex mu_;  // guards current_
  std::shared_ptr<const PoolSnapshot> current_;
  std::atomic<uint64_t> version_{0};
};

// A worker thread's view of a pool: one atomic load per use in the steady
// state; the lock is taken only when a new snapshot was published.
class CachedSnapshot {
 public:
  explicit CachedSnapshot(const Pool& pool) : pool_(&pool) {}
  const std::shared_ptr<const PoolSnapshot>& get() {
    uint64_t v = pool_->version();
    if (!snapshot_ || v != version_) {
      snapshot_ = pool_->snapshot();
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
