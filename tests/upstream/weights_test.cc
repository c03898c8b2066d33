// Slow start and adaptive weights on virtual time (upstream/weights.h, Pool::tick).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "upstream/pool.h"
#include "upstream/weights.h"

namespace heft::upstream {
namespace {

using namespace std::chrono_literals;

const TimePoint t0 = TimePoint(std::chrono::hours(1000));

PoolConfig pool_config(const std::vector<uint32_t>& weights, milliseconds slow_start = 0ms) {
  PoolConfig c;
  c.name = "p";
  for (size_t i = 0; i < weights.size(); ++i) {
    BackendConfig b;
    b.name = b.address = std::string(1, char('A' + i));
    b.weight = weights[i];
    b.fail_timeout = 1000ms;
    b.slow_start = slow_start;
    c.backends.push_back(b);
  }
  return c;
}

// Picks `n` times at `now`, returns counts by backend index.
// n requests that each succeed (a backend back on trial is held out from its
// trial's pick until that request's outcome).
std::vector<uint64_t> picks(Pool& pool, int n, TimePoint now) {
  auto snap = pool.snapshot();
  std::vector<uint64_t> counts(snap->size());
  for (int k = 0; k < n; ++k)
    if (auto i = snap->pick({}, now)) {
      ++counts[*i];
      snap->report_success(*i);
    }
  return counts;
}

TEST(SlowStartFactor, LinearMonotoneFromFloorToOne) {
  const auto window = std::chrono::nanoseconds(10s);
  EXPECT_DOUBLE_EQ(slow_start_factor(0ns, window), kSlowStartFloor);
  EXPECT_DOUBLE_EQ(slow_start_factor(5s, window), kSlowStartFloor + (1 - kSlowStartFloor) * 0.5);
  EXPECT_DOUBLE_EQ(slow_start_factor(10s, window), 1.0);
  EXPECT_DOUBLE_EQ(slow_start_factor(20s, window), 1.0);
  double last = 0;
  for (int ms = 0; ms <= 10000; ms += 50) {
    double f = slow_start_factor(std::chrono::milliseconds(ms), window);
    EXPECT_GE(f, last);
    // Linear within one step (1/20 of the window).
    double exact = kSlowStartFloor + (1 - kSlowStartFloor) * ms / 10000.0;
    EXPECT_NEAR(f, exact, (1 - kSlowStartFloor) / kSlowStartSteps + 1e-9);
    last = f;
  }
}

TEST(ScaledWeight, CommonScaleKeepsTheSplitExact) {
  EXPECT_EQ(scaled_weight(1, 1.0), 100u);
  EXPECT_EQ(scaled_weight(5, 0.5), 250u);
  EXPECT_EQ(scaled_weight(1, 0.001), 1u);  // never 0 while the weight is not
  EXPECT_EQ(scaled_weight(0, 0.5), 0u);
}

TEST(PoolSlowStart, NoRampAtProcessStart) {
  Pool pool(pool_config({1, 1}, 10s));
  EXPECT_TRUE(pool.tick(t0).empty());
  auto c = picks(pool, 1000, t0);
  EXPECT_EQ(c[0], 500u);
  EXPECT_EQ(c[1], 500u);
  EXPECT_EQ(pool.snapshot()->balancer().backend(0).balance_weight, 0u);
}

TEST(PoolSlowStart, ReturningBackendRampsLinearlyThenFullShare) {
  Pool pool(pool_config({3, 1}, 10s));
  pool.tick(t0);
  // B fails: out for fail_timeout (1 s), then back on trial at t0 + 1 s.
  pool.snapshot()->report_failure(1, t0);
  EXPECT_FALSE(pool.snapshot()->available(1));
  const TimePoint back = t0 + 1s;
  picks(pool, 1, back);  // the pick that returns it: available at once
  EXPECT_TRUE(pool.snapshot()->available(1));
  // The next tick balances it at the ramp's floor, ramping from its return.
  const uint64_t before_tick = pool.version();
  auto events = pool.tick(back);
  EXPECT_GT(pool.version(), before_tick);
  EXPECT_TRUE(pool.snapshot()->available(1));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, WeightReason::slow_start);
  EXPECT_EQ(pool.decisions(WeightReason::slow_start), 1u);
  // Share of B over successive tenths of the window: rises, ends at 1/4.
  double last = -1;
  std::vector<double> shares;
  for (int tenth = 0; tenth < 10; ++tenth) {
    TimePoint now = back + tenth * 1s + 500ms;  // middle of the tenth
    pool.tick(now);
    auto c = picks(pool, 4000, now);
    double share = double(c[1]) / double(c[0] + c[1]);
    shares.push_back(share);
    EXPECT_GT(share, last) << "tenth " << tenth;
    last = share;
  }
  // Linear in the factor: share = f / (3 + f) with f from ~0.1 to ~1.
  EXPECT_NEAR(shares.front(), (0.1 + 0.9 * 1 / 20.0) / (3 + 0.1 + 0.9 * 1 / 20.0), 0.01);
  auto done = pool.tick(back + 10s);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, WeightReason::slow_start_done);
  auto c = picks(pool, 4000, back + 10s);
  EXPECT_NEAR(double(c[1]), 1000, 2);  // its weight share again
  EXPECT_EQ(pool.snapshot()->balancer().backend(1).balance_weight, 0u);  // plain weights again
}

