// Small parts of the simulator's run (src/sim/simulator.cc): each request's
// random stream, service draws, FIFO rings and per-bucket time integrals.
// Internal to src/sim.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "heft/balance/hash.h"
#include "sim/latency_sketch.h"
#include "sim/scenario.h"
#include "sim/simulator.h"
#include "upstream/pool.h"

namespace heft::sim::detail {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// Request k's random stream: draw j of request k, independent of everything
// else the run does (common random numbers across policies).
struct RequestStream {
  uint64_t base;
  uint64_t draw(uint64_t k, uint64_t j) const {
    return balance::mix64(balance::mix64(base + k * kGolden) + (j + 1) * 0xd1b54a32d192ed03ULL);
  }
};
enum Draw : uint64_t { kGap = 0, kService = 1, kKey = 2, kPick = 3 };

// Uniform in (0, 1) from the top 53 bits.
inline double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53; }

// A mean-1 service draw for one request under a distribution.
inline double unit_service(ServiceDist dist, double sigma, uint64_t bits) {
  switch (dist) {
    case ServiceDist::fixed: return 1;
    case ServiceDist::exponential: return -std::log(unit_open(bits));
    case ServiceDist::lognormal: {
      // Box-Muller from the two 32-bit halves.
      double u1 = (static_cast<double>(bits >> 32) + 0.5) * 0x1p-32;
      double u2 = (static_cast<double>(bits & 0xffffffffu) + 0.5) * 0x1p-32;
      double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
      return std::exp(sigma * z - 0.5 * sigma * sigma);
    }
  }
  return 1;
}

// Virtual time (seconds from the run's start) as the pool's clock reads it.
// It starts an hour past the clock's epoch: the pool takes a zero time for
// "not set" in places. Saturates some 290 years in.
inline upstream::TimePoint pool_time(double seconds) {
  constexpr double kMaxNs = 9e18;
  const double ns = std::min(seconds * 1e9 + 0.5, kMaxNs);
  return upstream::TimePoint(std::chrono::hours(1)) + std::chrono::nanoseconds(static_cast<int64_t>(ns));
}

// A FIFO ring; grows by doubling (never per request on average).
template <typename T>
class Ring {
 public:
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const T& front() const { return slots_[head_]; }
  const T& at(size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  void push(const T& w) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) & (slots_.size() - 1)] = w;
    ++count_;
  }
  T pop() {
    T w = slots_[head_];
    head_ = (head_ + 1) & (slots_.size() - 1);
    --count_;
    return w;
  }
  void clear() { head_ = count_ = 0; }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 64 : slots_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
    slots_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> slots_;
  size_t head_ = 0, count_ = 0;
};

// The buckets of a run's measurement window [0, duration): the series'
// time axis.
class Buckets {
 public:
  explicit Buckets(const Scenario& sc) : sc_(sc), count_(bucket_count(sc)) {}
  size_t count() const { return count_; }
  double end(size_t b) const {
    if (b + 1 >= count_) return sc_.duration_s;  // the last one ends the window, however the division rounded
    return std::min(static_cast<double>(b + 1) * sc_.bucket_s, sc_.duration_s);
  }
  double width(size_t b) const { return end(b) - static_cast<double>(b) * sc_.bucket_s; }

 private:
  const Scenario& sc_;
  size_t count_;
};

// A level over time (busy workers, requests waiting, a weight factor)
// integrated per bucket of the measurement window: level x time, for a
// time-weighted mean per bucket.
class BucketedArea {
 public:
  void start(const Buckets& buckets) {
    area_.assign(buckets.count(), 0);
    bucket_end_ = buckets.end(0);
  }
  // Accumulates `level` (held since the last call) up to t into the buckets it spans.
  void advance(const Buckets& buckets, double level, double t) {
    if (t <= last_t_) return;
    if (t < bucket_end_) [[likely]] {  // within the current bucket
      area_[bucket_] += level * (t - last_t_);
      last_t_ = t;
      return;
    }
    advance_across(buckets, level, t);
  }
  double total() const {
    double sum = 0;
    for (double a : area_) sum += a;
    return sum;
  }
  // The time-weighted mean level per bucket, divided by `per` (the last bucket may be narrower).
  std::vector<double> means(const Buckets& buckets, double per) const {
    std::vector<double> series(buckets.count());
    for (size_t b = 0; b < series.size(); ++b) {
      const double width = buckets.width(b);
      series[b] = width > 0 ? area_[b] / (per * width) : 0;
    }
    return series;
  }

 private:
  [[gnu::noinline]] void advance_across(const Buckets& buckets, double level, double t) {
    for (; bucket_ < buckets.count(); ++bucket_) {
      if (t < bucket_end_) {
        area_[bucket_] += level * (t - last_t_);
        last_t_ = t;
        return;
      }
      area_[bucket_] += level * (bucket_end_ - last_t_);
      last_t_ = bucket_end_;
      bucket_end_ = buckets.end(bucket_ + 1);
    }
    last_t_ = t;  // past the measurement window: nothing more to count
  }

  double last_t_ = 0;
  size_t bucket_ = 0;
  double bucket_end_ = 0;
  std::vector<double> area_;
};

// A quantile is its bucket's midpoint, which can lie above the largest value
// seen (all at exactly 10 ms: p99 10.027 ms, max 10 ms); capped at the max so
// the table never contradicts itself.
inline LatencySummary summarise(const LatencySketch& s) {
  const double max = s.max_seconds();
  const auto quantile = [&](double q) { return std::min(s.quantile_seconds(q), max); };
  return {s.mean_seconds(), quantile(0.50), quantile(0.95), quantile(0.99), max};
}

}  // namespace heft::sim::detail
