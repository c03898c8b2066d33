// Passive failure accounting (max_fails / fail_timeout) on virtual time:
// the sliding window, trials, returns after fail_timeout (with and without
// slow start, by a pick or by Pool::tick) and the lone-backend rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "upstream/pool.h"

namespace heft::upstream {
namespace {

using namespace std::chrono_literals;

const TimePoint t0 = TimePoint(std::chrono::hours(1000));

PoolConfig pool_of(size_t backends, uint32_t max_fails, milliseconds fail_timeout, milliseconds slow_start = 0ms,
                   uint32_t weight = 1) {
  PoolConfig c;
  c.name = std::string("p");
  for (size_t i = 0; i < backends; ++i) {
    BackendConfig b;
    b.name = b.address = std::string(1, char('A' + i));
    b.weight = weight;
    b.max_fails = max_fails;
    b.fail_timeout = fail_timeout;
    b.slow_start = slow_start;
    c.backends.push_back(b);
  }
  return c;
}

TEST(RecentFailures, CountsTheWindowInclusiveAndAtMostTheLimit) {
  RecentFailures f;
  EXPECT_EQ(f.add(t0, 2000ms, 3), 1u);
  EXPECT_EQ(f.add(t0 + 1000ms, 2000ms, 3), 2u);
  EXPECT_EQ(f.add(t0 + 2000ms, 2000ms, 3), 3u);  // t0 is exactly fail_timeout ago: still counted
  EXPECT_EQ(f.add(t0 + 2001ms, 2000ms, 3), 3u);  // t0 drops out
  EXPECT_EQ(f.add(t0 + 2002ms, 2000ms, 3), 3u);  // never above the limit
  EXPECT_EQ(f.add(t0 + 9000ms, 2000ms, 3), 1u);  // all others too old
  f.clear();
  EXPECT_EQ(f.add(t0 + 9001ms, 2000ms, 3), 1u);
  // Many failures, each alone in its window: the count stays 1.
  for (int k = 0; k < 10000; ++k) ASSERT_EQ(f.add(t0 + 12s + k * 3s, 2000ms, 1000000), 1u);
}

// The upstreams view's `fails`: failures within fail_timeout of now, so the
// count falls back to 0 as the window passes (it used to keep the count as of
// the latest failure for good).
TEST(PassiveFailures, RecentFailsCountDownAsTheWindowPasses) {
  Pool pool(pool_of(2, 5, 2000ms));
  auto snap = pool.snapshot();
  EXPECT_EQ(snap->recent_fails(1, t0), 0u);
  snap->report_failure(1, t0);
  snap->report_failure(1, t0 + 1000ms);
  EXPECT_EQ(snap->recent_fails(1, t0 + 1000ms), 2u);
  EXPECT_EQ(snap->recent_fails(1, t0 + 2500ms), 1u);  // the first is older than fail_timeout
  EXPECT_EQ(snap->recent_fails(1, t0 + 3001ms), 0u);
  EXPECT_EQ(snap->recent_fails(0, t0 + 1000ms), 0u);
}

// The probe's case: max_fails 3, fail_timeout 2s, failures at 0, 1.52, 2.11 and
// 2.27 s. The last three fall within 0.75 s: out at the fourth (the window used
// to run from the first failure, restart at 2.11 s and never count to 3).
TEST(PassiveFailures, MaxFailsWithinTheLastFailTimeoutTakeTheBackendOut) {
  Pool pool(pool_of(2, 3, 2000ms));
  auto snap = pool.snapshot();
  for (milliseconds at : {0ms, 1520ms, 2110ms}) {
    snap->report_failure(1, t0 + at);
    EXPECT_TRUE(snap->available(1)) << at.count();
  }
  snap->report_failure(1, t0 + 2270ms);
  EXPECT_FALSE(snap->available(1));
  EXPECT_STREQ(snap->state_name(1), "out");
  // Out for fail_timeout from the failure that took it out.
  EXPECT_EQ(snap->pick({}, t0 + 4269ms), std::optional<uint32_t>(0));
  EXPECT_FALSE(snap->available(1));
  snap->pick({}, t0 + 4270ms);
  EXPECT_TRUE(snap->available(1));
}

TEST(PassiveFailures, FailuresFartherApartThanTheWindowNeverAddUp) {
  Pool pool(pool_of(2, 3, 2000ms));
  auto snap = pool.snapshot();
  // Two failures in every window of 2 s, never three.
  for (int k = 0; k < 20; ++k) {
    snap->report_failure(1, t0 + k * 1100ms);
    ASSERT_TRUE(snap->available(1)) << "failure " << k;
  }
}

TEST(PassiveFailures, TrialFailurePutsItOutAgainTrialSuccessClearsTheWindow) {
  Pool pool(pool_of(2, 3, 2000ms));
  auto snap = pool.snapshot();
  for (milliseconds at : {0ms, 100ms, 200ms}) snap->report_failure(1, t0 + at);
  ASSERT_FALSE(snap->available(1));  // out until 2.2 s
  snap->report_failure(1, t0 + 1000ms);  // an attempt started before it went out
  // Back on trial at 2.2 s; its first attempt fails: out again at once.
  snap->pick({}, t0 + 2200ms);
  ASSERT_TRUE(snap->available(1));
  snap->report_failure(1, t0 + 2300ms);
  EXPECT_FALSE(snap->available(1));
  snap->report_failure(1, t0 + 3000ms);  // attempts started before, as above
  snap->report_failure(1, t0 + 3500ms);
  // Back at 4.3 s; the trial succeeds and clears the window (the failures at
  // 3 and 3.5 s no longer count): two more failures leave it in.
  snap->pick({}, t0 + 4300ms);  // if this is the trial's pick, it is held out until the outcome
  snap->report_success(1);
  ASSERT_TRUE(snap->available(1));
  snap->report_failure(1, t0 + 4310ms);
  snap->report_failure(1, t0 + 4320ms);
  EXPECT_TRUE(snap->available(1));
  snap->report_failure(1, t0 + 4330ms);
  EXPECT_FALSE(snap->available(1));
}

// With slow start and every backend out, the pick that finds fail_timeout
// passed gets a backend (it used to return none until the next tick made the
// returned backends available: 503 for up to 250 ms). The ramp starts then.
TEST(PassiveFailures, WithSlowStartTheFirstPickAfterFailTimeoutGetsABackend) {
  Pool pool(pool_of(2, 1, 1000ms, 5000ms));
  pool.tick(t0);
  auto snap = pool.snapshot();
  snap->report_failure(0, t0);
  snap->report_failure(1, t0);
  EXPECT_FALSE(snap->pick({}, t0 + 999ms));
  const auto first = snap->pick({}, t0 + 1000ms);
  ASSERT_TRUE(first);
  // That pick's backend is held for its trial request, the other takes the
  // rest, until the trial's outcome.
  EXPECT_NE(snap->available(0), snap->available(1));
  snap->report_success(*first);
  EXPECT_TRUE(snap->available(0));
  EXPECT_TRUE(snap->available(1));
  // The next tick balances both by the ramp's floor, ramping from the pick.
  auto events = pool.tick(t0 + 1200ms);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].reason, WeightReason::slow_start);
  EXPECT_EQ(events[1].reason, WeightReason::slow_start);
  EXPECT_NE(pool.snapshot().get(), snap.get());
  EXPECT_DOUBLE_EQ(pool.snapshot()->factor(0), slow_start_factor(200ms, std::chrono::nanoseconds(5s)));
  EXPECT_TRUE(pool.snapshot()->available(0));
  EXPECT_TRUE(pool.snapshot()->available(1));
}

