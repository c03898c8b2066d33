// What the run-time pool (src/upstream/pool.h) adds to a request beyond the
// balancing policy, on virtual time as `heft sim` drives it: 10 backends
// (weights 3,1,1 repeated, as bench/sim_bench.cc's fleet), smooth weighted
// round robin, one thread.
//
//   BM_PolicyOnly         Balancer::acquire() + end_request(): the policy alone
//   BM_PoolRequest/A/C    PoolSnapshot::acquire() on virtual time +
//                         end_request() + record_response() + report_success(),
//                         the pool's tick every 250 ms of virtual time (a request
//                         every 400 us) and the snapshot version check a cached
//                         snapshot makes; A = adaptive weights on, C = also
//                         count_request() (requests_total, the proxy's)
//   BM_RecordResponse/A   record_response() alone
//   BM_Tick/A             Pool::tick() of an idle 10-backend pool
//
//   taskset -c 1 build/bench/pool_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "heft/balance/balancer.h"
#include "upstream/pool.h"

using namespace heft;
using namespace std::chrono_literals;

namespace {

upstream::PoolConfig ten_backends(bool adaptive) {
  upstream::PoolConfig config;
  config.name = "bench";
  config.policy.kind = balance::PolicyKind::weighted_round_robin;
  for (int i = 0; i < 10; ++i) {
    upstream::BackendConfig b;
    b.name = "s" + std::to_string(i + 1);
    b.address = b.name;
    b.weight = i % 3 == 0 ? 3 : 1;
    config.backends.push_back(b);
  }
  config.adaptive.enabled = adaptive;
  return config;
}

std::vector<balance::BackendSpec> ten_specs() {
  std::vector<balance::BackendSpec> specs;
  for (const upstream::BackendConfig& b : ten_backends(false).backends)
    specs.push_back({.name = b.name, .weight = b.weight});
  return specs;
}

// Virtual time starts well after the clock's epoch (0 means "unset" to some of the pool's fields).
const upstream::TimePoint kStart = upstream::TimePoint(std::chrono::hours(1));

void BM_PolicyOnly(benchmark::State& state) {
  balance::Balancer balancer(balance::PolicyOptions{balance::PolicyKind::weighted_round_robin}, ten_specs());
  for (auto _ : state) {
    const std::optional<uint32_t> got = balancer.acquire({});
    benchmark::DoNotOptimize(got);
    balancer.end_request(*got);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PoolRequest(benchmark::State& state) {
  const bool adaptive = state.range(0) != 0;
  const bool count = state.range(1) != 0;
  upstream::Pool pool(ten_backends(adaptive));
  std::shared_ptr<const upstream::PoolSnapshot> snapshot = pool.snapshot();
  uint64_t version = pool.version();
  upstream::TimePoint now = kStart;
  upstream::TimePoint next_tick = kStart + 250ms;
  for (auto _ : state) {
    now += 400us;
    if (now >= next_tick) [[unlikely]] {
      benchmark::DoNotOptimize(pool.tick(now));
      next_tick += 250ms;
    }
    if (pool.version() != version) [[unlikely]] {
      snapshot = pool.snapshot();
      version = snapshot->version();
    }
    bool full = false;
    const std::optional<uint32_t> got = snapshot->acquire({}, now, &full);
    benchmark::DoNotOptimize(got);
    if (count) snapshot->count_request(*got);
    snapshot->balancer().end_request(*got);
    snapshot->record_response(*got, 20ms, 200, true);
    snapshot->report_success(*got);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RecordResponse(benchmark::State& state) {
  upstream::Pool pool(ten_backends(state.range(0) != 0));
  auto snapshot = pool.snapshot();
  uint32_t i = 0;
  for (auto _ : state) {
    snapshot->record_response(i, 20ms, 200, true);
    i = i == 9 ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Tick(benchmark::State& state) {
  upstream::Pool pool(ten_backends(state.range(0) != 0));
  upstream::TimePoint now = kStart;
  for (auto _ : state) {
    now += 250ms;
    benchmark::DoNotOptimize(pool.tick(now));
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_PolicyOnly);
BENCHMARK(BM_PoolRequest)->ArgsProduct({{0, 1}, {0, 1}});
BENCHMARK(BM_RecordResponse)->Arg(0)->Arg(1);
BENCHMARK(BM_Tick)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
