// PlaceQueue: first come, first served; a bounded length; a woken request
// that lost its place rejoins at the front; leaving after a wake-up says so;
// the queue is one per pool, carried across snapshots, and a pool change
// wakes every waiter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "upstream/place_queue.h"
#include "upstream/pool.h"

namespace heft::upstream {
namespace {

TEST(PlaceQueue, WakesInArrivalOrderAndHoldsAtMostTheLimit) {
  PlaceQueue q;
  std::string woken;
  auto a = q.join(3, [&] { woken += 'a'; });
  auto b = q.join(3, [&] { woken += 'b'; });
  auto c = q.join(3, [&] { woken += 'c'; });
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(q.join(3, [&] { woken += 'd'; }), nullptr);  // full
  EXPECT_EQ(q.size(), 3u);
  q.wake_one();
  q.wake_one();
  EXPECT_EQ(woken, "ab");
  EXPECT_EQ(q.size(), 3u);  // woken, not yet picked: still counted
  a.reset();                // a picked
  EXPECT_EQ(q.size(), 2u);
  // b lost its place: it rejoins ahead of c, even at the limit.
  auto b_again = q.join(1, [&] { woken += 'B'; }, /*front=*/true);
  ASSERT_TRUE(b_again);
  b.reset();
  q.wake_one();
  q.wake_one();
  q.wake_one();  // nobody in line: nothing
  EXPECT_EQ(woken, "abBc");
  b_again.reset();
  c.reset();
  EXPECT_EQ(q.size(), 0u);
}

TEST(PlaceQueue, LeavingSaysWhetherTheRequestWasWoken) {
  PlaceQueue q;
  int wakes = 0;
  auto a = q.join(10, [&] { ++wakes; });
  auto b = q.join(10, [&] { ++wakes; });
  EXPECT_TRUE(q.leave(*b));  // gave up while in line: no wake-up to pass on
  EXPECT_FALSE(q.leave(*b));  // once
  EXPECT_EQ(q.size(), 1u);
  q.wake_one();
  EXPECT_FALSE(q.leave(*a));  // woken before it left: it must pass the wake-up on
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(q.size(), 0u);
  // A place destroyed while in line leaves by itself (a request's frame gone at a stop).
  {
    auto c = q.join(10, [&] { ++wakes; });
    EXPECT_EQ(q.size(), 1u);
  }
  EXPECT_EQ(q.size(), 0u);
  q.wake_one();
  EXPECT_EQ(wakes, 1);
}

TEST(PlaceQueue, FirstInLineOnlyWhenNobodyWaitsAheadWokenOrNot) {
  PlaceQueue q;
  bool first = false;
  auto a = q.join(10, [] {}, false, &first);
  EXPECT_TRUE(first);
  auto b = q.join(10, [] {}, false, &first);
  EXPECT_FALSE(first);
  q.wake_one();
  q.wake_one();
  // Both woken, neither has picked yet: a newcomer is behind them.
  auto c = q.join(10, [] {}, false, &first);
  EXPECT_FALSE(first);
  a.reset();
  b.reset();
  c.reset();
  auto d = q.join(10, [] {}, false, &first);
  EXPECT_TRUE(first);
  auto e = q.join(10, [] {}, /*front=*/true, &first);
  EXPECT_TRUE(first);  // a woken request rejoining at the front
}

TEST(PlaceQueue, OnePerPoolAcrossSnapshotsAndAChangeWakesEveryWaiter) {
  PoolConfig config;
  config.name = "p";
  BackendConfig b;
  b.name = b.address = "A";
  b.max_conns = 1;
  config.backends.push_back(b);
  Pool pool(config);
  auto before = pool.snapshot();
  int wakes = 0;
  auto one = before->places()->join(10, [&] { ++wakes; });
  auto two = before->places()->join(10, [&] { ++wakes; });
  config.backends[0].max_conns = 2;
  pool.update(config);
  EXPECT_EQ(pool.snapshot()->places(), before->places());
  EXPECT_EQ(wakes, 2);
  EXPECT_EQ(before->places()->size(), 2u);  // until they pick
  one.reset();
  two.reset();
  EXPECT_EQ(before->places()->size(), 0u);
}

}  // namespace
}  // namespace heft::upstream
