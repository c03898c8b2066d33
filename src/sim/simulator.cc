#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "heft/balance/balancer.h"
#include "sim/pool_settings.h"
#include "sim/sim_parts.h"
#include "upstream/place_queue.h"
#include "upstream/pool.h"

namespace heft::sim {
namespace {

using detail::BucketedArea;
using detail::Buckets;
using detail::Ring;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Hard stop for the event loop; a run ends long before (arrivals are finite).
constexpr uint64_t kMaxArrivals = uint64_t{1} << 40;
constexpr uint64_t kMaxSteps = uint64_t{1} << 44;
// The proxy ticks every pool every 250 ms (src/proxy/proxy.cc, kPoolTickInterval).
constexpr double kPoolTickS = 0.25;
// What an attempt ends with, as the proxy tells the pool: a request the
// server refused or that timed out in its queue is answered 503; one lost
// to a `fail` is a failed attempt (a reset connection: 502).
constexpr int kAnswered = 200, kServerBusy = 503, kFailed = 502;

// A request in a server's queue since `queued` (its attempt's start, from
// which the server's timeout counts); its latency counts from `arrival`
// (earlier when it first waited in the pool queue).
struct Waiting {
  double queued;
  double arrival;
  uint64_t service_bits;
};

// A pending completion or deadline in the event heap (32 bytes: the heap
// moves them about on every request).
struct HeapEvent {
  double time;
  double arrival;   // completion: the request's arrival (its latency counts from here)
  double started;   // completion: its attempt's start at the server (the response time the pool hears of)
  uint32_t target;  // the server (a completion), kDeadline | server (its queue's deadline), or kPool
  uint32_t tag;     // the server's epoch when scheduled (stale after a failure); kPool: the waiter's slot
};
constexpr uint32_t kPool = std::numeric_limits<uint32_t>::max();  // a pool-queue waiter's deadline
constexpr uint32_t kDeadline = uint32_t{1} << 31;                 // (servers are fewer than 2^31)
struct Later {
  bool operator()(const HeapEvent& a, const HeapEvent& b) const { return a.time > b.time; }
};

struct ServerState {
  const ServerSpec* spec = nullptr;
  double factor = 1;  // service time multiplier (slow events)
  bool broken = false;  // between `fail` and `recover`: every attempt fails
  uint64_t queue_limit = std::numeric_limits<uint64_t>::max();
  uint32_t busy = 0;
  uint32_t epoch = 0;
  bool deadline_pending = false;
  Ring<Waiting> queue;
  BucketedArea busy_time;    // busy workers x time
  BucketedArea weight_time;  // the pool's weight factor x time (dynamic weights)
  double weight_factor = 1;  // the factor of the snapshot in force
  std::vector<uint64_t> placed;  // requests placed per bucket (dynamic weights)
  std::unique_ptr<LatencySketch> latency = std::make_unique<LatencySketch>();
  ServerResult out;
};

// A request waiting in the pool's PlaceQueue, as the proxy's wait_in_queue().
struct PoolWaiter {
  uint64_t k = 0;
  double arrival = 0, deadline = 0;
  std::unique_ptr<upstream::PlaceQueue::Place> place;
  uint32_t gen = 0;
  bool active = false;
  bool woken = false;  // its wake-up came: it picks again once the current event is done
};

class Run {
 public:
  Run(const Scenario& scenario, balance::PolicyKind policy)
      : sc_(scenario),
        policy_(policy),
        stream_{balance::mix64(scenario.seed ^ 0x6865667473696dULL)},
        buckets_(scenario),
        weights_(initial_weights(scenario)),
        pool_(pool_config(scenario, policy, weights_)) {
    result_.policy = policy;
    needs_random_ = policy == balance::PolicyKind::random || policy == balance::PolicyKind::p2c;
    needs_key_ = policy == balance::PolicyKind::hash;
    dynamic_ = dynamic_weights(sc_);
    adaptive_ = sc_.adaptive.enabled;
    // Pool::tick() changes nothing without slow start, adaptive weights or a
    // server that can be taken out (only a `fail` makes attempts fail).
    ticking_ = dynamic_ || std::any_of(sc_.events.begin(), sc_.events.end(),
                                       [](const Event& e) { return e.kind == Event::Kind::fail; });
    const size_t n = sc_.servers.size();
    servers_.resize(n);
    size_t workers = 0;
    for (size_t i = 0; i < n; ++i) {
      ServerState& s = servers_[i];
      s.spec = &sc_.servers[i];
      if (s.spec->queue_limit) s.queue_limit = *s.spec->queue_limit;
      s.busy_time.start(buckets_);
      if (dynamic_) {
        s.weight_time.start(buckets_);
        s.placed.assign(buckets_.count(), 0);
      }
      s.out.name = s.spec->name;
      s.out.size = s.spec->size;
      s.out.weight = weights_[i];
      workers += s.spec->size;
    }
    heap_.reserve(2 * workers + 2 * n + 16);
    take_snapshot();
    // validate() refuses a pool queue without max_conns; without it nobody waits.
    pool_enabled_ = sc_.queue > 0 && balancer_->limited();
    if (pool_enabled_) pool_wait_.start(buckets_);
  }

