// Smooth weighted round robin with nginx's exact semantics, globally exact across threads.
//
// The exact rule (nginx's ngx_http_upstream_get_peer): every pick adds each
// eligible member's effective weight to its current weight, raises an effective
// weight that is below the weight by 1, chooses the highest current weight (the
// first in configured order on a tie) and subtracts the total effective weight
// from the chosen one. Current weights start at 0.
//
// Two modes produce that very sequence:
//  - slow: the O(n) loop above, under a mutex. Used while effective weights
//    recover (they change every pick) and for picks that must skip members a
//    request already tried.
//  - fast: while every available member is steady (effective == weight), the
//    sequence depends only on the state at the start of the steady stretch. It
//    is generated lazily into a table, in O(distinct weights) per entry, and a
//    pick is `table[ticket]` with the ticket from one shared atomic counter. Once
//    a whole period (W, or W/gcd from the zero state) is generated and the state
//    is back where it started, the period is repeated to fill the table (at
//    least kMinTable entries) and a pick is O(1): a ticket past the repeated
//    periods is served under the mutex, which also lowers the shared counter by
//    a multiple of the period, so tickets stay inside the table without a
//    modulo on the fast path. One counter for all threads makes the split exact
//    across threads: any k periods of consecutive tickets give each member
//    exactly k * weight picks.
// Switching fast -> slow replays the table up to the ticket count to recover the
// exact current weights; switching slow -> fast starts a new table epoch from
// the current state. The ticket word carries the epoch's tag and so does every
// table entry (written whole, read in one load), so a reader uses an entry only
// if it was generated for its own ticket's epoch: no seqlock, no second load.
//
// Thread safety: all public methods may be called concurrently.
#include "balance/weighted_round_robin.h"

#include <algorithm>
#include <cassert>
#include <mutex>
#include <numeric>

#include "balance/factories.h"

namespace heft::balance {
namespace {

// Largest table kept; pools whose period is longer stay on the exact loop.
constexpr uint64_t kMaxTable = uint64_t{1} << 22;
// Smallest table: short periods are repeated up to this many entries, so the
// counter is lowered (under the mutex) at most once per kMinTable picks.
constexpr uint64_t kMinTable = 2048;
// Pools above this many members prefetch the availability flags ahead: their
// BackendLive objects (64 bytes each) no longer fit in L1.
constexpr size_t kPrefetchMembers = 256;

// Generates nginx's sequence from an arbitrary state for steady weights, in
// O(distinct weights + log group) per pick instead of O(n). Members with the same
// weight gain the same amount every step, so only the leader of each weight
// group (highest current weight, then lowest position) can win.
class SteadyGenerator {
 public:
  // `cw` holds the current weights at the start; only members in `eligible` take part.
  void reset(const std::vector<int64_t>& cw, const std::vector<uint32_t>& weights,
             const std::vector<uint32_t>& eligible) {
    groups_.clear();
    step_ = 0;
    total_ = 0;
    std::vector<uint32_t> order = eligible;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return weights[a] < weights[b]; });
    for (uint32_t pos : order) {
      total_ += weights[pos];
      if (groups_.empty() || groups_.back().weight != weights[pos]) groups_.push_back({weights[pos], {}});
      groups_.back().heap.push_back({cw[pos], pos});
    }
    for (auto& g : groups_) std::make_heap(g.heap.begin(), g.heap.end(), Less{});
  }

  // Produces the next pick (a member position).
  uint32_t next() {
    ++step_;
    Group* best = nullptr;
    int64_t best_value = 0;
    uint32_t best_pos = 0;
    for (auto& g : groups_) {
      const Entry& lead = g.heap.front();
      int64_t value = lead.key + step_ * static_cast<int64_t>(g.weight);
      if (!best || value > best_value || (value == best_value && lead.pos < best_pos)) {
        best = &g;
        best_value = value;
        best_pos = lead.pos;
      }
    }
    std::pop_heap(best->heap.begin(), best->heap.end(), Less{});
    best->heap.back().key -= total_;
    std::push_heap(best->heap.begin(), best->heap.end(), Less{});
    return best_pos;
  }

  int64_t total() const { return total_; }

 private:
  // key = current weight minus what the member gained since the start (step * weight).
  struct Entry {
    int64_t key;
    uint32_t pos;
  };
  struct Less {  // max-heap on key, then min position
    bool operator()(const Entry& a, const Entry& b) const {
      return a.key != b.key ? a.key < b.key : a.pos > b.pos;
    }
  };
  struct Group {
    uint32_t weight;
    std::vector<Entry> heap;
  };
  std::vector<Group> groups_;
  int64_t step_ = 0;
  int64_t total_ = 0;
};

