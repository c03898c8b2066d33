// ns per pick of the balancing core at 3, 100 and 10,000 backends, single
// thread and two threads contending, beside the plain nginx O(n) loop; and the
// cost of rebuilding a 10,000-backend snapshot after one weight change; and
// acquire() with and without max_conns limits.
//
//   build/bench/balance_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>

#include "balance/reference_nginx.h"
#include "heft/balance/balancer.h"

using namespace heft::balance;

namespace {

std::vector<BackendSpec> fleet(size_t n) {
  std::mt19937_64 rng(12345);
  std::vector<BackendSpec> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back({.name = "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":80",
                   .weight = n == 3 ? uint32_t(5 - 2 * (i > 0)) : uint32_t(1 + rng() % 10)});
  return out;
}

// One balancer per benchmark, shared by its threads (that is the contention measured).
std::unique_ptr<Balancer> g_balancer;

void SetUpBalancer(PolicyKind kind, size_t n) { g_balancer = std::make_unique<Balancer>(PolicyOptions{kind}, fleet(n)); }

template <PolicyKind kKind>
void BM_Pick(benchmark::State& state) {
  if (state.thread_index() == 0) SetUpBalancer(kKind, state.range(0));
  uint64_t x = state.thread_index() * 0x9e3779b97f4a7c15ULL + 1;
  for (auto _ : state) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift: cheap per-pick randomness
    PickContext ctx{.key_hash = x, .random = x * 0x2545F4914F6CDD1DULL};
    benchmark::DoNotOptimize(g_balancer->pick(ctx));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_NginxLoop(benchmark::State& state) {
  std::vector<uint32_t> weights;
  for (const auto& b : fleet(state.range(0))) weights.push_back(b.weight);
  heft::test::ReferenceSwrr ref(weights);
  for (auto _ : state) benchmark::DoNotOptimize(ref.pick());
  state.SetItemsProcessed(state.iterations());
}

// least_conn with realistic, changing active counts: each pick's backend gets
// one more in flight (begin_request) and a random one finishes (end_request,
// a no-op at 0). Time per iteration = pick + begin + end.
void BM_LeastConnBusy(benchmark::State& state) {
  if (state.thread_index() == 0) SetUpBalancer(PolicyKind::least_conn, state.range(0));
  std::mt19937_64 rng(state.thread_index() + 7);
  size_t n = state.range(0);
  for (auto _ : state) {
    uint32_t i = *g_balancer->pick();
    g_balancer->begin_request(i);
    g_balancer->end_request(rng() % n);
  }
  state.SetItemsProcessed(state.iterations());
}

// max_conns: acquire() + end_request() per iteration on smooth WRR, one
// thread. Mode 0: no backend has a limit (the proxy's path for such pools);
// 1: every backend has a limit never reached; 2: the heaviest backend is held
// at its limit of 1 for the whole run, so each of its turns is passed over
// (a pick that skips it, nginx's exact loop under the policy's mutex).
void BM_AcquireRelease(benchmark::State& state) {
  auto specs = fleet(state.range(0));
  const int mode = int(state.range(1));
  size_t heaviest = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].weight > specs[heaviest].weight) heaviest = i;
    if (mode >= 1) specs[i].max_conns = 1000;
  }
  if (mode == 2) specs[heaviest].max_conns = 1;
  Balancer b(PolicyOptions{PolicyKind::weighted_round_robin}, specs);
  if (mode == 2) b.live(uint32_t(heaviest)).active = 1;  // a long request holds its one place
  for (auto _ : state) {
    const std::optional<uint32_t> got = b.acquire({});
    benchmark::DoNotOptimize(got);
    b.end_request(*got);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RebuildAfterWeightChange(benchmark::State& state) {
  auto specs = fleet(state.range(0));
  auto current = std::make_unique<Balancer>(PolicyOptions{PolicyKind(state.range(1))}, specs);
  for (int i = 0; i < 1000; ++i) current->pick();
  uint32_t k = 0;
  for (auto _ : state) {
    specs[k % specs.size()].weight = 1 + (specs[k % specs.size()].weight % 10);
    ++k;
    auto next = std::make_unique<Balancer>(PolicyOptions{PolicyKind(state.range(1))}, specs, current.get());
    benchmark::DoNotOptimize(next.get());
    current = std::move(next);
  }
}

}  // namespace

#define SIZES ->Arg(3)->Arg(100)->Arg(10000)
BENCHMARK(BM_Pick<PolicyKind::weighted_round_robin>) SIZES;
BENCHMARK(BM_Pick<PolicyKind::weighted_round_robin>) SIZES->Threads(2)->UseRealTime();
BENCHMARK(BM_NginxLoop) SIZES;
BENCHMARK(BM_Pick<PolicyKind::least_conn>) SIZES;
BENCHMARK(BM_LeastConnBusy) SIZES;
BENCHMARK(BM_LeastConnBusy) SIZES->Threads(2)->UseRealTime();
BENCHMARK(BM_Pick<PolicyKind::round_robin>) SIZES;
BENCHMARK(BM_Pick<PolicyKind::random>) SIZES;
BENCHMARK(BM_Pick<PolicyKind::p2c>) SIZES;
BENCHMARK(BM_Pick<PolicyKind::p2c>) SIZES->Threads(2)->UseRealTime();
BENCHMARK(BM_AcquireRelease)->ArgsProduct({{3, 100, 10000}, {0, 1, 2}});
BENCHMARK(BM_RebuildAfterWeightChange)
    ->Args({10000, int(PolicyKind::weighted_round_robin)})
    ->Args({10000, int(PolicyKind::least_conn)})
    ->Args({10000, int(PolicyKind::hash)})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
