// The discrete-event simulator behind `heft sim`: runs a Scenario once per
// policy through heft's own heft::balance::Balancer (the code the proxy runs)
// and measures what every server would see.
//
// Model (docs/sim.md): a server has `size` workers; a request that finds them
// all busy waits in the server's FIFO queue (refused beyond the queue limit,
// timed out after waiting longer than the timeout). Latency = queue wait +
// service. The balancer's active count of a server is every request assigned to
// it and not yet finished (queued or in service), as the proxy counts in-flight
// requests, so least_conn and p2c see real counts; a server's max_conns caps
// that count (Balancer::acquire() passes a full server over), and a request
// every eligible server is too full for is unrouted, as the proxy answers 503,
// or with a pool queue (Scenario::queue) waits in it for a place, as in the
// proxy: each request's end at any server wakes the one waiting longest, which
// acquires again with its own pick context; a weight change wakes them all;
// a recovering server wakes as many as it has free places; a newcomer
// finding anyone waiting queues behind them; a request waiting the queue
// timeout gives up. Backup servers take requests only when no primary can.
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
  LatencySummary latency;
  LatencySketch latency_sketch;  // every completed request: for CDFs
  std::vector<ServerResult> servers;
};

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