template <class Entry>
class WeightedRoundRobin final : public Policy, public WrrFastPath<Entry> {
  using Fast = WrrFastPath<Entry>;
  using Fast::capacity_;
  using Fast::kHalf;
  using Fast::kIndexMask;
  using Fast::kNoPick;
  using Fast::live_;
  using Fast::table_;
  using Fast::ticket_;

 public:
  WeightedRoundRobin(std::vector<Member> members, std::span<BackendLive* const> live,
                     const CarriedState* previous)
      : members_(std::move(members)),
        eff_published_(std::make_unique<std::atomic<uint32_t>[]>(members_.size())) {
    size_t n = members_.size();
    live_ = live.data();
    live_pos_.reserve(n);
    weights_.reserve(n);
    cw_.assign(n, 0);
    eff_.resize(n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const Member& m = members_[i];
      live_pos_.push_back(live[m.index]);
      weights_.push_back(m.weight);
      eff_[i] = m.weight;
      total += m.weight;
      if (m.index >= position_of_.size()) position_of_.resize(m.index + 1, kNone);
      position_of_[m.index] = static_cast<uint32_t>(i);
    }
    if (previous) carry_over(*previous, static_cast<int64_t>(total));
    for (size_t i = 0; i < n; ++i) eff_published_[i].store(static_cast<uint32_t>(eff_[i]));
    // The table never needs more than one period of the whole set (repeated up to kMinTable).
    uint64_t capacity = total == 0 || total > kMaxTable ? 0 : std::max(total, kMinTable);
    table_storage_ = std::make_unique<std::atomic<Entry>[]>(capacity + 2 * Fast::kAhead);
    table_ = table_storage_.get();
    capacity_ = capacity;
    this->prefetch_ = n > kPrefetchMembers;
    clear_table();
    std::lock_guard lock(mu_);
    try_enter_fast();
  }

  PolicyKind kind() const override { return PolicyKind::weighted_round_robin; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    uint32_t index = Fast::pick_index(ctx);
    if (index == kNoPick) return std::nullopt;
    return index;
  }

  void availability_changed(uint32_t index) override {
    if (position(index) == kNone) return;
    std::lock_guard lock(mu_);
    leave_fast();
    try_enter_fast();
  }

  void attempt_failed(uint32_t index, uint32_t max_fails) override {
    uint32_t pos = position(index);
    if (pos == kNone || max_fails == 0) return;
    int64_t penalty = weights_[pos] / max_fails;
    if (penalty == 0) return;  // nginx: integer division, a light peer is not penalised
    std::lock_guard lock(mu_);
    leave_fast();
    eff_[pos] = std::max<int64_t>(0, eff_[pos] - penalty);
    eff_published_[pos].store(static_cast<uint32_t>(eff_[pos]), std::memory_order_relaxed);
    try_enter_fast();
  }

  uint32_t effective_weight(uint32_t index) const override {
    uint32_t pos = position(index);
    return pos == kNone ? 0 : eff_published_[pos].load(std::memory_order_relaxed);
  }

  // Leaves this snapshot on the exact loop: it is being replaced, and the loop
  // stays exact for the few picks (retries in flight) it may still serve.
  void export_state(CarriedState& out) const override {
    std::lock_guard lock(mu_);
    const_cast<WeightedRoundRobin*>(this)->leave_fast();
    for (size_t i = 0; i < members_.size(); ++i)
      out.set(members_[i].index, cw_[i], static_cast<uint32_t>(eff_[i]));
  }

  // Everything the fast path does not answer: `word` is a ticket already taken.
  uint32_t slow(uint64_t word, const PickContext& ctx) {
    std::lock_guard lock(mu_);
    uint64_t tag = word >> kWrrTagShift;
    if (tag != 0 && (ticket_.load(std::memory_order_relaxed) >> kWrrTagShift) == tag) {
      // The ticket's epoch is still on: its entry was not generated yet, or lies
      // past the repeated periods, or its member just became unavailable.
      if (auto index = serve(word & kWrrTicketMask)) {
        if (live_[*index]->available.load(std::memory_order_relaxed)) return *index;
      }
    }
    leave_fast();
    auto pos = exact_pick(ctx);
    try_enter_fast();
    return pos ? members_[*pos].index : kNoPick;
  }

