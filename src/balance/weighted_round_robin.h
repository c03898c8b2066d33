// Internal: the lock-free fast path of smooth weighted round robin, inline so
// Balancer::pick reaches it without a virtual call (weighted_round_robin.cc has
// the rest and explains the design).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "heft/balance/policy.h"

namespace heft::balance {

// The shared ticket word: epoch tag (16 bits) | ticket count (48 bits). Tag 0 =
// slow mode (no table); epochs are tagged 1..kWrrMaxTag; a table entry never
// carries tag 0 and a ticket word never carries kWrrInvalidTag. Tags wrap
// after 65,534 epochs; the whole table is then cleared first.
inline constexpr int kWrrTagShift = 48;
inline constexpr uint64_t kWrrTicketMask = (uint64_t{1} << kWrrTagShift) - 1;
inline constexpr uint64_t kWrrMaxTag = 0xFFFE;
inline constexpr uint64_t kWrrInvalidTag = 0xFFFF;

// `Entry` is uint32_t (tag << 16 | pool index) for pools of up to 65,536
// backends, uint64_t (tag << 32 | pool index) above.
template <class Entry>
class WrrFastPath {
 public:
  static constexpr int kHalf = sizeof(Entry) * 4;
  static constexpr Entry kIndexMask = (Entry{1} << kHalf) - 1;

  static constexpr uint32_t kNoPick = UINT32_MAX;
  static constexpr uint64_t kAhead = 16;

  // Takes one ticket and answers it from the table: the chosen pool index, or
  // kNoPick when the table cannot (then pick_slow(word, ctx) finishes the pick
  // with that ticket). For picks with no tried members. One shared ticket, one
  // table entry whose tag proves it belongs to the ticket's epoch (no seqlock:
  // the entry is read in one load), and the chosen backend's availability.
  uint32_t try_fast(uint64_t& word) {
    word = ticket_.fetch_add(1, std::memory_order_relaxed);
    uint64_t ticket = word & kWrrTicketMask;
    if (ticket < capacity_) [[likely]] {
      if (prefetch_) {
        // Large pools: tickets come in order, so warm the caches for the picks
        // kAhead and 2 * kAhead tickets on (the BackendLive, then the pointer
        // to it) and the availability check below hits L1. Prefetches are
        // hints and do not hold up the next locked add; the table has
        // 2 * kAhead spare entries.
        __builtin_prefetch(&live_[table_[ticket + 2 * kAhead].load(std::memory_order_relaxed) & kIndexMask]);
        __builtin_prefetch(live_[table_[ticket + kAhead].load(std::memory_order_relaxed) & kIndexMask]);
      }
      Entry e = table_[ticket].load(std::memory_order_relaxed);
      if ((e >> kHalf) == (word >> kWrrTagShift)) [[likely]] {
        uint32_t index = static_cast<uint32_t>(e & kIndexMask);
        if (live_[index]->available.load(std::memory_order_relaxed)) [[likely]]
          return index;
      }
    }
    return kNoPick;
  }

  // The chosen pool index, or kNoPick when nothing is eligible. (A plain
  // integer: an optional returned through inlined layers is assembled on the
  // stack, and reading it back stalls store forwarding.)
  uint32_t pick_index(const PickContext& ctx) {
    if (ctx.tried && !ctx.tried->empty()) [[unlikely]]
      return pick_tried(ctx);
    uint64_t word;
    uint32_t index = try_fast(word);
    if (index != kNoPick) [[likely]]
      return index;
    return pick_slow(word, ctx);
  }

  // Everything the table does not answer, under the policy's mutex. `word` is
  // the ticket try_fast took.
  [[gnu::cold, gnu::noinline]] uint32_t pick_slow(uint64_t word, const PickContext& ctx);
  // A pick that must skip tried backends.
  [[gnu::cold, gnu::noinline]] uint32_t pick_tried(const PickContext& ctx);

 protected:
  alignas(64) std::atomic<uint64_t> ticket_{0};  // tag | ticket; alone on its cache line
  // Read-only after construction, on their own cache line.
  alignas(64) std::atomic<Entry>* table_ = nullptr;
  uint64_t capacity_ = 0;              // table entries; 0 = always the exact loop
  BackendLive* const* live_ = nullptr;  // by pool index
  bool prefetch_ = false;               // pools too large for L1
};

// std::optional<uint32_t>(index), built in a register. GCC 12 assembles an
// optional returned from a function with several return paths on the stack
// (a 4-byte and a 1-byte store, then an 8-byte load: a store-forwarding stall
// of ~10 cycles on every pick). Layout: value at offset 0, engaged flag at
// offset 4 (libstdc++ and libc++; checked by weighted_round_robin_test).
inline std::optional<uint32_t> engaged_index(uint32_t index) {
  using Opt = std::optional<uint32_t>;
  static_assert(sizeof(Opt) == sizeof(uint64_t) && std::is_trivially_copyable_v<Opt>);
  return std::bit_cast<Opt>(uint64_t{index} | uint64_t{1} << 32);
}

// The fast path of a weighted_round_robin policy with narrow entries, or null.
WrrFastPath<uint32_t>* narrow_wrr_fast_path(Policy& policy);

}  // namespace heft::balance
