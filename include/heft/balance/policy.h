// heft's balancing core: the policy interface.
//
// A policy chooses one backend of a pool for one attempt of one request. It is
// built once from the pool's members when membership or weights change (a
// snapshot) and then picks many times. Policies are pure: no I/O, no clock and
// no threads of their own. Randomness and keys come in through PickContext, so
// the proxy and the simulator drive the very same code.
//
// Thread safety: pick(), availability_changed(), active_changed() and
// attempt_failed() may be called from any number of threads at once. Construction is single-threaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace heft::balance {

enum class PolicyKind {
  round_robin,
  weighted_round_robin,
  least_conn,
  hash,  // consistent hashing of a key (ip_hash is this with the client address as key)
  random,
  p2c,
  first,
};

enum class HashStrategy { ring, maglev };

// What a policy reads besides the members and their weights, declared once
// per policy (as HAProxy's lb_ops declare theirs): the configuration's
// validation, the simulator, `heft pick` and the proxy ask these instead of
// naming policies, so a new policy states its needs in one place.
struct PolicyTraits {
  bool needs_key = false;           // picks by PickContext::key_hash: a pool must say which request key to hash
  bool uses_random = false;         // reads PickContext::random
  bool uses_active_counts = false;  // reads BackendLive::active (requests in flight)
  bool uses_weights = true;         // splits by weight (round_robin gives every member an equal share)
  bool uses_hash_strategy = false;  // builds a ring or a Maglev table (HashStrategy) over its members
  // Keeps smooth weighted round robin's current weights, carried from one
  // snapshot to the next (what `heft pick --trace` shows).
  bool keeps_current_weights = false;
  // A down backend keeps its place among the members (parked, never picked),
  // so taking it down moves only its own keys.
  bool parks_down_members = false;
};

constexpr PolicyTraits policy_traits(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::round_robin: return {.uses_weights = false};
    case PolicyKind::weighted_round_robin: return {.keeps_current_weights = true};
    case PolicyKind::least_conn: return {.uses_active_counts = true, .keeps_current_weights = true};
    case PolicyKind::hash: return {.needs_key = true, .uses_hash_strategy = true, .parks_down_members = true};
    case PolicyKind::random: return {.uses_random = true};
    case PolicyKind::p2c: return {.uses_random = true, .uses_active_counts = true};
    case PolicyKind::first: return {.uses_weights = false};
  }
  return {};
}

// Parses and names policies ("weighted_round_robin", "ip_hash" -> hash, ...).
std::optional<PolicyKind> parse_policy(std::string_view name);
std::string_view policy_name(PolicyKind kind);
std::optional<HashStrategy> parse_hash_strategy(std::string_view name);
std::string_view hash_strategy_name(HashStrategy strategy);

// Live, shared per-backend state that policies read. Owned by the pool, it
// outlives snapshots: a backend that stays across a rebuild keeps its object.
struct alignas(64) BackendLive {
  std::atomic<uint32_t> active{0};     // requests in flight to this backend
  std::atomic<bool> available{true};   // false when unhealthy or failed (passive)
};

// One backend as a policy sees it.
struct Member {
  uint32_t index = 0;   // position in the pool: what pick() returns
  uint32_t weight = 1;  // weight to balance by, > 0 (drained and down backends are not members)
  uint64_t id = 0;      // stable identity (hash of the backend's name), for hashing
  // Hashing only: a down backend keeps its place on the ring or table and is
  // never picked, so only its own keys move (nginx keeps down peers on its
  // consistent-hash ring; rebuilding without it moved other backends' keys).
  bool parked = false;
};

// The set of backends a request has already tried (never the same one twice).
// The first 64 pool positions live inline: a request adds one backend per
// attempt, and a heap allocation for that showed up in the proxy's profile.
class TriedSet {
 public:
  bool empty() const { return count_ == 0; }
  bool contains(uint32_t index) const {
    if (index < 64) return first_ >> index & 1u;
    size_t word = index / 64 - 1;
    return word < more_.size() && (more_[word] >> (index % 64) & 1u);
  }
  void add(uint32_t index) {
    if (contains(index)) return;
    ++count_;
    if (index < 64) {
      first_ |= uint64_t{1} << index;
      return;
    }
    size_t word = index / 64 - 1;
    if (word >= more_.size()) more_.resize(word + 1, 0);
    more_[word] |= uint64_t{1} << (index % 64);
  }
  size_t size() const { return count_; }

 private:
  uint64_t first_ = 0;
  std::vector<uint64_t> more_;  // positions 64 and up
  size_t count_ = 0;
};

struct PickContext {
  uint64_t key_hash = 0;             // hash policies: hash_key() of the request's key
  uint64_t random = 0;               // random and p2c: 64 random bits from the caller
  const TriedSet* tried = nullptr;   // backends to skip for this attempt
};

// Balancing state carried from one snapshot to the next, indexed by pool index
// (the Balancer translates old indices to new ones by backend name).
struct CarriedState {
  struct Entry {
    int64_t current_weight = 0;
    uint32_t effective_weight = 0;
    bool present = false;
  };
  std::vector<Entry> entries;
  void set(uint32_t index, int64_t current_weight, uint32_t effective_weight) {
    if (index >= entries.size()) entries.resize(index + 1);
    entries[index] = {current_weight, effective_weight, true};
  }
  const Entry* find(uint32_t index) const {
    return index < entries.size() && entries[index].present ? &entries[index] : nullptr;
  }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual PolicyKind kind() const = 0;

  // Chooses a member for one attempt. Returns its pool index, or nullopt when
  // no member is available (and not already tried). Never returns a member
  // that is unavailable or tried.
  virtual std::optional<uint32_t> pick(const PickContext& ctx) = 0;

  // The `available` flag of a member's BackendLive changed. Policies whose
  // sequence depends on the eligible set (smooth WRR) re-synchronise here.
  virtual void availability_changed(uint32_t index) {}

  // The `active` count of a member's BackendLive changed (Balancer::begin_request
  // and end_request; the atomic already holds the new value). Policies that
  // index active counts (least_conn) re-synchronise here. A policy must stay
  // correct when an active count changes without this call; it may only be
  // slower until it notices.
  virtual void active_changed(uint32_t index) {}

  // An attempt at a member failed. nginx semantics: its effective weight drops
  // by weight / max_fails (integer division), not below 0, and recovers by 1
  // on every pick in which it is eligible.
  virtual void attempt_failed(uint32_t index, uint32_t max_fails) {}

  // The weight this member is currently balanced with (nginx's effective weight).
  virtual uint32_t effective_weight(uint32_t index) const = 0;

  // Records the state to carry to a rebuilt snapshot, by pool index.
  virtual void export_state(CarriedState& out) const {}
};

struct PolicyOptions {
  PolicyKind kind = PolicyKind::weighted_round_robin;
  HashStrategy hash_strategy = HashStrategy::ring;
};

// Builds a policy over `members`. `live` is indexed by Member::index and must
// outlive the policy. `previous` (may be null) carries smooth-WRR state.
std::unique_ptr<Policy> make_policy(const PolicyOptions& options, std::vector<Member> members,
                                    std::span<BackendLive* const> live,
                                    const CarriedState* previous = nullptr);

}  // namespace heft::balance
