// Tests of the simulator (src/sim/simulator.h): determinism, common random
// numbers, the seed page's claims, agreement with `heft plan`'s arithmetic,
// events (failure, weight change, timeouts, queue limits) and the sketch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/latency_sketch.h"
#include "sim/planner.h"
#include "sim/report.h"
#include "sim/simulator.h"

namespace heft::sim {
namespace {

using balance::PolicyKind;

// The seed example runs once per process: it is the slowest thing here.
const SimResult& steady() {
  static const SimResult r = simulate(seed_example(false));
  return r;
}
const SimResult& half_speed() {
  static const SimResult r = simulate(seed_example(true));
  return r;
}

const PolicyResult& policy(const SimResult& r, PolicyKind kind) {
  for (const PolicyResult& p : r.policies)
    if (p.policy == kind) return p;
  ADD_FAILURE() << "policy not run";
  return r.policies.front();
}

// A small fleet for event tests: three equal servers.
Scenario three_equal(double duration_s = 100) {
  Scenario s;
  s.name = "three";
  s.duration_s = duration_s;
  s.rate = 300;
  for (int i = 0; i < 3; ++i) {
    ServerSpec server;
    server.name = std::string("s").append(std::to_string(i + 1));
    server.size = 4;
    server.service_s = 0.02;  // 200 req/s each
    s.servers.push_back(server);
  }
  s.bucket_s = 10;
  return s;
}

TEST(SimulatorTest, SameSeedGivesIdenticalJson) {
  Scenario s = three_equal(30);
  s.policies = {PolicyKind::round_robin, PolicyKind::least_conn, PolicyKind::p2c, PolicyKind::random,
                PolicyKind::hash};
  s.events.push_back(parse_event("10s:s2:slow=3"));
  const std::string a = results_to_json({simulate(s)}).dump();
  const std::string b = results_to_json({simulate(s)}).dump();
  EXPECT_EQ(a, b);
  s.seed = 2;
  EXPECT_NE(a, results_to_json({simulate(s)}).dump());
}

TEST(SimulatorTest, EveryPolicySeesTheSameArrivals) {
  for (const SimResult* r : {&steady(), &half_speed()}) {
    const uint64_t arrivals = r->policies.front().arrivals;
    EXPECT_GT(arrivals, 300000u);
    for (const PolicyResult& p : r->policies) {
      EXPECT_EQ(p.arrivals, arrivals) << balance::policy_name(p.policy);
      EXPECT_EQ(p.completed, arrivals) << "everything drains: no limits, no failures";
    }
  }
  // Same arrivals for both scenarios too (the slow-down changes service, not arrivals).
  EXPECT_EQ(steady().policies.front().arrivals, half_speed().policies.front().arrivals);
}

TEST(SimulatorTest, ServiceDemandsAreCommonToPolicies) {
  // One server: every policy must send it everything, so results are identical
  // only if arrivals and service draws do not depend on the policy.
  Scenario s = three_equal(20);
  s.servers.resize(1);
  s.policies = {PolicyKind::round_robin, PolicyKind::least_conn, PolicyKind::p2c};
  s.rate = 150;
  SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    EXPECT_EQ(p.servers[0].utilisation, r.policies[0].servers[0].utilisation);
    EXPECT_EQ(p.latency.p99_s, r.policies[0].latency.p99_s);
  }
}

// Step 4 of the seed: weights matching sizes put every server near 58 %.
TEST(SeedExampleTest, WeightsMatchingSizeGiveEqualUtilisation) {
  const Plan plan = make_plan(PlanInputs{});
  const PolicyResult& wrr = policy(steady(), PolicyKind::weighted_round_robin);
  for (const ServerResult& s : wrr.servers)
    EXPECT_NEAR(s.utilisation * 100, plan.utilisation_weighted_percent, plan.utilisation_weighted_percent * 0.02)
        << s.name;
  const PolicyResult& lc = policy(steady(), PolicyKind::least_conn);
  for (const ServerResult& s : lc.servers) {
    EXPECT_NEAR(s.utilisation * 100, plan.utilisation_weighted_percent, 6) << s.name;
    EXPECT_LT(s.latency.p99_s, 0.2) << s.name;
  }
}

// Step 5: without weights the small servers run near 96 %, the big one near 32 %.
TEST(SeedExampleTest, WithoutWeightsSmallServersNear96Percent) {
  const Plan plan = make_plan(PlanInputs{});
  const PolicyResult& rr = policy(steady(), PolicyKind::round_robin);
  ASSERT_EQ(plan.utilisation_unweighted.size(), 2u);
  const double big_plan = plan.utilisation_unweighted[0].busy_percent;    // size 3
  const double small_plan = plan.utilisation_unweighted[1].busy_percent;  // size 1
  EXPECT_NEAR(rr.servers[0].utilisation * 100, big_plan, big_plan * 0.02);
  EXPECT_NEAR(rr.servers[1].utilisation * 100, small_plan, small_plan * 0.02);
  EXPECT_NEAR(rr.servers[2].utilisation * 100, small_plan, small_plan * 0.02);
  // Their latency is far above the big server's.
  EXPECT_GT(rr.servers[1].latency.mean_s, 3 * rr.servers[0].latency.mean_s);
  EXPECT_GT(rr.servers[1].latency.p99_s, 3 * rr.servers[0].latency.p99_s);
}

// Step 6: with the big server at half speed a fixed share overloads it (the
// plan's 116 %), while least connections spreads load near the 83 % split.
TEST(SeedExampleTest, HalfSpeedBigServer) {
  const Plan plan = make_plan(PlanInputs{});
  ASSERT_GT(plan.fixed_share_big_percent, 100);
  const PolicyResult& wrr = policy(half_speed(), PolicyKind::weighted_round_robin);
  const ServerResult& big = wrr.servers[0];
  EXPECT_GT(big.utilisation, 0.99);  // capped at 100 %: the rest queues
  EXPECT_GT(big.queue_at_end, 10000u) << "a queue that grew all run";
  EXPECT_GT(big.latency.p99_s, 10.0) << "p99 explodes";
  // The queue grows at the excess arrival rate: fixed share - slow capacity.
  const double excess_rps = plan.fixed_share_big_rps - plan.slow_server_capacity_rps;
  const double duration = half_speed().scenario.duration_s;
  EXPECT_NEAR(static_cast<double>(big.queue_at_end), excess_rps * duration, excess_rps * duration * 0.1);

  const PolicyResult& lc = policy(half_speed(), PolicyKind::least_conn);
  for (const ServerResult& s : lc.servers) {
    EXPECT_LT(s.utilisation, 1.0) << s.name;
    EXPECT_NEAR(s.utilisation * 100, plan.perfect_split_percent, plan.perfect_split_percent * 0.02) << s.name;
    EXPECT_LT(s.latency.p99_s, 0.5) << s.name;
    EXPECT_EQ(s.queue_at_end < 50, true) << s.name;
  }
}

// Utilisation is the offered load whatever the distribution: for a range of
// planner inputs, a weighted round robin simulation of one group matches step 4
// and round robin matches step 5 within 2 %.
TEST(PlannerAgreementTest, UtilisationWithinTwoPercentOfPlan) {
  struct Case {
    double dau, peak, busy;
    std::vector<double> group;
    ServiceDist dist;
  };
  const Case cases[] = {
      {1'000'000, 2, 60, {3, 1, 1}, ServiceDist::exponential},
      {2'000'000, 1.5, 70, {2, 1}, ServiceDist::fixed},
      {500'000, 3, 50, {4, 2, 1, 1}, ServiceDist::lognormal},
  };
  for (const Case& c : cases) {
    PlanInputs in;
    in.daily_active_users = c.dau;
    in.peak_factor = c.peak;
    in.target_busy_percent = c.busy;
    in.group = c.group;
    const Plan plan = make_plan(in);
    Scenario s;
    s.duration_s = 300;
    s.rate = plan.traffic_now_rps / static_cast<double>(plan.groups);
    for (double units : c.group) {
      ServerSpec server;
      server.units = units;
      server.size = static_cast<uint32_t>(units * 4);
      server.service_s = 4 / in.server_rps;
      server.dist = c.dist;
      s.servers.push_back(server);
    }
    s.policies = {PolicyKind::weighted_round_robin, PolicyKind::round_robin};
    const SimResult r = simulate(s);
    for (const ServerResult& server : r.policies[0].servers)
      EXPECT_NEAR(server.utilisation * 100, plan.utilisation_weighted_percent,
                  plan.utilisation_weighted_percent * 0.02)
          << "dau " << c.dau << " server " << server.name;
    for (size_t i = 0; i < c.group.size(); ++i) {
      double expected = 0;
      for (const SizeUtilisation& u : plan.utilisation_unweighted)
        if (u.size == c.group[i]) expected = u.busy_percent;
      if (expected >= 100) continue;  // unstable: the simulation caps at 100 %
      EXPECT_NEAR(r.policies[1].servers[i].utilisation * 100, expected, expected * 0.02)
          << "dau " << c.dau << " server " << i;
    }
  }
}

TEST(EventsTest, FailureMovesTrafficOffAServer) {
  Scenario s = three_equal(100);
  s.policies = {PolicyKind::round_robin, PolicyKind::least_conn};
  s.events.push_back(parse_event("50s:s1:fail"));
  SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    const ServerResult& failed = p.servers[0];
    EXPECT_NEAR(failed.share, 1.0 / 6, 0.02) << "only the first half";
    EXPECT_GT(failed.failed, 0u) << "requests in service when it failed are lost";
    EXPECT_EQ(failed.requests, failed.completed + failed.failed);
    // Its utilisation series drops to zero after the failure.
    ASSERT_EQ(failed.utilisation_series.size(), 10u);
    EXPECT_GT(failed.utilisation_series[2], 0.2);
    EXPECT_EQ(failed.utilisation_series[7], 0);
    EXPECT_NEAR(p.servers[1].share + p.servers[2].share, 5.0 / 6, 0.02);
  }
}

TEST(EventsTest, RecoveryBringsTrafficBack) {
  Scenario s = three_equal(100);
  s.policies = {PolicyKind::round_robin};
  s.events.push_back(parse_event("20s:s1:fail"));
  s.events.push_back(parse_event("60s:s1:recover"));
  SimResult r = simulate(s);
  const ServerResult& s1 = r.policies[0].servers[0];
  EXPECT_EQ(s1.utilisation_series[4], 0);
  EXPECT_GT(s1.utilisation_series[8], 0.3);
}

TEST(EventsTest, WeightChangeChangesShares) {
  Scenario s = three_equal(100);
  s.policies = {PolicyKind::weighted_round_robin, PolicyKind::least_conn};
  s.events.push_back(parse_event("50s:weights=4,1,1"));
  SimResult r = simulate(s);
  // Weighted round robin: half the run at 1/3, half at 4/6.
  const PolicyResult& wrr = r.policies[0];
  EXPECT_NEAR(wrr.servers[0].share, (1.0 / 3 + 4.0 / 6) / 2, 0.02);
  EXPECT_GT(wrr.servers[0].utilisation_series[8], 1.5 * wrr.servers[0].utilisation_series[2]);
  // Least connections trusts s1 with 4x the requests in progress, but s1 is no
  // faster, so it ends up with more than before yet less than 4/6.
  const PolicyResult& lc = r.policies[1];
  EXPECT_GT(lc.servers[0].share, 1.0 / 3 + 0.05);
  EXPECT_LT(lc.servers[0].share, 0.5);
  EXPECT_GT(lc.servers[0].utilisation_series[8], 1.3 * lc.servers[0].utilisation_series[2]);
  // A single server's weight (a canary at weight 0 gets nothing after the event).
  Scenario canary = three_equal(100);
  canary.policies = {PolicyKind::weighted_round_robin};
  canary.events.push_back(parse_event("50s:s3:weight=0"));
  SimResult rc = simulate(canary);
  EXPECT_NEAR(rc.policies[0].servers[2].share, 1.0 / 6, 0.01);
}

// Least connections over more than eight servers keeps an index of the active
// counts that the balancer updates through begin_request()/end_request(), as
// the proxy calls them. The simulator changed live(i).active behind its back,
// so a server whose requests had finished still counted as busy: here at 6 ms
// s5 is idle (its two 1 ms requests are done), s1 has one request left and
// every other server two, and the request went to s1, to wait behind it.
TEST(LeastConnTest, ManyServersSeeEveryFinishedRequest) {
  Scenario s;
  s.duration_s = 1;
  for (int i = 0; i < 9; ++i) {
    ServerSpec server;
    server.name = fmt::format("s{}", i + 1);
    server.size = 1;
    server.dist = ServiceDist::fixed;
    server.service_s = i == 0 ? 0.005 : i == 4 ? 0.001 : 0.1;
    s.servers.push_back(server);
  }
  std::string trace;
  for (int i = 0; i < 18; ++i) trace += "0\n";  // two requests for every server at once
  trace += "0.006\n";
  load_trace(trace, s);
  s.policies = {PolicyKind::least_conn};
  const PolicyResult r = simulate(s).policies[0];
  for (const ServerResult& server : r.servers) EXPECT_EQ(server.requests, server.name == "s5" ? 3u : 2u) << server.name;
  EXPECT_NEAR(r.servers[4].latency.max_s, 0.002, 1e-9) << "s5's longest wait is its own second request";
}

TEST(EventsTest, SlowDownRaisesUtilisationAndLatency) {
  Scenario s = three_equal(100);
  s.policies = {PolicyKind::round_robin};
  s.events.push_back(parse_event("50s:s2:slow=2"));
  SimResult r = simulate(s);
  const ServerResult& s2 = r.policies[0].servers[1];
  EXPECT_NEAR(s2.utilisation_series[2], 0.5, 0.05);
  EXPECT_NEAR(s2.utilisation_series[8], 1.0, 0.05) << "twice the service time: 100 %";
}

// Every request takes exactly 10 ms; the histogram's bucket midpoint is above
// that, so unclamped percentiles (10.027 ms) exceeded the max (10 ms).
TEST(LatencyTest, PercentilesNeverExceedTheMax) {
  Scenario s = three_equal(10);
  s.servers.resize(1);
  s.servers[0].size = 1000;
  s.servers[0].dist = ServiceDist::fixed;
  s.servers[0].service_s = 0.01;
  s.rate = 100;
  s.policies = {PolicyKind::round_robin};
  const SimResult r = simulate(s);
  for (const LatencySummary& l : {r.policies[0].latency, r.policies[0].servers[0].latency}) {
    EXPECT_GT(l.max_s, 0.0099);
    EXPECT_LE(l.p50_s, l.max_s);
    EXPECT_LE(l.p95_s, l.max_s);
    EXPECT_LE(l.p99_s, l.max_s);
  }
}

// Names reach the SVG as text: a control character (which XML 1.0 forbids,
// even as a reference) is replaced, so the report stays well-formed.
TEST(ReportTest, SvgHasNoControlCharacters) {
  Scenario s = three_equal(5);
  s.name = std::string("ctl\x01name\ttab");
  s.servers[0].name = std::string("a\x02b");
  s.policies = {PolicyKind::round_robin};
  const std::string svg = format_svg({simulate(s)});
  EXPECT_EQ(std::count_if(svg.begin(), svg.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\n'; }),
            0);
  EXPECT_NE(svg.find("ctl\xEF\xBF\xBDname tab"), std::string::npos);
}

// A name that is not valid UTF-8 made the SVG ill-formed XML (an XML parser
// stops at the byte): invalid bytes are replaced, as control characters are.
TEST(ReportTest, SvgReplacesBytesThatAreNotUtf8) {
  Scenario s = three_equal(5);
  s.name = "caf\xe9 \xc3\xa9t\xc3";  // Latin-1, then valid UTF-8, then a cut sequence
  s.servers[0].name = "\xff\xfe";
  s.policies = {PolicyKind::round_robin};
  const std::string svg = format_svg({simulate(s)});
  EXPECT_NE(svg.find("caf\xEF\xBF\xBD \xC3\xA9t\xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(svg.find(">\xEF\xBF\xBD\xEF\xBF\xBD (4 workers"), std::string::npos);
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
  EXPECT_EQ(svg.find('\xe9'), std::string::npos);
}

TEST(LimitsTest, QueueLimitRefusesAndTimeoutTimesOut) {
  Scenario s = three_equal(60);
  s.servers.resize(1);
  s.rate = 300;  // 1.5x its capacity
  s.servers[0].queue_limit = 10;
  s.policies = {PolicyKind::round_robin};
  SimResult r = simulate(s);
  const ServerResult& limited = r.policies[0].servers[0];
  EXPECT_GT(limited.refused, 0u);
  EXPECT_LE(limited.peak_queue, 10u);
  EXPECT_EQ(limited.requests, limited.completed + limited.refused);

  s.servers[0].queue_limit.reset();
  s.servers[0].timeout_s = 0.1;
  r = simulate(s);
  const ServerResult& timed = r.policies[0].servers[0];
  EXPECT_GT(timed.timed_out, 0u);
  EXPECT_EQ(timed.requests, timed.completed + timed.timed_out);
  // Nobody served waited more than the timeout: latency <= timeout + a service time tail.
  EXPECT_LT(timed.latency.p50_s, 0.1 + 0.1);
}

// Two servers of fixed 10 ms service for the max_conns tests, `a` and `b` of
// `a_size` and `b_size` workers; equal weights, so round robin sends each half.
Scenario two_fixed(uint32_t a_size, uint32_t a_max_conns, uint32_t b_size, uint32_t b_max_conns) {
  Scenario s;
  s.name = "max_conns";
  s.duration_s = 20;
  s.rate = 300;  // 150 req/s to each under round robin
  for (auto [name, size, max_conns] : {std::tuple{"a", a_size, a_max_conns}, std::tuple{"b", b_size, b_max_conns}}) {
    ServerSpec server;
    server.name = name;
    server.size = size;
    server.units = 1;
    server.service_s = 0.01;  // 100 req/s per worker
    server.dist = ServiceDist::fixed;
    server.max_conns = max_conns;
    s.servers.push_back(server);
  }
  s.policies = {PolicyKind::round_robin, PolicyKind::weighted_round_robin, PolicyKind::least_conn,
                PolicyKind::p2c, PolicyKind::random, PolicyKind::hash};
  return s;
}

// max_conns caps what is assigned to a server (queued + in service): a server
// of one worker that round robin would overload (150 req/s for 100) never has
// a second request assigned, so it never queues, and the other server takes
// the overflow; nothing is unrouted while the other has room.
TEST(SimMaxConnsTest, AFullServerIsPassedOverAndTheOtherTakesTheOverflow) {
  const SimResult r = simulate(two_fixed(1, 1, 4, 0));
  for (const PolicyResult& p : r.policies) {
    const ServerResult& a = p.servers[0];
    const ServerResult& b = p.servers[1];
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_EQ(a.peak_queue, 0u);
    EXPECT_EQ(a.requests, a.completed);
    // Fixed 10 ms service one at a time: at most 100 req/s reach it.
    EXPECT_LE(static_cast<double>(a.requests), 100.0 * r.scenario.duration_s + 1);
    EXPECT_GT(a.requests, 0u);
    EXPECT_GT(b.requests, p.arrivals / 2) << "b takes a's overflow";
    EXPECT_EQ(a.requests + b.requests, p.arrivals);
    EXPECT_EQ(p.unrouted, 0u);
    EXPECT_EQ(p.unrouted_full, 0u);
  }
  // The cap counts the queue too: 2 workers and max_conns 3 queue at most one.
  const SimResult queued = simulate(two_fixed(2, 3, 4, 0));
  for (const PolicyResult& p : queued.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_LE(p.servers[0].peak_queue, 1u);
    EXPECT_EQ(p.unrouted, 0u);
  }
  EXPECT_EQ(policy(queued, PolicyKind::round_robin).servers[0].peak_queue, 1u);
}

// Every server at its max_conns: the request is unrouted (the proxy's 503),
// counted apart as unrouted_full; the servers never queue and refuse nothing.
TEST(SimMaxConnsTest, EveryServerFullIsUnrouted) {
  const SimResult r = simulate(two_fixed(1, 1, 1, 1));  // 200 req/s of room for 300
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.unrouted, p.arrivals / 5);
    EXPECT_EQ(p.unrouted_full, p.unrouted);
    EXPECT_EQ(p.servers[0].requests + p.servers[1].requests + p.unrouted, p.arrivals);
    for (const ServerResult& s : p.servers) {
      EXPECT_EQ(s.peak_queue, 0u) << s.name;
      EXPECT_EQ(s.refused, 0u) << s.name;
      EXPECT_EQ(s.requests, s.completed) << s.name;
    }
  }
  const std::vector<SimResult> results = {r};
  const std::string table = format_table(results);
  EXPECT_NE(table.find("a (1 worker x 10.0 ms fixed, max_conns 1)"), std::string::npos) << table;
  EXPECT_NE(table.find("(unrouted)"), std::string::npos) << table;
  EXPECT_NE(table.find("or every server at its max_conns"), std::string::npos) << table;
  const auto j = results_to_json(results)["scenarios"][0];
  EXPECT_EQ(j["servers"][0]["max_conns"], 1);
  EXPECT_EQ(j["policies"][0]["unrouted_full"], r.policies[0].unrouted_full);
  // Without a limit the JSON has neither member.
  const auto plain = results_to_json({simulate(three_equal(5))})["scenarios"][0];
  EXPECT_FALSE(plain["servers"][0].contains("max_conns"));
  EXPECT_FALSE(plain["policies"][0].contains("unrouted_full"));
}

// A request refused by a full queue was never assigned: the count acquire()
// raised at the pick is given back at once. `a` (1 worker, no queue) refuses
// whenever it is busy; its max_conns 2 is never reached unless refusals leak
// into its count. `b` (max_conns = size) never queues and, when full, passes
// its turn to `a`. So nothing is unrouted: a leak would fill `a` for good.
TEST(SimMaxConnsTest, RefusedRequestsDoNotHoldAPlace) {
  Scenario s = two_fixed(1, 2, 2, 2);
  s.servers[0].queue_limit = 0;
  s.rate = 400;
  const SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.servers[0].refused, 0u);
    EXPECT_EQ(p.servers[1].peak_queue, 0u);
    EXPECT_EQ(p.unrouted, 0u);
    EXPECT_EQ(p.servers[0].requests + p.servers[1].requests, p.arrivals);
  }
}

// The pool queue (Scenario::queue, `heft sim --queue`): one server of one
// worker, fixed 10 ms service (100 req/s), max_conns 1, offered `rate`.
Scenario one_capped(double rate, uint64_t queue, double timeout_s = 3600) {
  Scenario s;
  s.name = "capped";
  s.duration_s = 10;
  s.rate = rate;
  ServerSpec server;
  server.name = "a";
  server.size = 1;
  server.service_s = 0.01;
  server.dist = ServiceDist::fixed;
  server.max_conns = 1;
  s.servers.push_back(server);
  s.policies = {PolicyKind::round_robin, PolicyKind::least_conn, PolicyKind::p2c, PolicyKind::hash};
  s.queue = queue;
  if (queue > 0) s.queue_timeout_s = timeout_s;
  return s;
}

// A queue long enough and a timeout long enough: nothing is unrouted, every
// request waits its turn and is served (latency grows with the backlog).
TEST(SimPoolQueueTest, ALongQueueHoldsTheOverloadAndServesItAll) {
  const SimResult without = simulate(one_capped(150, 0));
  const SimResult r = simulate(one_capped(150, 100000));
  for (size_t i = 0; i < r.policies.size(); ++i) {
    const PolicyResult& p = r.policies[i];
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(without.policies[i].unrouted, p.arrivals / 5);
    EXPECT_EQ(p.unrouted, 0u);
    EXPECT_EQ(p.unrouted_full, 0u);
    EXPECT_EQ(p.queue_timed_out, 0u);
    EXPECT_EQ(p.completed, p.arrivals);
    EXPECT_EQ(p.servers[0].requests, p.arrivals);
    EXPECT_EQ(p.servers[0].peak_queue, 0u) << "max_conns 1 = size: the server itself never queues";
    EXPECT_GT(p.queue_waited, p.arrivals / 2);
    // 50 req/s more than it serves for 10 s: about 500 waiting when arrivals stop.
    EXPECT_GT(p.queue_at_end, 350u);
    EXPECT_GE(p.queue_peak, p.queue_at_end);
    // Served back to back from the first backlog on: the last arrival waits
    // for everything ahead of it, about 5 s.
    EXPECT_GT(p.latency.max_s, 3.5);
  }
}

// First come, first served: arrivals 1 ms apart at a server that takes 10 ms
// each. In order, request i ends at (i + 1) x 10 ms: latency 10 + 9i ms, the
// longest 901 ms for i = 99 (a later request served first makes it longer).
TEST(SimPoolQueueTest, WaitersAreServedInArrivalOrder) {
  Scenario s = one_capped(1, 1000);
  s.has_trace = true;
  for (int i = 0; i < 100; ++i) s.trace_times.push_back(i * 0.001);
  s.duration_s = 0.1;
  s.policies = {PolicyKind::round_robin, PolicyKind::p2c};
  const SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_EQ(p.completed, 100u);
    EXPECT_EQ(p.queue_waited, 99u);
    EXPECT_NEAR(p.latency.max_s, 0.901, 1e-6);
    EXPECT_NEAR(p.latency.mean_s, 0.010 + 0.009 * 99 / 2, 0.0005);
  }
}

