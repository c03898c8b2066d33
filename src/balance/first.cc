// First available: the first eligible member in configured order (Caddy's
// `first`, a primary/standby setup). O(position of the first eligible member).
// Thread-safe; no mutable state.
#include "balance/factories.h"

namespace heft::balance {
namespace {

class First final : public Policy {
 public:
  First(std::vector<Member> members, std::span<BackendLive* const> live) : members_(std::move(members)) {
    for (const Member& m : members_) live_.push_back(live[m.index]);
  }
  PolicyKind kind() const override { return PolicyKind::first; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    for (size_t i = 0; i < members_.size(); ++i)
      if (eligible(live_[i], members_[i].index, ctx)) return members_[i].index;
    return std::nullopt;
  }

  uint32_t effective_weight(uint32_t index) const override { return member_weight(members_, index); }

 private:
  std::vector<Member> members_;
  std::vector<BackendLive*> live_;
};

}  // namespace

std::unique_ptr<Policy> make_first(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<First>(std::move(members), live);
}

}  // namespace heft::balance
