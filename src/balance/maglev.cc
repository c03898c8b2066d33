// Weighted Maglev hashing (Eisenbud et al., NSDI'16 §3.4), heft's `hash`
// policy with the `maglev` strategy.
//
// What it is
//   A lookup table of M slots (M prime) in which every slot names a member; a
//   key goes to table[key_hash % M]. Each member has its own permutation of
//   the slots, perm[j] = (offset + j * skip) mod M, with offset and skip taken
//   from two independent hashes of Member::id (skip in [1, M-1], so the
//   permutation visits every slot once). Members take turns claiming the next
//   still-free slot of their permutation until the table is full.
//
// Table size
//   M = the smallest prime above bit_ceil(max(65536, 100 * n)), with 100 * n
//   capped at 2^24: 65537, 131101, 262147, 524309, 1048583, ... So M >= 100 n
//   (the paper's bound for ~1 % imbalance) and M >= 65537 (Envoy's default).
//   Sizes come from this fixed ladder rather than from 100 * n itself, so
//   adding or removing one member almost never changes M: it changes only
//   when the pool crosses 655, 1310, 2621, ... members, and then every key is
//   re-mapped, as after a restart with another table size. (No term for the
//   lightest member's weight: it would make M jump whenever the lightest
//   member left.)
//   Accuracy: with the claims below, member i owns c_i slots with
//   M w_i / W - n w_i / W <= c_i <= M w_i / W + 1, so its relative error is
//   at most max(n / M, W / (M w_i)): 1 % for n <= 655 members as long as
//   the member's ideal share is at least 100 slots (e.g. weights 1..10 over
//   100 members: a weight-1 member ideally owns ~120 slots, error <= 0.8 %).
// Weighting (what we do exactly)
//   Turn-taking in virtual time: the k-th claim (k = 0, 1, 2, ...) of a member
//   of weight w happens at time k / w. Claims are made in time order, equal
//   times in identity order (Member::id, then pool index). So every member
//   claims once at time 0, and by time t a member has made floor(t * w) + 1
//   claims: its slot count is proportional to its weight within one slot.
//   This is Envoy's turn skipping (a member takes a turn in round r only when
//   its accumulated weight reaches its next target) with the rounds made
//   continuous: unlike normalising by the largest weight, the order of claims
//   between two members never depends on the other members, which keeps the
//   disruption of adding or removing one member small even when it changes
//   the largest weight. With equal weights this is exactly the paper's
//   round-robin. A member whose weight is below total / M still gets its one
//   time-0 slot (if n <= M).
//
// Fallback
//   If the slot's member is unavailable or already tried, we probe further
//   slots by double hashing: step = 1 + mix64(key_hash ^ c) % (M - 1), which,
//   M being prime, visits every slot once in M probes. The first eligible
//   member wins. Keys of a down member therefore spread over the others in
//   proportion to their slots. After kProbeCheck probes we check in O(n)
//   whether any member is eligible at all, so "all down" is cheap.
//
// Complexity
//   Build O(M log n) for the time-ordered heap plus the permutation probing
//   (O(M log M) expected, as in the paper). Pick O(1): one modulo and one
//   table read; a fallback is O(1) expected while most members are up.
// Memory
//   4 bytes per slot: 256 KiB up to 655 members, 4 MiB at 10,000 members
//   (M = 1048583), 64 MiB at most.
// Thread safety
//   Immutable after construction; pick() only reads it and the atomic
//   BackendLive flags, so any number of threads may pick at once.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <vector>

#include "balance/factories.h"
#include "heft/balance/hash.h"
#include "heft/balance/policy.h"