  PolicyResult run() {
    double next_arrival = arrival_time(0);
    size_t next_event = 0;
    bool snapshot_taken = false;
    uint64_t ticks = 1;
    double next_tick = ticking_ ? kPoolTickS : kInf;
    for (uint64_t step = 0; step < kMaxSteps; ++step) {
      const double t_event = next_event < sc_.events.size() ? sc_.events[next_event].at_s : kInf;
      const double t_heap = heap_.empty() ? kInf : heap_.front().time;
      const double t_due = std::min(t_event, t_heap);
      const double t = std::min(t_due, next_arrival);
      if (t == kInf) break;  // (ticks alone keep nothing going)
      // At one time: events, completions and deadlines, the pool's tick, arrivals.
      if (next_tick <= t && next_tick < t_due) [[unlikely]] {
        // Ticks while something can still be picked: arrivals to come, or
        // requests waiting in the pool queue (none joins once arrivals stop).
        if (next_arrival == kInf && !(pool_enabled_ && places_->size() > 0)) {
          next_tick = kInf;
          continue;
        }
        move_to(next_tick, snapshot_taken);
        tick();
        next_tick = static_cast<double>(++ticks) * kPoolTickS;
      } else {
        move_to(t, snapshot_taken);
        if (t_event <= t_heap && t_event <= next_arrival) {
          apply(sc_.events[next_event++]);
        } else if (t_heap <= next_arrival) {
          std::pop_heap(heap_.begin(), heap_.end(), Later{});
          const HeapEvent ev = heap_.back();
          heap_.pop_back();
          if (ev.target == kPool) pool_deadline(ev);
          else if (ev.target & kDeadline) expire(ev);
          else complete(ev);
        } else {
          arrive(arrivals_, next_arrival);
          ++arrivals_;
          next_arrival = arrival_time(arrivals_);
        }
      }
      // Wake-ups are posted to the waiting requests in the proxy: they pick
      // once the event that freed the places is done.
      if (!woken_.empty()) [[unlikely]]
        resume_woken();
    }
    if (!snapshot_taken) note_queues_at_end();
    return finish();
  }

 private:
  // Virtual time moves on to t.
  void move_to(double t, bool& snapshot_taken) {
    if (pool_enabled_) pool_wait_.advance(buckets_, static_cast<double>(places_->size()), t);
    now_ = t;
    if (!snapshot_taken && t >= sc_.duration_s) [[unlikely]] {
      note_queues_at_end();
      snapshot_taken = true;
    }
  }
  // Now as the pool's clock reads it.
  upstream::TimePoint now_tp() const { return detail::pool_time(now_); }

  static std::vector<uint32_t> initial_weights(const Scenario& sc) {
    std::vector<uint32_t> weights;
    for (const ServerSpec& s : sc.servers) weights.push_back(initial_weight(s));
    return weights;
  }

  // Arrival time of request k, kInf once arrivals stop (at the duration).
  double arrival_time(uint64_t k) {
    if (k >= kMaxArrivals) return kInf;
    double t;
    if (sc_.has_trace) {
      if (k >= sc_.trace_times.size()) return kInf;
      t = sc_.trace_times[k];
    } else {
      poisson_clock_ += -std::log(detail::unit_open(stream_.draw(k, detail::kGap))) / sc_.rate;
      t = poisson_clock_;
    }
    return t < sc_.duration_s ? t : kInf;
  }

  void note_queues_at_end() {
    for (ServerState& s : servers_) s.out.queue_at_end = s.queue.size();
    result_.queue_at_end = places_->size();
  }