  uint32_t tried(const PickContext& ctx) {
    if (!touches_members(*ctx.tried)) {
      uint64_t word;
      uint32_t index = Fast::try_fast(word);
      return index != kNoPick ? index : slow(word, ctx);
    }
    std::lock_guard lock(mu_);
    leave_fast();
    auto pos = exact_pick(ctx);
    try_enter_fast();
    return pos ? members_[*pos].index : kNoPick;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  static Entry make_entry(uint64_t tag, uint32_t index) {
    return static_cast<Entry>((Entry(tag) << kHalf) | index);
  }
  static uint32_t index_of(Entry e) { return static_cast<uint32_t>(e & kIndexMask); }

  uint32_t position(uint32_t index) const {
    return index < position_of_.size() ? position_of_[index] : kNone;
  }

  bool touches_members(const TriedSet& tried) const {
    if (tried.empty()) return false;
    for (const Member& m : members_)
      if (tried.contains(m.index)) return true;
    return false;
  }

  // A backend kept across a rebuild keeps its current weight (clamped to the new
  // total so a shrunken pool does not starve it) and its effective weight: a
  // backend at full weight stays at full (new) weight; a penalised one keeps its
  // penalty and recovers as usual.
  void carry_over(const CarriedState& previous, int64_t total) {
    for (size_t i = 0; i < members_.size(); ++i) {
      const CarriedState::Entry* e = previous.find(members_[i].index);
      if (!e) continue;
      cw_[i] = std::clamp<int64_t>(e->current_weight, -total, total);
      if (e->effective_weight < eff_[i]) eff_[i] = e->effective_weight;
    }
  }

  // nginx's loop. Caller holds mu_ and has left fast mode.
  std::optional<uint32_t> exact_pick(const PickContext& ctx) {
    int64_t total = 0;
    int64_t best = -1;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!eligible(live_pos_[i], members_[i].index, ctx)) continue;
      cw_[i] += eff_[i];
      total += eff_[i];
      if (eff_[i] < weights_[i]) {
        ++eff_[i];
        eff_published_[i].store(static_cast<uint32_t>(eff_[i]), std::memory_order_relaxed);
      }
      if (best < 0 || cw_[i] > cw_[best]) best = static_cast<int64_t>(i);
    }
    if (best < 0) return std::nullopt;
    cw_[best] -= total;
    return static_cast<uint32_t>(best);
  }

  // Every entry gets a tag no ticket word carries.
  void clear_table() {
    // Including the 2 * kAhead spare entries the fast path prefetches through.
    for (uint64_t j = 0; j < capacity_ + 2 * Fast::kAhead; ++j)
      table_[j].store(make_entry(kWrrInvalidTag, 0), std::memory_order_relaxed);
  }

  // The pool index for ticket `ticket` of the current epoch. Caller holds mu_ in
  // fast mode. nullopt when the period ended without the state coming back
  // (fast mode is then left).
  std::optional<uint32_t> serve(uint64_t ticket) {
    if (!complete_ && ticket >= generated_ && !generate_until(ticket)) return std::nullopt;
    uint64_t slot = ticket;
    if (complete_ && ticket >= limit_) {
      slot = ticket % period_;
      // Lower the shared counter by a multiple of the period: every later
      // ticket keeps its place in the sequence and lands inside the table.
      // Only fetch_adds race with this (all other writers hold mu_), so the
      // count stays >= what is subtracted.
      uint64_t count = ticket_.load(std::memory_order_relaxed) & kWrrTicketMask;
      if (count >= limit_) ticket_.fetch_sub(count - count % period_, std::memory_order_relaxed);
    }
    return index_of(table_[slot].load(std::memory_order_relaxed));
  }

  // Extends the table through `ticket`. Caller holds mu_ in fast mode. Returns
  // false when the period ended without the state coming back (no wrap possible):
  // fast mode is then left at the end of the period.
  bool generate_until(uint64_t ticket) {
    if (complete_) return true;
    uint64_t done = generated_;
    uint64_t period = period_;
    uint64_t target = std::min(period, std::max(ticket + 1, std::min(period, done + 1024)));
    for (; done < target; ++done)
      table_[done].store(make_entry(tag_, members_[generator_.next()].index), std::memory_order_relaxed);
    generated_ = done;
    if (done == period) {
      if (state_at(period) == cw_) {
        complete_ = true;
        // Repeat the period through the table.
        for (uint64_t j = period; j < limit_; ++j)
          table_[j].store(table_[j - period].load(std::memory_order_relaxed), std::memory_order_relaxed);
        return true;
      }
      // The caller's ticket (and any later one) gets no table entry: the exact
      // state resumes right before it.
      leave_fast(ticket);
      return false;
    }
    return true;
  }

  // The current weights after the first `count` tickets of this epoch.
  std::vector<int64_t> state_at(uint64_t count) const {
    std::vector<int64_t> picks(members_.size(), 0);
    // After whole periods of a complete table the state is back at the start.
    uint64_t rest = complete_ ? count % period_ : count;
    for (uint64_t j = 0; j < rest; ++j)
      ++picks[position_of_[index_of(table_[j].load(std::memory_order_relaxed))]];
    std::vector<int64_t> cw = cw_;  // cw_ holds the state at the start of the epoch
    int64_t total = generator_.total();
    for (uint32_t pos : table_members_) {
      cw[pos] += static_cast<int64_t>(rest) * weights_[pos] - total * picks[pos];
    }
    return cw;
  }

  // Caller holds mu_. Turns the fast-mode ticket count into exact current weights.
  // Tickets from `first_unserved` on were never answered from the table.
  void leave_fast(uint64_t first_unserved = UINT64_MAX) {
    // Tag 0: every later ticket misses the table.
    uint64_t word = ticket_.fetch_and(kWrrTicketMask, std::memory_order_acq_rel);
    if ((word >> kWrrTagShift) == 0) {
      // Already slow. Keep the count far from the tag bits.
      if (word > (uint64_t{1} << 40)) ticket_.fetch_and(~kWrrTicketMask, std::memory_order_relaxed);
      return;
    }
    uint64_t count = std::min(word & kWrrTicketMask, first_unserved);
    // Tickets past the generated frontier (readers still on their way to the
    // lock) never got an entry; the sequence resumes at the frontier.
    if (!complete_) count = std::min(count, generated_);
    cw_ = state_at(count);
  }

  // Caller holds mu_ and is in slow mode. Starts a table epoch when every
  // available member is steady.
  void try_enter_fast() {
    if (capacity_ == 0) return;
    table_members_.clear();
    uint64_t total = 0;
    bool zero = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!live_pos_[i]->available.load(std::memory_order_relaxed)) continue;
      if (eff_[i] != weights_[i]) return;
      table_members_.push_back(static_cast<uint32_t>(i));
      total += weights_[i];
      zero = zero && cw_[i] == 0;
    }
    if (table_members_.empty()) return;
    uint64_t g = 0;
    for (uint32_t pos : table_members_) g = std::gcd(g, uint64_t{weights_[pos]});
    // From the zero state the sequence repeats every W/gcd picks; from another
    // state it may need W (or never repeat: then fast mode ends after one period).
    period_ = zero ? total / g : total;
    limit_ = capacity_ / period_ * period_;
    generator_.reset(cw_, weights_, table_members_);
    generated_ = 0;
    complete_ = false;
    if (++tag_ > kWrrMaxTag) {
      // Tags wrap: entries left from the previous use of a tag must not match.
      tag_ = 1;
      clear_table();
    }
    ticket_.store(tag_ << kWrrTagShift, std::memory_order_release);
  }

  const std::vector<Member> members_;
  std::vector<BackendLive*> live_pos_;    // by position
  std::vector<uint32_t> weights_;         // by position
  std::vector<uint32_t> position_of_;     // pool index -> position
  std::unique_ptr<std::atomic<uint32_t>[]> eff_published_;
  std::unique_ptr<std::atomic<Entry>[]> table_storage_;

  mutable std::mutex mu_;
  // Guarded by mu_: exact state in slow mode, the epoch's start state in fast mode.
  std::vector<int64_t> cw_;
  std::vector<int64_t> eff_;
  std::vector<uint32_t> table_members_;
  SteadyGenerator generator_;
  uint64_t tag_ = 0;        // current (or last) epoch's tag
  uint64_t period_ = 1;     // the epoch's period
  uint64_t limit_ = 0;      // entries holding whole periods once complete
  uint64_t generated_ = 0;  // entries generated in this epoch
  bool complete_ = false;   // a whole period generated, state back at the start
};

}  // namespace

template <class Entry>
uint32_t WrrFastPath<Entry>::pick_slow(uint64_t word, const PickContext& ctx) {
  return static_cast<WeightedRoundRobin<Entry>*>(this)->slow(word, ctx);
}

template <class Entry>
uint32_t WrrFastPath<Entry>::pick_tried(const PickContext& ctx) {
  return static_cast<WeightedRoundRobin<Entry>*>(this)->tried(ctx);
}

template class WrrFastPath<uint32_t>;
template class WrrFastPath<uint64_t>;

WrrFastPath<uint32_t>* narrow_wrr_fast_path(Policy& policy) {
  return dynamic_cast<WeightedRoundRobin<uint32_t>*>(&policy);
}

std::unique_ptr<Policy> make_weighted_round_robin(std::vector<Member> members,
                                                  std::span<BackendLive* const> live,
                                                  const CarriedState* previous) {
  // Narrow entries hold a 16-bit pool index.
  if (live.size() <= (size_t{1} << 16))
    return std::make_unique<WeightedRoundRobin<uint32_t>>(std::move(members), live, previous);
  return std::make_unique<WeightedRoundRobin<uint64_t>>(std::move(members), live, previous);
}

}  // namespace heft::balance
