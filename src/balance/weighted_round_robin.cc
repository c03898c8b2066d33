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
//    is back where it started, the table wraps and a pick is O(1). One counter
//    for all threads makes the split exact across threads: any k periods of
//    consecutive tickets give each member exactly k * weight picks.
// Switching fast -> slow replays the table up to the ticket count to recover the
// exact current weights; switching slow -> fast starts a new table (epoch) from
// the current state. A seqlock-style epoch check keeps readers from using a
// table that was restarted under them.
//
// Thread safety: all public methods may be called concurrently.
#include <algorithm>
#include <cassert>
#include <mutex>
#include <numeric>

#include "balance/factories.h"

namespace heft::balance {
namespace {

// Largest table kept; pools whose period is longer stay on the exact loop.
constexpr uint64_t kMaxTable = uint64_t{1} << 22;
constexpr uint64_t kFastBit = uint64_t{1} << 63;
constexpr int kEpochShift = 48;
constexpr uint64_t kEpochMask = (uint64_t{1} << 15) - 1;
constexpr uint64_t kTicketMask = (uint64_t{1} << kEpochShift) - 1;

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

class WeightedRoundRobin final : public Policy {
 public:
  WeightedRoundRobin(std::vector<Member> members, std::span<BackendLive* const> live,
                     const CarriedState* previous)
      : members_(std::move(members)),
        eff_published_(std::make_unique<std::atomic<uint32_t>[]>(members_.size())) {
    size_t n = members_.size();
    live_.reserve(n);
    weights_.reserve(n);
    cw_.assign(n, 0);
    eff_.resize(n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const Member& m = members_[i];
      live_.push_back(live[m.index]);
      weights_.push_back(m.weight);
      eff_[i] = m.weight;
      total += m.weight;
      if (m.index >= position_of_.size()) position_of_.resize(m.index + 1, kNone);
      position_of_[m.index] = static_cast<uint32_t>(i);
    }
    if (previous) carry_over(*previous, static_cast<int64_t>(total));
    for (size_t i = 0; i < n; ++i) eff_published_[i].store(static_cast<uint32_t>(eff_[i]));
    // The table never needs more than one period of the whole set.
    table_capacity_ = total <= kMaxTable ? total : 0;
    table_ = std::vector<std::atomic<uint32_t>>(table_capacity_);
    std::lock_guard lock(mu_);
    try_enter_fast();
  }