TEST(PoolSlowStart, RebuildsAtMostOncePerStep) {
  Pool pool(pool_config({1, 1}, 10s));
  pool.snapshot()->set_healthy(1, false, t0);
  pool.snapshot()->set_healthy(1, true, t0);
  pool.tick(t0);
  uint64_t v = pool.version();
  for (int ms = 0; ms <= 10000; ms += 10) pool.tick(t0 + std::chrono::milliseconds(ms));
  EXPECT_LE(pool.version() - v, kSlowStartSteps + 1);
  EXPECT_GE(pool.version() - v, kSlowStartSteps - 1);
}

TEST(PoolSlowStart, BackendAddedToRunningPoolRamps) {
  Pool pool(pool_config({1, 1}, 10s));
  pool.tick(t0);
  pool.update(pool_config({1, 1, 1}, 10s));
  // Before any tick: already at the floor, not flooded.
  auto c = picks(pool, 2100, t0);
  EXPECT_NEAR(double(c[2]), 100, 2);  // 10 / 210 of picks
  auto events = pool.tick(t0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].backend, "C");
  pool.tick(t0 + 10s);
  c = picks(pool, 3000, t0 + 10s);
  EXPECT_NEAR(double(c[2]), 1000, 2);
}

// A backend marked up again after `down` (reload or admin API) comes back
// into service: it ramps, as HAProxy's slowstart when a server leaves
// maintenance (it took its full share at once).
TEST(PoolSlowStart, BackendMarkedUpAfterDownRamps) {
  PoolConfig config = pool_config({1, 1}, 10s);
  config.backends[1].down = true;
  Pool pool(config);
  pool.tick(t0);
  config.backends[1].down = false;
  pool.update(config);
  auto c = picks(pool, 1100, t0);
  EXPECT_NEAR(double(c[1]), 100, 2);  // 0.1 / 1.1 of picks, before any tick
  auto events = pool.tick(t0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].backend, "B");
  EXPECT_EQ(events[0].reason, WeightReason::slow_start);
  pool.tick(t0 + 10s);
  c = picks(pool, 2000, t0 + 10s);
  EXPECT_NEAR(double(c[1]), 1000, 2);
  // Only its weight changing starts no ramp.
  config.backends[1].weight = 2;
  pool.update(config);
  EXPECT_TRUE(pool.tick(t0 + 11s).empty());
}

TEST(PoolSlowStart, WorksWithEveryWeightedPolicy) {
  for (auto kind : {balance::PolicyKind::weighted_round_robin, balance::PolicyKind::random,
                    balance::PolicyKind::least_conn, balance::PolicyKind::p2c}) {
    PoolConfig cfg = pool_config({1, 1}, 10s);
    cfg.policy.kind = kind;
    Pool pool(cfg);
    pool.snapshot()->set_healthy(1, false, t0);
    pool.snapshot()->set_healthy(1, true, t0);
    pool.tick(t0);
    EXPECT_EQ(pool.snapshot()->balancer().backend(1).balance_weight, 10u) << balance::policy_name(kind);
    EXPECT_EQ(pool.snapshot()->balancer().backend(0).balance_weight, 100u);
    // least_conn with no active requests, random and p2c: B gets clearly less than half.
    auto snap = pool.snapshot();
    uint64_t b = 0;
    for (int k = 0; k < 10000; ++k) {
      balance::PickContext ctx;
      ctx.random = uint64_t(k) * 0x9e3779b97f4a7c15ULL + 12345;
      auto i = snap->pick(ctx, t0);
      ASSERT_TRUE(i);
      snap->balancer().begin_request(*i);
      if (*i == 1) ++b;
      snap->balancer().end_request(*i);
    }
    EXPECT_LT(b, 2000u) << balance::policy_name(kind);
    // p2c with no load always prefers the heavier of two: B only when drawn twice.
    if (kind != balance::PolicyKind::p2c) {
      EXPECT_GT(b, 300u) << balance::policy_name(kind);
    }
  }
}

// ---- adaptive --------------------------------------------------------------

AdaptiveOptions adaptive_options() {
  AdaptiveOptions o;
  o.enabled = true;
  o.interval = 1000ms;
  o.cut = 0.25;
  o.min_weight_ratio = 0.1;
  return o;
}

