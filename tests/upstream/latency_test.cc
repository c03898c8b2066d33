// The stall limit from a backend's recent latency (upstream/latency.h).
#include "upstream/latency.h"

#include <gtest/gtest.h>

namespace heft::upstream {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

size_t bucket_of(uint32_t ms) {
  for (size_t b = 0; b + 1 < kLatencyBuckets; ++b)
    if (ms <= kLatencyBucketsMs[b]) return b;
  return kLatencyBuckets - 1;
}

TEST(RecentLatency, NoLimitWithTooFewResponses) {
  RecentLatency recent;
  std::array<uint64_t, kLatencyBuckets> totals{};
  totals[bucket_of(3)] = 19;
  recent.fold(totals, TimePoint(1s));
  EXPECT_EQ(recent.stall_limit(), 0ms);
  totals[bucket_of(3)] = 20;
  recent.fold(totals, TimePoint(1s));
  EXPECT_EQ(recent.stall_limit(), 1000ms) << "10 x 5 ms is under the 1 s floor";
}

TEST(RecentLatency, TenTimesTheP99BucketBound) {
  RecentLatency recent;
  std::array<uint64_t, kLatencyBuckets> totals{};
  totals[bucket_of(150)] = 995;  // p99 in the 150 ms bucket
  totals[bucket_of(700)] = 5;    // the slowest 0.5%: not the p99
  recent.fold(totals, TimePoint(1s));
  EXPECT_EQ(recent.stall_limit(), 1500ms);
  totals[bucket_of(700)] = 30;  // now 2.9% are in the 750 ms bucket
  recent.fold(totals, TimePoint(1s));
  EXPECT_EQ(recent.stall_limit(), 7500ms);
}

TEST(RecentLatency, OldResponsesFadeAndOnlyNewOnesCount) {
  RecentLatency recent;
  std::array<uint64_t, kLatencyBuckets> totals{};
  totals[bucket_of(400)] = 1000;
  recent.fold(totals, TimePoint(0s));
  EXPECT_EQ(recent.stall_limit(), 4000ms);
  // Five minutes (10 time constants) later, 100 fast responses: the slow ones
  // weigh e^-10 each (0.05 in all), under 1%.
  totals[bucket_of(2)] = 100;
  recent.fold(totals, TimePoint(300s));
  EXPECT_EQ(recent.stall_limit(), 1000ms);
  // Folding the same totals again adds nothing.
  recent.fold(totals, TimePoint(300s));
  EXPECT_NEAR(recent.weight[bucket_of(2)], 100.0, 1e-9);
}

TEST(RecentLatency, NoLimitWhenTheP99IsPastTheLastBound) {
  RecentLatency recent;
  std::array<uint64_t, kLatencyBuckets> totals{};
  totals[kLatencyBuckets - 1] = 50;  // over 30 s
  recent.fold(totals, TimePoint(1s));
  EXPECT_EQ(recent.stall_limit(), 0ms);
}

}  // namespace
}  // namespace heft::upstream