// Pool::tick ends passed out periods itself, with or without slow start: no
// pick needs to come first.
TEST(PassiveFailures, TickReturnsBackendsWhoseOutPeriodPassed) {
  for (milliseconds slow_start : {0ms, 5000ms}) {
    SCOPED_TRACE(slow_start.count());
    Pool pool(pool_of(2, 1, 1000ms, slow_start));
    pool.tick(t0);
    pool.snapshot()->report_failure(0, t0);
    pool.snapshot()->report_failure(1, t0);
    pool.tick(t0 + 999ms);
    EXPECT_FALSE(pool.snapshot()->available(0));
    pool.tick(t0 + 1000ms);
    auto snap = pool.snapshot();
    EXPECT_TRUE(snap->available(0));
    EXPECT_TRUE(snap->available(1));
    EXPECT_TRUE(snap->pick({}, t0 + 1000ms));
  }
}

// A failure reported through an older snapshot (its request began before the
// pool was rebuilt) marks the backend out for the current one too, whose hint
// of the next return did not know of it: the next tick corrects the hint, so
// the backend still comes back when its out period has passed (it stayed out
// until another rebuild).
TEST(PassiveFailures, OutThroughAnOlderSnapshotStillEnds) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto older = pool.snapshot();
  pool.update(pool_of(2, 1, 1000ms));
  auto current = pool.snapshot();
  ASSERT_NE(older.get(), current.get());
  older->report_failure(1, t0);
  EXPECT_FALSE(current->available(1));
  pool.tick(t0 + 250ms);
  EXPECT_EQ(current->pick({}, t0 + 999ms), std::optional<uint32_t>(0));
  EXPECT_FALSE(current->available(1));
  current->pick({}, t0 + 1000ms);
  EXPECT_TRUE(current->available(1));
}