TEST(AdaptiveEvaluate, CutRecoverFloorNeverAbove) {
  AdaptiveOptions o = adaptive_options();
  std::vector<AdaptiveInput> in = {{100, 10, 0, 1}, {100, 11, 0, 1}, {100, 100, 0, 1}};
  auto out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[0].reason, std::nullopt);
  EXPECT_EQ(out[1].reason, std::nullopt);
  ASSERT_EQ(out[2].reason, WeightReason::latency);
  EXPECT_DOUBLE_EQ(out[2].factor, 0.75);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 22);  // 2 x lower median (11)
  // Floor.
  in[2].factor = 0.12;
  out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].factor, 0.1);
  in[2].factor = 0.1;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
  EXPECT_DOUBLE_EQ(out[2].factor, 0.1);
  // Hysteresis band: below the limit (22) but not below 0.8 x limit: hold.
  in[2].ewma_latency_ms = 20;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
  // Back within bounds: + cut per evaluation, never above 1.
  in[2].ewma_latency_ms = 12;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, WeightReason::recover);
  EXPECT_DOUBLE_EQ(out[2].factor, 0.35);
  in[2].factor = 0.9;
  out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].factor, 1.0);
  in[2].factor = 1.0;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
  EXPECT_DOUBLE_EQ(out[2].factor, 1.0);
}

TEST(AdaptiveEvaluate, ErrorsAbsoluteThresholdAndTooFewSamples) {
  AdaptiveOptions o = adaptive_options();
  o.latency_threshold = 50ms;
  std::vector<AdaptiveInput> in = {{100, 10, 0.2, 1}, {100, 60, 0, 1}, {3, 500, 1, 1}};
  auto out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[0].reason, WeightReason::errors);
  EXPECT_EQ(out[1].reason, WeightReason::latency);
  EXPECT_EQ(out[2].reason, std::nullopt);  // fewer than kAdaptiveMinSamples: hold
}

// A difference below kLatencyNoiseFloorMs is noise, not slowness: at about
// 1 ms, a backend twice or five times as slow as the median is not cut; one
// more than the floor above it is. An explicit threshold is taken as given.
TEST(AdaptiveEvaluate, DifferencesBelowTheNoiseFloorAreNotSlowness) {
  static_assert(kLatencyNoiseFloorMs == 5.0);
  AdaptiveOptions o = adaptive_options();
  std::vector<AdaptiveInput> in = {{100, 0.9, 0, 1}, {100, 1.0, 0, 1}, {100, 5.9, 0, 1}};
  auto out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 6.0);  // median 1 ms + 5 ms (2 x median is only 2 ms)
  EXPECT_EQ(out[2].latency_rule, LatencyRule::peers);
  EXPECT_DOUBLE_EQ(out[2].latency_reference_ms, 1.0);
  EXPECT_EQ(out[2].reason, std::nullopt);
  in[2].ewma_latency_ms = 6.1;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, WeightReason::latency);
  // Far above the floor, the factor rules: 2 x 10 ms.
  in = {{100, 10, 0, 1}, {100, 10, 0, 1}, {100, 19.9, 0, 1}};
  out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 20.0);
  EXPECT_EQ(out[2].reason, std::nullopt);
  // An explicit threshold: no floor, no baseline.
  o.latency_threshold = 2ms;
  in = {{100, 0.9, 0, 1}, {100, 1.0, 0, 1}, {100, 2.5, 0, 1}};
  out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 2.0);
  EXPECT_EQ(out[2].latency_rule, LatencyRule::threshold);
  EXPECT_EQ(out[2].reason, WeightReason::latency);
}

// Three 10 ms backends with baselines of 10 ms; `c_ms` is C's EWMA latency,
// `c_above`: the last judgement found C above its baseline limit.
std::vector<AdaptiveInput> baselined(double c_ms, bool c_above, double others_ms = 10) {
  std::vector<AdaptiveInput> in = {{100, others_ms, 0, 1}, {100, others_ms, 0, 1}, {100, c_ms, 0, 1}};
  for (AdaptiveInput& b : in) b.baseline_latency_ms = 10;
  in[2].above_baseline = c_above;
  return in;
}

// A backend going from 10 ms to 20 ms while its peers stay at 10 ms is not
// slow by median_factor 2 (limit 20 ms), but it is by its own baseline
// (kBaselineFactor x 10 ms = 15 ms): cut at the second judgement in a row
// that finds it so.
TEST(AdaptiveEvaluate, SlowerThanItsOwnBaselineTwiceInARowIsCut) {
  AdaptiveOptions o = adaptive_options();
  auto out = adaptive_evaluate(o, baselined(19.9, false));
  EXPECT_EQ(out[2].reason, std::nullopt);  // the first time: noted, not cut
  EXPECT_TRUE(out[2].above_baseline);
  EXPECT_EQ(out[2].latency_rule, LatencyRule::baseline);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 15.0);
  EXPECT_DOUBLE_EQ(out[2].latency_reference_ms, 10.0);
  EXPECT_FALSE(out[0].above_baseline);
  out = adaptive_evaluate(o, baselined(19.9, true));
  ASSERT_EQ(out[2].reason, WeightReason::latency);
  EXPECT_DOUBLE_EQ(out[2].factor, 0.75);
  EXPECT_EQ(out[0].reason, std::nullopt);
  EXPECT_EQ(out[1].reason, std::nullopt);
  // Without a baseline (none yet), only the peers judge it: not cut.
  auto in = baselined(19.9, true);
  in[2].baseline_latency_ms = -1;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
  EXPECT_EQ(out[2].latency_rule, LatencyRule::peers);
  // Once in a while above it, below it in between: never cut.
  in = baselined(16, false);
  for (int k = 0; k < 10; ++k) {
    in[2].ewma_latency_ms = k % 2 ? 16 : 11;
    out = adaptive_evaluate(o, in);
    EXPECT_EQ(out[2].reason, std::nullopt) << k;
    in[2].above_baseline = out[2].above_baseline;
  }
  // An explicit latency_threshold is the only latency rule.
  o.latency_threshold = 50ms;
  out = adaptive_evaluate(o, baselined(19.9, true));
  EXPECT_EQ(out[2].reason, std::nullopt);
  EXPECT_FALSE(out[2].above_baseline);
}