// A short queue: beyond 2 waiting, a request is turned away as when there is
// no queue (unrouted, unrouted_full); at 3x the capacity most are.
TEST(SimPoolQueueTest, AShortQueueTurnsTheRestAway) {
  const SimResult r = simulate(one_capped(300, 2));
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.unrouted, p.arrivals / 2);
    EXPECT_EQ(p.unrouted_full, p.unrouted);
    EXPECT_EQ(p.queue_peak, 2u);
    EXPECT_GT(p.queue_waited, 0u);
    EXPECT_EQ(p.queue_timed_out, 0u);
    EXPECT_EQ(p.servers[0].requests + p.unrouted, p.arrivals);
    // At most 2 ahead, each 10 ms, plus its own service.
    EXPECT_LE(p.latency.max_s, 0.030 + 1e-9);
  }
}

// A short timeout: requests that waited 50 ms give up (neither served nor
// unrouted); nobody served waited longer.
TEST(SimPoolQueueTest, RequestsGiveUpAfterTheQueueTimeout) {
  const SimResult r = simulate(one_capped(150, 100000, 0.05));
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.queue_timed_out, p.arrivals / 5);
    EXPECT_EQ(p.unrouted, 0u);
    EXPECT_EQ(p.completed + p.queue_timed_out, p.arrivals);
    EXPECT_LE(p.latency.max_s, 0.05 + 0.01 + 1e-9);
    EXPECT_LE(p.queue_peak, 30u) << "50 ms at 150 req/s: about 8 arrive in a timeout";
  }
}

