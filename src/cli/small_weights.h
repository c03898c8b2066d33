// Small whole-number weights for measured capacities: "2, 4, 8 or 3, 6, 9,
// not 87 and 143". For each largest weight from 1 to `max_weight`, every
// capacity scaled to it and rounded (at least 1), reduced by their greatest
// common divisor; each set is scored by how far the traffic it sends each
// backend is from that backend's share of the capacity, and the set with the
// least error is chosen (on a tie, the one with the smaller numbers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace heft::cli {

struct WeightSet {
  std::vector<uint32_t> weights;
  // The largest relative difference between a backend's share of the traffic
  // under these weights and its share of the capacity: 0.1 means some backend
  // gets 10 % more or less than its capacity's share.
  double error = 0;
};

// The candidate sets, smallest first, duplicates dropped. `capacities` are
// all above 0; `max_weight` at least 1.
std::vector<WeightSet> candidate_weights(const std::vector<double>& capacities, uint32_t max_weight);

// The index of the set with the least error (the first of equals: the smaller numbers).
size_t best_weights(const std::vector<WeightSet>& candidates);

// The error of `weights` against `capacities` (as WeightSet::error).
double weight_error(const std::vector<uint32_t>& weights, const std::vector<double>& capacities);

}  // namespace heft::cli
