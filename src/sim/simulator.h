// The discrete-event simulator behind `heft sim`: runs a Scenario once per
// policy through heft's own run-time pool, upstream::Pool (the snapshots,
// passive failures, slow start, adaptive weights, max_conns and the pool
// queue the proxy runs, on heft::balance::Balancer), on virtual time, and
// measures what every server would see.
//
// Model (docs/sim.md): a server has `size` workers; a request that finds them
// all busy waits in the server's FIFO queue (refused beyond the queue limit,
// timed out after waiting longer than the timeout: the server answers 503).
// Latency = queue wait + service. Each arrival is placed as the proxy places
// a request: PoolSnapshot::acquire() at its virtual time (the pick and the
// count in one step, passing over a server at its max_conns), or, when every
// server that could take it is full, a wait in the pool's PlaceQueue
// (Scenario::queue) as the proxy waits. Each attempt's end frees its place
// (waking the request waiting longest) and tells the pool of its outcome
// (report_success / report_failure, and record_response for adaptive
// weights), as the proxy does; Pool::tick() runs every 250 ms of virtual
// time, as the proxy ticks its pools. A `fail` event makes the server's
// requests fail (those in progress at once, new ones on arrival), so passive
// failures take it out as they would in the proxy; `recover` makes it answer
// again, and the pool takes it back at its next trial (slow start ramps it).
//
// Common random numbers: request k's arrival gap, service draw, key and the
// random bits handed to the policy all come from a stream seeded by (seed, k),
// so every policy sees the very same requests. Runs are deterministic: the same
// scenario gives bit-identical results.
//
// Pure: no I/O, no clock, no threads. Memory is fixed per server (a latency
// sketch, the utilisation series) plus the queues' current contents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/latency_sketch.h"
#include "sim/scenario.h"
#include "upstream/weights.h"

namespace heft::sim {

struct LatencySummary {
  double mean_s = 0, p50_s = 0, p95_s = 0, p99_s = 0, max_s = 0;
};

struct ServerResult {
  std::string name;
  uint32_t size = 0;
  uint32_t weight = 0;            // weight at the start
  uint64_t requests = 0;          // assigned to this server by the balancer
  uint64_t completed = 0;
  uint64_t refused = 0;           // queue full
  uint64_t timed_out = 0;         // waited longer than the timeout
  uint64_t failed = 0;            // lost when the server failed
  double share = 0;               // requests / arrivals
  double utilisation = 0;         // busy worker-seconds / (size x duration), 0..1
  LatencySummary latency;         // of the requests it completed
  uint64_t peak_queue = 0;        // most requests waiting at once
  uint64_t queue_at_end = 0;      // waiting when arrivals stopped (at the duration)
  std::vector<double> utilisation_series;  // per bucket of Scenario::bucket_s, 0..1
  // With slow start or adaptive weights (dynamic_weights()), per bucket: the
  // server's share of the requests placed in it, and the weight factor
  // (slow start x adaptive) the pool balanced it by, time-weighted. Else empty.
  std::vector<double> share_series;
  std::vector<double> factor_series;
};

// A decision of the pool's (Pool::tick()): a server's weight factor changed
// (slow start began or ended, an adaptive cut or recovery), at `at_s` of virtual time.
struct WeightChange {
  double at_s = 0;
  std::string server;
  upstream::WeightReason reason = upstream::WeightReason::slow_start;
  double factor_before = 1, factor_after = 1;  // slow start x adaptive
  std::string detail;                          // as the proxy logs it: "latency 212.4ms > limit 41.2ms"
};

struct PolicyResult {
  balance::PolicyKind policy = balance::PolicyKind::round_robin;
  uint64_t arrivals = 0;
  uint64_t completed = 0, refused = 0, timed_out = 0, failed = 0;
  uint64_t unrouted = 0;  // no server could take it: none eligible, or every eligible one at its max_conns
  uint64_t unrouted_full = 0;  // of those, the ones turned away because every eligible server was full
                               // (with a pool queue: because the queue was full)
  // The pool queue (Scenario::queue > 0): requests that waited in it for a
  // place, the ones that gave up after the queue timeout (never assigned,
  // neither unrouted), the most waiting at once, and those waiting when
  // arrivals stopped.
  uint64_t queue_waited = 0, queue_timed_out = 0, queue_peak = 0, queue_at_end = 0;
  // With a pool queue: the mean number of requests waiting in it, per bucket
  // of Scenario::bucket_s (time-weighted, as utilisation_series); else empty.
  std::vector<double> queue_series;
  // The pool's weight decisions, in time order (at most kMaxWeightChanges;
  // weight_changes_dropped counts the rest).
  std::vector<WeightChange> weight_changes;
  uint64_t weight_changes_dropped = 0;
  LatencySummary latency;
  LatencySketch latency_sketch;  // every completed request: for CDFs
  std::vector<ServerResult> servers;
};

inline constexpr size_t kMaxWeightChanges = 10'000;

struct SimResult {
  Scenario scenario;  // as run (validated); trace arrivals dropped to keep it small
  uint64_t trace_arrivals = 0;  // a trace's arrivals before the duration: those replayed
  std::vector<PolicyResult> policies;
};

// Runs the scenario (validated first: std::invalid_argument) for each policy.
SimResult simulate(const Scenario& scenario);

// Runs one policy; `scenario` must already be validated.
PolicyResult simulate_policy(const Scenario& scenario, balance::PolicyKind policy);

}  // namespace heft::sim
