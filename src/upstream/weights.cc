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

double ewma_fold(double previous, double value, unsigned intervals) {
  if (previous < 0) return value;
  const double keep = std::pow(1 - kEwmaAlpha, std::clamp(intervals, 1u, kMaxCarriedIntervals));
  return (1 - keep) * value + keep * previous;
}

std::vector<AdaptiveOutput> adaptive_evaluate(const AdaptiveOptions& options, const std::vector<AdaptiveInput>& in) {
  std::vector<AdaptiveOutput> out(in.size());
  double limit = double(options.latency_threshold.count());
  if (limit <= 0) {
    std::vector<double> latencies;
    for (const AdaptiveInput& b : in)
      if (b.samples >= kAdaptiveMinSamples) latencies.push_back(b.ewma_latency_ms);
    if (latencies.size() >= 2) {
      // Lower median: with two backends, the faster one is the reference.
      size_t mid = (latencies.size() - 1) / 2;
      std::nth_element(latencies.begin(), latencies.begin() + mid, latencies.end());
      limit = std::max(kMinRelativeLatencyLimitMs, options.median_factor * latencies[mid]);
    } else {
      limit = 0;  // nothing to compare with: latency is not judged
    }
  }
  const double floor = std::clamp(options.min_weight_ratio, 0.0, 1.0);
  for (size_t i = 0; i < in.size(); ++i) {
    const AdaptiveInput& b = in[i];
    AdaptiveOutput& o = out[i];
    o.factor = b.factor;
    o.latency_limit_ms = limit;
    o.hold = std::max(1u, b.hold);
    o.clean = b.clean;
    o.last_up = b.last_up;
    o.full = b.full;
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
    const bool slow = limit > 0 && b.ewma_latency_ms > limit;
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
    const bool fast = limit <= 0 || b.ewma_latency_ms < kRecoverHysteresis * limit;
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
