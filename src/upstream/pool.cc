#include "upstream/pool.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <utility>
#include <fmt/format.h>

namespace heft::upstream {
namespace {
int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }

// Records that a backend came back at steady ticks `at` (0: at the next
// tick): the next Pool::tick starts its slow-start ramp from then and
// publishes a snapshot at the ramp's floor.
void mark_returned(const BackendConfig& b, BackendState& s, int64_t at) {
  s.returned_at.store(at, std::memory_order_relaxed);
  if (b.slow_start.count() > 0) s.factor.store(kSlowStartFloor, std::memory_order_relaxed);
  s.returned.store(true, std::memory_order_release);
}

void note_return(const BackendConfig& b, BackendState& s, TimePoint now) { mark_returned(b, s, ticks(now)); }

// Under s.mu: out from `now` for fail_timeout (a failure, or a trial's request held out).
void start_out_period(BackendState& s, const BackendConfig& b, TimePoint now) {
  s.out = true;
  s.out_since = now;
  s.out_until = now + b.fail_timeout;
}

// The same for a backend an active check brings back; with slow start it is
// made available by that tick, in the snapshot that already balances it at
// the floor (the current one was built with its old factor and would flood it).
bool defers_return(const BackendConfig& b, BackendState& s, TimePoint now) {
  note_return(b, s, now);
  return b.slow_start.count() > 0;
}

// Balance weights: plain weights while every factor is 1, else every backend
// on the common kWeightResolution scale (see weights.h).
std::vector<balance::BackendSpec> specs_of(const PoolConfig& config, const std::vector<double>& factors) {
  bool scaled = false;
  for (size_t i = 0; i < factors.size(); ++i)
    if (factors[i] < 1.0 && config.backends[i].weight > 0) scaled = true;
  std::vector<balance::BackendSpec> specs;
  specs.reserve(config.backends.size());
  for (size_t i = 0; i < config.backends.size(); ++i) {
    balance::BackendSpec& spec = specs.emplace_back(config.backends[i]);
    spec.balance_weight = scaled ? scaled_weight(spec.weight, factors[i]) : 0;
  }
  return specs;
}
}  // namespace

uint32_t RecentFailures::add(TimePoint now, milliseconds window, uint32_t limit) {
  times_.push_back(now);
  // Older than the window, or beyond the latest `limit`: no longer counted.
  while (first_ < times_.size() && (now - times_[first_] > window || times_.size() - first_ > limit)) ++first_;
  // Dropped entries are erased once they are the larger part: amortised O(1)
  // per failure, and at most twice the counted ones kept.
  if (first_ * 2 >= times_.size()) {
    times_.erase(times_.begin(), times_.begin() + static_cast<std::ptrdiff_t>(first_));
    first_ = 0;
  }
  return static_cast<uint32_t>(times_.size() - first_);
}

uint32_t RecentFailures::count(TimePoint now, milliseconds window) const {
  uint32_t n = 0;
  for (size_t k = first_; k < times_.size(); ++k) n += now - times_[k] <= window;
  return n;
}

