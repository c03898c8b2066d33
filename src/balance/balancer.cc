#include "heft/balance/balancer.h"

#include <algorithm>
#include <unordered_map>

#include "balance/weighted_round_robin.h"
#include "heft/balance/hash.h"

namespace heft::balance {

Balancer::Balancer(PolicyOptions options, std::vector<BackendSpec> backends, const Balancer* previous)
    : options_(options), backends_(std::move(backends)) {
  std::vector<Member> primaries, backups;
  CarriedState old_state, carried;
  if (previous) old_state = previous->carried_state();
  // Name lookups for the next rebuild: one flat table, no allocation per backend.
  size_t slots = 16;
  while (slots < 2 * backends_.size()) slots *= 2;
  name_slots_.assign(slots, 0);
  live_.reserve(backends_.size());
  live_ptrs_.reserve(backends_.size());
  // previous->retired_ by name, built when a backend is not in `previous`.
  std::unordered_map<std::string_view, size_t> retired_by_name;
  size_t kept = 0;  // backends of `previous` found here (names are unique)
  for (uint32_t i = 0; i < backends_.size(); ++i) {
    const BackendSpec& b = backends_[i];
    uint64_t id = hash_key(b.name);
    for (size_t s = id & (slots - 1);; s = (s + 1) & (slots - 1)) {
      if (name_slots_[s] == 0) {
        name_slots_[s] = i + 1;
        break;
      }
    }
    std::optional<uint32_t> old;
    if (previous) {
      // Most changes keep the order of backends: try the same position first.
      if (i < previous->size() && previous->backends_[i].name == b.name) old = i;
      else old = previous->find(b.name);
    }
    if (old) {
      ++kept;
      live_.push_back(previous->live_[*old]);
      if (const auto* e = old_state.find(*old)) {
        const BackendSpec& was = previous->backends_[*old];
        if (was.weight > 0 && b.weight > 0) {
          const int64_t from = was.balance_weight ? was.balance_weight : was.weight;
          const int64_t to = b.balance_weight ? b.balance_weight : b.weight;
          // The effective weight in proportion: a backend at full weight is at
          // its new full weight at once (a raised weight must not climb up one
          // per pick), a penalised one keeps its share of the penalty.
          const int64_t eff = std::min<int64_t>(to, int64_t(e->effective_weight) * to / from);
          // A balance-weight rescale (slow start, adaptive) changes the units:
          // the current weight follows. A plain weight change keeps it.
          const bool rescale = was.balance_weight || b.balance_weight;
          carried.set(i, rescale ? e->current_weight * to / from : e->current_weight, static_cast<uint32_t>(eff));
        } else {
          carried.set(i, e->current_weight, e->effective_weight);
        }
      }
    } else {
      // Removed by an earlier change and added back: requests that began
      // before the removal may still be in flight, counted on the object an
      // older Balancer holds. A fresh count would let max_conns more in.
      std::shared_ptr<BackendLive> revived;
      if (previous && !previous->retired_.empty()) {
        if (retired_by_name.empty())
          for (size_t r = 0; r < previous->retired_.size(); ++r)
            retired_by_name.emplace(previous->retired_[r].name, r);
        if (auto it = retired_by_name.find(b.name); it != retired_by_name.end())
          revived = previous->retired_[it->second].live.lock();
      }
      if (revived) {
        revived->available.store(true);  // as an added backend: available until told otherwise
        live_.push_back(std::move(revived));
      } else {
        live_.push_back(std::make_shared<BackendLive>());
      }
    }
    live_ptrs_.push_back(live_.back().get());
    if (b.max_conns > 0) limited_ = true;
    // Drained or down: listed, never a member; but a down backend keeps its
    // place where the policy parks it (a hash ring or table), so only its own keys move.
    if (b.weight == 0 || (b.down && !policy_traits(options_.kind).parks_down_members)) continue;
    (b.backup ? backups : primaries)
        .push_back(Member{i, b.balance_weight ? b.balance_weight : b.weight, id, b.down});
  }
  if (previous) {
    // What this Balancer does not list and an older one may still hold: the
    // backends `previous` had and this one lacks, and its own retired ones
    // still held somewhere.
    for (const Retired& r : previous->retired_)
      if (!r.live.expired() && !find(r.name)) retired_.push_back(r);
    if (kept < previous->backends_.size())  // (a weight change removes none: no scan)
      for (uint32_t j = 0; j < previous->backends_.size(); ++j)
        if (!find(previous->backends_[j].name)) retired_.push_back({previous->backends_[j].name, previous->live_[j]});
  }
  // Before the policies read the flags: one that flips meanwhile is told
  // again by the next set_available() or sync_availability() (harmless).
  told_available_ = std::make_unique<std::atomic<bool>[]>(backends_.size());
  for (uint32_t i = 0; i < backends_.size(); ++i) told_available_[i] = live_[i]->available.load();
  const CarriedState* carry = previous ? &carried : nullptr;
  primary_ = make_policy(options_, std::move(primaries), live_ptrs_, carry);
  backup_ = make_policy(options_, std::move(backups), live_ptrs_, carry);
  if (options_.kind == PolicyKind::weighted_round_robin) primary_wrr_ = narrow_wrr_fast_path(*primary_);
}

namespace {

// The general case: `primary` first (null when it was already asked), then `backup`.
[[gnu::noinline]] std::optional<uint32_t> pick_from(Policy* primary, Policy& backup, const PickContext& ctx) {
  if (primary) {
    if (auto choice = primary->pick(ctx)) return choice;
  }
  return backup.pick(ctx);
}

// Smooth WRR whose table did not answer ticket `word`.
[[gnu::noinline]] std::optional<uint32_t> pick_after_miss(WrrFastPath<uint32_t>& primary, Policy& backup,
                                                          uint64_t word, const PickContext& ctx) {
  uint32_t index = primary.pick_slow(word, ctx);
  if (index != WrrFastPath<uint32_t>::kNoPick) return index;
  return backup.pick(ctx);
}

}  // namespace

std::optional<uint32_t> Balancer::pick(const PickContext& ctx) {
  if (primary_wrr_ && !(ctx.tried && !ctx.tried->empty())) [[likely]] {
    // Smooth WRR: the table lookup inline, no virtual call, no stack frame.
    uint64_t word;
    uint32_t index = primary_wrr_->try_fast(word);
    if (index != WrrFastPath<uint32_t>::kNoPick) [[likely]]
      return engaged_index(index);
    return pick_after_miss(*primary_wrr_, *backup_, word, ctx);
  }
  return pick_from(primary_.get(), *backup_, ctx);
}

std::optional<uint32_t> Balancer::acquire(const PickContext& ctx, bool* full) {
  if (!limited_) [[likely]] {
    const std::optional<uint32_t> chosen = pick(ctx);
    if (chosen) begin_request(*chosen);
    return chosen;
  }
  return acquire_limited(ctx, full);
}

std::optional<uint32_t> Balancer::acquire_limited(const PickContext& ctx, bool* full) {
  // Counts the request at `index` unless it is full: the check and the
  // increment are one step, so two threads cannot both take the last place.
  auto try_count = [&](uint32_t index) {
    const uint32_t limit = backends_[index].max_conns;
    std::atomic<uint32_t>& active = live_[index]->active;
    // Sequentially consistent, as end_request(): a request that joins a
    // pool's queue publishes its place and then picks here, a request that
    // ends lowers the count and then looks at the queue; with weaker orders
    // each could miss the other's write and the wake-up be lost (free on
    // x86, where the CAS is a full barrier and loads are plain moves).
    uint32_t a = active.load(std::memory_order_seq_cst);
    while (limit == 0 || a < limit) {
      if (active.compare_exchange_weak(a, a + 1, std::memory_order_seq_cst)) {
        tell_active_changed(index);
        return true;
      }
    }
    if (full) *full = true;
    return false;
  };
  if (primary_wrr_ && !(ctx.tried && !ctx.tried->empty())) {
    // Smooth WRR: a full backend's turn is skipped by taking the next ticket
    // (its current weight pays for the turn, as below), which stays on the
    // lock-free table; a skip through the tried set below leaves it for
    // nginx's loop under the mutex (~1 us). A few tickets, then that.
    for (int skips = 0; skips < 4; ++skips) {
      const std::optional<uint32_t> chosen = pick(ctx);
      if (!chosen) return std::nullopt;
      if (try_count(*chosen)) return chosen;
    }
  }
  // The full backends join a copy of the request's tried set for this pick
  // only: a retry of the request may find one with room again.
  TriedSet passed = ctx.tried ? *ctx.tried : TriedSet{};
  PickContext with_passed = ctx;
  with_passed.tried = &passed;
  // Each round passes over one more backend: at most size() rounds.
  for (size_t round = 0; round <= backends_.size(); ++round) {
    const std::optional<uint32_t> chosen = pick(with_passed);
    if (!chosen) return std::nullopt;
    if (try_count(*chosen)) return chosen;
    passed.add(*chosen);
  }
  return std::nullopt;
}

std::optional<uint32_t> Balancer::room(uint32_t index) const {
  const uint32_t limit = backends_[index].max_conns;
  if (limit == 0) return std::nullopt;
  return limit - std::min(limit, live_[index]->active.load(std::memory_order_relaxed));
}

bool Balancer::set_available(uint32_t index, bool available) {
  if (index >= live_.size()) return false;
  live_[index]->available.store(available);
  if (told_available_[index].exchange(available) == available) return false;
  Policy& policy = backends_[index].backup ? *backup_ : *primary_;
  policy.availability_changed(index);
  return available;
}

bool Balancer::sync_availability() {
  bool became_available = false;
  for (uint32_t i = 0; i < live_.size(); ++i) {
    const bool available = live_[i]->available.load();
    if (told_available_[i].exchange(available) == available) continue;
    Policy& policy = backends_[i].backup ? *backup_ : *primary_;
    policy.availability_changed(i);
    became_available |= available;
  }
  return became_available;
}

void Balancer::begin_request(uint32_t index) {
  if (index >= live_.size()) return;
  live_[index]->active.fetch_add(1, std::memory_order_relaxed);
  tell_active_changed(index);
}

void Balancer::tell_active_changed(uint32_t index) {
  // Both policies: each ignores non-members cheaply (no BackendSpec to read).
  primary_->active_changed(index);
  backup_->active_changed(index);
}

void Balancer::end_request(uint32_t index) {
  if (index >= live_.size()) return;
  std::atomic<uint32_t>& active = live_[index]->active;
  uint32_t a = active.load(std::memory_order_relaxed);
  // seq_cst: see acquire_limited() (the caller looks at the queue next).
  while (a != 0 && !active.compare_exchange_weak(a, a - 1, std::memory_order_seq_cst)) {
  }
  if (a == 0) return;  // already 0: nothing changed
  tell_active_changed(index);
}

void Balancer::report_failure(uint32_t index) {
  if (index >= backends_.size()) return;
  Policy& policy = backends_[index].backup ? *backup_ : *primary_;
  policy.attempt_failed(index, backends_[index].max_fails);
}

uint32_t Balancer::effective_weight(uint32_t index) const {
  if (index >= backends_.size()) return 0;
  const BackendSpec& b = backends_[index];
  if (b.weight == 0 || b.down) return 0;
  return (b.backup ? *backup_ : *primary_).effective_weight(index);
}

std::optional<uint32_t> Balancer::find(std::string_view name) const {
  size_t mask = name_slots_.size() - 1;
  for (size_t s = hash_key(name) & mask; name_slots_[s] != 0; s = (s + 1) & mask)
    if (backends_[name_slots_[s] - 1].name == name) return name_slots_[s] - 1;
  return std::nullopt;
}

CarriedState Balancer::carried_state() const {
  CarriedState out;
  out.entries.resize(backends_.size());
  primary_->export_state(out);
  backup_->export_state(out);
  return out;
}

}  // namespace heft::balance
