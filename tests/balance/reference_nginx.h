// A plain O(n) transcription of nginx's smooth weighted round robin loop, kept
// deliberately naive: the oracle the fast implementation must match pick for pick.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace heft::test {

struct ReferencePeer {
  int64_t weight;
  int64_t effective;
  int64_t current = 0;
  bool available = true;
  int64_t max_fails = 1;
};

class ReferenceSwrr {
 public:
  explicit ReferenceSwrr(const std::vector<uint32_t>& weights, uint32_t max_fails = 1) {
    for (uint32_t w : weights) peers.push_back({w, w, 0, true, max_fails});
  }

  std::optional<size_t> pick(const std::set<size_t>& tried = {}) {
    int64_t total = 0;
    std::optional<size_t> best;
    for (size_t i = 0; i < peers.size(); ++i) {
      ReferencePeer& p = peers[i];
      if (!p.available || tried.count(i)) continue;
      p.current += p.effective;
      total += p.effective;
      if (p.effective < p.weight) p.effective++;
      if (!best || p.current > peers[*best].current) best = i;
    }
    if (best) peers[*best].current -= total;
    return best;
  }

  void fail(size_t i) {
    ReferencePeer& p = peers[i];
    if (p.max_fails) {
      p.effective -= p.weight / p.max_fails;
      if (p.effective < 0) p.effective = 0;
    }
  }

  std::vector<ReferencePeer> peers;
};

}  // namespace heft::test
