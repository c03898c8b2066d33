// Internal: one factory per policy file, dispatched by make_policy().
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "heft/balance/policy.h"

namespace heft::balance {

std::unique_ptr<Policy> make_round_robin(std::vector<Member> members, std::span<BackendLive* const> live);
std::unique_ptr<Policy> make_weighted_round_robin(std::vector<Member> members,
                                                  std::span<BackendLive* const> live,
                                                  const CarriedState* previous);
std::unique_ptr<Policy> make_least_conn(std::vector<Member> members, std::span<BackendLive* const> live,
                                        const CarriedState* previous);
std::unique_ptr<Policy> make_ring_hash(std::vector<Member> members, std::span<BackendLive* const> live);
std::unique_ptr<Policy> make_maglev(std::vector<Member> members, std::span<BackendLive* const> live);
std::unique_ptr<Policy> make_random(std::vector<Member> members, std::span<BackendLive* const> live);
std::unique_ptr<Policy> make_p2c(std::vector<Member> members, std::span<BackendLive* const> live);
std::unique_ptr<Policy> make_first(std::vector<Member> members, std::span<BackendLive* const> live);

// True when `index` may be chosen for this attempt: available and not tried.
inline bool eligible(const BackendLive* live, uint32_t index, const PickContext& ctx) {
  return live->available.load(std::memory_order_relaxed) && !(ctx.tried && ctx.tried->contains(index));
}

// A policy's members with their live state looked up once, by position.
struct PositionedMembers {
  std::vector<Member> members;
  std::vector<BackendLive*> live;  // live[i] belongs to members[i]

  PositionedMembers(std::vector<Member> m, std::span<BackendLive* const> all_live) : members(std::move(m)) {
    live.reserve(members.size());
    for (const Member& x : members) live.push_back(all_live[x.index]);
  }
  bool eligible_at(uint32_t pos, const PickContext& ctx) const {
    return eligible(live[pos], members[pos].index, ctx);
  }
};

// The weight of the member at pool `index`, 0 when it is not a member. O(n):
// for displays, not for picks.
inline uint32_t member_weight(const std::vector<Member>& members, uint32_t index) {
  for (const Member& m : members)
    if (m.index == index) return m.weight;
  return 0;
}

// True when any of `indices` (pool indices) may be chosen for this attempt.
// Hashing's parked members (Member::parked), by pool index; empty when none.
class ParkedSet {
 public:
  void add(uint32_t index) {
    if (index >= by_index_.size()) by_index_.resize(index + 1, 0);
    by_index_[index] = 1;
  }
  bool contains(uint32_t index) const { return index < by_index_.size() && by_index_[index]; }

 private:
  std::vector<uint8_t> by_index_;
};

inline bool any_eligible(std::span<BackendLive* const> live, const std::vector<uint32_t>& indices,
                         const PickContext& ctx) {
  for (uint32_t index : indices)
    if (eligible(live[index], index, ctx)) return true;
  return false;
}

// The members of a hash policy (ring, maglev): sorted into identity order
// (Member::id, then pool index), since where a member lands must not depend
// on the order the pool lists them; their weights by pool index; and the
// parked ones (placed like the others, never picked, shown with weight 0).
class HashedMembers {
 public:
  HashedMembers(std::vector<Member>& members, std::span<BackendLive* const> live) : live_(live) {
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
      return a.id != b.id ? a.id < b.id : a.index < b.index;
    });
    for (const Member& m : members) {
      if (m.index >= weight_by_index_.size()) weight_by_index_.resize(m.index + 1, 0);
      if (m.parked) {
        parked_.add(m.index);
      } else {
        weight_by_index_[m.index] = m.weight;
        indices_.push_back(m.index);
      }
    }
  }
  // Member pool indices that may be picked, in identity order.
  const std::vector<uint32_t>& indices() const { return indices_; }
  uint32_t weight(uint32_t index) const { return index < weight_by_index_.size() ? weight_by_index_[index] : 0; }
  bool any_eligible(const PickContext& ctx) const { return balance::any_eligible(live_, indices_, ctx); }
  // The member at pool `index` may take this attempt.
  bool usable(uint32_t index, const PickContext& ctx) const {
    return !parked_.contains(index) && eligible(live_[index], index, ctx);
  }

 private:
  std::span<BackendLive* const> live_;
  std::vector<uint32_t> weight_by_index_;
  ParkedSet parked_;
  std::vector<uint32_t> indices_;
};

}  // namespace heft::balance
