// Plain round robin: members in turn, ignoring weights (a member of weight 3 is
// one member like any other). One shared atomic counter, so the rotation is
// global across threads. Unavailable or tried members are skipped by scanning
// forward from the counter's position, and the counter is moved past the ones
// skipped, as Caddy spends a turn on each: without that, every turn of a dead
// member went to its successor (A C A C C A C C with B out of A B C). O(1) when
// all are available, O(n) worst. Thread-safe.
#include "balance/factories.h"

namespace heft::balance {
namespace {

class RoundRobin final : public Policy {
 public:
  RoundRobin(std::vector<Member> members, std::span<BackendLive* const> live) : pool_(std::move(members), live) {}
  PolicyKind kind() const override { return PolicyKind::round_robin; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    size_t n = pool_.members.size();
    if (n == 0) return std::nullopt;
    size_t start = next_.fetch_add(1, std::memory_order_relaxed) % n;
    for (size_t k = 0; k < n; ++k) {
      size_t i = start + k < n ? start + k : start + k - n;
      if (pool_.eligible_at(static_cast<uint32_t>(i), ctx)) {
        if (k > 0) next_.fetch_add(k, std::memory_order_relaxed);
        return pool_.members[i].index;
      }
    }
    return std::nullopt;
  }

  uint32_t effective_weight(uint32_t index) const override { return member_weight(pool_.members, index); }

 private:
  PositionedMembers pool_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace

std::unique_ptr<Policy> make_round_robin(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<RoundRobin>(std::move(members), live);
}

}  // namespace heft::balance
