// Internal: one factory per policy file, dispatched by make_policy().
#pragma once

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

}  // namespace heft::balance