// A trace of requests at `times` to servers `a` (weight 1) and `b` (weight
// `b_weight`), each one worker of fixed `service_s`, max_conns 1, round robin.
Scenario two_capped_trace(std::vector<double> times, double service_s, uint32_t b_weight) {
  Scenario s;
  s.name = "pool queue events";
  s.has_trace = true;
  s.trace_times = std::move(times);
  s.duration_s = 3;
  for (auto [name, weight] : {std::pair{"a", 1u}, std::pair{"b", b_weight}}) {
    ServerSpec server;
    server.name = name;
    server.size = 1;
    server.service_s = service_s;
    server.dist = ServiceDist::fixed;
    server.max_conns = 1;
    server.weight = weight;
    s.servers.push_back(server);
  }
  s.policies = {PolicyKind::round_robin};
  s.queue = 10;
  return s;
}

// A weight change wakes every waiter, as a reload does in the proxy: `b`
// (weight 0) takes the request waiting since 1 s when it gets a weight at 2 s,
// 8 s before `a` frees its place: latency 1 + 10 s, not 9 + 10.
TEST(SimPoolQueueTest, AWeightChangeWakesTheWaiters) {
  for (const char* event : {"2s:weights=1,1", "2s:b:weight=1"}) {
    SCOPED_TRACE(event);
    Scenario s = two_capped_trace({0, 1}, 10, 0);
    s.events.push_back(parse_event(event));
    const PolicyResult p = simulate(s).policies[0];
    EXPECT_EQ(p.queue_waited, 1u);
    EXPECT_EQ(p.completed, 2u);
    EXPECT_EQ(p.servers[1].requests, 1u);
    EXPECT_NEAR(p.latency.max_s, 11, 1e-6);
  }
}

