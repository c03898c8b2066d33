// Micro-benchmarks of the consistent hashing policies: nanoseconds per lookup
// for the ring and Maglev at 3, 100 and 10,000 backends (weights 1..10 from a
// fixed seed), single-threaded and with two threads sharing one policy, and
// the time to build each at 10,000 backends.
//
//   build-hash/bench/hash_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "heft/balance/hash.h"
#include "heft/balance/policy.h"

namespace {

using namespace heft::balance;

struct Pool {
  explicit Pool(size_t n) : live(n) {
    std::mt19937 rng(12345);
    for (uint32_t i = 0; i < n; ++i)
      members.push_back(Member{i, static_cast<uint32_t>(rng() % 10 + 1), hash_key("backend-" + std::to_string(i))});
    for (auto& l : live) ptrs.push_back(&l);
  }
  std::unique_ptr<Policy> make(HashStrategy strategy) const {
    return make_policy({PolicyKind::hash, strategy}, members, std::span<BackendLive* const>(ptrs));
  }
  std::vector<Member> members;
  std::vector<BackendLive> live;
  std::vector<BackendLive*> ptrs;
};

// One policy per (strategy, size), shared by the threads of a benchmark.
Policy& shared_policy(HashStrategy strategy, size_t n) {
  struct Entry {
    HashStrategy strategy;
    size_t n;
    std::unique_ptr<Pool> pool;
    std::unique_ptr<Policy> policy;
  };
  static std::vector<Entry> cache;
  static std::mutex mu;
  std::lock_guard lock(mu);
  for (auto& e : cache)
    if (e.strategy == strategy && e.n == n) return *e.policy;
  auto pool = std::make_unique<Pool>(n);
  auto policy = pool->make(strategy);
  cache.push_back(Entry{strategy, n, std::move(pool), std::move(policy)});
  return *cache.back().policy;
}

void lookup(benchmark::State& state, HashStrategy strategy) {
  Policy& policy = shared_policy(strategy, static_cast<size_t>(state.range(0)));
  // Keys: a well-mixed stream, different per thread; hash_key is not timed.
  uint64_t i = static_cast<uint64_t>(state.thread_index()) << 40;
  uint64_t sink = 0;
  for (auto _ : state) {
    PickContext ctx;
    ctx.key_hash = mix64(++i);
    sink += *policy.pick(ctx);
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
}

void BM_RingLookup(benchmark::State& state) { lookup(state, HashStrategy::ring); }
void BM_MaglevLookup(benchmark::State& state) { lookup(state, HashStrategy::maglev); }
BENCHMARK(BM_RingLookup)->Arg(3)->Arg(100)->Arg(10'000);
BENCHMARK(BM_RingLookup)->Arg(3)->Arg(100)->Arg(10'000)->Threads(2);
BENCHMARK(BM_MaglevLookup)->Arg(3)->Arg(100)->Arg(10'000);
BENCHMARK(BM_MaglevLookup)->Arg(3)->Arg(100)->Arg(10'000)->Threads(2);

void BM_HashKey(benchmark::State& state) {
  std::string key = "user-1234567";
  for (auto _ : state) benchmark::DoNotOptimize(hash_key(key));
}
BENCHMARK(BM_HashKey);

void build(benchmark::State& state, HashStrategy strategy) {
  Pool pool(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    auto policy = pool.make(strategy);
    benchmark::DoNotOptimize(policy.get());
  }
}
void BM_RingBuild(benchmark::State& state) { build(state, HashStrategy::ring); }
void BM_MaglevBuild(benchmark::State& state) { build(state, HashStrategy::maglev); }
BENCHMARK(BM_RingBuild)->Arg(3)->Arg(100)->Arg(10'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaglevBuild)->Arg(3)->Arg(100)->Arg(10'000)->Unit(benchmark::kMillisecond);

}  // namespace
BENCHMARK_MAIN();
