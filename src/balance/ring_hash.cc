// Weighted consistent hashing on a ring (ketama-style), heft's `hash` policy
// with the `ring` strategy (ip_hash is the same with the client address as key).
//
// What it is
//   Every member gets a number of points ("virtual nodes") on a 32-bit ring in
//   proportion to its weight. Point j of a member sits at the top 32 bits of a
//   splitmix64-style stream seeded by Member::id: nothing else (no pool order,
//   no random seed, no address) goes into a position, so every process on
//   every host builds the same ring from the same names and weights. A key is
//   served by the owner of the first point at or after the key's hash (top 32
//   bits of ctx.key_hash), wrapping at the end of the ring.
//
// How many points
//   points_i = max(1, round(K * n * w_i / W)) with W the total weight: K points
//   for a member of mean weight. K = 32768 while K * n <= kMaxPoints (2^22,
//   i.e. up to 128 members); for larger pools K is the largest power of two
//   with K * n <= 2^22 (256 at 10,000 members), at least 1 point per member.
//   Normalising by the mean weight bounds memory whatever the weights (1 or
//   1,000,000) and keeps each member's point count unchanged when a member of
//   mean weight joins or leaves (with equal weights, exactly unchanged), so
//   only that member's keys move. K comes from a power-of-two ladder for the
//   same reason: it changes only when the pool crosses 128, 256, 512, ...
//   members. Why so many points: a member's share of the ring has a relative
//   spread of about 1/sqrt(points); ketama's 160 points give 8 %, far outside
//   +-5 %, while 32768 points (~6,000 for a weight-1 member among weights
//   1..10) keep every share within a few percent. See docs/hashing.md.
//
// Lookup
//   A bucket index over the top `bits` bits of the ring (about 2-4 points per
//   bucket) gives the first point of each bucket, so a lookup reads one index
//   entry and scans a few adjacent points instead of a ~22-step binary search.
//   If the owner is unavailable or already tried, we walk clockwise to the
//   next point owned by an eligible member (a different one by construction).
//
// Complexity
//   Build O(P) with P the number of points (counting sort by bucket, then a
//   tiny insertion sort per bucket). Pick O(1) expected; a walk past an
//   ineligible owner is O(points until an eligible one), and after kWalkCheck
//   points we check in O(n) whether any member is eligible at all, so "all
//   down" costs O(kWalkCheck + n) rather than O(P).
// Memory
//   8 bytes per point (32-bit position + pool index) plus 4 bytes per bucket
//   (2-4 points per bucket): at most 2^22 points = 32 MiB + 4 MiB; 3 members
//   ~100k points = 0.9 MiB; 100 members 3.3M points = 30 MiB; 10,000 members
//   2.6M points = 22 MiB.
// Thread safety
//   Immutable after construction; pick() only reads it and the atomic
//   BackendLive flags, so any number of threads may pick at once.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "balance/factories.h"
#include "heft/balance/hash.h"
#include "heft/balance/policy.h"