// A failure ends the requests at the server: each frees a place and wakes a
// waiter, which picks once the pool has heard of the failure. `a`'s first
// failure takes it out (max_fails 1), and `b` weighs 0: the woken request
// finds no server available, and is unrouted at once (the proxy's "no
// available backend"), not left to time out, and not counted as turned away
// by full servers.
TEST(SimPoolQueueTest, AFailureWakesTheWaiters) {
  Scenario s = two_capped_trace({0, 1}, 10, 0);
  s.events.push_back(parse_event("2s:a:fail"));
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.queue_waited, 1u);
  EXPECT_EQ(p.failed, 1u);
  EXPECT_EQ(p.queue_timed_out, 0u);
  EXPECT_EQ(p.unrouted, 1u);
  EXPECT_EQ(p.unrouted_full, 0u);
  // A pool's only backend is never taken out (nginx's rule, the pool's): the
  // woken request goes to the broken server and fails at once too. (Before
  // the simulator ran on the pool, a failed server was out at once even
  // alone, and this request was unrouted.)
  Scenario lone = two_capped_trace({0, 1}, 10, 0);
  lone.servers.pop_back();
  lone.events.push_back(parse_event("2s:a:fail"));
  const PolicyResult l = simulate(lone).policies[0];
  EXPECT_EQ(l.queue_waited, 1u);
  EXPECT_EQ(l.failed, 2u);
  EXPECT_EQ(l.servers[0].requests, 2u);
  EXPECT_EQ(l.unrouted, 0u);
  // With a second server, full until 10 s, the woken one keeps waiting for it.
  Scenario two = two_capped_trace({0, 0, 1}, 10, 1);
  two.events.push_back(parse_event("2s:a:fail"));
  const PolicyResult q = simulate(two).policies[0];
  EXPECT_EQ(q.queue_waited, 1u);
  EXPECT_EQ(q.unrouted, 0u);
  EXPECT_EQ(q.servers[1].completed, 2u);
  EXPECT_NEAR(q.latency.max_s, 19, 1e-6) << "waited from 1 s to 10 s at b";
}

