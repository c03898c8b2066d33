#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>

#include <fmt/format.h>

#include "heft/balance/balancer.h"
#include "heft/balance/hash.h"

namespace heft::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// Hard stop for the event loop; a run ends long before (arrivals are finite).
constexpr uint64_t kMaxArrivals = uint64_t{1} << 40;
constexpr uint64_t kMaxSteps = uint64_t{1} << 44;

// Request k's random stream: draw j of request k, independent of everything
// else the run does (common random numbers across policies).
struct RequestStream {
  uint64_t base;
  uint64_t draw(uint64_t k, uint64_t j) const {
    return balance::mix64(balance::mix64(base + k * kGolden) + (j + 1) * 0xd1b54a32d192ed03ULL);
  }
};
enum Draw : uint64_t { kGap = 0, kService = 1, kKey = 2, kPick = 3 };

// Uniform in (0, 1) from the top 53 bits.
inline double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53; }

// A mean-1 service draw for one request under a distribution.
inline double unit_service(ServiceDist dist, double sigma, uint64_t bits) {
  switch (dist) {
    case ServiceDist::fixed: return 1;
    case ServiceDist::exponential: return -std::log(unit_open(bits));
    case ServiceDist::lognormal: {
      // Box-Muller from the two 32-bit halves.
      double u1 = (static_cast<double>(bits >> 32) + 0.5) * 0x1p-32;
      double u2 = (static_cast<double>(bits & 0xffffffffu) + 0.5) * 0x1p-32;
      double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
      return std::exp(sigma * z - 0.5 * sigma * sigma);
    }
  }
  return 1;
}

// A request in a server's queue: its timeout counts from `queued`, its
// latency from `arrival` (earlier when it first waited in the pool queue).
struct Waiting {
  double queued;
  double arrival;
  uint64_t service_bits;
};

// A request in the pool queue: request k (its pick context and service draw
// come from its stream), arrived at `arrival`.
struct PoolWaiting {
  double arrival;
  uint64_t k;
};

// A FIFO ring of waiting requests; grows by doubling (never per request on average).
template <typename T>
class Ring {
 public:
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const T& front() const { return slots_[head_]; }
  void push(const T& w) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) & (slots_.size() - 1)] = w;
    ++count_;
  }
  T pop() {
    T w = slots_[head_];
    head_ = (head_ + 1) & (slots_.size() - 1);
    --count_;
    return w;
  }
  void clear() { head_ = count_ = 0; }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 64 : slots_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
    slots_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> slots_;
  size_t head_ = 0, count_ = 0;
};
using WaitQueue = Ring<Waiting>;

// A pending completion (or queue deadline) in the event heap.
struct HeapEvent {
  double time;
  double arrival;
  uint32_t server;  // kPool: the pool queue's deadline
  uint32_t epoch;  // the server's epoch when scheduled: stale after a failure
  bool deadline;   // a queue-head timeout check rather than a completion
};
constexpr uint32_t kPool = std::numeric_limits<uint32_t>::max();
struct Later {
  bool operator()(const HeapEvent& a, const HeapEvent& b) const { return a.time > b.time; }
};

// A level over time (busy workers, requests waiting) integrated per bucket of
// the measurement window: level x time, for a time-weighted mean per bucket.
struct BucketedArea {
  double last_t = 0;
  size_t bucket = 0;
  double bucket_end = 0;
  std::vector<double> area;
};

struct ServerState {
  const ServerSpec* spec = nullptr;
  double factor = 1;  // service time multiplier (slow events)
  uint64_t queue_limit = std::numeric_limits<uint64_t>::max();
  uint32_t busy = 0;
  uint32_t epoch = 0;
  bool deadline_pending = false;
  WaitQueue queue;
  BucketedArea busy_time;  // busy workers x time
  std::unique_ptr<LatencySketch> latency = std::make_unique<LatencySketch>();
  ServerResult out;
};

// A quantile is its bucket's midpoint, which can lie above the largest value
// seen (all at exactly 10 ms: p99 10.027 ms, max 10 ms); capped at the max so
// the table never contradicts itself.
LatencySummary summarise(const LatencySketch& s) {
  const double max = s.max_seconds();
  const auto quantile = [&](double q) { return std::min(s.quantile_seconds(q), max); };
  return {s.mean_seconds(), quantile(0.50), quantile(0.95), quantile(0.99), max};
}

