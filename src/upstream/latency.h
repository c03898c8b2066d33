// A backend's times to the response head: the histogram's buckets, and what
// heft reads from its recent part. A backend keeping a request waiting for
// its head ten times longer than its recent 99th percentile (at least
// kMinStallLimit) is taken for hung: the request counts as a failure of the
// backend, as a timeout would (docs/health.md, "A hung backend"). nginx and
// HAProxy wait out proxy_read_timeout / timeout server (60 s by default) on a
// backend that accepts connections and never answers, and keep sending it
// new requests meanwhile.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace heft::upstream {

// Upper bounds (ms) of the per-backend histogram of the time to the response
// head (+Inf implied).
inline constexpr uint32_t kLatencyBucketsMs[] = {1,   2,   5,   10,  25,  50,   100,  150,  200,   250,
                                                 300, 400, 500, 750, 1000, 2000, 5000, 10000, 30000};
inline constexpr size_t kLatencyBuckets = std::size(kLatencyBucketsMs) + 1;

inline constexpr std::chrono::milliseconds kMinStallLimit{1000};
inline constexpr double kStallFactor = 10;  // x the recent p99
// Fewer recent responses than this: no limit (too little to know the
// backend's usual latency; the pool's read_timeout still applies).
inline constexpr double kStallMinSamples = 20;
// The recent window's time constant: a response of age t weighs e^(-t/tau).
inline constexpr std::chrono::seconds kStallWindow{30};

// The recent histogram, decayed in time (Pool::tick keeps one per backend).
struct RecentLatency {
  std::array<uint64_t, kLatencyBuckets> seen{};  // the histogram's totals at the last fold
  std::array<double, kLatencyBuckets> weight{};  // decayed counts
  std::chrono::steady_clock::time_point folded_at{};
  bool folded = false;  // folded_at is set (virtual time may start at the epoch)

  // Folds in the responses the histogram's `totals` gained since the last call.
  void fold(const std::array<uint64_t, kLatencyBuckets>& totals, std::chrono::steady_clock::time_point now);
  // The stall limit: max(kMinStallLimit, kStallFactor x p99 (its bucket's
  // upper bound)); 0 with too little history, or a p99 past the last bound.
  std::chrono::milliseconds stall_limit() const;
};

}  // namespace heft::upstream