// A recovery wakes as many waiters as the server has free places, as the
// proxy's pool does when a backend comes back; each end wakes one. `a` and
// `b`, 10 s each, max_conns 1, fail_timeout 1 s: 0 s two requests take both;
// 1 s b fails, and its request's failure takes it out till 2 s; 1.5 s one
// waits (a full, b out); 2 s b recovers, the pool's tick returns it and it
// takes the waiter (latency 10.5 s, not 18.5 s as when only a's end at 10 s
// woke it); 3 s the next waits (both full); 10 s a's end wakes it (latency
// 17 s). (Before the simulator ran on the pool, `recover` brought b back at
// once; the pool takes it back when its fail_timeout has passed, here at the
// same moment.)
TEST(SimPoolQueueTest, ARecoveryWakesTheWaitersAndEachEndWakesOne) {
  Scenario s = two_capped_trace({0, 0, 1.5, 3}, 10, 1);
  s.duration_s = 4;
  s.fail_timeout_s = 1;
  s.events = {parse_event("1s:b:fail"), parse_event("2s:b:recover")};
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.failed, 1u);
  EXPECT_EQ(p.queue_waited, 2u);
  EXPECT_EQ(p.queue_peak, 1u);
  EXPECT_EQ(p.completed, 3u);
  EXPECT_EQ(p.servers[1].completed, 1u);
  EXPECT_NEAR(p.latency.max_s, 17, 1e-6);
  EXPECT_NEAR(p.latency.mean_s, (10 + 10.5 + 17) / 3, 1e-3);
}

// Backups, as the proxy's: only when no primary can take a request (every
// one full or failed). `a` (max_conns 1) and backup `b`, 10 s each: requests
// at 0 s and 1 s; the second finds `a` full and goes to `b`. With `a` failed
// at 2 s, the request at 3 s goes to `b` too; without backups it is unrouted.
TEST(SimPoolQueueTest, BackupsTakeWhatNoPrimaryCan) {
  Scenario s = two_capped_trace({0, 1, 3}, 10, 1);
  s.queue = 0;
  s.duration_s = 4;
  s.servers[1].max_conns = 0;
  s.servers[1].backup = true;
  s.events = {parse_event("2s:a:fail")};
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.servers[0].requests, 1u);
  EXPECT_EQ(p.servers[1].requests, 2u);
  EXPECT_EQ(p.unrouted, 0u);
  s.servers[1].backup = false;
  s.servers[1].weight = 0;  // a primary that takes nothing, for contrast
  const PolicyResult q = simulate(s).policies[0];
  EXPECT_EQ(q.servers[1].requests, 0u);
  EXPECT_EQ(q.unrouted, 2u);
  const std::string table = format_table({simulate(s)});
  EXPECT_EQ(table.find(", backup"), std::string::npos);
  s.servers[1].backup = true;
  EXPECT_NE(format_table({simulate(s)}).find("b (1 worker x 10.00 s fixed, backup)"), std::string::npos)
      << format_table({simulate(s)});
}

// The pool queue's length over time, per bucket: the same run in buckets of
// 1 s has one request waiting from 1.5 s to 2 s and one from 3 s on.
TEST(SimPoolQueueTest, TheQueueSeriesIsTheMeanWaitingPerBucket) {
  Scenario s = two_capped_trace({0, 0, 1.5, 3}, 10, 1);
  s.duration_s = 4;
  s.bucket_s = 1;
  s.fail_timeout_s = 1;
  s.events = {parse_event("1s:b:fail"), parse_event("2s:b:recover")};
  const SimResult r = simulate(s);
  const std::vector<double> expected = {0, 0.5, 0, 1};
  ASSERT_EQ(r.policies[0].queue_series.size(), expected.size());
  for (size_t b = 0; b < expected.size(); ++b) EXPECT_NEAR(r.policies[0].queue_series[b], expected[b], 1e-9) << b;
  const std::string svg = format_svg({r});
  EXPECT_NE(svg.find("pool queue (at most 10)"), std::string::npos);
  EXPECT_NE(svg.find("requests waiting (mean)"), std::string::npos);
  EXPECT_NE(svg.find("round_robin: 2 waited, 0 timed out, at most 1 at once"), std::string::npos) << svg;
  // Without a queue: no series, no panel, one column fewer.
  Scenario plain = s;
  plain.name = "plain";
  plain.queue = 0;
  plain.events.clear();
  const SimResult q = simulate(plain);
  EXPECT_TRUE(q.policies[0].queue_series.empty());
  const std::string plain_svg = format_svg({q});
  EXPECT_EQ(plain_svg.find("pool queue"), std::string::npos);
  const auto width = [](const std::string& svg) { return std::stod(svg.substr(svg.find("width=\"") + 7)); };
  EXPECT_GT(width(svg), width(plain_svg));
}

// A request placed from the pool queue into a server's own queue times out
// there after the server's timeout counted from when it got there, while its
// latency counts from its arrival. `a`: 1 worker of 1 s, max_conns 2 (one may
// queue at the server), timeout 1.5 s. 0 s: served till 1 s; 0.1 s: queued at
// a, served 1..2 s; 0.2 s: waits in the pool till 1 s, then at a till 2 s
// (1 s, within its timeout): served 2..3 s, latency 2.8 s.
TEST(SimPoolQueueTest, AServersTimeoutCountsFromItsOwnQueue) {
  Scenario s = two_capped_trace({0, 0.1, 0.2}, 1, 0);
  s.servers.pop_back();
  s.servers[0].max_conns = 2;
  s.servers[0].timeout_s = 1.5;
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.queue_waited, 1u);
  EXPECT_EQ(p.timed_out, 0u);
  EXPECT_EQ(p.completed, 3u);
  EXPECT_NEAR(p.latency.max_s, 2.8, 1e-6);
}