  // The pool's current snapshot, taken again after a tick or an update
  // published a new one (the proxy's workers do the same through CachedSnapshot).
  void take_snapshot() {
    snapshot_ = pool_.snapshot();
    version_ = snapshot_->version();
    balancer_ = &snapshot_->balancer();
    places_ = snapshot_->places().get();
    if (!dynamic_) return;
    for (uint32_t i = 0; i < servers_.size(); ++i) {
      ServerState& s = servers_[i];
      s.weight_time.advance(buckets_, s.weight_factor, now_);
      s.weight_factor = snapshot_->factor(i);
    }
  }
  void refresh_snapshot() {
    if (pool_.version() != version_) take_snapshot();
  }

  // Request k's pick context: drawn only for the policies that read them;
  // either way a function of (seed, k), the same at its arrival and whenever
  // it picks again from the pool queue.
  balance::PickContext pick_context(uint64_t k) const {
    balance::PickContext ctx;
    if (needs_random_) ctx.random = stream_.draw(k, detail::kPick);
    // A trace line without a key is placed as a keyless request: from its own stream.
    if (needs_key_) {
      const bool keyed = k < sc_.trace_keyed.size() && sc_.trace_keyed[k];
      ctx.key_hash = keyed ? sc_.trace_keys[k] : stream_.draw(k, detail::kKey);
    }
    return ctx;
  }

  // As the proxy places a request's first attempt: requests waiting in the
  // pool queue go first (a newcomer queues behind them); else the pick and
  // the count in one step, passing over servers at their max_conns; with
  // every server that could take it full, a wait in the pool queue, or the
  // proxy's 503 (unrouted), as when no server is available at all.
  void arrive(uint64_t k, double now) {
    const bool queue_ahead = pool_enabled_ && places_->size() > 0;
    bool full = false;
    std::optional<uint32_t> picked;
    if (!queue_ahead) [[likely]]
      picked = snapshot_->acquire(pick_context(k), now_tp(), &full);
    if (!picked && pool_enabled_ && (full || queue_ahead)) {
      wait_for_place(k, now);
      return;
    }
    if (!picked) {
      ++result_.unrouted;
      if (full) ++result_.unrouted_full;
      return;
    }
    start_attempt(*picked, k, now);
  }

  // Request k (arrived at `arrival`) is at server i from now on: served,
  // queued there, refused by its queue, or failed at once by a broken server.
  void start_attempt(uint32_t i, uint64_t k, double arrival) {
    ServerState& s = servers_[i];
    ++s.out.requests;
    if (dynamic_ && now_ < sc_.duration_s) {
      while (placed_bucket_ + 1 < buckets_.count() && now_ >= buckets_.end(placed_bucket_)) ++placed_bucket_;
      ++s.placed[placed_bucket_];
    }
    if (s.broken) [[unlikely]] {
      ++s.out.failed;
      end_attempt(i, 0, kFailed);
      return;
    }
    const uint64_t bits = stream_.draw(k, detail::kService);
    if (s.busy < s.spec->size) {
      start_service(s, i, now_, arrival, bits);
    } else if (s.queue.size() >= s.queue_limit) {
      ++s.out.refused;
      end_attempt(i, 0, kServerBusy);
    } else {
      s.queue.push(Waiting{now_, arrival, bits});
      if (s.queue.size() > s.out.peak_queue) s.out.peak_queue = s.queue.size();
      schedule_deadline(s, i);
    }
  }

  // An attempt at server i ended after `seconds` with `status`. As the
  // proxy's attempt loop: the request's place is freed first (waking the one
  // waiting longest in the pool queue), then the pool hears of the outcome.
  // Through the current snapshot, where the proxy uses the one the attempt
  // began with: servers keep their index and their live state across
  // snapshots here, and only least_conn's index (which repairs itself) could
  // tell the difference.
  void end_attempt(uint32_t i, double seconds, int status) {
    balancer_->end_request(i);
    if (pool_enabled_ && places_->size() > 0) [[unlikely]]
      places_->wake_one();
    const bool failed = status == kFailed;
    // Only adaptive weights read the responses (the counters they also
    // feed, for /metrics, nobody reads here).
    if (adaptive_)
      snapshot_->record_response(i, std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)), status, !failed);
    if (failed) [[unlikely]]
      snapshot_->report_failure(i, now_tp());
    else
      snapshot_->report_success(i);
  }

