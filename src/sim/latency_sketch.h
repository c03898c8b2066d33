// A bounded-memory latency histogram (log-linear buckets, HDR-style) for the
// simulator's percentiles and CDFs.
//
// Values are recorded in whole nanoseconds. Below 128 ns every value has its own
// bucket; above, each power of two is split into 64 equal buckets, so a bucket
// is at most 1/64 of its lower bound wide. Quantiles report the bucket's
// midpoint: relative error <= 0.8 %. Memory is fixed (3,776 counters, 30 KiB)
// whatever the run length; 64 rather than 128 sub-buckets keeps a 10-server
// fleet's hot buckets in cache (the bucket increment was the simulator's top cost).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace heft::sim {

class LatencySketch {
 public:
  static constexpr int kSubBits = 6;  // 64 buckets per power of two
  static constexpr uint64_t kLinear = uint64_t{2} << kSubBits;  // 128 exact buckets
  static constexpr size_t kBuckets = kLinear + (64 - kSubBits - 1) * (uint64_t{1} << kSubBits);

  void record_seconds(double seconds) {
    double ns = seconds * 1e9;
    uint64_t v = ns <= 0 ? 0 : ns >= 1.8e19 ? ~uint64_t{0} : static_cast<uint64_t>(ns + 0.5);
    record_ns(v);
  }

  void record_ns(uint64_t v) {
    ++counts_[index_of(v)];
    ++count_;
    sum_ns_ += static_cast<double>(v);
    if (v > max_ns_) max_ns_ = v;
  }

  void merge(const LatencySketch& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ns_ += other.sum_ns_;
    if (other.max_ns_ > max_ns_) max_ns_ = other.max_ns_;
  }

  uint64_t count() const { return count_; }
  double mean_seconds() const { return count_ ? sum_ns_ / static_cast<double>(count_) * 1e-9 : 0; }
  double max_seconds() const { return static_cast<double>(max_ns_) * 1e-9; }

  // The q-quantile (0..1) in seconds: the midpoint of the bucket holding the
  // ceil(q * count)-th smallest value. 0 when empty.
  double quantile_seconds(double q) const {
    if (count_ == 0) return 0;
    double rank_real = std::ceil(q * static_cast<double>(count_));
    uint64_t rank = rank_real < 1 ? 1 : static_cast<uint64_t>(rank_real);
    if (rank > count_) rank = count_;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return midpoint_ns(i) * 1e-9;
    }
    return max_seconds();
  }

  // Bucket access for CDF plots: bucket i covers [lower_ns(i), lower_ns(i+1)).
  uint64_t bucket_count(size_t i) const { return counts_[i]; }
  static double lower_ns(size_t i) {
    if (i < kLinear) return static_cast<double>(i);
    size_t k = i - kLinear;
    int shift = static_cast<int>(k >> kSubBits) + 1;
    uint64_t mantissa = (k & ((uint64_t{1} << kSubBits) - 1)) + (uint64_t{1} << kSubBits);
    return std::ldexp(static_cast<double>(mantissa), shift);
  }
  static double midpoint_ns(size_t i) {
    if (i < kLinear) return static_cast<double>(i);
    return 0.5 * (lower_ns(i) + lower_ns(i + 1));
  }

  static size_t index_of(uint64_t v) {
    if (v < kLinear) return static_cast<size_t>(v);
    int shift = std::bit_width(v) - (kSubBits + 1);  // >= 1
    uint64_t mantissa = v >> shift;                  // in [64, 128)
    return kLinear + (static_cast<size_t>(shift - 1) << kSubBits) +
           static_cast<size_t>(mantissa - (uint64_t{1} << kSubBits));
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ns_ = 0;
  double sum_ns_ = 0;
};

}  // namespace heft::sim
