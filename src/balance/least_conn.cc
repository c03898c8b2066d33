// Weighted least connections with nginx's semantics: the eligible member with
// the lowest active / weight wins (compared by cross-multiplication with the
// configured weight, no floating point); when several tie, smooth weighted round
// robin runs over the tied members only (their current weights grow by their
// effective weights, effective weights recover by 1, the highest current weight
// wins, first in order on a tie, and loses the tied total).
//
// Index (pools of more than kScanMax members). Members are grouped by
// configured weight into classes. Inside a class the ratio order is the order
// of active counts, so each class keeps its indexed members in FIFO buckets by
// active count (intrusive lists, a bitmap of non-empty buckets) and knows its
// lowest non-empty bucket. A tournament tree over the classes keeps, at the
// root, the class with the lowest min_active / weight (cross-multiplied) and
// the number of members tied at that ratio across all classes. Updates
// (begin/end of a request, availability) are O(1) bucket moves plus an
// O(log classes) tree walk only when a class's lowest bucket changes.
//
// Choice:
//  - The minimum ratio class is exact: the root's ratio is nginx's minimum.
//  - Ties of at most kExactTies members (every tie in a pool of up to 64
//    members): exactly nginx, smooth WRR over the tied members in pool order,
//    using and updating the same current/effective weights. O(ties).
//  - Larger ties: weight-proportional, O(log classes). Tied members of one
//    class all have the same weight and the same active count; they take turns
//    (round robin: the chosen member moves to the back of its bucket). Across
//    the tied classes, earliest-deadline-first on a per-class virtual pass: the
//    tied class with the lowest pass wins (lower class on equal passes) and
//    advances by 2^40 / (weight * tied members in the class); a class that sat
//    out (pass behind the virtual time) gets at most one early turn, then
//    restarts from the virtual time. With a steady tie set each class gets a
//    share proportional to weight * members, so each member's share is
//    proportional to its weight. Only the chosen member's effective weight
//    recovers by 1 (nginx recovers every tied member; effective weights do not
//    enter this choice).
//
// Staleness: the index holds the active count it was last told. Counts that
// change without active_changed() (callers still touching live(i).active) are
// caught two ways: every candidate is checked against its atomic (and the
// available flag) before it is returned, and a mismatch re-indexes it and
// retries (after kMaxRetries, an O(n) scan decides); and every pick audits one
// more member round robin, so an unnotified decrease elsewhere is repaired
// within n picks. Never returns an unavailable or tried member.
//
// Picks with a non-empty tried set and pools of up to kScanMax members use the
// plain O(n) nginx scan (exact, needs no index).
//
// Thread-safe: one mutex guards the index and the smooth-WRR state; critical
// sections are short.
#include <algorithm>
#include <bit>
#include <mutex>

#include "balance/factories.h"

namespace heft::balance {
namespace {

constexpr uint32_t kNil = UINT32_MAX;
constexpr size_t kScanMax = 8;      // pools up to this size: plain scan
constexpr size_t kExactTies = 64;   // ties up to this size: exact nginx smooth WRR
constexpr int kMaxRetries = 16;     // stale candidates re-indexed before scanning
constexpr uint64_t kPassScale = uint64_t{1} << 40;

class LeastConn final : public Policy {
 public:
  LeastConn(std::vector<Member> members, std::span<BackendLive* const> live, const CarriedState* previous)
      : members_(std::move(members)),
        eff_published_(std::make_unique<std::atomic<uint32_t>[]>(members_.size())) {
    size_t n = members_.size();
    cw_.assign(n, 0);
    uint32_t max_index = 0;
    for (size_t i = 0; i < n; ++i) {
      live_.push_back(live[members_[i].index]);
      eff_.push_back(members_[i].weight);
      max_index = std::max(max_index, members_[i].index);
      if (previous) {
        if (const auto* e = previous->find(members_[i].index)) {
          cw_[i] = e->current_weight;
          if (e->effective_weight < eff_[i]) eff_[i] = e->effective_weight;
        }
      }
      eff_published_[i].store(static_cast<uint32_t>(eff_[i]));
    }
    pos_of_.assign(n ? max_index + 1 : 0, kNil);
    for (uint32_t i = 0; i < n; ++i) pos_of_[members_[i].index] = i;
    indexed_ = n > kScanMax;
    if (indexed_) build_index();
  }

  PolicyKind kind() const override { return PolicyKind::least_conn; }