namespace heft::balance {

namespace {

constexpr uint64_t kPointsPerMeanWeight = 32768;  // K
constexpr uint64_t kMaxPoints = uint64_t{1} << 22;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kRingSeed = 0x72696e672d686674ULL;  // "ring-hft": separates ring from other uses of id
constexpr size_t kWalkCheck = 64;

struct Point {
  uint32_t pos;    // top 32 bits of the point's hash
  uint32_t owner;  // pool index of the member
};

// Position of point `j` of the member with identity `id`.
inline uint32_t point_position(uint64_t id, uint64_t j) {
  uint64_t seed = mix64(id ^ kRingSeed);
  return static_cast<uint32_t>(mix64(seed + (j + 1) * kGolden) >> 32);
}

class RingHash final : public Policy {
 public:
  RingHash(std::vector<Member> members, std::span<BackendLive* const> live) : members_(members, live) {
    const uint64_t n = members.size();
    uint64_t total_weight = 0;
    for (const Member& m : members) total_weight += std::max<uint32_t>(m.weight, 1);
    if (n == 0) return;

    // Points for a member of mean weight: K, or a power of two below
    // kMaxPoints / n for large pools (a ladder, so that one member more or
    // less does not rescale everyone's points).
    uint64_t per_mean = kPointsPerMeanWeight;
    if (per_mean * n > kMaxPoints) per_mean = std::bit_floor(std::max<uint64_t>(1, kMaxPoints / n));
    const uint64_t budget = per_mean * n;  // <= 2^22, so budget * weight < 2^54
    std::vector<uint32_t> points(n);
    uint64_t total_points = 0;
    for (size_t r = 0; r < n; ++r) {
      uint64_t w = std::max<uint32_t>(members[r].weight, 1);
      points[r] = static_cast<uint32_t>(std::max<uint64_t>(1, (budget * w + total_weight / 2) / total_weight));
      total_points += points[r];
    }

    // Bucket index: about 2-4 points per bucket.
    unsigned bits = std::clamp<unsigned>(static_cast<unsigned>(std::bit_width(total_points)) - 2, 1, 20);
    shift_ = 32 - bits;
    const size_t buckets = size_t{1} << bits;
    bucket_.assign(buckets + 1, 0);

    // Counting sort by bucket: count, prefix-sum, scatter.
    for (size_t r = 0; r < n; ++r)
      for (uint32_t j = 0; j < points[r]; ++j) ++bucket_[(point_position(members[r].id, j) >> shift_) + 1];
    for (size_t b = 0; b < buckets; ++b) bucket_[b + 1] += bucket_[b];
    // Sort key: position in the high half, identity rank in the low half, so
    // equal positions are ordered by identity too.
    std::vector<uint64_t> keys(total_points);
    {
      std::vector<uint32_t> fill(bucket_.begin(), bucket_.end() - 1);
      for (size_t r = 0; r < n; ++r)
        for (uint32_t j = 0; j < points[r]; ++j) {
          uint32_t pos = point_position(members[r].id, j);
          keys[fill[pos >> shift_]++] = uint64_t{pos} << 32 | r;
        }
    }
    ring_.resize(total_points);
    for (size_t b = 0; b < buckets; ++b) {
      auto first = keys.begin() + bucket_[b], last = keys.begin() + bucket_[b + 1];
      if (last - first > 1) std::sort(first, last);
    }
    for (size_t i = 0; i < total_points; ++i)
      ring_[i] = Point{static_cast<uint32_t>(keys[i] >> 32), members[keys[i] & 0xffffffffu].index};
  }

  PolicyKind kind() const override { return PolicyKind::hash; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    const size_t size = ring_.size();
    if (size == 0) return std::nullopt;
    const uint32_t key = static_cast<uint32_t>(ctx.key_hash >> 32);
    const size_t bucket = key >> shift_;
    size_t i = bucket_[bucket];
    const size_t end = bucket_[bucket + 1];
    while (i < end && ring_[i].pos < key) ++i;
    if (i == size) i = 0;
    const uint32_t first = ring_[i].owner;
    if (members_.usable(first, ctx)) return first;

    // Walk clockwise to the next point of a different, eligible member.
    for (size_t step = 1; step < size; ++step) {
      if (step == kWalkCheck && !members_.any_eligible(ctx)) return std::nullopt;
      if (++i == size) i = 0;
      const uint32_t owner = ring_[i].owner;
      if (owner != first && members_.usable(owner, ctx)) return owner;
    }
    return std::nullopt;
  }

  uint32_t effective_weight(uint32_t index) const override { return members_.weight(index); }

 private:
  HashedMembers members_;
  std::vector<Point> ring_;            // sorted by (position, identity)
  std::vector<uint32_t> bucket_;       // bucket_[b]: first point with pos >= b << shift_; last = size
  unsigned shift_ = 31;
};

}  // namespace

std::unique_ptr<Policy> make_ring_hash(std::vector<Member> members, std::span<BackendLive* const> live) {
  return std::make_unique<RingHash>(std::move(members), live);
}

}  // namespace heft::balance