// The reverse: a backend returned through an older snapshot (a pick by a
// request that began before a rebuild) set the shared flag and told only the
// older snapshot's policy; the current one's left it out of its picks for
// good. The tick tells it.
TEST(PassiveFailures, ReturnThroughAnOlderSnapshotReachesTheCurrentPolicy) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto older = pool.snapshot();
  older->report_failure(1, t0);
  pool.update(pool_of(2, 1, 1000ms));
  auto current = pool.snapshot();
  ASSERT_NE(older.get(), current.get());
  older->pick({}, t0 + 1000ms);  // returns backend 1 on trial
  EXPECT_TRUE(current->available(1));
  pool.tick(t0 + 1250ms);
  int picked[2] = {0, 0};
  for (int k = 0; k < 20; ++k)
    if (auto i = current->pick({}, t0 + 1300ms)) {
      ++picked[*i];
      current->report_success(*i);  // (the first to backend 1 is its trial)
    }
  // Equal weights: about half each (the smooth WRR state carried over may
  // give one a pick of lead); backend 1 got none before.
  EXPECT_GE(picked[0], 9);
  EXPECT_GE(picked[1], 9);
}

// A backend removed and added back while a request that began before the
// removal is still in flight shares that request's count with it (max_conns,
// Balancer), and so the policy's availability flag. The request's failure,
// reported through its older snapshot, takes the old incarnation out, not
// the one added back: that one has failed nothing, and nothing would have
// returned it (its own state was never out).
TEST(PassiveFailures, AFailureThroughASnapshotOfARemovedBackendLeavesTheOneAddedBackIn) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto older = pool.snapshot();
  ASSERT_EQ(older->acquire({}, t0, nullptr), std::optional<uint32_t>(0));  // a request at A
  PoolConfig b_alone = pool_of(2, 1, 1000ms);
  b_alone.backends.erase(b_alone.backends.begin());
  pool.update(b_alone);
  pool.update(pool_of(2, 1, 1000ms));
  auto current = pool.snapshot();
  EXPECT_EQ(current->live(0).active.load(), 1u);
  older->report_failure(0, t0);
  older->balancer().end_request(0);
  EXPECT_TRUE(current->available(0));
  pool.tick(t0 + 250ms);
  EXPECT_TRUE(current->available(0));
  int to_a = 0;
  for (int k = 0; k < 10; ++k) to_a += current->pick({}, t0 + 300ms) == 0u;
  EXPECT_EQ(to_a, 5);
}

// An idle pool: nothing picks after the failure, but the backend is reported
// available once fail_timeout has passed (the admin API's state, `healthy`,
// heft_upstream_healthy), as the proxy ticks every pool.
TEST(PassiveFailures, IdlePoolReportsTheBackendUpOnceItsOutPeriodPassed) {
  Pool pool(pool_of(2, 1, 10000ms));
  pool.snapshot()->report_failure(1, t0);
  pool.tick(t0 + 1s);
  EXPECT_STREQ(pool.snapshot()->state_name(1), "out");
  EXPECT_FALSE(pool.snapshot()->healthy(1));
  pool.tick(t0 + 10s);
  EXPECT_STREQ(pool.snapshot()->state_name(1), "up");
  EXPECT_TRUE(pool.snapshot()->healthy(1));
  EXPECT_FALSE(pool.snapshot()->passive_out(1));
  // On trial: its next failure puts it out again at once.
  pool.snapshot()->report_failure(1, t0 + 20s);
  EXPECT_STREQ(pool.snapshot()->state_name(1), "out");
}