class Run {
 public:
  Run(const Scenario& scenario, balance::PolicyKind policy)
      : sc_(scenario), stream_{balance::mix64(scenario.seed ^ 0x6865667473696dULL)} {
    options_.kind = policy;
    options_.hash_strategy = scenario.hash_strategy;
    result_.policy = policy;
    needs_random_ = balance::policy_traits(policy).uses_random;
    needs_key_ = balance::policy_traits(policy).needs_key;
    const size_t n = sc_.servers.size();
    buckets_ = bucket_count(sc_);
    servers_.resize(n);
    weights_.resize(n);
    size_t workers = 0;
    for (size_t i = 0; i < n; ++i) {
      ServerState& s = servers_[i];
      s.spec = &sc_.servers[i];
      if (s.spec->queue_limit) s.queue_limit = *s.spec->queue_limit;
      start_area(s.busy_time);
      weights_[i] = initial_weight(*s.spec);
      s.out.name = s.spec->name;
      s.out.size = s.spec->size;
      s.out.weight = weights_[i];
      workers += s.spec->size;
    }
    heap_.reserve(2 * workers + 2 * n + 16);
    rebuild_balancer();
    // validate() refuses a pool queue without max_conns; without it nobody waits.
    pool_enabled_ = sc_.queue > 0 && balancer_->limited();
    if (pool_enabled_) start_area(pool_wait_);
  }

  PolicyResult run() {
    double next_arrival = arrival_time(0);
    size_t next_event = 0;
    bool snapshot_taken = false;
    for (uint64_t step = 0; step < kMaxSteps; ++step) {
      double t_event = next_event < sc_.events.size() ? sc_.events[next_event].at_s : kInf;
      double t_heap = heap_.empty() ? kInf : heap_.front().time;
      double t = std::min({t_event, t_heap, next_arrival});
      if (t == kInf) break;
      now_ = t;
      if (!snapshot_taken && t >= sc_.duration_s) {
        for (ServerState& s : servers_) s.out.queue_at_end = s.queue.size();
        result_.queue_at_end = pool_.size();
        snapshot_taken = true;
      }
      if (t_event <= t_heap && t_event <= next_arrival) {
        apply(sc_.events[next_event++]);
      } else if (t_heap <= next_arrival) {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        HeapEvent ev = heap_.back();
        heap_.pop_back();
        if (ev.server == kPool) expire_pool(ev);
        else if (ev.deadline) expire(ev);
        else complete(ev);
      } else {
        arrive(arrivals_, next_arrival);
        ++arrivals_;
        next_arrival = arrival_time(arrivals_);
      }
    }
    if (!snapshot_taken) {
      for (ServerState& s : servers_) s.out.queue_at_end = s.queue.size();
      result_.queue_at_end = pool_.size();
    }
    return finish();
  }

 private:
  double bucket_end(size_t b) const {
    if (b + 1 >= buckets_) return sc_.duration_s;  // the last one ends the window, however the division rounded
    return std::min(static_cast<double>(b + 1) * sc_.bucket_s, sc_.duration_s);
  }

  // Arrival time of request k, kInf once arrivals stop (at the duration).
  double arrival_time(uint64_t k) {
    if (k >= kMaxArrivals) return kInf;
    double t;
    if (sc_.has_trace) {
      if (k >= sc_.trace_times.size()) return kInf;
      t = sc_.trace_times[k];
    } else {
      poisson_clock_ += -std::log(unit_open(stream_.draw(k, kGap))) / sc_.rate;
      t = poisson_clock_;
    }
    return t < sc_.duration_s ? t : kInf;
  }

  void start_area(BucketedArea& a) const {
    a.area.assign(buckets_, 0);
    a.bucket_end = bucket_end(0);
  }

  // Accumulates `level` (held since a.last_t) up to t into the buckets it spans.
  void advance(BucketedArea& a, double level, double t) {
    if (t <= a.last_t) return;
    for (; a.bucket < buckets_; ++a.bucket) {
      if (t < a.bucket_end) {
        a.area[a.bucket] += level * (t - a.last_t);
        a.last_t = t;
        return;
      }
      a.area[a.bucket] += level * (a.bucket_end - a.last_t);
      a.last_t = a.bucket_end;
      a.bucket_end = bucket_end(a.bucket + 1);
    }
    a.last_t = t;  // past the measurement window: nothing more to count
  }
  // Busy worker-time up to t.
  void advance(ServerState& s, double t) { advance(s.busy_time, s.busy, t); }
  // Waiting time in the pool queue up to t; call before its length changes.
  void advance_pool(double t) { advance(pool_wait_, static_cast<double>(pool_.size()), t); }