// The baseline limit is also at least the noise floor above the expected
// latency: at 1 ms, 5.9 ms twice in a row is not slow, 6.1 ms is.
TEST(AdaptiveEvaluate, TheBaselineRuleHasTheNoiseFloorToo) {
  AdaptiveOptions o = adaptive_options();
  o.median_factor = 100;  // the peers' limit out of the way
  std::vector<AdaptiveInput> in = {{100, 1, 0, 1}, {100, 1, 0, 1}, {100, 5.9, 0, 1}};
  for (AdaptiveInput& b : in) b.baseline_latency_ms = 1;
  in[2].above_baseline = true;
  auto out = adaptive_evaluate(o, in);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 6.0);
  EXPECT_EQ(out[2].reason, std::nullopt);
  in[2].ewma_latency_ms = 6.1;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, WeightReason::latency);
}

// A slowdown the whole pool shares (a common dependency, more load) cuts
// nobody: the baseline is scaled by the pool's rise (the lower median of the
// backends' latency / baseline). A backend that rose well beyond the others
// still is.
TEST(AdaptiveEvaluate, ASlowdownThePoolSharesCutsNobody) {
  AdaptiveOptions o = adaptive_options();
  auto in = baselined(20, true, 20);
  for (AdaptiveInput& b : in) b.above_baseline = true;
  auto out = adaptive_evaluate(o, in);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].reason, std::nullopt) << i;
    EXPECT_FALSE(out[i].above_baseline) << i;
  }
  EXPECT_DOUBLE_EQ(out[2].latency_reference_ms, 20.0);  // peers: median 20 ms; baseline: 10 ms x rise 2
  in = baselined(31, true, 20);  // the pool rose 2x, C 3.1x: above 1.5 x 20 ms
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, WeightReason::latency);
  EXPECT_EQ(out[2].latency_rule, LatencyRule::baseline);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 30.0);
  // A pool that got faster does not make a backend that did not slow.
  in = baselined(10, true, 6);
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
}

// A backend cut by its baseline recovers under that limit (0.8 x 15 ms), not
// under the peers' (0.8 x 20 ms): back at 10 ms it recovers, at 13 ms it holds.
TEST(AdaptiveEvaluate, ACutBackendRecoversUnderTheLowerLimit) {
  AdaptiveOptions o = adaptive_options();
  auto in = baselined(13, false);
  in[2].factor = 0.75;
  auto out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, std::nullopt);
  EXPECT_DOUBLE_EQ(out[2].latency_limit_ms, 15.0);
  in[2].ewma_latency_ms = 10;
  out = adaptive_evaluate(o, in);
  EXPECT_EQ(out[2].reason, WeightReason::recover);
  EXPECT_DOUBLE_EQ(out[2].factor, 1.0);
}

TEST(EwmaFold, HistoryAgesWithIntervalsNotSamples) {
  EXPECT_DOUBLE_EQ(ewma_fold(-1, 7), 7);
  EXPECT_NEAR(ewma_fold(100, 0), 20, 1e-9);
  EXPECT_NEAR(ewma_fold(100, 0, 2), 4, 1e-9);
  EXPECT_NEAR(ewma_fold(100, 0, 3), 0.8, 1e-9);
  EXPECT_NEAR(ewma_fold(100, 10, 0), ewma_fold(100, 10, 1), 1e-12);  // at least one interval
  EXPECT_NEAR(ewma_fold(100, 0, 1, kBaselineAlpha), 90, 1e-9);         // the baseline's slower fold
  EXPECT_NEAR(ewma_fold(100, 0, 2, kBaselineAlpha), 81, 1e-9);
}

// Feeds `n` responses of `latency` to backend i, `errors` of them failed.
void feed(Pool& pool, uint32_t i, int n, milliseconds latency, int errors = 0) {
  auto snap = pool.snapshot();
  for (int k = 0; k < n; ++k) snap->record_response(i, latency, k < errors ? 500 : 200, k >= errors);
}