// nginx: a lone backend is never unavailable. Its failures do not lower its
// effective weight either (heft upstreams showed EFFECTIVE 0.00 with STATE up);
// they are still counted.
TEST(PassiveFailures, LoneBackendStaysUpAtItsFullWeight) {
  Pool pool(pool_of(1, 2, 1000ms, 0ms, 4));
  auto snap = pool.snapshot();
  for (int k = 0; k < 5; ++k) snap->report_failure(0, t0 + k * 1ms);
  EXPECT_TRUE(snap->available(0));
  EXPECT_STREQ(snap->state_name(0), "up");
  EXPECT_DOUBLE_EQ(snap->display_effective_weight(0), 4.0);
  EXPECT_EQ(snap->state(0).failures_total.load(), 5u);
  EXPECT_EQ(snap->recent_fails(0, t0 + 5ms), 2u);  // shown (at most max_fails), never acted on (it showed 0)
  EXPECT_EQ(snap->pick({}, t0 + 5ms), std::optional<uint32_t>(0));
  // With a second backend the same failures count and dip (nginx's rule).
  Pool two(pool_of(2, 2, 1000ms, 0ms, 4));
  two.snapshot()->report_failure(0, t0);
  EXPECT_DOUBLE_EQ(two.snapshot()->display_effective_weight(0), 2.0);
  two.snapshot()->report_failure(0, t0 + 1ms);
  EXPECT_FALSE(two.snapshot()->available(0));
}


// A pool cut down to one backend (a reload, an admin API write) while that
// backend is out: the lone backend is never unavailable, whatever state it
// carries (it stayed out, and every request got 503 "no available backend",
// for the rest of fail_timeout). Neither is a backend whose max_fails becomes
// 0 ("never").
TEST(PassiveFailures, ABackendLeftAloneOrWithMaxFailsZeroIsNotKeptOut) {
  Pool pool(pool_of(2, 1, 10000ms));
  pool.snapshot()->report_failure(0, t0);
  ASSERT_FALSE(pool.snapshot()->available(0));
  pool.update(pool_of(1, 1, 10000ms));
  auto snap = pool.snapshot();
  EXPECT_TRUE(snap->available(0));
  EXPECT_STREQ(snap->state_name(0), "up");
  EXPECT_EQ(snap->pick({}, t0 + 1s), std::optional<uint32_t>(0));
  // A second backend joins: the first is judged by max_fails again.
  pool.update(pool_of(2, 1, 10000ms));
  pool.snapshot()->report_failure(0, t0 + 2s);
  EXPECT_FALSE(pool.snapshot()->available(0));

  Pool never(pool_of(2, 1, 10000ms));
  never.snapshot()->report_failure(1, t0);
  ASSERT_FALSE(never.snapshot()->available(1));
  never.update(pool_of(2, 0, 10000ms));
  EXPECT_TRUE(never.snapshot()->available(1));
  EXPECT_STREQ(never.snapshot()->state_name(1), "up");
  never.snapshot()->report_failure(1, t0 + 1s);
  EXPECT_TRUE(never.snapshot()->available(1));
}


// An out period lasts fail_timeout as configured now, from the failure that
// began it: an operator who lowers a too long fail_timeout (a reload, an
// admin API write) gets the backend back when the new one has passed. (The
// period set by the old value ran to its end: with 10m lowered to 5s, the
// backend stayed out for ten minutes.) A longer one lengthens it likewise.
TEST(PassiveFailures, AChangedFailTimeoutAppliesToTheOutPeriodUnderWay) {
  Pool pool(pool_of(2, 1, 600000ms));
  pool.snapshot()->report_failure(0, t0);
  pool.update(pool_of(2, 1, 5000ms));
  auto snap = pool.snapshot();
  EXPECT_FALSE(snap->available(0));
  pool.tick(t0 + 4s);
  EXPECT_STREQ(pool.snapshot()->state_name(0), "out");
  pool.tick(t0 + 5s);
  EXPECT_STREQ(pool.snapshot()->state_name(0), "up");
  // Through a pick as well, no tick needed.
  Pool picked(pool_of(2, 1, 600000ms));
  picked.snapshot()->report_failure(0, t0);
  picked.update(pool_of(2, 1, 5000ms));
  std::vector<int> counts(2);
  for (int k = 0; k < 4; ++k) ++counts[*picked.snapshot()->pick({}, t0 + 6s)];
  EXPECT_GT(counts[0], 0);
  // Raised: the period runs to the failure + the new value.
  Pool longer(pool_of(2, 1, 5000ms));
  longer.snapshot()->report_failure(0, t0);
  longer.update(pool_of(2, 1, 20000ms));
  longer.tick(t0 + 10s);
  EXPECT_STREQ(longer.snapshot()->state_name(0), "out");
  longer.tick(t0 + 20s);
  EXPECT_STREQ(longer.snapshot()->state_name(0), "up");
}