  PolicyKind kind() const override { return PolicyKind::weighted_round_robin; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    if (!ctx.tried || !touches_members(*ctx.tried)) {
      uint64_t word = ticket_.fetch_add(1, std::memory_order_relaxed);
      if (word & kFastBit) {
        if (auto pos = read_table(word)) return members_[*pos].index;
      }
    }
    std::lock_guard lock(mu_);
    leave_fast();
    auto pos = exact_pick(ctx);
    try_enter_fast();
    if (!pos) return std::nullopt;
    return members_[*pos].index;
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

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

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
      if (!eligible(live_[i], members_[i].index, ctx)) continue;
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

  // ticket % period by Barrett reduction (a division costs more than the rest
  // of a pick): q underestimates the quotient by at most 1.
  static uint64_t reduce(uint64_t ticket, uint64_t period, uint64_t inverse) {
    if (period == 1) return 0;
    uint64_t q = static_cast<uint64_t>((static_cast<unsigned __int128>(ticket) * inverse) >> 64);
    uint64_t r = ticket - q * period;
    while (r >= period) r -= period;
    return r;
  }

  // Fast path read of ticket `word`. Returns nullopt if the table was restarted
  // (another epoch) or the chosen member just became unavailable.
  std::optional<uint32_t> read_table(uint64_t word) {
    uint64_t epoch = (word >> kEpochShift) & kEpochMask;
    uint64_t ticket = word & kTicketMask;
    if (epoch_.load(std::memory_order_acquire) != epoch) return std::nullopt;
    uint64_t period = period_.load(std::memory_order_relaxed);
    uint64_t slot;
    if (complete_.load(std::memory_order_acquire)) {
      slot = reduce(ticket, period, period_inverse_.load(std::memory_order_relaxed));
    } else if (ticket < generated_.load(std::memory_order_acquire)) {
      slot = ticket;
    } else {
      std::lock_guard lock(mu_);
      if (!(ticket_.load(std::memory_order_relaxed) & kFastBit) ||
          epoch_.load(std::memory_order_relaxed) != epoch)
        return std::nullopt;
      if (!generate_until(ticket)) return std::nullopt;
      slot = ticket < period ? ticket : ticket % period;
    }
    uint32_t pos = table_[slot].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (epoch_.load(std::memory_order_relaxed) != epoch) return std::nullopt;
    if (!live_[pos]->available.load(std::memory_order_relaxed)) return std::nullopt;
    return pos;
  }

  // Extends the table through `ticket`. Caller holds mu_ in fast mode. Returns
  // false when the period ended without the state coming back (no wrap possible):
  // fast mode is then left at the end of the period.
  bool generate_until(uint64_t ticket) {
    uint64_t done = generated_.load(std::memory_order_relaxed);
    if (complete_.load(std::memory_order_relaxed)) return true;
    uint64_t period = period_.load(std::memory_order_relaxed);
    uint64_t target = std::min(period, std::max(ticket + 1, std::min(period, done + 1024)));
    // Seqlock writer: readers that see an entry written below also see the new epoch.
    std::atomic_thread_fence(std::memory_order_release);
    for (; done < target; ++done) table_[done].store(generator_.next(), std::memory_order_relaxed);
    generated_.store(done, std::memory_order_release);
    if (done == period) {
      if (state_at(period) == cw_) {
        complete_.store(true, std::memory_order_release);
        return true;
      }
      // The caller's ticket (and any later one) gets no table entry: the exact
      // state resumes right before it.
      leave_fast(ticket);
      return false;
    }
    return true;
  }

  // The current weights after the first `count` table entries of this epoch.
  std::vector<int64_t> state_at(uint64_t count) const {
    std::vector<int64_t> picks(members_.size(), 0);
    // After whole periods of a complete table the state is back at the start.
    uint64_t rest = complete_.load(std::memory_order_relaxed)
                        ? count % period_.load(std::memory_order_relaxed)
                        : count;
    for (uint64_t j = 0; j < rest; ++j) ++picks[table_[j].load(std::memory_order_relaxed)];
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
    uint64_t word = ticket_.fetch_and(~kFastBit, std::memory_order_acq_rel);
    if (!(word & kFastBit)) return;
    uint64_t count = std::min(word & kTicketMask, first_unserved);
    // Tickets past the generated frontier (readers still on their way to the
    // lock) never got an entry; the sequence resumes at the frontier.
    if (!complete_.load(std::memory_order_relaxed))
      count = std::min(count, generated_.load(std::memory_order_relaxed));
    cw_ = state_at(count);
    // Invalidate the epoch before the table is rewritten (seqlock writer side).
    epoch_.store(kEpochMask + 1, std::memory_order_release);
  }

  // Caller holds mu_ and is in slow mode. Starts a table epoch when every
  // available member is steady.
  void try_enter_fast() {
    if (table_capacity_ == 0) return;
    table_members_.clear();
    uint64_t total = 0;
    bool zero = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!live_[i]->available.load(std::memory_order_relaxed)) continue;
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
    uint64_t period = zero ? total / g : total;
    period_.store(period, std::memory_order_relaxed);
    period_inverse_.store(period > 1 ? UINT64_MAX / period : 0, std::memory_order_relaxed);
    generator_.reset(cw_, weights_, table_members_);
    generated_.store(0, std::memory_order_relaxed);
    complete_.store(false, std::memory_order_relaxed);
    uint64_t epoch = (next_epoch_++) & kEpochMask;
    epoch_.store(epoch, std::memory_order_release);
    ticket_.store(kFastBit | (epoch << kEpochShift), std::memory_order_release);
  }

  const std::vector<Member> members_;
  std::vector<BackendLive*> live_;        // by position
  std::vector<uint32_t> weights_;         // by position
  std::vector<uint32_t> position_of_;     // pool index -> position
  std::unique_ptr<std::atomic<uint32_t>[]> eff_published_;

  mutable std::mutex mu_;
  // Guarded by mu_: exact state in slow mode, the epoch's start state in fast mode.
  std::vector<int64_t> cw_;
  std::vector<int64_t> eff_;
  std::vector<uint32_t> table_members_;
  SteadyGenerator generator_;
  uint64_t next_epoch_ = 0;
  uint64_t table_capacity_ = 0;
  std::atomic<uint64_t> period_{1};
  std::atomic<uint64_t> period_inverse_{0};  // floor((2^64 - 1) / period): modulo without a division

  std::atomic<uint64_t> ticket_{0};  // fast bit | epoch | ticket
  std::atomic<uint64_t> epoch_{kEpochMask + 1};
  std::atomic<uint64_t> generated_{0};
  std::atomic<bool> complete_{false};
  std::vector<std::atomic<uint32_t>> table_;
};

}  // namespace

std::unique_ptr<Policy> make_weighted_round_robin(std::vector<Member> members,
                                                  std::span<BackendLive* const> live,
                                                  const CarriedState* previous) {
  return std::make_unique<WeightedRoundRobin>(std::move(members), live, previous);
}

}  // namespace heft::balance