// Same seed, same results with a pool queue too, for every policy and events.
TEST(SimPoolQueueTest, RunsAreDeterministic) {
  Scenario s = two_fixed(1, 1, 2, 2);
  s.rate = 400;
  s.queue = 50;
  s.queue_timeout_s = 0.05;
  s.events = {parse_event("5s:b:fail"), parse_event("8s:b:recover"), parse_event("12s:weights=1,3")};
  const SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.queue_waited, 0u);
    EXPECT_GT(p.queue_timed_out, 0u);
  }
  const std::string a = results_to_json({r}).dump();
  EXPECT_EQ(a, results_to_json({simulate(s)}).dump());
  s.seed = 2;
  EXPECT_NE(a, results_to_json({simulate(s)}).dump());
}

// The outputs speak of the pool queue only when there is one.
TEST(SimPoolQueueTest, OutputsShowThePoolQueue) {
  const std::vector<SimResult> results = {simulate(one_capped(150, 100000, 0.05))};
  const PolicyResult& p = results[0].policies[0];
  const std::string table = format_table(results);
  EXPECT_NE(table.find("  pool queue: 100000 at most, timeout 50.0 ms\n"), std::string::npos) << table;
  EXPECT_NE(table.find(fmt::format("pool queue: {} waited (", p.queue_waited)), std::string::npos) << table;
  EXPECT_NE(table.find(fmt::format("{:<20} {:>9}", "(queue timeout)", p.queue_timed_out)), std::string::npos) << table;
  const auto j = results_to_json(results)["scenarios"][0];
  EXPECT_EQ(j["queue"], 100000);
  EXPECT_EQ(j["queue_timeout_s"], 0.05);
  EXPECT_EQ(j["policies"][0]["pool_queue"]["waited"], p.queue_waited);
  EXPECT_EQ(j["policies"][0]["pool_queue"]["timed_out"], p.queue_timed_out);
  EXPECT_EQ(j["policies"][0]["pool_queue"]["peak"], p.queue_peak);
  EXPECT_EQ(j["policies"][0]["pool_queue"]["at_end"], p.queue_at_end);
  EXPECT_EQ(j["policies"][0]["pool_queue"]["series"].size(), p.queue_series.size());
  EXPECT_FALSE(p.queue_series.empty());
  const std::string csv = format_csv(results);
  EXPECT_NE(csv.find(",unrouted,pool_queue_waited,pool_queue_timed_out,pool_queue_peak,pool_queue_at_end\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(fmt::format(",{},{},{},{}\n", p.queue_waited, p.queue_timed_out, p.queue_peak, p.queue_at_end)),
            std::string::npos)
      << csv;
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  const auto fields = std::count(header.begin(), header.end(), ',');
  while (std::getline(lines, line)) EXPECT_EQ(std::count(line.begin(), line.end(), ','), fields) << line;

  const std::vector<SimResult> plain = {simulate(one_capped(150, 0))};
  EXPECT_EQ(format_table(plain).find("queue:"), std::string::npos);
  EXPECT_EQ(format_table(plain).find("queue timeout"), std::string::npos);
  EXPECT_FALSE(results_to_json(plain)["scenarios"][0].contains("queue"));
  EXPECT_FALSE(results_to_json(plain)["scenarios"][0]["policies"][0].contains("pool_queue"));
  EXPECT_EQ(format_csv(plain).find("pool_queue"), std::string::npos);
}

// A request a server's queue refuses was an attempt all the same: the
// proxy's pool counts it on the server from the pick (acquire()) to the
// refusal (end_request()), as it counts any attempt until its answer. Counted
// up and down, its server moves to the back of least_conn's tied members when
// its index (over 8 servers) holds more than 64 of them in a tie, and the
// picks after it change: 66 servers of 1 and 2 workers without queues refuse
// 1,802 requests. (Before the simulator ran on the pool it counted only the
// requests a server took, and refused 1,829, with 155 and 113 requests at s2
// and s3.) The numbers are this run's, from `heft sim --csv`.
TEST(SimMaxConnsTest, RefusedRequestsAreCountedWhileTheirAttemptLastsAsInTheProxy) {
  std::string servers;
  for (int i = 0; i < 66; ++i)
    servers += fmt::format(R"({}{{"name": "s{}", "size": {}, "service": "10ms", "dist": "fixed", "units": 1, )"
                           R"("queue": 0}})",
                           i ? ", " : "", i, i % 2 ? 2 : 1);
  Scenario s = scenario_from_json(
      nlohmann::json::parse(R"({"duration": "1s", "rate": 8910, "policies": ["least_conn"], "servers": [)" + servers +
                            "]}"),
      nullptr);
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.arrivals, 8740u);
  EXPECT_EQ(p.refused, 1802u);
  EXPECT_EQ(p.servers[2].requests, 151u);
  EXPECT_EQ(p.servers[3].requests, 114u);
}

TEST(ArrivalsTest, TraceReplaysArrivalsAndKeys) {
  Scenario s = three_equal(10);
  std::string trace = "# time key\n";
  for (int i = 0; i < 1000; ++i) trace += std::to_string(i * 0.01) + " user" + std::to_string(i % 7) + "\n";
  load_trace(trace, s);
  s.policies = {PolicyKind::hash, PolicyKind::round_robin};
  SimResult r = simulate(s);
  EXPECT_EQ(r.policies[0].arrivals, 1000u);
  // 7 keys: a hash policy maps each to one server, so shares are multiples of 1/7.
  for (const ServerResult& server : r.policies[0].servers) {
    double sevenths = server.share * 7;
    EXPECT_NEAR(sevenths, std::round(sevenths), 0.02);
  }
  EXPECT_NEAR(r.policies[1].servers[0].share, 1.0 / 3, 0.01);
}

// A trace whose lines mix keys and no keys: a keyless line is placed as a
// keyless request is, from the request's own random stream, as if the trace had
// no keys at all (it was hashed as key 0: all 999 keyless arrivals on s1).
TEST(ArrivalsTest, KeylessLinesOfAKeyedTraceArePlacedAtRandomByWeight) {
  Scenario s;
  s.duration_s = 2;
  for (uint32_t weight : {5u, 3u, 2u}) {
    ServerSpec server;
    server.service_s = 0.001;
    server.weight = weight;
    s.servers.push_back(server);
  }
  s.policies = {PolicyKind::hash};
  std::string keyless = "0.000\n", keyed = "0.000 alice\n";
  for (int i = 1; i < 1000; ++i) {
    keyless += fmt::format("{:.4f}\n", 0.001 * i);
    keyed += fmt::format("{:.4f}\n", 0.001 * i);
  }
  Scenario without_keys = s;
  load_trace(keyless, without_keys);
  load_trace(keyed, s);
  const PolicyResult mixed = simulate(s).policies[0];
  const PolicyResult plain = simulate(without_keys).policies[0];
  ASSERT_EQ(mixed.arrivals, 1000u);
  EXPECT_NEAR(mixed.servers[0].share, 0.5, 0.05);
  EXPECT_NEAR(mixed.servers[1].share, 0.3, 0.05);
  EXPECT_NEAR(mixed.servers[2].share, 0.2, 0.05);
  // Only alice's request may land elsewhere than in the keyless trace.
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(static_cast<double>(mixed.servers[i].requests), static_cast<double>(plain.servers[i].requests), 1)
        << i;
}