// One 1 s interval of the three-backend pools below: backend i gets
// responses[i] responses of latency[i], then the pool ticks.
std::vector<WeightEvent> interval(Pool& pool, TimePoint& now, std::array<int, 3> responses,
                                  std::array<milliseconds, 3> latency) {
  for (uint32_t i = 0; i < 3; ++i) feed(pool, i, responses[i], latency[i]);
  now += 1s;
  return pool.tick(now);
}

TEST(PoolAdaptive, SlowBackendLosesShareAndRegainsIt) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);  // starts the first interval
  std::vector<double> factors;
  // 6 intervals of C being 20x slower.
  for (int k = 0; k < 6; ++k) {
    interval(pool, now, {100, 100, 100}, {10ms, 10ms, 200ms});
    factors.push_back(pool.snapshot()->factor(2));
  }
  EXPECT_DOUBLE_EQ(factors[0], 0.75);
  for (size_t k = 1; k < factors.size(); ++k) EXPECT_LT(factors[k], factors[k - 1]);
  EXPECT_EQ(pool.snapshot()->factor(0), 1.0);
  EXPECT_EQ(pool.decisions(WeightReason::latency), 6u);
  auto c = picks(pool, 10000, now);
  EXPECT_LT(c[2], 1000u);
  // Delay removed: back to its full weight within the documented bound:
  // EWMA decay (20x: 2 intervals) + (1 - factor) / cut intervals.
  double low = pool.snapshot()->factor(2);
  int intervals = 0;
  while (pool.snapshot()->factor(2) < 1.0 && intervals < 20) {
    interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms});
    ++intervals;
  }
  EXPECT_LE(intervals, 3 + int(std::ceil((1 - low) / 0.25)));
  EXPECT_EQ(pool.snapshot()->factor(2), 1.0);
  EXPECT_EQ(pool.snapshot()->balancer().backend(2).balance_weight, 0u);
  c = picks(pool, 3000, now);
  EXPECT_NEAR(double(c[2]), 1000, 2);
}

// One of three 10 ms backends slows to 20 ms for good: cut from the second
// interval (its baseline's rule, twice in a row), a few times while its
// baseline is still what it was, then held where it is (its baseline has
// become 20 ms and the peers' limit, 2 x 10 ms, is not broken, but 20 ms is
// above 0.8 x that: no recovery); back at 10 ms it regains its weight.
TEST(PoolAdaptive, ABackendTwiceAsSlowAsItWasIsCutHeldThenRestored) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  for (int k = 0; k < 20; ++k) EXPECT_TRUE(interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms}).empty());
  int first_cut = 0;
  std::vector<double> factors;
  for (int k = 1; k <= 30; ++k) {
    for (const WeightEvent& e : interval(pool, now, {100, 100, 100}, {10ms, 10ms, 20ms})) {
      EXPECT_EQ(e.backend, "C");
      EXPECT_EQ(e.reason, WeightReason::latency);
      EXPECT_NE(e.detail.find("from its own baseline"), std::string::npos) << e.detail;
      if (!first_cut) first_cut = k;
    }
    factors.push_back(pool.snapshot()->factor(2));
  }
  EXPECT_EQ(first_cut, 2);
  for (size_t k = 1; k < factors.size(); ++k) EXPECT_LE(factors[k], factors[k - 1]) << k;
  EXPECT_LT(factors.back(), 0.6);
  EXPECT_GT(factors.back(), 0.3);
  EXPECT_EQ(factors.back(), factors[factors.size() - 15]);  // held for the last 15 intervals
  EXPECT_EQ(pool.snapshot()->factor(0), 1.0);
  EXPECT_EQ(pool.snapshot()->factor(1), 1.0);
  for (int k = 0; k < 10; ++k) interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms});
  EXPECT_EQ(pool.snapshot()->factor(2), 1.0);
}

// The whole pool slowing from 10 ms to 20 ms (a shared dependency) cuts nobody.
TEST(PoolAdaptive, ThePoolSlowingTogetherCutsNobody) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  for (int k = 0; k < 20; ++k) interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms});
  for (int k = 0; k < 20; ++k) EXPECT_TRUE(interval(pool, now, {100, 100, 100}, {20ms, 21ms, 20ms}).empty()) << k;
  EXPECT_EQ(pool.decisions(WeightReason::latency), 0u);
}