  std::optional<uint32_t> pick(const PickContext& ctx) override {
    if (!indexed_ || (ctx.tried && !ctx.tried->empty())) return scan_pick(ctx);
    std::unique_lock lock(mu_);
    audit();
    for (int attempt = 0; attempt < kMaxRetries; ++attempt) {
      const Node root = tree_[1];
      if (root.cls == kNil) return std::nullopt;
      if (root.ties == 1) {  // the common case: one member has the lowest ratio
        const Class& k = classes_[root.cls];
        uint32_t pos = k.buckets[k.min].head;
        if (fresh(pos, k.min)) return members_[pos].index;
        reindex(pos);
      } else if (root.ties <= kExactTies) {
        if (auto pos = exact_tied_pick(root)) return members_[*pos].index;
      } else {
        if (auto pos = large_tied_pick(root.cls)) return members_[*pos].index;
      }
    }
    lock.unlock();
    return scan_pick(ctx);
  }

  void active_changed(uint32_t index) override {
    if (!indexed_ || index >= pos_of_.size() || pos_of_[index] == kNil) return;
    std::lock_guard lock(mu_);
    reindex(pos_of_[index]);
  }

  void availability_changed(uint32_t index) override { active_changed(index); }

  void attempt_failed(uint32_t index, uint32_t max_fails) override {
    if (max_fails == 0 || index >= pos_of_.size() || pos_of_[index] == kNil) return;
    uint32_t i = pos_of_[index];
    std::lock_guard lock(mu_);
    eff_[i] = std::max<int64_t>(0, eff_[i] - members_[i].weight / max_fails);
    eff_published_[i].store(static_cast<uint32_t>(eff_[i]), std::memory_order_relaxed);
  }

  uint32_t effective_weight(uint32_t index) const override {
    if (index >= pos_of_.size() || pos_of_[index] == kNil) return 0;
    return eff_published_[pos_of_[index]].load(std::memory_order_relaxed);
  }

  void export_state(CarriedState& out) const override {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < members_.size(); ++i)
      out.set(members_[i].index, cw_[i], static_cast<uint32_t>(eff_[i]));
  }

 private:
  struct Slot {
    uint32_t cls = 0;
    uint32_t active = kNil;  // the count the index holds; kNil = not indexed
    uint32_t prev = kNil, next = kNil;
  };
  struct Bucket {
    uint32_t head = kNil, tail = kNil, size = 0;
  };
  struct Class {
    uint64_t weight = 1;
    uint64_t min = kNil;  // lowest non-empty bucket, kNil when the class is empty
    uint64_t pass = 0;
    uint32_t leaf_ties = 0;  // what the tree leaf holds
    uint64_t leaf_min = kNil;
    std::vector<Bucket> buckets;
    std::vector<uint64_t> nonempty;  // bitmap over buckets
  };
  struct Node {
    uint32_t cls = kNil;  // winning class of the subtree
    uint32_t ties = 0;    // members tied at the subtree's minimum ratio
  };

  // ---- plain nginx scan (small pools, tried sets, fallback) ----

  std::optional<uint32_t> scan_pick(const PickContext& ctx) {
    thread_local std::vector<uint32_t> tied;
    tied.clear();
    uint64_t best_active = 0, best_weight = 1;
    for (uint32_t i = 0; i < members_.size(); ++i) {
      if (!eligible(live_[i], members_[i].index, ctx)) continue;
      uint64_t active = live_[i]->active.load(std::memory_order_relaxed);
      uint64_t weight = members_[i].weight;
      if (tied.empty() || active * best_weight < best_active * weight) {
        tied.clear();
        best_active = active;
        best_weight = weight;
        tied.push_back(i);
      } else if (active * best_weight == best_active * weight) {
        tied.push_back(i);
      }
    }
    if (tied.empty()) return std::nullopt;
    if (tied.size() == 1) return members_[tied[0]].index;
    std::lock_guard lock(mu_);
    return members_[smooth_among(tied)].index;
  }

  // nginx's smooth WRR pass over `tied` (positions in pool order). Holds mu_.
  uint32_t smooth_among(const std::vector<uint32_t>& tied) {
    int64_t total = 0;
    uint32_t best = tied[0];
    bool first = true;
    for (uint32_t i : tied) {
      cw_[i] += eff_[i];
      total += eff_[i];
      if (eff_[i] < members_[i].weight) {
        ++eff_[i];
        eff_published_[i].store(static_cast<uint32_t>(eff_[i]), std::memory_order_relaxed);
      }
      if (first || cw_[i] > cw_[best]) best = i;
      first = false;
    }
    cw_[best] -= total;
    return best;
  }

  // ---- the index (holds mu_ from here on) ----