// Without a duration, a trace is measured over its own span (last arrival plus
// one mean gap), not the default 60 s: a 6 s trace keeping one worker busy all
// the time is 100 % busy, not 10 %. A duration that is given stays.
TEST(ArrivalsTest, TraceWithoutDurationIsMeasuredOverItsSpan) {
  Scenario s;
  ServerSpec server;
  server.service_s = 0.001;
  server.dist = ServiceDist::fixed;
  s.servers.push_back(server);
  s.policies = {PolicyKind::round_robin};
  std::string trace;
  for (int i = 0; i < 6000; ++i) trace += fmt::format("{:.3f}\n", 0.001 * i);
  Scenario given = s;
  load_trace(trace, s);
  const SimResult r = simulate(s);
  EXPECT_NEAR(r.scenario.duration_s, 6.0, 1e-9);
  EXPECT_EQ(r.policies[0].arrivals, 6000u);
  EXPECT_NEAR(r.policies[0].servers[0].utilisation, 1.0, 1e-6);
  given.duration_s = 3;
  load_trace(trace, given);
  const SimResult three = simulate(given);
  EXPECT_DOUBLE_EQ(three.scenario.duration_s, 3);
  EXPECT_EQ(three.policies[0].arrivals, 3000u);
  validate(given);
  EXPECT_EQ(trace_arrivals_after_duration(given), 3000u);
  // One arrival (no gap to measure): its time plus a millisecond.
  Scenario single = s;
  single.duration_s = 0;
  load_trace("2.5\n", single);
  validate(single);
  EXPECT_DOUBLE_EQ(single.duration_s, 2.501);
  EXPECT_EQ(trace_arrivals_after_duration(single), 0u);
}

TEST(ScenarioTest, ParsesFlagsAndJson) {
  EXPECT_DOUBLE_EQ(parse_duration("600s"), 600);
  EXPECT_DOUBLE_EQ(parse_duration("20ms"), 0.02);
  EXPECT_DOUBLE_EQ(parse_duration("2m"), 120);
  EXPECT_DOUBLE_EQ(parse_duration("1.5"), 1.5);
  EXPECT_THROW(parse_duration("fast"), std::invalid_argument);
  EXPECT_EQ(parse_units("3x,1x,1x"), (std::vector<double>{3, 1, 1}));
  ServerSpec big = parse_server("name=big,size=12,service=20ms,dist=lognormal,sigma=0.8,weight=3,queue=5,timeout=1s");
  EXPECT_EQ(big.name, "big");
  EXPECT_EQ(big.size, 12u);
  EXPECT_EQ(big.dist, ServiceDist::lognormal);
  EXPECT_EQ(*big.weight, 3u);
  EXPECT_EQ(*big.queue_limit, 5u);
  EXPECT_THROW(parse_server("colour=red"), std::invalid_argument);
  Event e = parse_event("300s:big:slow=2");
  EXPECT_EQ(e.kind, Event::Kind::slow);
  EXPECT_EQ(e.server, "big");
  EXPECT_DOUBLE_EQ(e.factor, 2);
  EXPECT_EQ(event_text(e), "300s:big:slow=2");
  EXPECT_THROW(parse_event("300s:big:explode"), std::invalid_argument);
  EXPECT_THROW(parse_policies("round_robin,fastest"), std::invalid_argument);

  auto j = nlohmann::json::parse(R"({
    "name": "file", "seed": 3, "duration": "60s", "rate": 100,
    "servers": [{"name": "a", "size": 4, "service": "20ms", "weight": 2}, {"name": "b", "size": 4, "service": 0.02}],
    "policies": ["least_conn"], "events": ["30s:a:fail"], "bucket": "5s"
  })");
  Scenario s = scenario_from_json(j, nullptr);
  validate(s);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.servers.size(), 2u);
  EXPECT_EQ(initial_weight(s.servers[0]), 2u);
  EXPECT_EQ(initial_weight(s.servers[1]), 4u);
  EXPECT_EQ(s.events.size(), 1u);
  EXPECT_DOUBLE_EQ(s.bucket_s, 5);
  Scenario bad = s;
  bad.events.push_back(parse_event("1s:nobody:fail"));
  EXPECT_THROW(validate(bad), std::invalid_argument);
  EXPECT_THROW(scenario_from_json(nlohmann::json::parse(R"({"colour": 1})"), nullptr), std::invalid_argument);
}

TEST(LatencySketchTest, QuantilesWithinOnePercent) {
  LatencySketch sketch;
  // 1 us .. 10 s, log-uniform-ish: the exact quantiles are known.
  std::vector<double> values;
  for (int i = 0; i < 100000; ++i) values.push_back(1e-6 * std::pow(1e7, i / 99999.0));
  for (double v : values) sketch.record_seconds(v);
  for (double q : {0.01, 0.5, 0.9, 0.95, 0.99, 0.999}) {
    double exact = values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
    EXPECT_NEAR(sketch.quantile_seconds(q), exact, exact * 0.01) << q;
  }
  EXPECT_EQ(sketch.count(), values.size());
  // Bucket bounds are consistent with index_of.
  for (uint64_t v : {0ull, 1ull, 127ull, 128ull, 129ull, 1000ull, 123456789ull, 1ull << 62}) {
    size_t i = LatencySketch::index_of(v);
    EXPECT_LE(LatencySketch::lower_ns(i), static_cast<double>(v));
    EXPECT_GT(LatencySketch::lower_ns(i + 1), static_cast<double>(v));
  }
}

TEST(ReportTest, FormatsAreDeterministicAndComplete) {
  Scenario s = three_equal(20);
  std::vector<SimResult> results = {simulate(s)};
  std::string table = format_table(results);
  EXPECT_NE(table.find("weighted_round_robin"), std::string::npos);
  EXPECT_NE(table.find("p99"), std::string::npos);
  std::string csv = format_csv(results);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3 * 4);
  std::string svg = format_svg(results);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("utilisation (%)"), std::string::npos);
  EXPECT_NE(svg.find("time (s)"), std::string::npos);
  EXPECT_NE(svg.find("latency (log scale)"), std::string::npos);
  EXPECT_EQ(svg, format_svg({simulate(s)}));
}

// Utilisations (and shares) in the JSON carry no binary noise: a server busy
// 7 ms in every 10 ms for 1 s printed 0.7000000000000006 and its buckets
// 0.7000000000000001, where the times beside them are rounded to the nanosecond.
TEST(ReportTest, JsonFractionsCarryNoBinaryNoise) {
  Scenario s;
  s.name = "fixed";
  ServerSpec server;
  server.name = "a";
  server.dist = ServiceDist::fixed;
  server.service_s = 0.007;
  s.servers.push_back(server);
  std::string trace;
  for (int i = 0; i < 100; ++i) trace += fmt::format("{}\n", i * 0.01);
  load_trace(trace, s);
  s.bucket_s = 0.1;
  s.policies = {PolicyKind::round_robin};
  const SimResult r = simulate(s);
  ASSERT_NEAR(r.policies[0].servers[0].utilisation, 0.7, 1e-9);
  const auto j = results_to_json({r})["scenarios"][0]["policies"][0]["servers"][0];
  EXPECT_EQ(j["utilisation"].dump(), "0.7");
  EXPECT_EQ(j["share"].dump(), "1.0");
  ASSERT_EQ(j["utilisation_series"].size(), 10u);
  for (const auto& u : j["utilisation_series"]) EXPECT_EQ(u.dump(), "0.7");
}