PoolSnapshot::PoolSnapshot(const PoolConfig& config, const PoolSnapshot* previous)
    : config_(config), places_(previous ? previous->places_ : std::make_shared<PlaceQueue>()) {
  version_ = previous ? previous->version_ + 1 : 1;
  states_.reserve(config_.backends.size());
  factors_.reserve(config_.backends.size());
  int64_t next_return = INT64_MAX;
  size_t kept = 0;  // backends of `previous` found here
  for (uint32_t i = 0; i < config_.backends.size(); ++i) {
    const BackendConfig& b = config_.backends[i];
    std::shared_ptr<BackendState> state;
    bool was_down = false;
    if (previous) {
      if (auto old = previous->balancer_->find(b.name)) {
        ++kept;
        state = previous->states_[*old];
        was_down = previous->config_.backends[*old].down;
      }
    }
    // Marked up again after `down` (a reload, the admin API): back in service,
    // so slow start, as HAProxy's slowstart when a server leaves maintenance.
    // Unless the checks or its failures still hold it out: it ramps when they end.
    if (was_down && !b.down && b.slow_start.count() > 0 && state->healthy.load(std::memory_order_relaxed)) {
      std::lock_guard lock(state->mu);
      if (!state->out) mark_returned(b, *state, 0);
    }
    if (!state) {
      state = std::make_shared<BackendState>(config_.counter_slots);
      // Added to a running pool: slow start (from the floor until the next tick starts the ramp).
      if (previous && b.slow_start.count() > 0) mark_returned(b, *state, 0);
    }
    {
      std::lock_guard lock(state->mu);
      // An out state carried into a configuration that would never have
      // taken the backend out (it is now the pool's only backend, or its
      // max_fails is 0) ends here: it comes back (slow start from this
      // snapshot's first tick), or a lone backend would answer 503 for the
      // rest of fail_timeout.
      if (state->out && (config_.backends.size() == 1 || b.max_fails == 0)) {
        state->out = false;
        state->trial = false;
        // (Unhealthy: it returns when the checks say so.)
        if (state->healthy.load(std::memory_order_relaxed)) mark_returned(b, *state, 0);
      }
      // A reload that changed fail_timeout changes the out period under way.
      if (state->out) {
        state->out_until = state->out_since + b.fail_timeout;
        next_return = std::min(next_return, ticks(state->out_until));
      }
    }
    factors_.push_back(state->factor.load(std::memory_order_relaxed));
    states_.push_back(std::move(state));
  }
  next_return_.store(next_return);
  balancer_ = std::make_unique<balance::Balancer>(config_.policy, specs_of(config_, factors_),
                                                  previous ? previous->balancer_.get() : nullptr);
  if (previous && kept < previous->states_.size()) {
    for (uint32_t j = 0; j < previous->states_.size(); ++j)
      if (!balancer_->find(previous->config_.backends[j].name))
        previous->states_[j]->removed.store(true, std::memory_order_relaxed);
  }
  // No wake-up here: Pool::update() wakes every waiter once the snapshot is
  // published, and a tick's republish() wakes for the backends it returns.
  for (uint32_t i = 0; i < states_.size(); ++i) refresh_availability(i, false);
}

bool PoolSnapshot::available(uint32_t i) const {
  const BackendConfig& b = config_.backends[i];
  if (b.down || b.weight == 0) return false;
  return balancer_->live(i).available.load(std::memory_order_relaxed);
}

bool PoolSnapshot::healthy(uint32_t i) const { return balancer_->live(i).available.load(std::memory_order_relaxed); }

const char* PoolSnapshot::state_name(uint32_t i) const {
  const BackendConfig& b = config_.backends[i];
  if (b.down) return "down";
  if (b.weight == 0) return "drained";
  BackendState& s = *states_[i];
  {
    std::lock_guard lock(s.mu);
    if (s.out) return "out";
  }
  return s.healthy.load(std::memory_order_relaxed) ? "up" : "unhealthy";
}

void PoolSnapshot::refresh_availability(uint32_t i, bool wake) const {
  BackendState& s = *states_[i];
  // No longer in the pool: the flag may be a returned backend's now.
  if (s.removed.load(std::memory_order_relaxed)) [[unlikely]]
    return;
  bool out;
  {
    std::lock_guard lock(s.mu);
    out = s.out;
  }
  if (balancer_->set_available(i, !out && s.healthy.load(std::memory_order_relaxed)) && wake) wake_for_return(i);
}

void PoolSnapshot::wake_for_return(uint32_t i) const {
  if (places_->size() == 0 || i >= size()) return;  // the usual case: nobody waits
  const std::optional<uint32_t> room = balancer_->room(i);
  places_->wake(room ? *room : SIZE_MAX);  // (SIZE_MAX: every waiter, none kept as spare)
}

