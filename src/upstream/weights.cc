#include "upstream/weights.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace heft::upstream {

double slow_start_factor(std::chrono::nanoseconds elapsed, std::chrono::nanoseconds window) {
  if (window.count() <= 0 || elapsed >= window) return 1.0;
  if (elapsed.count() <= 0) return kSlowStartFloor;
  auto step = static_cast<unsigned>((static_cast<__int128>(elapsed.count()) * kSlowStartSteps) / window.count());
  return kSlowStartFloor + (1.0 - kSlowStartFloor) * double(step) / double(kSlowStartSteps);
}

uint32_t scaled_weight(uint32_t weight, double factor) {
  if (weight == 0) return 0;
  double w = std::round(double(weight) * kWeightResolution * std::clamp(factor, 0.0, 1.0));
  return static_cast<uint32_t>(std::clamp(w, 1.0, 4e9));
}

std::string_view reason_name(WeightReason reason) {
  switch (reason) {
    case WeightReason::latency: return "latency";
    case WeightReason::errors: return "errors";
    case WeightReason::recover: return "recover";
    case WeightReason::slow_start: return "slow_start";
    case WeightReason::slow_start_done: return "slow_start_done";
  }
  return "?";
}

double ewma_fold(double previous, double value, unsigned intervals, double alpha) {
  if (previous < 0) return value;
  const double keep = std::pow(1 - alpha, std::clamp(intervals, 1u, kMaxCarriedIntervals));
  return (1 - keep) * value + keep * previous;
}

namespace {
// Lower median (of two values, the smaller): with two backends, the faster
// one is the reference. `values` is not empty.
double lower_median(std::vector<double> values) {
  const size_t mid = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

// A relative limit: `factor` x the reference, and more than the noise floor above it.
double relative_limit(double factor, double reference) {
  return std::max(factor * reference, reference + kLatencyNoiseFloorMs);
}
}  // namespace

std::vector<AdaptiveOutput> adaptive_evaluate(const AdaptiveOptions& options, const std::vector<AdaptiveInput>& in) {
  std::vector<AdaptiveOutput> out(in.size());
  const bool relative = options.latency_threshold.count() <= 0;
  // The pool-wide references of the relative rules (see weights.h).
  double peer_limit = relative ? 0 : double(options.latency_threshold.count());
  double median = 0;
  double pool_rise = 0;  // 0: fewer than two baselines, the baseline rule is not applied
  if (relative) {
    std::vector<double> latencies, rises;
    for (const AdaptiveInput& b : in) {
      if (b.samples < kAdaptiveMinSamples) continue;
      latencies.push_back(b.ewma_latency_ms);
      if (b.baseline_latency_ms > 0) rises.push_back(b.ewma_latency_ms / b.baseline_latency_ms);
    }
    if (latencies.size() >= 2) {  // else nothing to compare with: latency is not judged
      median = lower_median(latencies);
      peer_limit = relative_limit(options.median_factor, median);
    }
    if (rises.size() >= 2) pool_rise = std::max(1.0, lower_median(rises));
  }
  const double floor = std::clamp(options.min_weight_ratio, 0.0, 1.0);
  for (size_t i = 0; i < in.size(); ++i) {
    const AdaptiveInput& b = in[i];
    AdaptiveOutput& o = out[i];
    o.factor = b.factor;
    o.latency_limit_ms = peer_limit;
    o.latency_rule = peer_limit <= 0 ? LatencyRule::none : relative ? LatencyRule::peers : LatencyRule::threshold;
    o.latency_reference_ms = median;
    o.hold = std::max(1u, b.hold);
    o.clean = b.clean;
    o.last_up = b.last_up;
    o.full = b.full;
    // Judged now: above its baseline limit or not (false where that rule does
    // not apply); not judged (too few responses): as it was.
    o.above_baseline = b.samples >= kAdaptiveMinSamples ? false : b.above_baseline;
    bool slow_for_itself = false;
    if (pool_rise > 0 && b.baseline_latency_ms > 0 && b.samples >= kAdaptiveMinSamples) {
      const double expected = b.baseline_latency_ms * pool_rise;
      const double self_limit = relative_limit(kBaselineFactor, expected);
      o.above_baseline = b.ewma_latency_ms > self_limit;
      slow_for_itself = o.above_baseline && b.above_baseline;  // two judgements in a row
      // Its limit (reported, and the bound it recovers under) is the lower one,
      // unless the peers' rule is what it breaks.
      if (self_limit < peer_limit && !(b.ewma_latency_ms > peer_limit)) {
        o.latency_limit_ms = self_limit;
        o.latency_rule = LatencyRule::baseline;
        o.latency_reference_ms = expected;
      }
    }
    if (b.factor < floor) {
      // Below the bound: min_weight_ratio was raised since the backend was
      // cut. Lifted to it, whatever its figures (a cut never raises a factor,
      // and a failing backend would not recover).
      o.factor = floor;
      o.reason = WeightReason::recover;
      o.to_floor = true;
      continue;
    }
    if (b.samples < kAdaptiveMinSamples) continue;  // too little traffic to judge: hold
    const bool slow = (peer_limit > 0 && b.ewma_latency_ms > peer_limit) || slow_for_itself;
    // The EWMA decays by 0.2 an interval and never reaches 0: below the
    // resolution it is 0, or error_threshold 0 would never let a backend be clean.
    const double error = b.ewma_error < kErrorRateResolution ? 0.0 : b.ewma_error;
    const bool failing = error > options.error_threshold;
    if (slow || failing) {
      o.clean = 0;
      o.full = 0;
      double next = std::max(floor, b.factor * (1.0 - options.cut));
      if (next < b.factor) {
        if (b.last_up) o.hold = std::min(kMaxRecoverHold, o.hold * 2);  // the step overshot: back off
        o.last_up = false;
        o.factor = next;
        o.reason = slow ? WeightReason::latency : WeightReason::errors;
      }
      continue;
    }
    const bool fast = o.latency_limit_ms <= 0 || b.ewma_latency_ms < kRecoverHysteresis * o.latency_limit_ms;
    const bool clean = error <= kRecoverHysteresis * options.error_threshold;
    if (b.factor >= 1.0) {
      if (++o.full >= kMaxRecoverHold) {
        // Settled at full weight: the recovery is over, so a later cut is a
        // new incident, not the last step overshooting (no doubled hold).
        o.hold = 1;
        o.last_up = false;
      }
      continue;
    }
    if (!(fast && clean)) {
      o.clean = 0;
      continue;
    }
    if (++o.clean < o.hold) continue;
    o.clean = 0;
    o.factor = std::min(1.0, b.factor + options.cut);
    o.last_up = true;
    o.reason = WeightReason::recover;
  }
  return out;
}

std::string WeightEvent::to_string() const {
  return fmt::format("pool {} backend {}: weight factor {:.2f} -> {:.2f} ({}{}{})", pool, backend,
                     factor_before, factor_after, reason_name(reason), detail.empty() ? "" : ": ", detail);
}

}  // namespace heft::upstream
