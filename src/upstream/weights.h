// Dynamic weights: slow start and adaptive weights, as pure functions.
//
// Mechanism: every backend has a weight factor in [0, 1], the product of its
// slow-start ramp and its adaptive factor. While any backend of a pool has a
// factor below 1, every backend is balanced by
//   balance_weight = max(1, round(weight x kWeightResolution x factor))
// (weight 0 stays 0: drained); when every factor is 1 the plain configured
// weights are used. Smooth WRR, random, least_conn and the hash policies only
// depend on the ratios of weights, so the common x100 scale keeps the split
// exact while allowing 1 % steps.
//
// Slow start (nginx Plus `slow_start`): a backend that comes back into service
// (passive failures expired, an active check passes again, or it is added to a
// running pool) starts at kSlowStartFloor (10 %) of its weight and ramps
// linearly to 100 % over the window, in kSlowStartSteps (20) equal steps, so a
// pool snapshot is rebuilt at most 20 times per window. Not at process start.
//
// Adaptive weights: per backend, the mean latency and the error rate of each
// interval are folded into an EWMA (kEwmaAlpha = 0.8 weight for the newest
// interval). An interval with fewer than kAdaptiveMinSamples responses is not
// folded but carried into the next, until the backend has that many: a
// backend cut to a small share of a quiet pool is judged over longer spans
// instead of never again. The history then weighs (1 - kEwmaAlpha)^k for k
// intervals, as if each had been folded (it ages with time, not with samples).
// Every interval, a backend with at least kAdaptiveMinSamples responses since
// its last judgement is judged:
//   * too slow: EWMA latency > latency_threshold, or, when that is 0,
//     > median_factor x the pool median (the lower median of the EWMA latencies
//     of the backends with samples), and never below kMinRelativeLatencyLimitMs:
//     below a millisecond, differences between backends are mostly scheduling
//     noise, not a slower backend. Latency is judged against the pool's
//     median, never against a weight share, so a backend slower in proportion
//     to its lower weight is not punished.
//   * too many errors: EWMA error rate > error_threshold. An EWMA error rate
//     below kErrorRateResolution (0.01 %) counts as 0: it only decays
//     geometrically and never reaches 0, so with error_threshold 0 a backend
//     that once had errors would stay "failing" and never be clean again.
//   A bad backend's factor is multiplied by (1 - cut), never below
//   min_weight_ratio; a factor below it (min_weight_ratio was raised since
//   the cut) is lifted to it at the next evaluation, whatever the figures.
//   A backend back within bounds with hysteresis (EWMA latency < 0.8 x
//   threshold and error rate < 0.8 x error_threshold) regains `cut` of its
//   full weight per interval (factor += cut) up to 1: never above its
//   configured weight. Between the two bands nothing changes.
//   Anti-oscillation backoff: recovering needs `hold` consecutive intervals
//   within bounds (1 at first). A backend cut right after a recovery step
//   (its latency depends on its load, so the step overshot) doubles its hold,
//   up to kMaxRecoverHold (16); the hold is back to 1 once the backend has
//   stayed at its full weight for kMaxRecoverHold intervals, and a cut after
//   that is a new incident: its recovery starts at hold 1 again.
//
// Nothing here reads a clock or takes a lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heft::upstream {

inline constexpr uint32_t kWeightResolution = 100;
inline constexpr double kSlowStartFloor = 0.1;
inline constexpr unsigned kSlowStartSteps = 20;
inline constexpr double kEwmaAlpha = 0.8;
inline constexpr double kRecoverHysteresis = 0.8;
inline constexpr uint64_t kAdaptiveMinSamples = 5;
inline constexpr unsigned kMaxRecoverHold = 16;
inline constexpr double kMinRelativeLatencyLimitMs = 1.0;
inline constexpr double kErrorRateResolution = 1e-4;  // an EWMA error rate below it counts as 0
inline constexpr unsigned kMaxCarriedIntervals = 16;  // (1 - kEwmaAlpha)^16: history gone

struct AdaptiveOptions {
  bool enabled = false;
  std::chrono::milliseconds interval{30000};
  std::chrono::milliseconds latency_threshold{0};  // 0 = median_factor x pool median
  double median_factor = 2.0;
  double error_threshold = 0.05;
  double cut = 0.25;
  double min_weight_ratio = 0.1;

  bool operator==(const AdaptiveOptions&) const = default;
};

// The slow-start factor `elapsed` into a ramp of length `window`: from
// kSlowStartFloor to 1 in kSlowStartSteps equal steps; 1 at or after the end.
double slow_start_factor(std::chrono::nanoseconds elapsed, std::chrono::nanoseconds window);

// The weight a backend is balanced by when factors are in use (see above).
uint32_t scaled_weight(uint32_t weight, double factor);

// Why a backend's factor changed.
enum class WeightReason { latency, errors, recover, slow_start, slow_start_done };
std::string_view reason_name(WeightReason reason);
inline constexpr int kWeightReasons = 5;

// One backend's figures and controller state for an adaptive evaluation.
struct AdaptiveInput {
  uint64_t samples = 0;         // responses since the last fold (carried intervals included)
  double ewma_latency_ms = 0;   // after folding them in (when there are enough)
  double ewma_error = 0;        // fraction 0..1, idem
  double factor = 1;            // adaptive factor before the evaluation
  // Backoff state (carried from one evaluation to the next by the caller).
  unsigned hold = 1;            // clean intervals needed to recover a step
  unsigned clean = 0;           // consecutive clean intervals so far
  bool last_up = false;         // the last change was a recovery step (cleared after kMaxRecoverHold intervals at full)
  unsigned full = 0;            // consecutive intervals at factor 1
};

struct AdaptiveOutput {
  double factor = 1;                   // adaptive factor after the evaluation
  std::optional<WeightReason> reason;  // set when it changed
  double latency_limit_ms = 0;         // the latency threshold applied (0 = none)
  unsigned hold = 1, clean = 0, full = 0;  // backoff state to carry
  bool last_up = false;
  bool to_floor = false;  // raised to min_weight_ratio (it was raised above the factor)
};

// One evaluation of a pool (inputs and outputs by backend index).
std::vector<AdaptiveOutput> adaptive_evaluate(const AdaptiveOptions& options, const std::vector<AdaptiveInput>& in);

// Folds a value measured over `intervals` intervals into an EWMA (`previous`
// < 0: no history yet): the history weighs (1 - kEwmaAlpha)^intervals.
double ewma_fold(double previous, double value, unsigned intervals = 1);

// A decision, for the log.
struct WeightEvent {
  std::string pool;
  std::string backend;
  WeightReason reason;
  double factor_before = 1;  // the backend's total factor (slow start x adaptive)
  double factor_after = 1;
  std::string detail;  // e.g. "latency 212.4ms > limit 3.1ms"
  std::string to_string() const;
};

}  // namespace heft::upstream
