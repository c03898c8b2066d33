#include "cli/small_weights.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace heft::cli {

double weight_error(const std::vector<uint32_t>& weights, const std::vector<double>& capacities) {
  const double weight_sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double capacity_sum = std::accumulate(capacities.begin(), capacities.end(), 0.0);
  double worst = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double share = double(weights[i]) / weight_sum, target = capacities[i] / capacity_sum;
    worst = std::max(worst, std::abs(share / target - 1));
  }
  return worst;
}

std::vector<WeightSet> candidate_weights(const std::vector<double>& capacities, uint32_t max_weight) {
  std::vector<WeightSet> sets;
  if (capacities.empty()) return sets;
  const double largest = *std::max_element(capacities.begin(), capacities.end());
  for (uint32_t top = 1; top <= std::max<uint32_t>(1, max_weight); ++top) {
    WeightSet set;
    uint32_t divisor = 0;
    for (double capacity : capacities) {
      const auto w = uint32_t(std::max(1.0, std::round(capacity / largest * top)));
      set.weights.push_back(w);
      divisor = std::gcd(divisor, w);
    }
    for (uint32_t& w : set.weights) w /= divisor;
    if (std::any_of(sets.begin(), sets.end(), [&](const WeightSet& s) { return s.weights == set.weights; })) continue;
    set.error = weight_error(set.weights, capacities);
    sets.push_back(std::move(set));
  }
  return sets;
}

size_t best_weights(const std::vector<WeightSet>& candidates) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].error < candidates[best].error - 1e-12) best = i;
  return best;
}

}  // namespace heft::cli
