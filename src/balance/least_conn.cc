// Weighted least connections with nginx's semantics: the eligible member with
// the lowest active / weight wins (compared by cross-multiplication with the
// configured weight, no floating point); when several tie, smooth weighted round
// robin runs over the tied members only (their current weights grow by their
// effective weights, effective weights recover by 1, the highest current weight
// wins, first in order on a tie, and loses the tied total).
//
// Cost: one O(n) scan of the active counts per pick, plus O(ties) under a mutex
// when there is a tie. Active counts are read without locking.
// Thread-safe.
#include <mutex>

#include "balance/factories.h"

namespace heft::balance {
namespace {

class LeastConn final : public Policy {
 public:
  LeastConn(std::vector<Member> members, std::span<BackendLive* const> live, const CarriedState* previous)
      : members_(std::move(members)),
        eff_published_(std::make_unique<std::atomic<uint32_t>[]>(members_.size())) {
    size_t n = members_.size();
    cw_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      live_.push_back(live[members_[i].index]);
      eff_.push_back(members_[i].weight);
      if (previous) {
        if (const auto* e = previous->find(members_[i].index)) {
          cw_[i] = e->current_weight;
          if (e->effective_weight < eff_[i]) eff_[i] = e->effective_weight;
        }
      }
      eff_published_[i].store(static_cast<uint32_t>(eff_[i]));
    }
  }

  PolicyKind kind() const override { return PolicyKind::least_conn; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    // Pass 1: the lowest active/weight; remember every member tied with it.
    thread_local std::vector<uint32_t> tied;
    thread_local std::vector<uint64_t> tied_active;
    tied.clear();
    tied_active.clear();
    uint64_t best_active = 0, best_weight = 1;
    for (uint32_t i = 0; i < members_.size(); ++i) {
      if (!eligible(live_[i], members_[i].index, ctx)) continue;
      uint64_t active = live_[i]->active.load(std::memory_order_relaxed);
      uint64_t weight = members_[i].weight;
      if (tied.empty() || active * best_weight < best_active * weight) {
        tied.clear();
        best_active = active;
        best_weight = weight;
        tied.push_back(i);
      } else if (active * best_weight == best_active * weight) {
        tied.push_back(i);
      }
    }
    if (tied.empty()) return std::nullopt;
    if (tied.size() == 1) return members_[tied[0]].index;

    // Pass 2: smooth WRR among the tied.
    std::lock_guard lock(mu_);
    int64_t total = 0;
    uint32_t best = tied[0];
    bool first = true;
    for (uint32_t i : tied) {
      cw_[i] += eff_[i];
      total += eff_[i];
      if (eff_[i] < members_[i].weight) {
        ++eff_[i];
        eff_published_[i].store(static_cast<uint32_t>(eff_[i]), std::memory_order_relaxed);
      }
      if (first || cw_[i] > cw_[best]) best = i;
      first = false;
    }
    cw_[best] -= total;
    return members_[best].index;
  }

  void attempt_failed(uint32_t index, uint32_t max_fails) override {
    if (max_fails == 0) return;
    for (uint32_t i = 0; i < members_.size(); ++i) {
      if (members_[i].index != index) continue;
      std::lock_guard lock(mu_);
      eff_[i] = std::max<int64_t>(0, eff_[i] - members_[i].weight / max_fails);
      eff_published_[i].store(static_cast<uint32_t>(eff_[i]), std::memory_order_relaxed);
    }
  }

  uint32_t effective_weight(uint32_t index) const override {
    for (uint32_t i = 0; i < members_.size(); ++i)
      if (members_[i].index == index) return eff_published_[i].load(std::memory_order_relaxed);
    return 0;
  }

  void export_state(CarriedState& out) const override {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < members_.size(); ++i)
      out.set(members_[i].index, cw_[i], static_cast<uint32_t>(eff_[i]));
  }

 private:
  std::vector<Member> members_;
  std::vector<BackendLive*> live_;
  std::unique_ptr<std::atomic<uint32_t>[]> eff_published_;
  mutable std::mutex mu_;
  std::vector<int64_t> cw_;   // guarded by mu_
  std::vector<int64_t> eff_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Policy> make_least_conn(std::vector<Member> members, std::span<BackendLive* const> live,
                                        const CarriedState* previous) {
  return std::make_unique<LeastConn>(std::move(members), live, previous);
}

}  // namespace heft::balance
