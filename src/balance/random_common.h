// Internal: the weighted draw shared by `random` and `p2c`.
#pragma once

#include <optional>

#include "balance/factories.h"
#include "balance/weighted_sampler.h"
#include "heft/balance/hash.h"

namespace heft::balance {

struct SampledMembers : PositionedMembers {
  WeightedSampler sampler;

  SampledMembers(std::vector<Member> m, std::span<BackendLive* const> all_live)
      : PositionedMembers(std::move(m), all_live), sampler(weights_of(members)) {}

  static std::vector<uint32_t> weights_of(const std::vector<Member>& members) {
    std::vector<uint32_t> w;
    for (const Member& m : members) w.push_back(m.weight);
    return w;
  }

  bool eligible_at(uint32_t pos, const PickContext& ctx, uint32_t exclude = UINT32_MAX) const {
    return pos != exclude && PositionedMembers::eligible_at(pos, ctx);
  }

  // A weighted draw among eligible members other than `exclude` (a position).
  // A few cheap redraws first; then an exact weighted draw over the eligible
  // members only.
  std::optional<uint32_t> draw_eligible(const PickContext& ctx, uint64_t random,
                                        uint32_t exclude = UINT32_MAX) const {
    if (members.empty()) return std::nullopt;
    uint64_t r = random;
    for (int attempt = 0; attempt < 4; ++attempt) {
      uint32_t pos = sampler.sample(r);
      if (eligible_at(pos, ctx, exclude)) return pos;
      r = mix64(r + 0x9e3779b97f4a7c15ULL);
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < members.size(); ++i)
      if (eligible_at(i, ctx, exclude)) total += members[i].weight;
    if (total == 0) return std::nullopt;
    uint64_t target = static_cast<uint64_t>((static_cast<unsigned __int128>(r) * total) >> 64);
    for (uint32_t i = 0; i < members.size(); ++i) {
      if (!eligible_at(i, ctx, exclude)) continue;
      if (target < members[i].weight) return i;
      target -= members[i].weight;
    }
    return std::nullopt;
  }

  uint32_t weight_of(uint32_t index) const { return member_weight(members, index); }
};

}  // namespace heft::balance