void PoolSnapshot::return_expired(TimePoint now) const {
  std::lock_guard guard(return_mu_);
  int64_t next_return = INT64_MAX;
  for (uint32_t i = 0; i < states_.size(); ++i) {
    BackendState& s = *states_[i];
    bool returned = false;
    {
      std::lock_guard lock(s.mu);
      if (!s.out) continue;
      if (s.out_until <= now) {
        // Available at once, slow start or not: this may be the pick that
        // finds every backend out (see the contract in pool.h).
        s.out = false;
        // Back in service (slow start from now) unless the active checks
        // hold it out: then it returns when they make it healthy again. (A
        // trial whose request had no outcome within fail_timeout: another
        // trial, the ramp as it was.)
        if (!s.trial.exchange(true, std::memory_order_relaxed) && s.healthy.load(std::memory_order_relaxed))
          note_return(config_.backends[i], s, now);
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
  if (ticks(now) >= next_return_.load(std::memory_order_relaxed)) return_expired(now);
  const std::optional<uint32_t> chosen = balancer_->pick(ctx);
  if (chosen && states_[*chosen]->trial.load(std::memory_order_relaxed)) [[unlikely]]
    hold_trial(*chosen, now);
  return chosen;
}

void PoolSnapshot::hold_trial(uint32_t i, TimePoint now) const {
  // nginx lets one request through to a backend back on trial and none other
  // until that one ends or fail_timeout passes again (the pick sets `checked`).
  // Were it available to every pick until its first failure came back, a
  // backend that swallows connections (a host gone, no RST) would hold 1/n of
  // all requests for connect_timeout every fail_timeout. So the trial's pick
  // takes it out again, until the trial's outcome (report_success(),
  // report_failure(), clear_passive()) or a new fail_timeout. Not when no
  // other backend is available: then it stays everyone's (as it was), rather
  // than every other request getting a 503.
  bool other = false;
  for (uint32_t j = 0; j < states_.size() && !other; ++j) other = j != i && available(j);
  if (!other) return;
  const BackendConfig& b = config_.backends[i];
  BackendState& s = *states_[i];
  {
    std::lock_guard lock(s.mu);
    if (!s.trial || s.out) return;  // settled meanwhile, or held by another worker's pick
    start_out_period(s, b, now);
  }
  announce_out(i, now + b.fail_timeout);
}

void PoolSnapshot::announce_out(uint32_t i, TimePoint until) const {
  const int64_t at = ticks(until);
  int64_t cur = next_return_.load(std::memory_order_relaxed);
  while (at < cur && !next_return_.compare_exchange_weak(cur, at)) {
  }
  refresh_availability(i);
}

void PoolSnapshot::report_failure(uint32_t i, TimePoint now) const {
  const BackendConfig& b = config_.backends[i];
  BackendState& s = *states_[i];
  s.failures_total.fetch_add(1, std::memory_order_relaxed);
  // A lone backend is never out (nginx); neither is its effective weight
  // lowered: it gets every request whatever its weight, so the dip would be
  // shown but mean nothing. Its failures are still counted in the window
  // (the upstreams view's `fails`).
  const bool lone = config_.backends.size() == 1;
  if (!lone) balancer_->report_failure(i);
  if (b.max_fails == 0) return;
  bool taken_out = false;
  {
    std::lock_guard lock(s.mu);
    const uint32_t fails = s.recent_failures.add(now, b.fail_timeout, b.max_fails);
    // On trial (its request held out or not): out again at once.
    if (!lone && (s.trial || (!s.out && fails >= b.max_fails))) {
      start_out_period(s, b, now);
      s.trial = false;
      taken_out = true;
    }
  }
  if (taken_out) announce_out(i, now + b.fail_timeout);
}

uint32_t PoolSnapshot::recent_fails(uint32_t i, TimePoint now) const {
  BackendState& s = *states_[i];
  std::lock_guard lock(s.mu);
  return s.recent_failures.count(now, config_.backends[i].fail_timeout);
}

void PoolSnapshot::settle_trial(uint32_t i) const {
  BackendState& s = *states_[i];
  bool released = false;
  {
    std::lock_guard lock(s.mu);
    if (!s.trial) return;
    s.trial = false;
    s.recent_failures.clear();
    released = std::exchange(s.out, false);  // held while its trial ran (hold_trial())
  }
  if (released) refresh_availability(i);
}

void PoolSnapshot::set_healthy(uint32_t i, bool healthy) const {
  states_[i]->healthy.store(healthy, std::memory_order_relaxed);
  refresh_availability(i);
}

void PoolSnapshot::set_healthy(uint32_t i, bool healthy, TimePoint now) const {
  BackendState& s = *states_[i];
  bool deferred = false;
  if (s.healthy.exchange(healthy, std::memory_order_relaxed) != healthy) {
    s.health_changes_total.fetch_add(1, std::memory_order_relaxed);
    bool out = false;
    if (healthy) {
      std::lock_guard lock(s.mu);
      out = s.out;
    }
    // Still out by passive failures: it returns when that ends (clear_passive,
    // return_expired), not now.
    if (healthy && !out) deferred = defers_return(config_.backends[i], s, now);
  }
  if (!deferred) refresh_availability(i);
}



bool PoolSnapshot::clear_passive(uint32_t i, TimePoint now) const {
  BackendState& s = *states_[i];
  {
    std::lock_guard lock(s.mu);
    if (!s.out) {
      // Back on trial (its out period ended, perhaps while unhealthy): the
      // passing check settles it as a success would.
      if (s.trial) {
        s.trial = false;
        s.recent_failures.clear();
      }
      return false;
    }
    s.out = false;
    s.trial = false;
    s.recent_failures.clear();
  }
  if (!defers_return(config_.backends[i], s, now)) refresh_availability(i);
  return true;
}

bool PoolSnapshot::passive_out(uint32_t i) const {
  BackendState& s = *states_[i];
  std::lock_guard lock(s.mu);
  return s.out;
}

void PoolSnapshot::record_response(uint32_t i, std::chrono::nanoseconds duration, int status, bool ok,
                                   unsigned worker) const {
  ResponseCounters& s = states_[i]->slot(worker);
  const auto us = static_cast<uint64_t>(std::max<int64_t>(0, duration.count() / 1000));
  s.responses.fetch_add(1, std::memory_order_relaxed);
  if (status >= 500) s.responses_5xx.fetch_add(1, std::memory_order_relaxed);
  size_t bucket = 0;
  while (bucket < std::size(kLatencyBucketsMs) && us > uint64_t{kLatencyBucketsMs[bucket]} * 1000) ++bucket;
  s.latency_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  if (!config_.adaptive.enabled) return;
  s.interval_count.fetch_add(1, std::memory_order_relaxed);
  if (!ok || status >= 500) s.interval_errors.fetch_add(1, std::memory_order_relaxed);  // 5xx always counts
  s.interval_latency_us.fetch_add(us, std::memory_order_relaxed);
}

double PoolSnapshot::display_effective_weight(uint32_t i) const {
  const balance::BackendSpec& spec = balancer_->backend(i);
  uint32_t member = spec.balance_weight ? spec.balance_weight : spec.weight;
  if (member == 0) return 0;
  // The policy's effective weight relative to its member weight (nginx's
  // passive-failure dip), times the configured weight and the factor.
  return double(balancer_->effective_weight(i)) / double(member) * double(spec.weight) * factors_[i];
}

Pool::Pool(const PoolConfig& config) : current_(std::make_shared<PoolSnapshot>(config, nullptr)) {
  version_.store(current_->version());
}

std::shared_ptr<const PoolSnapshot> Pool::snapshot() const {
  std::lock_guard lock(mu_);
  return current_;
}

void Pool::update(const PoolConfig& config) {
  std::shared_ptr<const PoolSnapshot> next;
  {
    std::lock_guard lock(mu_);
    next = std::make_shared<PoolSnapshot>(config, current_.get());
    current_ = next;
    version_.store(next->version(), std::memory_order_release);
  }
  // Limits or backends may have changed: whoever waits for a place picks again.
  next->places()->wake_all();
}

std::pair<std::shared_ptr<const PoolSnapshot>, std::shared_ptr<const PoolSnapshot>> Pool::republish() {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<PoolSnapshot>(current_->config(), current_.get());
  auto replaced = std::exchange(current_, next);
  version_.store(next->version(), std::memory_order_release);
  return {std::move(replaced), std::move(next)};
}

std::vector<WeightEvent> Pool::tick(TimePoint now) {
  std::lock_guard tick_lock(tick_mu_);
  std::vector<WeightEvent> events;
  auto snap = snapshot();
  // Out periods that have passed end here too, not only at the next pick: an
  // idle pool would report the backend out for good, and with slow start its
  // ramp starts in this tick. The scan skips no snapshot's next_return_ hint:
  // a failure reported through an older snapshot (a request that began before
  // a rebuild) lowered only that one's, and this repairs the current one's.
  snap->return_expired(now);
  // A backend returned or taken out through an older snapshot changed the
  // shared flag and told only that snapshot's policy.
  snap->sync_availability();
  const PoolConfig& config = snap->config();
  const size_t n = snap->size();
  std::vector<double> before(n);
  for (uint32_t i = 0; i < n; ++i) {
    BackendState& s = snap->state(i);
    before[i] = s.ramp * s.adaptive;
  }
  auto note = [&](uint32_t i, WeightReason reason, double after, std::string detail) {
    decisions_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
    events.push_back({config.name, config.backends[i].name, reason, before[i], after, std::move(detail)});
  };

  // Stall limits: each backend's recent latency, folded in (latency.h).
  for (uint32_t i = 0; i < n; ++i) {
    BackendState& s = snap->state(i);
    std::array<uint64_t, kLatencyBuckets> totals;
    for (size_t b = 0; b < kLatencyBuckets; ++b) totals[b] = s.latency_bucket(b);
    s.recent_latency.fold(totals, now);
    s.stall_limit_ms.store(s.recent_latency.stall_limit().count(), std::memory_order_relaxed);
  }

  // Slow start.
  bool ramp_started = false;
  std::vector<uint32_t> returned;  // made available by this tick's snapshot (defers_return)
  for (uint32_t i = 0; i < n; ++i) {
    BackendState& s = snap->state(i);
    const milliseconds window = config.backends[i].slow_start;
    if (s.returned.exchange(false, std::memory_order_acquire) && window.count() > 0) {
      int64_t at = s.returned_at.load(std::memory_order_relaxed);
      s.ramp_start = at ? TimePoint(TimePoint::duration(at)) : now;
      if (s.ramp_start > now) s.ramp_start = now;
      s.ramping = true;
      ramp_started = true;
      returned.push_back(i);
      s.ramp = slow_start_factor(now - s.ramp_start, window);
      note(i, WeightReason::slow_start, s.ramp * s.adaptive, fmt::format("back in service, ramping over {}ms", window.count()));
    } else if (s.ramping) {
      s.ramp = window.count() > 0 ? slow_start_factor(now - s.ramp_start, window) : 1.0;
      if (s.ramp >= 1.0) {
        s.ramping = false;
        note(i, WeightReason::slow_start_done, s.adaptive, "ramp complete");
      }
    } else {
      s.ramp = 1.0;
    }
  }

  // Adaptive weights.
  const AdaptiveOptions& adaptive = config.adaptive;
  if (adaptive.enabled && next_evaluation_ && adaptive.interval != evaluation_interval_) {
    // A reload changed the interval: a shorter one takes effect now (the
    // evaluation would wait out the old one, perhaps minutes long), a
    // longer one after the evaluation already due.
    evaluation_interval_ = adaptive.interval;
    next_evaluation_ = std::min(*next_evaluation_, now + adaptive.interval);
  }
  if (!adaptive.enabled) {
    next_evaluation_.reset();
    for (uint32_t i = 0; i < n; ++i) snap->state(i).adaptive = 1.0;
  } else if (!next_evaluation_) {
    next_evaluation_ = now + adaptive.interval;
    evaluation_interval_ = adaptive.interval;
    for (uint32_t i = 0; i < n; ++i) {  // start a clean interval
      BackendState& s = snap->state(i);
      s.drain_interval();
      s.carried = {};
      s.carried_intervals = 0;
    }
  } else if (now >= *next_evaluation_) {
    next_evaluation_ = std::max(*next_evaluation_ + adaptive.interval, now);
    std::vector<AdaptiveInput> in(n);
    for (uint32_t i = 0; i < n; ++i) {
      BackendState& s = snap->state(i);
      const BackendState::IntervalSums sums = s.drain_interval();
      s.carried.count += sums.count;
      s.carried.errors += sums.errors;
      s.carried.latency_us += sums.latency_us;
      s.carried_intervals = std::min(s.carried_intervals + 1, kMaxCarriedIntervals);
      const auto [count, errors, latency_us] = s.carried;
      const double baseline = s.baseline_latency_ms;  // judged against it as it was before this interval
      if (count >= kAdaptiveMinSamples) {
        const double mean_ms = double(latency_us) / 1000.0 / double(count);
        s.ewma_latency_ms = ewma_fold(s.ewma_latency_ms, mean_ms, s.carried_intervals);
        s.baseline_latency_ms = ewma_fold(s.baseline_latency_ms, mean_ms, s.carried_intervals, kBaselineAlpha);
        s.ewma_error = ewma_fold(s.ewma_error, double(std::min(errors, count)) / double(count), s.carried_intervals);
        s.carried = {};
        s.carried_intervals = 0;
      }
      in[i] = {count,          std::max(0.0, s.ewma_latency_ms), std::max(0.0, s.ewma_error), s.adaptive,
               s.recover_hold, s.clean_intervals,                   s.last_up,                    s.full_intervals,
               baseline,       s.above_baseline};
    }
    std::vector<AdaptiveOutput> out = adaptive_evaluate(adaptive, in);
    for (uint32_t i = 0; i < n; ++i) {
      BackendState& s = snap->state(i);
      s.recover_hold = out[i].hold;
      s.clean_intervals = out[i].clean;
      s.full_intervals = out[i].full;
      s.last_up = out[i].last_up;
      s.above_baseline = out[i].above_baseline;
      if (!out[i].reason) continue;
      s.adaptive = out[i].factor;
      std::string detail;
      if (out[i].to_floor) {
        detail = fmt::format("raised to min_weight_ratio {:.2f}", adaptive.min_weight_ratio);
        note(i, *out[i].reason, s.ramp * s.adaptive, std::move(detail));
        continue;
      }
      switch (*out[i].reason) {
        case WeightReason::latency:
          detail = fmt::format("latency {:.1f}ms > limit {:.1f}ms", in[i].ewma_latency_ms, out[i].latency_limit_ms);
          if (out[i].latency_rule == LatencyRule::peers)
            detail += fmt::format(" (pool median {:.1f}ms)", out[i].latency_reference_ms);
          else if (out[i].latency_rule == LatencyRule::baseline)
            detail += fmt::format(" (expected {:.1f}ms from its own baseline)", out[i].latency_reference_ms);
          break;
        case WeightReason::errors:
          detail = fmt::format("error rate {:.1f}% > {:.1f}%", in[i].ewma_error * 100, adaptive.error_threshold * 100);
          break;
        default:
          detail = fmt::format("latency {:.1f}ms, error rate {:.1f}% within bounds", in[i].ewma_latency_ms,
                               in[i].ewma_error * 100);
      }
      note(i, *out[i].reason, s.ramp * s.adaptive, std::move(detail));
    }
  }

  // Publish when a balance weight changed (or a returning backend waits for
  // the snapshot that makes it available, or balances it at the floor; see
  // defers_return).
  bool changed = ramp_started;
  for (uint32_t i = 0; i < n; ++i) {
    BackendState& s = snap->state(i);
    double f = std::clamp(s.ramp * s.adaptive, 0.0, 1.0);
    s.factor.store(f, std::memory_order_relaxed);
    if (f != snap->factor(i)) changed = true;
  }
  if (changed) {
    std::vector<double> factors(n);
    for (uint32_t i = 0; i < n; ++i) factors[i] = snap->state(i).factor.load(std::memory_order_relaxed);
    auto specs = specs_of(config, factors);
    bool same = true;
    for (uint32_t i = 0; i < n; ++i)
      if (specs[i].balance_weight != snap->balancer().backend(i).balance_weight) same = false;
    if (!same || ramp_started) {
      auto [replaced, published] = republish();
      // The indices are this tick's snapshot's; a Pool::update() that came
      // between has woken every waiter itself.
      if (replaced == snap)
        for (uint32_t i : returned) published->wake_for_return(i);
    }
  }
  return events;
}

}  // namespace heft::upstream
