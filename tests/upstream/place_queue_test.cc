// PlaceQueue: first come, first served; a bounded length; a woken request
// that lost its place rejoins at the front; leaving after a wake-up says so;
// the queue is one per pool, carried across snapshots, and a pool change
// wakes every waiter; a backend that comes back wakes as many as it has
// places.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <memory>
#include <vector>

#include "upstream/place_queue.h"
#include "upstream/pool.h"

namespace heft::upstream {
namespace {

// A pool "p" of one backend "A" with `max_conns`.
PoolConfig one_backend(uint32_t max_conns) {
  PoolConfig config;
  config.name = "p";
  BackendConfig b;
  b.name = b.address = "A";
  b.max_conns = max_conns;
  config.backends.push_back(b);
  return config;
}

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

// Two places free one after the other while one request waits: the first
// wakes it, the second finds nobody in line (the woken request has not
// picked yet). A request that joins then must look for that place itself:
// it used to wait behind the woken one for a third request to end, with a
// place free all along (and got the 503 at queue_timeout if none ended).
TEST(PlaceQueue, AWakeUpThatFindsOnlyWokenRequestsGoesToTheNextToJoin) {
  PlaceQueue q;
  bool first = false;
  auto w = q.join(10, [] {}, false, &first);
  EXPECT_TRUE(first);
  q.wake_one();  // a place for w
  q.wake_one();  // another: nobody in line
  auto n = q.join(10, [] {}, false, &first);
  EXPECT_TRUE(first);
  auto m = q.join(10, [] {}, false, &first);
  EXPECT_FALSE(first);  // one place, one newcomer
  // Once nobody is pending, an old spare is forgotten (newcomers look anyway).
  w.reset();
  n.reset();
  m.reset();
  auto x = q.join(10, [] {}, false, &first);
  q.wake_one();
  q.wake_one();  // spare, while x is woken
  x.reset();
  auto y = q.join(10, [] {}, false, &first);
  EXPECT_TRUE(first);  // nobody ahead
  auto z = q.join(10, [] {}, false, &first);
  EXPECT_FALSE(first);  // behind y; the spare went with x
}

// The same through a pool: A holds two requests; both end (each end wakes
// one, as the proxy's), the one waiting was woken by the first, and a
// request joining before it picks finds the second place.
TEST(PlaceQueue, ARequestJoiningBehindAWokenOneFindsTheOtherFreedPlace) {
  Pool pool(one_backend(2));
  auto snap = pool.snapshot();
  const auto now = TimePoint(std::chrono::hours(1));
  PlaceQueue& q = *snap->places();
  ASSERT_TRUE(snap->acquire({}, now, nullptr));
  ASSERT_TRUE(snap->acquire({}, now, nullptr));
  bool full = false;
  EXPECT_FALSE(snap->acquire({}, now, &full));
  EXPECT_TRUE(full);
  int w_woken = 0;
  bool first = false;
  auto w = q.join(10, [&] { ++w_woken; }, false, &first);
  for (int k = 0; k < 2; ++k) {
    snap->balancer().end_request(0);
    if (q.size() > 0) q.wake_one();
  }
  EXPECT_EQ(w_woken, 1);
  auto n = q.join(10, [] {}, false, &first);
  ASSERT_TRUE(first);  // so it looks:
  EXPECT_TRUE(snap->acquire({}, now, nullptr));
  EXPECT_TRUE(snap->acquire({}, now, nullptr));  // and w gets its own
}

TEST(PlaceQueue, OnePerPoolAcrossSnapshotsAndAChangeWakesEveryWaiter) {
  PoolConfig config = one_backend(1);
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

TEST(PlaceQueue, CountsWhoJoinedFoundItFullOrTimedOut) {
  PlaceQueue q;
  auto a = q.join(1, [] {});
  EXPECT_EQ(q.join(1, [] {}), nullptr);
  q.wake_one();
  auto again = q.join(1, [] {}, true);  // a woken one whose place was taken: counted once
  q.note_timeout();
  const PlaceQueue::Counts c = q.counts();
  EXPECT_EQ(c.joined, 1u);
  EXPECT_EQ(c.full, 1u);
  EXPECT_EQ(c.timed_out, 1u);
}

TEST(PlaceQueue, WakesAsManyAsAskedLongestWaitingFirst) {
  PlaceQueue q;
  std::string woken;
  auto a = q.join(5, [&] { woken += 'a'; });
  auto b = q.join(5, [&] { woken += 'b'; });
  auto c = q.join(5, [&] { woken += 'c'; });
  q.wake(2);
  EXPECT_EQ(woken, "ab");
  q.wake(0);
  EXPECT_EQ(woken, "ab");
  q.wake(5);  // more than wait
  EXPECT_EQ(woken, "abc");
  EXPECT_EQ(q.size(), 3u);  // woken, not yet left
}

// Backend A (max_conns 1) is full; B (max_conns 2) is held out. Four requests
// wait in the pool's queue.
struct ComeBack : ::testing::Test {
  static PoolConfig config(std::chrono::milliseconds slow_start) {
    PoolConfig config;
    config.name = "p";
    for (const char* name : {"A", "B"}) {
      BackendConfig b;
      b.name = b.address = name;
      b.max_conns = name[0] == 'A' ? 1 : 2;
      b.max_fails = 1;
      b.fail_timeout = std::chrono::seconds(1);
      b.slow_start = slow_start;
      config.backends.push_back(b);
    }
    return config;
  }
  void wait_four(const Pool& pool) {
    queue = pool.snapshot()->places();
    for (char name : std::string("wxyz")) waiting.push_back(queue->join(10, [this, name] { woken += name; }));
  }
  std::string woken;
  std::shared_ptr<PlaceQueue> queue;  // outlives the places (the test's Pool does not)
  std::vector<std::unique_ptr<PlaceQueue::Place>> waiting;
  const TimePoint t0 = TimePoint(std::chrono::hours(1));
};

TEST_F(ComeBack, AHealthyAgainBackendWakesAsManyWaitersAsItHasPlaces) {
  Pool pool(config(std::chrono::milliseconds(0)));
  pool.snapshot()->set_healthy(1, false, t0);
  ASSERT_TRUE(pool.snapshot()->acquire({}, t0, nullptr).has_value());  // A's one place
  wait_four(pool);
  bool full = false;
  EXPECT_FALSE(pool.snapshot()->acquire({}, t0, &full).has_value());
  EXPECT_TRUE(full);
  pool.snapshot()->set_healthy(1, true, t0);
  EXPECT_EQ(woken, "wx");  // B's two places, to the two waiting longest
  pool.snapshot()->set_healthy(1, true, t0);
  EXPECT_EQ(woken, "wx") << "no change, no wake-up";
}

TEST_F(ComeBack, ABackendBackFromPassiveFailuresWakesWaiters) {
  Pool pool(config(std::chrono::milliseconds(0)));
  pool.snapshot()->report_failure(1, t0);  // B out for fail_timeout (1 s)
  ASSERT_TRUE(pool.snapshot()->acquire({}, t0, nullptr).has_value());
  wait_four(pool);
  pool.tick(t0 + std::chrono::milliseconds(500));
  EXPECT_EQ(woken, "");
  pool.tick(t0 + std::chrono::milliseconds(1500));  // the out period has passed
  EXPECT_EQ(woken, "wx");
}

TEST_F(ComeBack, WithSlowStartTheWakeUpComesWithTheSnapshotThatMakesItAvailable) {
  Pool pool(config(std::chrono::seconds(10)));
  pool.snapshot()->set_healthy(1, false, t0);
  ASSERT_TRUE(pool.snapshot()->acquire({}, t0, nullptr).has_value());
  wait_four(pool);
  pool.snapshot()->set_healthy(1, true, t0);
  EXPECT_EQ(woken, "") << "not available before the next tick";
  pool.tick(t0);
  EXPECT_EQ(woken, "wx");
  EXPECT_TRUE(pool.snapshot()->available(1));
}

TEST_F(ComeBack, ABackendWithoutMaxConnsWakesEveryWaiter) {
  PoolConfig c = config(std::chrono::milliseconds(0));
  c.backends[1].max_conns = 0;
  Pool pool(c);
  pool.snapshot()->set_healthy(1, false, t0);
  wait_four(pool);
  pool.snapshot()->set_healthy(1, true, t0);
  EXPECT_EQ(woken, "wxyz");
}

}  // namespace
}  // namespace heft::upstream
