#include "upstream/pool.h"

#include <algorithm>

namespace heft::upstream {
namespace {
int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }

std::vector<balance::BackendSpec> specs_of(const PoolConfig& config) {
  std::vector<balance::BackendSpec> specs;
  specs.reserve(config.backends.size());
  for (const BackendConfig& b : config.backends)
    specs.push_back({b.name, b.weight, b.backup, b.down, b.max_fails});
  return specs;
}
}  // namespace

PoolSnapshot::PoolSnapshot(const PoolConfig& config, const PoolSnapshot* previous)
    : config_(config) {
  balancer_ = std::make_unique<balance::Balancer>(config_.policy, specs_of(config_),
                                                  previous ? previous->balancer_.get() : nullptr);
  version_ = previous ? previous->version_ + 1 : 1;
  states_.reserve(config_.backends.size());
  int64_t next_return = INT64_MAX;
  for (uint32_t i = 0; i < config_.backends.size(); ++i) {
    std::shared_ptr<BackendState> state;
    if (previous) {
      if (auto old = previous->balancer_->find(config_.backends[i].name)) state = previous->states_[*old];
    }
    if (!state) state = std::make_shared<BackendState>();
    {
      std::lock_guard lock(state->mu);
      if (state->out) next_return = std::min(next_return, ticks(state->out_until));
    }
    states_.push_back(std::move(state));
  }
  next_return_.store(next_return);
  for (uint32_t i = 0; i < states_.size(); ++i) refresh_availability(i);
}

bool PoolSnapshot::available(uint32_t i) const {
  const BackendConfig& b = config_.backends[i];
  if (b.down || b.weight == 0) return false;
  return balancer_->live(i).available.load(std::memory_order_relaxed);
}

void PoolSnapshot::refresh_availability(uint32_t i) const {
  BackendState& s = *states_[i];
  bool out;
  {
    std::lock_guard lock(s.mu);
    out = s.out;
  }
  balancer_->set_available(i, !out && s.healthy.load(std::memory_order_relaxed));
}

void PoolSnapshot::return_expired(TimePoint now) const {
  if (ticks(now) < next_return_.load(std::memory_order_relaxed)) return;
  std::lock_guard guard(return_mu_);
  int64_t next_return = INT64_MAX;
  for (uint32_t i = 0; i < states_.size(); ++i) {
    BackendState& s = *states_[i];
    bool returned = false;
    {
      std::lock_guard lock(s.mu);
      if (!s.out) continue;
      if (s.out_until <= now) {
        s.out = false;
        s.trial = true;
        returned = true;
      } else {
        next_return = std::min(next_return, ticks(s.out_until));
      }
    }
    if (returned) refresh_availability(i);
  }
  next_return_.store(next_return, std::memory_order_relaxed);
}

std::optional<uint32_t> PoolSnapshot::pick(const balance::PickContext& ctx, TimePoint now) const {
  return_expired(now);
  return balancer_->pick(ctx);
}

void PoolSnapshot::report_failure(uint32_t i, TimePoint now) const {
  const BackendConfig& b = config_.backends[i];
  BackendState& s = *states_[i];
  s.failures_total.fetch_add(1, std::memory_order_relaxed);
  balancer_->report_failure(i);
  if (b.max_fails == 0 || config_.backends.size() == 1) return;
  bool taken_out = false;
  {
    std::lock_guard lock(s.mu);
    if (s.fails == 0 || now - s.window_start > b.fail_timeout) {
      s.fails = 0;
      s.window_start = now;
    }
    ++s.fails;
    if (!s.out && (s.trial || s.fails >= b.max_fails)) {
      s.out = true;
      s.trial = false;
      s.out_until = now + b.fail_timeout;
      taken_out = true;
    }
  }
  if (taken_out) {
    int64_t until = ticks(now + b.fail_timeout);
    int64_t cur = next_return_.load(std::memory_order_relaxed);
    while (until < cur && !next_return_.compare_exchange_weak(cur, until)) {
    }
    refresh_availability(i);
  }
}

void PoolSnapshot::report_success(uint32_t i) const {
  BackendState& s = *states_[i];
  std::lock_guard lock(s.mu);
  if (s.trial) {
    s.trial = false;
    s.fails = 0;
  }
}

void PoolSnapshot::set_healthy(uint32_t i, bool healthy) const {
  states_[i]->healthy.store(healthy, std::memory_order_relaxed);
  refresh_availability(i);
}

Pool::Pool(const PoolConfig& config) : current_(std::make_shared<PoolSnapshot>(config, nullptr)) {
  version_.store(current_->version());
}

std::shared_ptr<const PoolSnapshot> Pool::snapshot() const {
  std::lock_guard lock(mu_);
  return current_;
}

void Pool::update(const PoolConfig& config) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<PoolSnapshot>(config, current_.get());
  current_ = next;
  version_.store(next->version(), std::memory_order_release);
}

}  // namespace heft::upstream