// Servers named by address (docs/sim.md: as the proxy names backends) are
// longer than the server column's 8 characters: every column after the name
// was pushed right on their rows, under the wrong headings.
TEST(ReportTest, TableColumnsStayAlignedWithLongServerNames) {
  Scenario s = three_equal(5);
  s.servers[0].name = "127.0.0.1:22001";
  s.servers[1].name = "backend-with-a-long-name.internal:8080";
  for (ServerSpec& server : s.servers) server.weight = 0;  // an (unrouted) row too
  s.servers[2].weight = 1;
  s.events.push_back(parse_event("2s:s3:weight=0"));
  const std::string table = format_table({simulate(s)});
  std::istringstream lines(table);
  std::string line;
  size_t header_length = 0, rows = 0;
  size_t requests_end = 0;  // where the requests column ends
  while (std::getline(lines, line)) {
    if (line.starts_with("  policy")) {
      header_length = line.size();
      requests_end = line.find("requests") + std::string("requests").size();
    } else if (header_length && line.starts_with("  ") && line.find('%') != std::string::npos) {
      ++rows;
      if (line.find("(unrouted)") != std::string::npos) {
        // Its count ends where the requests column does.
        ASSERT_GT(line.size(), requests_end) << line;
        EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(line[requests_end - 1])) && line[requests_end] == ' ')
            << line;
      } else {
        EXPECT_EQ(line.size(), header_length) << line;
      }
    }
  }
  EXPECT_EQ(rows, 3u * 4u) << table;  // 3 policies x (3 servers + unrouted)
}

// The header's duration is the one given: {:g} kept six digits, so a 30-day
// run read "for 2.592e+06 s" and --duration 1234.5678s "for 1234.57 s".
TEST(ReportTest, HeaderShowsTheDurationAsGiven) {
  Scenario s = three_equal(30 * 86400);
  s.bucket_s = 0;  // duration / 60
  s.rate = 0.001;
  s.policies = {PolicyKind::round_robin};
  std::string table = format_table({simulate(s)});
  EXPECT_NE(table.find("0.001 req/s Poisson for 2592000 s, seed 1"), std::string::npos) << table.substr(0, 200);
  s.duration_s = 1234.5678;
  table = format_table({simulate(s)});
  EXPECT_NE(table.find("Poisson for 1234.5678 s, seed 1"), std::string::npos) << table.substr(0, 200);
  EXPECT_NE(format_svg({simulate(s)}).find("Poisson for 1234.5678 s, seed 1"), std::string::npos);
}

// A latency just below a unit's boundary rounded up into the next unit's
// range but kept the smaller unit: "1000.0 ms", "1000 us".
TEST(ReportTest, LatenciesNearAUnitBoundaryTakeTheLargerUnit) {
  EXPECT_EQ(format_latency(0.99996), "1.00 s");
  EXPECT_EQ(format_latency(0.99994), "999.9 ms");
  EXPECT_EQ(format_latency(0.0009996), "1.0 ms");
  EXPECT_EQ(format_latency(0.000999), "999 us");
  EXPECT_EQ(format_latency(0.0201), "20.1 ms");
  EXPECT_EQ(format_latency(2.345), "2.35 s");
  EXPECT_EQ(format_latency(0), "0 us");
}

// The SVG's server legend ran on in one line past the picture's right edge:
// with a dozen servers and one policy, most of their names were cut off.
TEST(ReportTest, SvgServerLegendStaysInsideThePicture) {
  Scenario s = three_equal(5);
  s.servers.resize(12, s.servers[0]);
  for (size_t i = 0; i < s.servers.size(); ++i) s.servers[i].name = fmt::format("backend-{}.example", i + 1);
  s.policies = {PolicyKind::least_conn};
  const SimResult r = simulate(s);
  const std::string svg = format_svg({r, r});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex(R"re(<svg [^>]*width="([0-9.]+)" height="([0-9.]+)")re")));
  const double width = std::stod(m[1]), height = std::stod(m[2]);
  const std::regex legend(R"re(<text x="([0-9.]+)" y="([0-9.]+)" class="legend">([^<]*)</text>)re");
  size_t names = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), legend); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[3];
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_LE(x + 7.0 * static_cast<double>(text.size()), width) << text;  // 12 px text: about 7 px a character
    EXPECT_LT(y, height) << text;
    if (text.starts_with("backend-")) ++names;
  }
  EXPECT_EQ(names, 24u);
  // The second scenario's rows start below the first's legend.
  std::vector<double> title_y;
  const std::regex title(R"re(<text x="10" y="([0-9.]+)" class="scenario">)re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), title); it != std::sregex_iterator(); ++it)
    title_y.push_back(std::stod((*it)[1]));
  ASSERT_EQ(title_y.size(), 2u);
  double last_legend_y = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), legend); it != std::sregex_iterator(); ++it) {
    const double y = std::stod((*it)[2]);
    if (y < title_y[1]) last_legend_y = std::max(last_legend_y, y);
  }
  EXPECT_LT(last_legend_y, title_y[1] - 14);
}

// Requests no server could take (every weight 0) are labelled in the table and
// counted in CSV and JSON; the table's share column holds no bare negative count.
TEST(ReportTest, UnroutedRequestsAreLabelled) {
  Scenario s = three_equal(20);
  s.policies = {PolicyKind::weighted_round_robin};
  for (ServerSpec& server : s.servers) server.weight = 0;
  const std::vector<SimResult> results = {simulate(s)};
  const PolicyResult& p = results[0].policies[0];
  ASSERT_GT(p.unrouted, 0u);
  ASSERT_EQ(p.unrouted, p.arrivals);
  const std::string table = format_table(results);
  EXPECT_EQ(table.find(fmt::format("-{}", p.unrouted)), std::string::npos) << table;
  const std::string row = fmt::format("(unrouted)           {:>9} 100.0%\n", p.unrouted);
  EXPECT_NE(table.find(row), std::string::npos) << table;
  EXPECT_NE(table.find("unrouted = requests no server could take"), std::string::npos) << table;
  const std::string csv = format_csv(results);
  EXPECT_NE(csv.find(",failed,unrouted\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(fmt::format(",{}\n", p.unrouted)), std::string::npos) << csv;
  EXPECT_EQ(results_to_json(results)["scenarios"][0]["policies"][0]["unrouted"], p.unrouted);
  // Every server row has as many fields as the header.
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  const auto fields = std::count(header.begin(), header.end(), ',');
  while (std::getline(lines, line)) EXPECT_EQ(std::count(line.begin(), line.end(), ','), fields) << line;
  // A run where everything is routed has no unrouted row or note.
  const std::string routed = format_table({simulate(three_equal(20))});
  EXPECT_EQ(routed.find("unrouted"), std::string::npos);
}

}  // namespace
}  // namespace heft::sim