namespace heft::balance {

namespace {

constexpr uint64_t kMinTableSize = uint64_t{1} << 16;
constexpr uint64_t kSlotsPerMember = 100;
constexpr uint64_t kMaxByCount = uint64_t{1} << 24;
constexpr uint64_t kOffsetSeed = 0x6d61676c65762d6fULL;  // "maglev-o"
constexpr uint64_t kSkipSeed = 0x6d61676c65762d73ULL;    // "maglev-s"
constexpr uint64_t kProbeSeed = 0x6d61676c65762d70ULL;   // "maglev-p"
constexpr size_t kProbeCheck = 64;
constexpr uint32_t kEmpty = 0xffffffffu;

bool is_prime(uint64_t x) {
  if (x < 2) return false;
  if (x % 2 == 0) return x == 2;
  for (uint64_t d = 3; d * d <= x; d += 2)
    if (x % d == 0) return false;
  return true;
}

// The table size for a pool of n members (see the header comment).
uint64_t table_size_for(size_t n) {
  uint64_t target = std::max(kMinTableSize, std::min<uint64_t>(kSlotsPerMember * n, kMaxByCount));
  uint64_t size = std::bit_ceil(target) + 1;
  while (!is_prime(size)) ++size;
  return size;
}

class Maglev final : public Policy {
 public:
  Maglev(std::vector<Member> members, std::span<BackendLive* const> live) : members_(members, live) {
    if (members.empty()) return;

    const uint64_t size = table_size_for(members.size());
    table_.assign(size, kEmpty);

    struct Cursor {
      uint64_t slot;  // current position in the member's permutation
      uint64_t skip;
    };
    std::vector<Cursor> cursor(members.size());
    for (size_t r = 0; r < members.size(); ++r) {
      cursor[r].slot = mix64(members[r].id ^ kOffsetSeed) % size;
      cursor[r].skip = mix64(members[r].id ^ kSkipSeed) % (size - 1) + 1;
    }

    // Next claim of a member: its claim number k and weight w give the time
    // k / w; compare times by cross-multiplying (k < 2^25, w < 2^32: no overflow).
    struct Turn {
      uint64_t claims;
      uint32_t weight;
      uint32_t rank;  // identity order
    };
    auto later = [](const Turn& a, const Turn& b) {  // priority_queue wants "a after b"
      uint64_t ta = a.claims * b.weight, tb = b.claims * a.weight;
      return ta != tb ? ta > tb : a.rank > b.rank;
    };
    std::vector<Turn> heap;
    heap.reserve(members.size());
    for (size_t r = 0; r < members.size(); ++r)
      heap.push_back(Turn{0, std::max<uint32_t>(members[r].weight, 1), static_cast<uint32_t>(r)});
    std::priority_queue<Turn, std::vector<Turn>, decltype(later)> turns(later, std::move(heap));

    uint64_t filled = 0;
    while (filled < size) {
      Turn turn = turns.top();
      turns.pop();
      Cursor& c = cursor[turn.rank];
      while (table_[c.slot] != kEmpty) {
        c.slot += c.skip;
        if (c.slot >= size) c.slot -= size;
      }
      table_[c.slot] = members[turn.rank].index;
      ++filled;
      ++turn.claims;
      turns.push(turn);
    }
  }

  PolicyKind kind() const override { return PolicyKind::hash; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    const uint64_t size = table_.size();
    if (size == 0) return std::nullopt;
    uint64_t slot = ctx.key_hash % size;
    const uint32_t first = table_[slot];
    if (members_.usable(first, ctx)) return first;

    const uint64_t step = 1 + mix64(ctx.key_hash ^ kProbeSeed) % (size - 1);
    for (uint64_t probe = 1; probe < size; ++probe) {
      if (probe == kProbeCheck && !members_.any_eligible(ctx)) return std::nullopt;
      slot += step;
      if (slot >= size) slot -= size;
      const uint32_t owner = table_[slot];
      if (owner != first && members_.usable(owner, ctx)) return owner;
    }
    // Only reachable when n > M left an eligible member without a slot.
    for (uint32_t index : members_.indices())
      if (members_.usable(index, ctx)) return index;
    return std::nullopt;
  }

  uint32_t effective_weight(uint32_t index) const override { return members_.weight(index); }

 private:
  HashedMembers members_;
  std::vector<uint32_t> table_;  // slot -> pool index
};

}  // namespace

std::unique_ptr<Policy> make_maglev(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<Maglev>(std::move(members), live);
}

}  // namespace heft::balance