// Scheduling noise on a busy host, at about 1 ms: now and then a backend has
// an interval in which a fifth of its responses wait 5-20 ms for a CPU, so
// its mean is 2-4x the others'. Nobody is cut (with a limit of 2 x the
// median, and no noise floor, such intervals cut backends to half their
// weight and less).
TEST(PoolAdaptive, SchedulingNoiseAtAMillisecondCutsNobody) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  uint64_t seed = 12345;
  const auto uniform = [&seed] {  // deterministic, in [0, 1)
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(seed >> 11) / double(1ULL << 53);
  };
  int noisy_intervals = 0;
  for (int k = 0; k < 300; ++k) {
    auto snap = pool.snapshot();
    for (uint32_t i = 0; i < 3; ++i) {
      const bool noisy = uniform() < 0.1;
      noisy_intervals += noisy;
      for (int r = 0; r < 100; ++r) {
        double us = 300 + 1200 * uniform();  // 0.3-1.5 ms
        if (noisy && uniform() < 0.2) us += 5000 + 15000 * uniform();
        snap->record_response(i, std::chrono::microseconds(int64_t(us)), 200, true);
      }
    }
    now += 1s;
    for (const WeightEvent& e : pool.tick(now)) ADD_FAILURE() << "interval " << k << ": " << e.to_string();
  }
  EXPECT_GT(noisy_intervals, 60);
  EXPECT_EQ(pool.decisions(WeightReason::latency), 0u);
}

// After a full recovery and kMaxRecoverHold intervals at full weight, the
// next incident is a new one: it recovers one step per interval again, as
// fast as the first. (The reset set the hold back to 1 but left "the last
// change was a recovery step" set, so the next cut doubled the hold: every
// later incident recovered at half speed.)
TEST(PoolAdaptive, RecoveryAfterSettlingAtFullWeightIsNotSlowedDown) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  // One slow interval of C, then fast ones until it is back at full weight:
  // the intervals (counted from the first fast one) that took a recovery step.
  const auto incident = [&] {
    interval(pool, now, {100, 100, 100}, {10ms, 10ms, 200ms});
    EXPECT_LT(pool.snapshot()->factor(2), 1.0);
    std::vector<int> steps;
    for (int k = 1; k <= 40 && pool.snapshot()->factor(2) < 1.0; ++k)
      for (const WeightEvent& e : interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms}))
        if (e.reason == WeightReason::recover) steps.push_back(k);
    EXPECT_EQ(pool.snapshot()->factor(2), 1.0);
    return steps;
  };
  const std::vector<int> first = incident();
  ASSERT_GE(first.size(), 2u);
  for (size_t j = 1; j < first.size(); ++j) EXPECT_EQ(first[j], first[j - 1] + 1) << "hold 1: a step per interval";
  // Settled: kMaxRecoverHold intervals and more at full weight.
  for (unsigned k = 0; k < kMaxRecoverHold + 4; ++k) interval(pool, now, {100, 100, 100}, {10ms, 10ms, 10ms});
  ASSERT_EQ(pool.snapshot()->factor(2), 1.0);
  EXPECT_EQ(incident(), first);
}

// The backoff itself: a cut right after a recovery step doubles the hold; a
// cut after kMaxRecoverHold intervals at full weight does not.
TEST(AdaptiveEvaluate, HoldDoublesOnlyWhenCutRightAfterARecoveryStep) {
  AdaptiveOptions o = adaptive_options();
  o.latency_threshold = 50ms;
  AdaptiveInput slow{100, 100, 0, 0.75};
  slow.last_up = true;
  EXPECT_EQ(adaptive_evaluate(o, {slow})[0].hold, 2u);
  AdaptiveInput fast{100, 10, 0, 1.0};
  fast.last_up = true;  // its last change was the step to full weight
  for (unsigned k = 0; k < kMaxRecoverHold; ++k) {
    const AdaptiveOutput out = adaptive_evaluate(o, {fast})[0];
    fast.hold = out.hold;
    fast.clean = out.clean;
    fast.last_up = out.last_up;
    fast.full = out.full;
  }
  EXPECT_EQ(fast.hold, 1u);
  EXPECT_FALSE(fast.last_up);
  AdaptiveInput cut = fast;
  cut.ewma_latency_ms = 100;
  const AdaptiveOutput out = adaptive_evaluate(o, {cut})[0];
  EXPECT_EQ(out.reason, WeightReason::latency);
  EXPECT_EQ(out.hold, 1u);
}

// A backend cut low in a quiet pool gets fewer responses per interval than a
// judgement needs: its intervals are carried until it has enough, so it is
// judged over longer spans and still regains its weight (it used to stay at
// its cut factor for good).
TEST(PoolAdaptive, QuietBackendStillRegainsItsWeight) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  for (int k = 0; k < 6; ++k) interval(pool, now, {100, 100, 100}, {10ms, 10ms, 200ms});
  const double low = pool.snapshot()->factor(2);
  ASSERT_LT(low, 0.2);
  // Now fast, but only 2 responses per interval (kAdaptiveMinSamples is 5):
  // judged every third interval, when the carried responses reach 6.
  static_assert(kAdaptiveMinSamples == 5);
  std::vector<int> recovered_at;
  for (int k = 1; k <= 30 && pool.snapshot()->factor(2) < 1.0; ++k)
    if (!interval(pool, now, {100, 100, 2}, {10ms, 10ms, 10ms}).empty()) recovered_at.push_back(k);
  EXPECT_EQ(pool.snapshot()->factor(2), 1.0);
  const int steps = int(std::ceil((1 - low) / 0.25));
  ASSERT_EQ(int(recovered_at.size()), steps);
  // Three intervals' history is 0.2^3 of the EWMA: 200 ms -> 11.6 ms, already
  // below 0.8 x the limit (20 ms), so the first judgement recovers a step.
  for (int j = 0; j < steps; ++j) EXPECT_EQ(recovered_at[j], 3 * (j + 1));
  EXPECT_EQ(pool.decisions(WeightReason::recover), unsigned(steps));
}