  void start_service(ServerState& s, uint32_t index, double now, double arrival, uint64_t bits) {
    advance(s, now);
    ++s.busy;
    double service = s.spec->service_s * s.factor * unit_service(s.spec->dist, s.spec->sigma, bits);
    heap_.push_back(HeapEvent{now + service, arrival, index, s.epoch, false});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  void schedule_deadline(ServerState& s, uint32_t index) {
    if (s.deadline_pending || s.queue.empty() || s.spec->timeout_s <= 0) return;
    s.deadline_pending = true;
    heap_.push_back(HeapEvent{s.queue.front().queued + s.spec->timeout_s, 0, index, s.epoch, true});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  // Request k's pick context: drawn only for the policies that read them;
  // either way a function of (seed, k), the same at its arrival and whenever
  // it picks again from the pool queue.
  balance::PickContext pick_context(uint64_t k) const {
    balance::PickContext ctx;
    if (needs_random_) ctx.random = stream_.draw(k, kPick);
    // A trace line without a key is placed as a keyless request: from its own stream.
    if (needs_key_) {
      const bool keyed = k < sc_.trace_keyed.size() && sc_.trace_keyed[k];
      ctx.key_hash = keyed ? sc_.trace_keys[k] : stream_.draw(k, kKey);
    }
    return ctx;
  }

  void arrive(uint64_t k, double now) {
    // A newcomer that finds anyone waiting in the pool queue queues behind
    // them, as in the proxy: a place that freed is theirs. Beyond the queue's
    // length it is turned away as when every server is full.
    if (!pool_.empty()) {
      join_pool(k, now);
      return;
    }
    // With max_conns, the pick and the count are one step, as in the proxy:
    // acquire() passes over a server with max_conns requests assigned (queued
    // or in service); nothing eligible, or every eligible server full, is
    // unrouted (the proxy's 503), or with a pool queue waits in it. A request
    // the server's queue then refuses was never assigned and is uncounted at
    // once. Without max_conns the count is raised only once the request is
    // taken, as before: counting a refused request up and down moves its
    // server to the back of least_conn's tied members (its index, over 8
    // servers), which would change later picks.
    const bool limited = balancer_->limited();
    bool full = false;
    const balance::PickContext ctx = pick_context(k);
    const std::optional<uint32_t> picked = limited ? balancer_->acquire(ctx, &full) : balancer_->pick(ctx);
    if (!picked) {
      if (full && pool_enabled_) {
        join_pool(k, now);
        return;
      }
      ++result_.unrouted;
      if (full) ++result_.unrouted_full;
      return;
    }
    assign(*picked, k, now, now);
  }

  // Request k (arrived at `arrival`) is counted at server i at `now`: served,
  // queued there, or refused by its queue. A refusal ends the request at once,
  // freeing the place it took: the next one waiting in the pool queue wakes.
  void assign(uint32_t i, uint64_t k, double now, double arrival) {
    const bool limited = balancer_->limited();
    ServerState& s = servers_[i];
    ++s.out.requests;
    const uint64_t bits = stream_.draw(k, kService);
    if (s.busy < s.spec->size) {
      if (!limited) balancer_->begin_request(i);
      start_service(s, i, now, arrival, bits);
    } else if (s.queue.size() >= s.queue_limit) {
      if (limited) {
        balancer_->end_request(i);
        wake(1);
      }
      ++s.out.refused;
    } else {
      if (!limited) balancer_->begin_request(i);
      s.queue.push(Waiting{now, arrival, bits});
      if (s.queue.size() > s.out.peak_queue) s.out.peak_queue = s.queue.size();
      schedule_deadline(s, i);
    }
  }

  // Into the pool queue at its back, or turned away when it is full.
  void join_pool(uint64_t k, double now) {
    if (pool_.size() >= sc_.queue) {
      ++result_.unrouted;
      ++result_.unrouted_full;
      return;
    }
    advance_pool(now);
    pool_.push(PoolWaiting{now, k});
    ++result_.queue_waited;
    if (pool_.size() > result_.queue_peak) result_.queue_peak = pool_.size();
    schedule_pool_deadline();
  }

  void schedule_pool_deadline() {
    if (pool_deadline_pending_ || pool_.empty()) return;
    pool_deadline_pending_ = true;
    heap_.push_back(HeapEvent{pool_.front().arrival + sc_.queue_timeout(), 0, kPool, 0, true});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  // A pool-queue head deadline: every request that has waited the queue
  // timeout gives up (the proxy's 503). It held no place: nobody wakes.
  void expire_pool(const HeapEvent& ev) {
    pool_deadline_pending_ = false;
    drop_expired_pool(ev.time);
    schedule_pool_deadline();
  }

  // The same expression as the scheduled deadline, so rounding cannot re-arm it forever.
  void drop_expired_pool(double now) {
    const double timeout = sc_.queue_timeout();
    for (size_t guard = pool_.size(); guard > 0 && !pool_.empty(); --guard) {
      if (now < pool_.front().arrival + timeout) break;
      advance_pool(now);
      pool_.pop();
      ++result_.queue_timed_out;
    }
  }

  // `places` requests ended now (each end_request() freed a place): as the
  // proxy's end of a request wakes the one waiting longest, each wakes the
  // pool queue's head, which acquires again with its own pick context; placed,
  // it is assigned now (its latency counts from its arrival). A head that
  // finds every server full keeps its turn, and so do those behind it: every
  // server is as full for them (stop). One that finds no server it could take
  // (every one failed or weighing 0) is unrouted, as the proxy answers a woken
  // request that finds no available backend. A head whose deadline is now
  // has given up first (as at a server's queue). Called once the event that
  // ended them is done (after a fail marks its server unavailable), and with
  // every waiter's count after a weight change (the proxy wakes all on a
  // change of configuration).
  void wake(uint64_t places) {
    if (!pool_enabled_) return;
    pending_wakes_ += places;
    if (dispatching_) return;
    if (pool_.empty()) {
      pending_wakes_ = 0;
      return;
    }
    dispatching_ = true;
    while (pending_wakes_ > 0 && !pool_.empty()) {
      drop_expired_pool(now_);
      if (pool_.empty()) break;
      const PoolWaiting w = pool_.front();
      bool full = false;
      const std::optional<uint32_t> picked = balancer_->acquire(pick_context(w.k), &full);
      if (!picked && full) break;
      advance_pool(now_);
      pool_.pop();
      --pending_wakes_;
      if (!picked) {
        ++result_.unrouted;
        continue;
      }
      assign(*picked, w.k, now_, w.arrival);  // a refusal there wakes the next (pending_wakes_)
    }
    pending_wakes_ = 0;  // a wake-up that finds nobody waiting, or only full servers, is spent
    dispatching_ = false;
    schedule_pool_deadline();
  }

  void complete(const HeapEvent& ev) {
    ServerState& s = servers_[ev.server];
    if (ev.epoch != s.epoch) return;  // lost when the server failed
    advance(s, ev.time);
    --s.busy;
    balancer_->end_request(ev.server);
    ++s.out.completed;
    s.latency->record_seconds(ev.time - ev.arrival);
    uint64_t ended = 1;
    const double timeout = s.spec->timeout_s;
    for (size_t guard = s.queue.size(); guard > 0 && !s.queue.empty(); --guard) {
      Waiting w = s.queue.pop();
      if (timeout > 0 && ev.time >= w.queued + timeout) {  // its deadline is now: it left
        ++s.out.timed_out;
        balancer_->end_request(ev.server);
        ++ended;
        continue;
      }
      start_service(s, ev.server, ev.time, w.arrival, w.service_bits);
      break;
    }
    wake(ended);
  }

  // A queue-head deadline: every request that has waited `timeout` leaves.
  void expire(const HeapEvent& ev) {
    ServerState& s = servers_[ev.server];
    if (ev.epoch != s.epoch) return;
    s.deadline_pending = false;
    const double timeout = s.spec->timeout_s;
    uint64_t ended = 0;
    for (size_t guard = s.queue.size(); guard > 0 && !s.queue.empty(); --guard) {
      // The same expression as the scheduled deadline, so rounding cannot re-arm it forever.
      if (ev.time < s.queue.front().queued + timeout) break;
      s.queue.pop();
      ++s.out.timed_out;
      balancer_->end_request(ev.server);
      ++ended;
    }
    schedule_deadline(s, ev.server);
    wake(ended);
  }

  void apply(const Event& e) {
    if (e.kind == Event::Kind::weights) {
      weights_ = e.weights;
      rebuild_balancer();
      wake(pool_.size());
      return;
    }
    auto found = balancer_->find(e.server);
    if (!found) return;
    const uint32_t i = *found;
    ServerState& s = servers_[i];
    switch (e.kind) {
      case Event::Kind::slow: s.factor = e.factor; break;
      case Event::Kind::fail: {
        advance(s, e.at_s);
        const uint64_t lost = s.busy + s.queue.size();
        s.out.failed += lost;
        for (uint64_t n = lost; n > 0; --n) balancer_->end_request(i);
        s.busy = 0;
        s.queue.clear();
        ++s.epoch;  // in-service completions still in the heap are now stale
        s.deadline_pending = false;
        balancer_->set_available(i, false);
        wake(lost);  // the places freed, once the server is out: the woken pick elsewhere
        break;
      }
      case Event::Kind::recover: {
        balancer_->set_available(i, true);
        // The proxy's pool wakes as many waiters as a backend that comes
        // back has free places (every waiter when it has no max_conns).
        const std::optional<uint32_t> room = balancer_->room(i);
        wake(room ? *room : pool_.size());
        break;
      }
      case Event::Kind::weight:
        weights_[i] = e.weight;
        rebuild_balancer();
        wake(pool_.size());  // as the proxy wakes every waiter on a change of configuration
        break;
      case Event::Kind::weights: break;
    }
  }

  // A new snapshot; backends keep their live state and smooth-WRR weights.
  void rebuild_balancer() {
    std::vector<balance::BackendSpec> specs;
    specs.reserve(servers_.size());
    for (size_t i = 0; i < servers_.size(); ++i) {
      balance::BackendSpec b;
      b.name = servers_[i].spec->name;
      b.weight = weights_[i];
      b.max_conns = servers_[i].spec->max_conns;
      b.backup = servers_[i].spec->backup;
      b.down = servers_[i].spec->down;
      specs.push_back(std::move(b));
    }
    auto next = std::make_unique<balance::Balancer>(options_, std::move(specs), balancer_.get());
    balancer_ = std::move(next);
  }

  PolicyResult finish() {
    for (ServerState& s : servers_) advance(s, sc_.duration_s);
    // The time-weighted mean of a level per bucket (the last one may be narrower).
    const auto means = [&](const BucketedArea& a, double per) {
      std::vector<double> series(buckets_);
      for (size_t b = 0; b < buckets_; ++b) {
        const double width = bucket_end(b) - static_cast<double>(b) * sc_.bucket_s;
        series[b] = width > 0 ? a.area[b] / (per * width) : 0;
      }
      return series;
    };
    if (pool_enabled_) {
      advance_pool(sc_.duration_s);
      result_.queue_series = means(pool_wait_, 1);
    }
    result_.arrivals = arrivals_;
    for (ServerState& s : servers_) {
      ServerResult& out = s.out;
      out.share = arrivals_ ? static_cast<double>(out.requests) / static_cast<double>(arrivals_) : 0;
      double area = 0;
      for (double a : s.busy_time.area) area += a;
      out.utilisation_series = means(s.busy_time, s.spec->size);
      out.utilisation = area / (s.spec->size * sc_.duration_s);
      out.latency = summarise(*s.latency);
      result_.latency_sketch.merge(*s.latency);
      result_.completed += out.completed;
      result_.refused += out.refused;
      result_.timed_out += out.timed_out;
      result_.failed += out.failed;
      result_.servers.push_back(std::move(out));
    }
    result_.latency = summarise(result_.latency_sketch);
    return std::move(result_);
  }

  const Scenario& sc_;
  RequestStream stream_;
  balance::PolicyOptions options_;
  std::unique_ptr<balance::Balancer> balancer_;
  std::vector<ServerState> servers_;
  std::vector<uint32_t> weights_;
  std::vector<HeapEvent> heap_;
  size_t buckets_ = 1;
  bool needs_random_ = false, needs_key_ = false;
  // The pool queue (Scenario::queue), its pending head deadline, the wake-ups
  // not yet handed out, and the time of the event being handled.
  bool pool_enabled_ = false, pool_deadline_pending_ = false, dispatching_ = false;
  Ring<PoolWaiting> pool_;
  BucketedArea pool_wait_;  // requests waiting in pool_ x time
  uint64_t pending_wakes_ = 0;
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
