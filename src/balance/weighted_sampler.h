// Internal: O(1) weighted sampling by Vose's alias method, in integers so a draw
// is the same on every host. Built once per snapshot (O(n)); read-only after.
#pragma once

#include <cstdint>
#include <vector>

namespace heft::balance {

class WeightedSampler {
 public:
  explicit WeightedSampler(const std::vector<uint32_t>& weights) {
    size_t n = weights.size();
    threshold_.assign(n, UINT32_MAX);
    alias_.resize(n);
    for (size_t i = 0; i < n; ++i) alias_[i] = static_cast<uint32_t>(i);
    if (n == 0) return;
    uint64_t total = 0;
    for (uint32_t w : weights) total += w;
    // Scaled mass of each column: w_i * n against a full column of `total`.
    std::vector<uint64_t> mass(n);
    std::vector<uint32_t> small, large;
    for (size_t i = 0; i < n; ++i) {
      mass[i] = uint64_t{weights[i]} * n;
      (mass[i] < total ? small : large).push_back(static_cast<uint32_t>(i));
    }
    while (!small.empty() && !large.empty()) {
      uint32_t s = small.back();
      small.pop_back();
      uint32_t l = large.back();
      threshold_[s] = static_cast<uint32_t>((static_cast<unsigned __int128>(mass[s]) << 32) / total);
      alias_[s] = l;
      mass[l] -= total - mass[s];
      if (mass[l] < total) {
        large.pop_back();
        small.push_back(l);
      }
    }
    // Leftovers are full columns (rounding): they keep their own index.
  }

  // Draws a position from 64 random bits.
  uint32_t sample(uint64_t random) const {
    uint32_t column = static_cast<uint32_t>(((random >> 32) * alias_.size()) >> 32);
    uint32_t coin = static_cast<uint32_t>(random);
    return coin < threshold_[column] || threshold_[column] == UINT32_MAX ? column : alias_[column];
  }

  size_t size() const { return alias_.size(); }

 private:
  std::vector<uint32_t> threshold_;  // keep the column when coin < threshold (UINT32_MAX: always)
  std::vector<uint32_t> alias_;
};

}  // namespace heft::balance