  void build_index() {
    std::vector<std::pair<uint32_t, uint32_t>> by_weight;  // weight -> class
    slots_.assign(members_.size(), {});
    for (uint32_t i = 0; i < members_.size(); ++i) {
      uint32_t w = members_[i].weight;
      auto it = std::lower_bound(by_weight.begin(), by_weight.end(), std::make_pair(w, 0u));
      if (it == by_weight.end() || it->first != w) {
        it = by_weight.insert(it, {w, static_cast<uint32_t>(classes_.size())});
        classes_.emplace_back().weight = w;
      }
      slots_[i].cls = it->second;
    }
    leaves_ = std::bit_ceil(std::max<size_t>(classes_.size(), 1));
    tree_.assign(2 * leaves_, Node{});
    for (uint32_t i = 0; i < members_.size(); ++i) {
      if (!live_[i]->available.load(std::memory_order_relaxed)) continue;
      insert(i, live_[i]->active.load(std::memory_order_relaxed));
    }
    for (uint32_t c = 0; c < classes_.size(); ++c) {
      Class& k = classes_[c];
      k.leaf_min = k.min;
      k.leaf_ties = k.min == kNil ? 0 : k.buckets[k.min].size;
      tree_[leaves_ + c] = {k.min == kNil ? kNil : c, k.leaf_ties};
    }
    for (size_t n = leaves_ - 1; n >= 1; --n) tree_[n] = combine(tree_[2 * n], tree_[2 * n + 1]);
  }

  // Compares the ratio min/weight of two non-empty classes: <0, 0, >0.
  int compare_ratio(uint32_t a, uint32_t b) const {
    const Class& x = classes_[a];
    const Class& y = classes_[b];
    uint64_t l = x.min * y.weight, r = y.min * x.weight;
    return l < r ? -1 : l > r ? 1 : 0;
  }

  Node combine(Node a, Node b) const {
    if (a.cls == kNil) return b;
    if (b.cls == kNil) return a;
    int c = compare_ratio(a.cls, b.cls);
    if (c < 0) return a;
    if (c > 0) return b;
    const Class& x = classes_[a.cls];
    const Class& y = classes_[b.cls];
    uint32_t win = (y.pass < x.pass || (y.pass == x.pass && b.cls < a.cls)) ? b.cls : a.cls;
    return {win, a.ties + b.ties};
  }

  void update_leaf(uint32_t c, bool force = false) {
    Class& k = classes_[c];
    uint32_t ties = k.min == kNil ? 0 : k.buckets[k.min].size;
    if (!force && k.leaf_min == k.min && k.leaf_ties == ties) return;
    k.leaf_min = k.min;
    k.leaf_ties = ties;
    size_t n = leaves_ + c;
    tree_[n] = {k.min == kNil ? kNil : c, ties};
    for (n /= 2; n >= 1; n /= 2) tree_[n] = combine(tree_[2 * n], tree_[2 * n + 1]);
  }

  void insert(uint32_t pos, uint32_t active) {
    Slot& s = slots_[pos];
    Class& k = classes_[s.cls];
    if (active >= k.buckets.size()) {
      k.buckets.resize(std::max<size_t>(active + 1, k.buckets.size() * 2));
      k.nonempty.resize((k.buckets.size() + 63) / 64, 0);
    }
    Bucket& b = k.buckets[active];
    s.active = active;
    s.next = kNil;
    s.prev = b.tail;
    if (b.tail != kNil) slots_[b.tail].next = pos;
    else b.head = pos;
    b.tail = pos;
    if (b.size++ == 0) k.nonempty[active / 64] |= uint64_t{1} << (active % 64);
    if (k.min == kNil || active < k.min) k.min = active;
  }

  void remove(uint32_t pos) {
    Slot& s = slots_[pos];
    Class& k = classes_[s.cls];
    uint32_t a = s.active;
    Bucket& b = k.buckets[a];
    if (s.prev != kNil) slots_[s.prev].next = s.next;
    else b.head = s.next;
    if (s.next != kNil) slots_[s.next].prev = s.prev;
    else b.tail = s.prev;
    s.active = s.prev = s.next = kNil;
    if (--b.size == 0) {
      k.nonempty[a / 64] &= ~(uint64_t{1} << (a % 64));
      if (k.min == a) k.min = next_nonempty(k, a + 1);
    }
  }

  static uint64_t next_nonempty(const Class& k, size_t from) {
    size_t w = from / 64;
    if (w >= k.nonempty.size()) return kNil;
    uint64_t bits = k.nonempty[w] & (~uint64_t{0} << (from % 64));
    while (true) {
      if (bits) return w * 64 + std::countr_zero(bits);
      if (++w >= k.nonempty.size()) return kNil;
      bits = k.nonempty[w];
    }
  }

