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
//   * too slow, with latency_threshold set: EWMA latency > latency_threshold,
//     taken as given. With latency_threshold 0 (relative), by two references:
//     - its peers: EWMA latency > median_factor x the pool median (the lower
//       median of the EWMA latencies of the backends with samples, so with two
//       backends the faster one is the reference);
//     - its own recent baseline (a slow EWMA of its interval means, the newest
//       weighing kBaselineAlpha: about its last ten judgements), scaled by the
//       pool's common rise (the lower median over the backends of EWMA latency
//       / baseline, at least 1, so a slowdown the whole pool shares, a common
//       dependency or more load, cuts nobody): EWMA latency > kBaselineFactor
//       x that expected latency, at two judgements in a row (a single
//       interval's mean is too noisy a sign on its own). This catches a
//       backend going from 10 ms to 20 ms while its peers stay at 10 ms, which
//       median_factor 2 would not; once the slowdown has lasted long enough to
//       become its baseline, only the peers judge it.
//     Both limits are at least kLatencyNoiseFloorMs above their reference: a
//     difference smaller than that is not slowness but noise (on a busy host
//     the scheduler delays some responses by a few ms at random; at 1 ms, that
//     doubled a backend's mean). The backend's limit is the lower of the two
//     (the peers' alone until two backends have baselines; with fewer than two
//     backends with samples, latency is not judged). A backend slower in
//     proportion to its lower weight is as fast as the others at its share,
//     so neither reference punishes it: latency is never judged against a
//     weight share.
//   * too many errors: EWMA error rate > error_threshold. An EWMA error rate
//     below kErrorRateResolution (0.01 %) counts as 0: it only decays
//     geometrically and never reaches 0, so with error_threshold 0 a backend
//     that once had errors would stay "failing" and never be clean again.
//   A bad backend's factor is multiplied by (1 - cut), never below
//   min_weight_ratio; a factor below it (min_weight_ratio was raised since
//   the cut) is lifted to it at the next evaluation, whatever the figures.
//   A backend back within bounds with hysteresis (EWMA latency < 0.8 x its
//   latency limit and error rate < 0.8 x error_threshold) regains `cut` of its
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
// Relative latency rules (latency_threshold 0): a backend is not slow unless
// its EWMA latency exceeds its reference by more than this.
inline constexpr double kLatencyNoiseFloorMs = 5.0;
inline constexpr double kBaselineAlpha = 0.1;   // weight of the newest interval in a backend's baseline
inline constexpr double kBaselineFactor = 1.5;  // slower than this x its (pool-scaled) baseline is slow
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

// Which rule set a backend's latency limit.
enum class LatencyRule {
  none,       // not judged (latency_threshold 0 and fewer than two backends with samples)
  threshold,  // latency_threshold
  peers,      // median_factor x the pool median (and kLatencyNoiseFloorMs above it)
  baseline,   // kBaselineFactor x its own baseline x the pool's rise (and kLatencyNoiseFloorMs above it)
};

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
  // Its baseline latency before this interval's fold (< 0: none yet), and
  // whether the last judgement found it above its baseline limit.
  double baseline_latency_ms = -1;
  bool above_baseline = false;
};

struct AdaptiveOutput {
  double factor = 1;                   // adaptive factor after the evaluation
  std::optional<WeightReason> reason;  // set when it changed
  double latency_limit_ms = 0;         // the latency limit applied (0 = none): the lower of the rules'
  LatencyRule latency_rule = LatencyRule::none;  // the rule it came from
  double latency_reference_ms = 0;     // that rule's reference: the pool median, or the expected latency
  bool above_baseline = false;         // to carry (above its baseline limit at this judgement)
  unsigned hold = 1, clean = 0, full = 0;  // backoff state to carry
  bool last_up = false;
  bool to_floor = false;  // raised to min_weight_ratio (it was raised above the factor)
};

// One evaluation of a pool (inputs and outputs by backend index).
std::vector<AdaptiveOutput> adaptive_evaluate(const AdaptiveOptions& options, const std::vector<AdaptiveInput>& in);

// Folds a value measured over `intervals` intervals into an EWMA (`previous`
// < 0: no history yet): the history weighs (1 - alpha)^intervals.
double ewma_fold(double previous, double value, unsigned intervals = 1, double alpha = kEwmaAlpha);

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
