// Per-worker counter slots (BackendState::slot) and the worker-local snapshot
// references of CachedSnapshot: totals add every slot up, the adaptive
// evaluation drains them all, and a cached snapshot stays valid for a request
// that holds it while the pool moves on.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "upstream/pool.h"

namespace heft::upstream {
namespace {

using namespace std::chrono_literals;

const TimePoint t0 = TimePoint(std::chrono::hours(1000));

PoolConfig three_backends(unsigned slots) {
  PoolConfig c;
  c.name = std::string("p");  // (a move: GCC 12 warns falsely about assigning the literal here)
  for (char name : {'A', 'B', 'C'}) {
    BackendConfig b;
    b.name = b.address = std::string(1, name);
    c.backends.push_back(b);
  }
  c.counter_slots = slots;
  return c;
}

TEST(CounterSlots, TotalsAddUpEveryWorkersSlot) {
  Pool pool(three_backends(2));
  auto snap = pool.snapshot();
  EXPECT_EQ(snap->state(0).slots, 2u);
  constexpr int kPerWorker = 20000;
  std::vector<std::thread> workers;
  for (unsigned worker = 0; worker < 2; ++worker) {
    workers.emplace_back([&snap, worker] {
      for (int k = 0; k < kPerWorker; ++k) {
        snap->count_request(0, worker);
        // 3 ms lands in the 5 ms bucket (index 2); every tenth is a 503.
        const bool failed = k % 10 == 0;
        snap->record_response(0, 3ms, failed ? 503 : 200, !failed, worker);
      }
    });
  }
  for (auto& t : workers) t.join();
  const BackendState& s = snap->state(0);
  EXPECT_EQ(s.requests_total(), 2u * kPerWorker);
  EXPECT_EQ(s.responses_total(), 2u * kPerWorker);
  EXPECT_EQ(s.responses_5xx_total(), 2u * kPerWorker / 10);
  EXPECT_EQ(s.latency_bucket(2), 2u * kPerWorker);
  EXPECT_EQ(s.latency_bucket(1), 0u);
  // Each worker wrote its own slot.
  EXPECT_EQ(s.slot(0).requests.load(), uint64_t{kPerWorker});
  EXPECT_EQ(s.slot(1).requests.load(), uint64_t{kPerWorker});
  // A worker index past the slots shares a slot instead of writing out of bounds.
  snap->count_request(1, 5);
  EXPECT_EQ(snap->state(1).requests_total(), 1u);
  EXPECT_EQ(snap->state(1).slot(1).requests.load(), 1u);
}

TEST(CounterSlots, AdaptiveWeightsSeeTheResponsesOfEveryWorker) {
  PoolConfig cfg = three_backends(2);
  cfg.adaptive.enabled = true;
  cfg.adaptive.interval = 1000ms;
  cfg.adaptive.cut = 0.25;
  cfg.adaptive.min_weight_ratio = 0.1;
  Pool pool(cfg);
  TimePoint now = t0;
  pool.tick(now);  // starts the first interval
  // Backend C is 20x slower. Each worker alone records fewer responses of C
  // than an evaluation needs (kAdaptiveMinSamples); only their sum is enough.
  auto snap = pool.snapshot();
  for (unsigned worker = 0; worker < 2; ++worker) {
    for (int k = 0; k < 50; ++k) {
      snap->record_response(0, 10ms, 200, true, worker);
      snap->record_response(1, 10ms, 200, true, worker);
    }
    for (uint64_t k = 0; k < kAdaptiveMinSamples - 2; ++k) snap->record_response(2, 200ms, 200, true, worker);
  }
  now += 1s;
  pool.tick(now);
  EXPECT_EQ(pool.decisions(WeightReason::latency), 1u);
  EXPECT_LT(pool.snapshot()->factor(2), 1.0);
  // The evaluation drained both slots: nothing is counted twice.
  const BackendState& c = pool.snapshot()->state(2);
  for (unsigned worker = 0; worker < 2; ++worker) EXPECT_EQ(c.slot(worker).interval_count.load(), 0u);
  EXPECT_EQ(c.responses_total(), 2 * (kAdaptiveMinSamples - 2));
}

TEST(CounterSlots, CarriedBackendsKeepTheirCounts) {
  Pool pool(three_backends(2));
  pool.snapshot()->count_request(1, 0);
  pool.snapshot()->count_request(1, 1);
  PoolConfig next = three_backends(2);
  next.backends[0].weight = 7;  // a change, so a new snapshot
  pool.update(next);
  EXPECT_EQ(pool.snapshot()->version(), 2u);
  EXPECT_EQ(pool.snapshot()->state(1).requests_total(), 2u);
}

TEST(CachedSnapshot, AHeldCopyOutlivesTheCachesMoveToANewSnapshot) {
  Pool pool(three_backends(1));
  CachedSnapshot cache(pool);
  std::shared_ptr<const PoolSnapshot> held = cache.get();  // a request in flight
  EXPECT_EQ(held->version(), 1u);
  std::weak_ptr<const PoolSnapshot> first = pool.snapshot();
  PoolConfig next = three_backends(1);
  next.backends[2].weight = 4;
  pool.update(next);
  // The cache moves on; the pool no longer holds the first snapshot either.
  EXPECT_EQ(cache.get()->version(), 2u);
  EXPECT_EQ(cache.get()->backend(2).weight, 4u);
  ASSERT_FALSE(first.expired());  // only the request keeps it now
  EXPECT_EQ(held->backend(2).weight, 1u);
  EXPECT_EQ(held->size(), 3u);
  held.reset();
  EXPECT_TRUE(first.expired());
  // Copies of the cached pointer count on the cache's holder, not on the
  // snapshot's own control block (which the pool shares with other workers).
  std::shared_ptr<const PoolSnapshot> copy = cache.get();
  const long pool_side = pool.snapshot().use_count();
  std::shared_ptr<const PoolSnapshot> another = cache.get();
  EXPECT_EQ(pool.snapshot().use_count(), pool_side);
  EXPECT_EQ(another.get(), pool.snapshot().get());
}

}  // namespace
}  // namespace heft::upstream