TEST(PoolAdaptive, ErrorsCutToTheFloorNeverBelow) {
  PoolConfig cfg = pool_config({2, 2});
  cfg.adaptive = adaptive_options();
  cfg.adaptive.cut = 0.5;
  cfg.adaptive.min_weight_ratio = 0.2;
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  for (int k = 0; k < 10; ++k) {
    feed(pool, 0, 100, 5ms);
    feed(pool, 1, 100, 5ms, 30);
    now += 1s;
    auto events = pool.tick(now);
    for (const auto& e : events) EXPECT_NE(e.to_string().find("error rate"), std::string::npos);
    EXPECT_GE(pool.snapshot()->factor(1), 0.2);
  }
  EXPECT_DOUBLE_EQ(pool.snapshot()->factor(1), 0.2);
  EXPECT_EQ(pool.decisions(WeightReason::errors), 3u);  // 1 -> .5 -> .25 -> .2
  EXPECT_EQ(pool.snapshot()->balancer().backend(1).balance_weight, 40u);
  EXPECT_EQ(pool.snapshot()->balancer().backend(0).balance_weight, 200u);
  EXPECT_NEAR(pool.snapshot()->display_effective_weight(1), 0.4, 1e-9);
}

// A backend slower in proportion to its (lower) weight: latency depends on its
// load relative to its capacity, so at its weight share it is as fast as the
// others. Its weight must settle (no cut, no oscillation).
TEST(PoolAdaptive, ProportionallySlowerBackendIsNotPunished) {
  PoolConfig cfg = pool_config({4, 2, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  const double capacity[] = {4, 2, 1};
  std::vector<int> direction_changes(3, 0), last_direction(3, 0);
  std::vector<double> last_factor(3, 1.0);
  for (int k = 0; k < 40; ++k) {
    auto c = picks(pool, 700, now);
    for (uint32_t i = 0; i < 3; ++i) {
      // Latency grows with load per unit of capacity; the small box is also 1.5x slower per request.
      double load = double(c[i]) / 700.0 / (capacity[i] / 7.0);
      double ms = 10.0 * (i == 2 ? 1.5 : 1.0) * (0.5 + 0.5 * load);
      feed(pool, i, int(c[i]), milliseconds(int64_t(ms)));
    }
    now += 1s;
    pool.tick(now);
    for (uint32_t i = 0; i < 3; ++i) {
      double f = pool.snapshot()->factor(i);
      int dir = f > last_factor[i] ? 1 : f < last_factor[i] ? -1 : 0;
      if (dir != 0 && last_direction[i] != 0 && dir != last_direction[i]) ++direction_changes[i];
      if (dir != 0) last_direction[i] = dir;
      last_factor[i] = f;
    }
  }
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(pool.snapshot()->factor(i), 1.0) << i;
    EXPECT_LE(direction_changes[i], 1) << i;
  }
  EXPECT_EQ(pool.decisions(WeightReason::latency), 0u);
}

// A backend whose latency rises with its load (a box near saturation): the
// controller cuts it and probes back up, but the recovery backoff makes the
// probes rare (at most one per kMaxRecoverHold intervals) and it stays cut.
TEST(PoolAdaptive, LoadDependentLatencySettles) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  std::vector<double> history;
  for (int k = 0; k < 60; ++k) {
    auto c = picks(pool, 900, now);
    for (uint32_t i = 0; i < 3; ++i) {
      double share = double(c[i]) / 900.0;
      // C saturates above 25 % of the traffic: latency 10 ms below, up to 60 ms at 1/3.
      double ms = i == 2 && share > 0.25 ? 10 + (share - 0.25) * 600 : 10;
      feed(pool, i, int(c[i]), milliseconds(int64_t(ms)));
    }
    now += 1s;
    pool.tick(now);
    history.push_back(pool.snapshot()->factor(2));
  }
  // After settling (the second half): at most two upward probes, never back to full.
  int probes = 0;
  for (size_t k = 31; k < history.size(); ++k) {
    if (history[k] > history[k - 1]) ++probes;
    EXPECT_LT(history[k], 1.0);
    EXPECT_GT(history[k], 0.4);
  }
  EXPECT_LE(probes, 2);
}


