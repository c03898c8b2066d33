// Power of two choices, weighted: two distinct weighted-random candidates (the
// second drawn from the others, so a heavy member cannot face itself); the one
// with the lower active / weight wins (compared by cross-multiplication). On a
// tie the first drawn wins, as in nginx's `random two`: the first draw is
// weighted, so an idle pool's shares follow the weights (the heavier one
// winning ties gave it everything at low load). O(1) when the draws land on
// eligible members.
// Thread-safe; reads active counts without locking (a count may move under the
// comparison; that only makes the choice as stale as the count).
#include "balance/random_common.h"

namespace heft::balance {
namespace {

class PowerOfTwoChoices final : public Policy {
 public:
  PowerOfTwoChoices(std::vector<Member> members, std::span<BackendLive* const> live)
      : pool_(std::move(members), live) {}
  PolicyKind kind() const override { return PolicyKind::p2c; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    auto a = pool_.draw_eligible(ctx, ctx.random);
    if (!a) return std::nullopt;
    auto b = pool_.draw_eligible(ctx, mix64(ctx.random ^ 0x5851f42d4c957f2dULL), *a);
    if (!b) return pool_.members[*a].index;  // the only eligible member
    uint64_t active_a = pool_.live[*a]->active.load(std::memory_order_relaxed);
    uint64_t active_b = pool_.live[*b]->active.load(std::memory_order_relaxed);
    uint64_t wa = pool_.members[*a].weight, wb = pool_.members[*b].weight;
    uint64_t load_a = active_a * wb, load_b = active_b * wa;  // a/wa vs b/wb
    const bool take_b = load_b < load_a;
    return pool_.members[take_b ? *b : *a].index;
  }

  uint32_t effective_weight(uint32_t index) const override { return pool_.weight_of(index); }

 private:
  SampledMembers pool_;
};

}  // namespace

std::unique_ptr<Policy> make_p2c(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<PowerOfTwoChoices>(std::move(members), live);
}

}  // namespace heft::balance
