// Policy names and the factory that dispatches to one file per policy.
#include "heft/balance/policy.h"

#include "balance/factories.h"

namespace heft::balance {

namespace {
struct NamedPolicy {
  std::string_view name;
  PolicyKind kind;
};
constexpr NamedPolicy kPolicies[] = {
    {"round_robin", PolicyKind::round_robin},
    {"weighted_round_robin", PolicyKind::weighted_round_robin},
    {"least_conn", PolicyKind::least_conn},
    {"hash", PolicyKind::hash},
    {"random", PolicyKind::random},
    {"p2c", PolicyKind::p2c},
    {"first", PolicyKind::first},
};
}  // namespace

std::optional<PolicyKind> parse_policy(std::string_view name) {
  if (name == "ip_hash") return PolicyKind::hash;
  for (const auto& p : kPolicies)
    if (p.name == name) return p.kind;
  return std::nullopt;
}

std::string_view policy_name(PolicyKind kind) {
  for (const auto& p : kPolicies)
    if (p.kind == kind) return p.name;
  return "unknown";
}

std::optional<HashStrategy> parse_hash_strategy(std::string_view name) {
  if (name == "ring") return HashStrategy::ring;
  if (name == "maglev") return HashStrategy::maglev;
  return std::nullopt;
}

std::string_view hash_strategy_name(HashStrategy strategy) {
  return strategy == HashStrategy::maglev ? "maglev" : "ring";
}

std::unique_ptr<Policy> make_policy(const PolicyOptions& options, std::vector<Member> members,
                                    std::span<BackendLive* const> live, const CarriedState* previous) {
  switch (options.kind) {
    case PolicyKind::round_robin: return make_round_robin(std::move(members), live);
    case PolicyKind::weighted_round_robin:
      return make_weighted_round_robin(std::move(members), live, previous);
    case PolicyKind::least_conn: return make_least_conn(std::move(members), live, previous);
    case PolicyKind::hash:
      return options.hash_strategy == HashStrategy::maglev ? make_maglev(std::move(members), live)
                                                           : make_ring_hash(std::move(members), live);
    case PolicyKind::random: return make_random(std::move(members), live);
    case PolicyKind::p2c: return make_p2c(std::move(members), live);
    case PolicyKind::first: return make_first(std::move(members), live);
  }
  return nullptr;
}

}  // namespace heft::balance
