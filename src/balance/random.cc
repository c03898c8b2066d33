// Weighted random: each pick draws a member with probability weight / total, in
// O(1) with an alias table. The caller supplies the random bits (PickContext::random),
// so the simulator replays a run exactly. When the draw lands on an unavailable or
// tried member, a few more draws are made from bits derived from the same input,
// then the pick falls back to a weighted draw among the eligible members (O(n)).
// Thread-safe; read-only after construction.
#include "balance/random_common.h"

namespace heft::balance {
namespace {

class WeightedRandom final : public Policy {
 public:
  WeightedRandom(std::vector<Member> members, std::span<BackendLive* const> live)
      : pool_(std::move(members), live) {}
  PolicyKind kind() const override { return PolicyKind::random; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    auto pos = pool_.draw_eligible(ctx, ctx.random);
    if (!pos) return std::nullopt;
    return pool_.members[*pos].index;
  }

  uint32_t effective_weight(uint32_t index) const override { return pool_.weight_of(index); }

 private:
  SampledMembers pool_;
};

}  // namespace

std::unique_ptr<Policy> make_random(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<WeightedRandom>(std::move(members), live);
}

}  // namespace heft::balance