  // Brings one member's entry in line with its atomics. Returns true if it changed.
  bool reindex(uint32_t pos) {
    Slot& s = slots_[pos];
    bool available = live_[pos]->available.load(std::memory_order_relaxed);
    uint32_t active = live_[pos]->active.load(std::memory_order_relaxed);
    if (available ? s.active == active : s.active == kNil) return false;
    if (s.active != kNil) remove(pos);
    if (available) insert(pos, active);
    update_leaf(s.cls);
    return true;
  }

  // Checks one member per pick, round robin. Its BackendLive was prefetched
  // by the previous pick (a cold line per pick otherwise).
  void audit() {
    reindex(audit_cursor_);
    if (++audit_cursor_ == members_.size()) audit_cursor_ = 0;
    __builtin_prefetch(live_[audit_cursor_]);
  }

  bool fresh(uint32_t pos, uint64_t active) const {
    return live_[pos]->available.load(std::memory_order_relaxed) &&
           live_[pos]->active.load(std::memory_order_relaxed) == active;
  }

  // Exact nginx tie-break over every member tied at the root's ratio.
  std::optional<uint32_t> exact_tied_pick(Node root) {
    thread_local std::vector<uint32_t> tied;
    tied.clear();
    uint32_t stack[64];
    int top = 0;
    stack[top++] = 1;
    bool stale = false;
    while (top > 0) {
      uint32_t n = stack[--top];
      const Node& node = tree_[n];
      if (node.cls == kNil || compare_ratio(node.cls, root.cls) != 0) continue;
      if (n < leaves_) {
        stack[top++] = 2 * n + 1;
        stack[top++] = 2 * n;
        continue;
      }
      const Class& k = classes_[node.cls];
      for (uint32_t p = k.buckets[k.min].head; p != kNil; p = slots_[p].next) {
        if (!fresh(p, k.min)) stale = true;
        tied.push_back(p);
      }
    }
    if (stale) {
      for (uint32_t p : tied) reindex(p);
      return std::nullopt;
    }
    if (tied.size() == 1) return tied[0];
    std::sort(tied.begin(), tied.end());
    return smooth_among(tied);
  }

  // Large tie: EDF over the tied classes (the root is the lowest pass), round
  // robin inside the class.
  std::optional<uint32_t> large_tied_pick(uint32_t c) {
    Class& k = classes_[c];
    Bucket& b = k.buckets[k.min];
    uint32_t pos = b.head;
    if (!fresh(pos, k.min)) {
      reindex(pos);
      return std::nullopt;
    }
    if (b.size > 1) {  // to the back of its bucket
      Slot& s = slots_[pos];
      b.head = s.next;
      slots_[b.head].prev = kNil;
      s.prev = b.tail;
      s.next = kNil;
      slots_[b.tail].next = pos;
      b.tail = pos;
    }
    uint64_t start = std::max(k.pass, vtime_);
    vtime_ = std::max(vtime_, k.pass);
    unsigned __int128 share = static_cast<unsigned __int128>(k.weight) * b.size;
    uint64_t step = share >= kPassScale ? 1 : static_cast<uint64_t>(kPassScale / share);
    k.pass = start + step;
    if (eff_[pos] < members_[pos].weight) {
      ++eff_[pos];
      eff_published_[pos].store(static_cast<uint32_t>(eff_[pos]), std::memory_order_relaxed);
    }
    if (vtime_ > (uint64_t{1} << 62)) {
      uint64_t base = vtime_ - (kPassScale << 1);
      for (Class& x : classes_) x.pass = x.pass > base ? x.pass - base : 0;
      vtime_ -= base;
      for (uint32_t x = 0; x < classes_.size(); ++x) update_leaf(x, true);
    } else {
      update_leaf(c, true);
    }
    return pos;
  }

  std::vector<Member> members_;
  std::vector<BackendLive*> live_;
  std::vector<uint32_t> pos_of_;  // pool index -> position in members_, kNil if not a member
  std::unique_ptr<std::atomic<uint32_t>[]> eff_published_;
  bool indexed_ = false;
  mutable std::mutex mu_;
  // Guarded by mu_:
  std::vector<int64_t> cw_;
  std::vector<int64_t> eff_;
  std::vector<Slot> slots_;
  std::vector<Class> classes_;
  std::vector<Node> tree_;
  size_t leaves_ = 1;
  uint64_t vtime_ = 0;
  uint32_t audit_cursor_ = 0;
};

}  // namespace

std::unique_ptr<Policy> make_least_conn(std::vector<Member> members, std::span<BackendLive* const> live,
                                        const CarriedState* previous) {
  return std::make_unique<LeastConn>(std::move(members), live, previous);
}

}  // namespace heft::balance