  void start_service(ServerState& s, uint32_t index, double started, double arrival, uint64_t bits) {
    s.busy_time.advance(buckets_, s.busy, now_);
    ++s.busy;
    const double service = s.spec->service_s * s.factor * detail::unit_service(s.spec->dist, s.spec->sigma, bits);
    heap_.push_back(HeapEvent{now_ + service, arrival, started, index, s.epoch});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  void schedule_deadline(ServerState& s, uint32_t index) {
    if (s.deadline_pending || s.queue.empty() || s.spec->timeout_s <= 0) return;
    s.deadline_pending = true;
    heap_.push_back(HeapEvent{s.queue.front().queued + s.spec->timeout_s, 0, 0, kDeadline | index, s.epoch});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  void complete(const HeapEvent& ev) {
    const uint32_t i = ev.target;
    ServerState& s = servers_[i];
    if (ev.tag != s.epoch) return;  // failed with its server: told already
    s.busy_time.advance(buckets_, s.busy, ev.time);
    --s.busy;
    ++s.out.completed;
    s.latency->record_seconds(ev.time - ev.arrival);
    end_attempt(i, ev.time - ev.started, kAnswered);
    const double timeout = s.spec->timeout_s;
    for (size_t guard = s.queue.size(); guard > 0 && !s.queue.empty(); --guard) {
      const Waiting w = s.queue.pop();
      if (timeout > 0 && ev.time >= w.queued + timeout) {  // its deadline is now: it left
        ++s.out.timed_out;
        end_attempt(i, ev.time - w.queued, kServerBusy);
        continue;
      }
      start_service(s, i, w.queued, w.arrival, w.service_bits);
      break;
    }
  }

  // A server's queue-head deadline: every request that has waited `timeout` leaves.
  void expire(const HeapEvent& ev) {
    const uint32_t i = ev.target & ~kDeadline;
    ServerState& s = servers_[i];
    if (ev.tag != s.epoch) return;
    s.deadline_pending = false;
    const double timeout = s.spec->timeout_s;
    for (size_t guard = s.queue.size(); guard > 0 && !s.queue.empty(); --guard) {
      // The same expression as the scheduled deadline, so rounding cannot re-arm it forever.
      if (ev.time < s.queue.front().queued + timeout) break;
      const Waiting w = s.queue.pop();
      ++s.out.timed_out;
      end_attempt(i, ev.time - w.queued, kServerBusy);
    }
    schedule_deadline(s, i);
  }

  // ---- the pool queue: the proxy's wait_in_queue() on virtual time ----

  uint32_t new_waiter(uint64_t k, double arrival) {
    uint32_t slot;
    if (!free_waiters_.empty()) {
      slot = free_waiters_.back();
      free_waiters_.pop_back();
    } else {
      slot = static_cast<uint32_t>(waiters_.size());
      waiters_.emplace_back();
    }
    PoolWaiter& w = waiters_[slot];
    w.k = k;
    w.arrival = arrival;
    w.deadline = arrival + sc_.queue_timeout();
    w.active = true;
    w.woken = false;
    ++w.gen;
    return slot;
  }
  void release(uint32_t slot) {
    PoolWaiter& w = waiters_[slot];
    w.place.reset();  // leaves the queue (a no-op once woken)
    w.active = false;
    free_waiters_.push_back(slot);
  }

  void wait_for_place(uint64_t k, double arrival) {
    const uint32_t slot = new_waiter(k, arrival);
    const PoolWaiter& w = waiters_[slot];
    heap_.push_back(HeapEvent{w.deadline, arrival, 0, kPool, slot});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
    queue_for_place(slot, false);
  }

  // Joins the queue (at the front: woken, but every server still full) and,
  // first in line, picks again at once: a place may have freed that no
  // wake-up was left for.
  void queue_for_place(uint32_t slot, bool front) {
    waiters_[slot].place.reset();  // (front: the place of the wake-up, left before joining again)
    waiters_[slot].woken = false;
    bool first = false;
    const uint32_t gen = waiters_[slot].gen;
    std::unique_ptr<upstream::PlaceQueue::Place> place =
        places_->join(sc_.queue, [this, slot, gen] { woken(slot, gen); }, front, &first);
    if (!place) {  // the queue is full
      ++result_.unrouted;
      ++result_.unrouted_full;
      release(slot);
      return;
    }
    if (!front) ++result_.queue_waited;
    result_.queue_peak = std::max<uint64_t>(result_.queue_peak, places_->size());
    if (first) {
      bool busy = false;
      const PoolWaiter& w = waiters_[slot];
      if (const std::optional<uint32_t> picked = snapshot_->acquire(pick_context(w.k), now_tp(), &busy)) {
        if (!places_->leave(*place)) places_->wake_one();  // woken meanwhile: pass it on
        const uint64_t k = w.k;
        const double arrival = w.arrival;
        release(slot);
        start_attempt(*picked, k, arrival);
        return;
      }
      if (!busy) {  // nothing available any more: no place will free
        release(slot);
        ++result_.unrouted;
        return;
      }
    }
    waiters_[slot].place = std::move(place);
  }

  // A wake-up, called by the PlaceQueue: as the proxy posts it to the
  // waiting request, it is handled once the current event is done.
  void woken(uint32_t slot, uint32_t gen) {
    PoolWaiter& w = waiters_[slot];
    if (!w.active || w.gen != gen) return;
    w.woken = true;
    woken_.push_back({slot, gen});
  }

  void resume_woken() {
    for (size_t x = 0; x < woken_.size(); ++x) {  // (resume() may wake more)
      const auto [slot, gen] = woken_[x];
      PoolWaiter& w = waiters_[slot];
      if (!w.active || w.gen != gen || !w.woken) continue;
      w.woken = false;
      resume(slot);
    }
    woken_.clear();
  }

  // A woken request picks again: placed; nothing available (unrouted); its
  // deadline passed (it gives up, passing the wake-up on); or back in line
  // at the front.
  void resume(uint32_t slot) {
    PoolWaiter& w = waiters_[slot];
    bool busy = false;
    if (const std::optional<uint32_t> picked = snapshot_->acquire(pick_context(w.k), now_tp(), &busy)) {
      const uint64_t k = w.k;
      const double arrival = w.arrival;
      release(slot);
      start_attempt(*picked, k, arrival);
      return;
    }
    if (!busy) {
      release(slot);
      ++result_.unrouted;
      return;
    }
    if (now_ >= w.deadline) {
      places_->wake_one();  // the place this wake-up stood for, unused
      places_->note_timeout();
      release(slot);
      ++result_.queue_timed_out;
      return;
    }
    queue_for_place(slot, true);
  }

  // A waiter's queue timeout: it gives up unless a wake-up came first. (The
  // slot's waiter may be a later one: its deadline is no earlier, and if it
  // is now, this is its timeout too.)
  void pool_deadline(const HeapEvent& ev) {
    PoolWaiter& w = waiters_[ev.tag];
    if (!w.active || w.deadline > ev.time || w.woken || !w.place) return;
    if (!places_->leave(*w.place)) return;
    places_->note_timeout();
    release(ev.tag);
    ++result_.queue_timed_out;
  }

  // ---- the pool's clock and the scenario's events ----

  void tick() {
    std::vector<upstream::WeightEvent> events = pool_.tick(now_tp());
    refresh_snapshot();
    for (upstream::WeightEvent& e : events) {
      if (result_.weight_changes.size() >= kMaxWeightChanges) {
        ++result_.weight_changes_dropped;
        continue;
      }
      result_.weight_changes.push_back(
          {now_, std::move(e.backend), e.reason, e.factor_before, e.factor_after, std::move(e.detail)});
    }
  }

  // A new configuration, as a reload or the admin API gives the proxy's pool.
  void update_pool() {
    pool_.update(pool_config(sc_, policy_, weights_));
    refresh_snapshot();
  }

  void apply(const Event& e) {
    if (e.kind == Event::Kind::weights) {
      weights_ = e.weights;
      update_pool();
      return;
    }
    const std::optional<uint32_t> found = balancer_->find(e.server);
    if (!found) return;
    const uint32_t i = *found;
    ServerState& s = servers_[i];
    switch (e.kind) {
      case Event::Kind::slow: s.factor = e.factor; break;
      case Event::Kind::fail: fail_server(s, i); break;
      case Event::Kind::recover: s.broken = false; break;
      case Event::Kind::weight:
        weights_[i] = e.weight;
        update_pool();
        break;
      case Event::Kind::weights: break;
    }
  }

  // The server breaks: the requests in service and queued there fail now (a
  // reset connection), and so will every attempt until it recovers. The pool
  // hears of each failure, as the proxy's would.
  void fail_server(ServerState& s, uint32_t i) {
    s.busy_time.advance(buckets_, s.busy, now_);
    s.broken = true;
    std::vector<double> started;  // the attempts lost, by start time
    for (const HeapEvent& h : heap_)
      if (h.target == i && h.tag == s.epoch) started.push_back(h.started);
    for (size_t q = 0; q < s.queue.size(); ++q) started.push_back(s.queue.at(q).queued);
    s.busy = 0;
    s.queue.clear();
    ++s.epoch;  // in-service completions still in the heap are now stale
    s.deadline_pending = false;
    std::sort(started.begin(), started.end());
    for (double at : started) {
      ++s.out.failed;
      end_attempt(i, now_ - at, kFailed);
    }
  }

  PolicyResult finish() {
    for (ServerState& s : servers_) s.busy_time.advance(buckets_, s.busy, sc_.duration_s);
    if (pool_enabled_) {
      pool_wait_.advance(buckets_, static_cast<double>(places_->size()), sc_.duration_s);
      result_.queue_series = pool_wait_.means(buckets_, 1);
    }
    std::vector<uint64_t> placed_total(dynamic_ ? buckets_.count() : 0, 0);
    for (ServerState& s : servers_)
      for (size_t b = 0; b < placed_total.size(); ++b) placed_total[b] += s.placed[b];
    result_.arrivals = arrivals_;
    for (ServerState& s : servers_) {
      ServerResult& out = s.out;
      out.share = arrivals_ ? static_cast<double>(out.requests) / static_cast<double>(arrivals_) : 0;
      out.utilisation_series = s.busy_time.means(buckets_, s.spec->size);
      out.utilisation = s.busy_time.total() / (s.spec->size * sc_.duration_s);
      if (dynamic_) {
        s.weight_time.advance(buckets_, s.weight_factor, sc_.duration_s);
        out.factor_series = s.weight_time.means(buckets_, 1);
        out.share_series.resize(buckets_.count());
        for (size_t b = 0; b < placed_total.size(); ++b)
          out.share_series[b] =
              placed_total[b] ? static_cast<double>(s.placed[b]) / static_cast<double>(placed_total[b]) : 0;
      }
      out.latency = detail::summarise(*s.latency);
      result_.latency_sketch.merge(*s.latency);
      result_.completed += out.completed;
      result_.refused += out.refused;
      result_.timed_out += out.timed_out;
      result_.failed += out.failed;
      result_.servers.push_back(std::move(out));
    }
    result_.latency = detail::summarise(result_.latency_sketch);
    // Waiters still in line leave the queue before the pool goes.
    woken_.clear();
    for (PoolWaiter& w : waiters_) w.place.reset();
    return std::move(result_);
  }

  const Scenario& sc_;
  const balance::PolicyKind policy_;
  detail::RequestStream stream_;
  Buckets buckets_;
  std::vector<uint32_t> weights_;
  std::vector<ServerState> servers_;
  std::vector<HeapEvent> heap_;
  // The pool waiters are declared after it: their places leave its queue first.
  upstream::Pool pool_;
  std::shared_ptr<const upstream::PoolSnapshot> snapshot_;
  uint64_t version_ = 0;
  balance::Balancer* balancer_ = nullptr;  // snapshot_'s
  upstream::PlaceQueue* places_ = nullptr;  // the pool's queue (one for every snapshot)
  bool needs_random_ = false, needs_key_ = false;
  bool dynamic_ = false, adaptive_ = false, ticking_ = false;
  bool pool_enabled_ = false;
  std::vector<PoolWaiter> waiters_;
  std::vector<uint32_t> free_waiters_;
  std::vector<std::pair<uint32_t, uint32_t>> woken_;  // (slot, generation) in wake-up order
  BucketedArea pool_wait_;  // requests waiting in the pool queue x time
  size_t placed_bucket_ = 0;
  double now_ = 0;
  uint64_t arrivals_ = 0;
  double poisson_clock_ = 0;
  PolicyResult result_;
};

}  // namespace

PolicyResult simulate_policy(const Scenario& scenario, balance::PolicyKind policy) {
  Run run(scenario, policy);
  return run.run();
}

SimResult simulate(const Scenario& scenario) {
  SimResult result;
  result.scenario = scenario;
  validate(result.scenario);
  for (balance::PolicyKind policy : result.scenario.policies)
    result.policies.push_back(simulate_policy(result.scenario, policy));
  if (result.scenario.has_trace)
    result.trace_arrivals = result.scenario.trace_times.size() - trace_arrivals_after_duration(result.scenario);
  result.scenario.trace_times.clear();
  result.scenario.trace_times.shrink_to_fit();
  result.scenario.trace_keys.clear();
  result.scenario.trace_keys.shrink_to_fit();
  result.scenario.trace_keyed.clear();
  result.scenario.trace_keyed.shrink_to_fit();
  return result;
}

}  // namespace heft::sim