// A backend whose out period ended while the active checks held it unhealthy
// was left on trial: once a passing check brought it back, its first failed
// request (of max_fails 3) put it out again for fail_timeout. The passing
// check that brings it back (clear_passive, as the checker calls it) settles
// the trial as a success would.
TEST(PassiveFailures, APassingActiveCheckSettlesATrialLeftPending) {
  Pool pool(pool_of(2, 3, 10000ms));
  auto snap = pool.snapshot();
  for (int k = 0; k < 3; ++k) snap->report_failure(0, t0 + k * 1ms);
  snap->set_healthy(0, false, t0 + 1s);
  pool.tick(t0 + 11s);  // the out period ends while it is unhealthy: on trial
  EXPECT_FALSE(pool.snapshot()->passive_out(0));
  snap = pool.snapshot();
  snap->set_healthy(0, true, t0 + 60s);
  EXPECT_FALSE(snap->clear_passive(0, t0 + 60s));  // nothing was out
  pool.tick(t0 + 60s);
  snap = pool.snapshot();
  ASSERT_TRUE(snap->available(0));
  snap->report_failure(0, t0 + 70s);
  snap->report_failure(0, t0 + 71s);
  EXPECT_TRUE(snap->available(0));  // 2 of max_fails 3
  snap->report_failure(0, t0 + 72s);
  EXPECT_FALSE(snap->available(0));
}
// nginx sends one request to a backend back on trial (its pick sets
// `checked`, which keeps the peer out for another fail_timeout) and the rest
// elsewhere until that request's outcome. heft made it available to every
// pick until a failure came back: a backend that swallows connections held
// 1/n of all requests for connect_timeout every fail_timeout.
TEST(PassiveFailures, ABackendOnTrialGetsOneRequestUntilItsOutcome) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto snap = pool.snapshot();
  snap->report_failure(1, t0);
  ASSERT_FALSE(snap->available(1));
  // Back on trial at 1 s: 20 picks while no outcome has come, one of them to it.
  int to_trial = 0;
  for (int k = 0; k < 20; ++k) {
    const auto picked = snap->pick({}, t0 + 1000ms + k * 1ms);
    ASSERT_TRUE(picked.has_value());
    to_trial += *picked == 1;
  }
  EXPECT_EQ(to_trial, 1);
  EXPECT_FALSE(snap->available(1));
  // Its success ends the hold: its share again, failures forgotten.
  snap->report_success(1);
  EXPECT_TRUE(snap->available(1));
  EXPECT_STREQ(snap->state_name(1), "up");
  int to_it = 0;
  for (int k = 0; k < 20; ++k) to_it += snap->pick({}, t0 + 1100ms) == std::optional<uint32_t>(1);
  EXPECT_GE(to_it, 9);
}

// The trial's failure puts it out for fail_timeout from then; a trial with no
// outcome within fail_timeout (a request still waiting) is followed by another.
TEST(PassiveFailures, ATrialFailsOrTimesOutIntoAnotherOutPeriod) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto snap = pool.snapshot();
  snap->report_failure(1, t0);
  const auto trials_between = [&](milliseconds from, milliseconds to) {
    int n = 0;
    for (milliseconds at = from; at < to; at += 10ms) n += snap->pick({}, t0 + at) == std::optional<uint32_t>(1);
    return n;
  };
  EXPECT_EQ(trials_between(1000ms, 2000ms), 1);  // one trial, no outcome
  EXPECT_EQ(trials_between(2000ms, 2500ms), 1);  // fail_timeout after it: another
  snap->report_failure(1, t0 + 2500ms);  // that one fails: out until 3.5 s
  EXPECT_EQ(trials_between(2510ms, 3500ms), 0);
  EXPECT_EQ(trials_between(3500ms, 3600ms), 1);
}

// With no other backend available, the one on trial stays every request's
// (held out, they would all get 503).
TEST(PassiveFailures, ATrialIsEveryonesWhenNoOtherBackendIsAvailable) {
  Pool pool(pool_of(2, 1, 1000ms));
  auto snap = pool.snapshot();
  snap->report_failure(0, t0);
  snap->report_failure(1, t0);
  ASSERT_FALSE(snap->available(0));
  ASSERT_FALSE(snap->available(1));
  // Both back on trial at 1 s: the first pick holds one, the other takes the rest.
  int got = 0;
  for (int k = 0; k < 20; ++k) got += snap->pick({}, t0 + 1000ms).has_value();
  EXPECT_EQ(got, 20);
}

}  // namespace
}  // namespace heft::upstream
