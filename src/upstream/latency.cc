// A backend's recent latency and its stall limit (see latency.h).
#include "upstream/latency.h"

#include <algorithm>
#include <cmath>

namespace heft::upstream {

void RecentLatency::fold(const std::array<uint64_t, kLatencyBuckets>& totals,
                         std::chrono::steady_clock::time_point now) {
  double keep = 1.0;
  if (folded && now > folded_at) {
    const double age = std::chrono::duration<double>(now - folded_at).count();
    keep = std::exp(-age / std::chrono::duration<double>(kStallWindow).count());
  }
  folded_at = now;
  folded = true;
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    const uint64_t added = totals[b] >= seen[b] ? totals[b] - seen[b] : totals[b];
    seen[b] = totals[b];
    weight[b] = weight[b] * keep + static_cast<double>(added);
  }
}

std::chrono::milliseconds RecentLatency::stall_limit() const {
  double total = 0;
  for (double w : weight) total += w;
  if (total < kStallMinSamples) return std::chrono::milliseconds(0);
  // The bucket where the cumulative weight reaches 99%, by its upper bound:
  // the limit errs long, never short.
  double below = 0;
  for (size_t b = 0; b + 1 < kLatencyBuckets; ++b) {
    below += weight[b];
    if (below >= 0.99 * total) {
      const auto p99 = std::chrono::milliseconds(kLatencyBucketsMs[b]);
      return std::max(kMinStallLimit, std::chrono::duration_cast<std::chrono::milliseconds>(p99 * kStallFactor));
    }
  }
  return std::chrono::milliseconds(0);
}

}  // namespace heft::upstream
