// First available: the first eligible member in configured order (Caddy's
// `first`, a primary/standby setup). O(position of the first eligible member).
// Thread-safe; no mutable state.
#include "balance/factories.h"

namespace heft::balance {
namespace {

class First final : public Policy {
 public:
  First(std::vector<Member> members, std::span<BackendLive* const> live) : pool_(std::move(members), live) {}
  PolicyKind kind() const override { return PolicyKind::first; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    for (size_t i = 0; i < pool_.members.size(); ++i)
      if (pool_.eligible_at(static_cast<uint32_t>(i), ctx)) return pool_.members[i].index;
    return std::nullopt;
  }

  uint32_t effective_weight(uint32_t index) const override { return member_weight(pool_.members, index); }

 private:
  PositionedMembers pool_;
};

}  // namespace

std::unique_ptr<Policy> make_first(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<First>(std::move(members), live);
}

}  // namespace heft::balance