// A reload that shortens the adaptive interval takes effect within one new
// interval: the evaluation was left on the old schedule (10 minutes lowered to
// 1 s: no judgement for up to 10 minutes, a slow backend kept its full share).
TEST(PoolAdaptive, AShortenedIntervalTakesEffectAtOnce) {
  PoolConfig cfg = pool_config({1, 1, 1});
  cfg.adaptive = adaptive_options();
  cfg.adaptive.interval = 600s;
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);  // the first interval: 10 minutes
  cfg.adaptive.interval = 1s;
  pool.update(cfg);
  for (int k = 0; k < 3; ++k) interval(pool, now, {100, 100, 100}, {10ms, 10ms, 200ms});
  EXPECT_LT(pool.snapshot()->factor(2), 1.0);
  EXPECT_GE(pool.decisions(WeightReason::latency), 2u);
}

// A backend whose passive out period ends while the active checks hold it
// unhealthy is not back in service: no slow start then (the log said "back in
// service, ramping" and counted a decision for a backend taking no traffic,
// then "ramp complete" while it still took none). Its ramp starts when the
// checks bring it back.
TEST(PoolSlowStart, NoRampWhileTheActiveChecksHoldItOut) {
  Pool pool(pool_config({1, 1}, 10s));
  pool.snapshot()->report_failure(1, t0);
  pool.snapshot()->set_healthy(1, false, t0 + 100ms);
  EXPECT_TRUE(pool.tick(t0 + 2s).empty());  // fail_timeout (1 s) has passed: no longer out, still unhealthy
  EXPECT_FALSE(pool.snapshot()->passive_out(1));
  EXPECT_FALSE(pool.snapshot()->available(1));
  EXPECT_TRUE(pool.tick(t0 + 20s).empty());
  EXPECT_EQ(pool.decisions(WeightReason::slow_start), 0u);
  EXPECT_EQ(pool.decisions(WeightReason::slow_start_done), 0u);
  pool.snapshot()->set_healthy(1, true, t0 + 30s);
  auto events = pool.tick(t0 + 30s);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, WeightReason::slow_start);
  EXPECT_TRUE(pool.snapshot()->available(1));
  EXPECT_DOUBLE_EQ(pool.snapshot()->factor(1), kSlowStartFloor);
}

// An operator who finds a backend cut too far raises min_weight_ratio (a
// reload, an admin change): the backend is lifted to the new floor at the
// next evaluation, failing or not. It used to stay below it for as long as it
// stayed bad (a cut never raises a factor, and recovery needs good figures),
// so `weight_factor` showed 0.10 under a configured floor of 0.5.
TEST(PoolAdaptive, RaisedMinWeightRatioLiftsACutBackendToIt) {
  PoolConfig cfg = pool_config({2, 2});
  cfg.adaptive = adaptive_options();
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  const auto failing_interval = [&] {
    feed(pool, 0, 100, 5ms);
    feed(pool, 1, 100, 5ms, 30);
    now += 1s;
    return pool.tick(now);
  };
  for (int k = 0; k < 12; ++k) failing_interval();
  ASSERT_NEAR(pool.snapshot()->factor(1), 0.1, 0.001);  // at the floor
  cfg.adaptive.min_weight_ratio = 0.5;
  pool.update(cfg);
  const std::vector<WeightEvent> events = failing_interval();  // still failing
  EXPECT_DOUBLE_EQ(pool.snapshot()->factor(1), 0.5);
  EXPECT_EQ(pool.snapshot()->balancer().backend(1).balance_weight, 100u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].to_string().find("weight factor 0.10 -> 0.50 (recover: raised to min_weight_ratio 0.50)"),
            std::string::npos)
      << events[0].to_string();
  for (int k = 0; k < 5; ++k) failing_interval();
  EXPECT_DOUBLE_EQ(pool.snapshot()->factor(1), 0.5);  // and cut no further
}


// error_threshold 0 ("cut on any error"): after an interval with errors, the
// backend recovers once it answers without errors. The EWMA of its error
// rate only decays geometrically (0.2 per interval) and never reaches 0, so
// it used to stay "failing" (> 0) for hundreds of intervals: cut every one
// of them down to the floor, and never "clean" (<= 0.8 x 0) to recover.
TEST(PoolAdaptive, ZeroErrorThresholdStillRecovers) {
  PoolConfig cfg = pool_config({1, 1});
  cfg.adaptive = adaptive_options();
  cfg.adaptive.error_threshold = 0;
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);
  feed(pool, 0, 100, 5ms);
  feed(pool, 1, 100, 5ms, 10);  // 10 % errors in one interval
  now += 1s;
  pool.tick(now);
  ASSERT_DOUBLE_EQ(pool.snapshot()->factor(1), 0.75);
  int intervals = 0;
  while (pool.snapshot()->factor(1) < 1.0 && intervals < 30) {
    feed(pool, 0, 100, 5ms);
    feed(pool, 1, 100, 5ms);
    now += 1s;
    pool.tick(now);
    ++intervals;
  }
  EXPECT_EQ(pool.snapshot()->factor(1), 1.0);
  EXPECT_LE(intervals, 10);
  EXPECT_GE(pool.snapshot()->factor(1), 0.75);
}

}  // namespace
}  // namespace heft::upstream
