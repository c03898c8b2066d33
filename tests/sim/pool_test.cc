// `heft sim` on the run-time pool (src/upstream/pool.h): passive failures
// (max_fails / fail_timeout and the trial after it), slow start's ramp after
// a recovery and adaptive weights' cut after a slowdown, each from the pool's
// own code on virtual time; the pool settings' parsers; and how the outputs
// show weight decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/pool_settings.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/simulator.h"
#include "upstream/weights.h"

namespace heft::sim {
namespace {

using balance::PolicyKind;

template <typename F>
std::string error_of(F parse) {
  try {
    parse();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Two servers `a` and `b`, weight 1 each, 100 workers of fixed `service_s`
// (they never queue), and a trace of arrivals every `gap_s` (half a gap off
// the 250 ms grid of the pool's ticks) for `duration_s`.
Scenario two_servers(double service_s, double gap_s, double duration_s) {
  Scenario s;
  s.name = "two servers";
  s.duration_s = duration_s;
  s.has_trace = true;
  for (double t = gap_s / 2; t < duration_s; t += gap_s) s.trace_times.push_back(t);
  for (const char* name : {"a", "b"}) {
    ServerSpec server;
    server.name = name;
    server.size = 100;
    server.service_s = service_s;
    server.dist = ServiceDist::fixed;
    server.weight = 1;
    s.servers.push_back(server);
  }
  s.policies = {PolicyKind::weighted_round_robin};
  return s;
}

// The first weight change of server `name`, or null.
const WeightChange* first_change(const PolicyResult& p, const std::string& name) {
  for (const WeightChange& c : p.weight_changes)
    if (c.server == name) return &c;
  return nullptr;
}

// `a` fails at 2 s with two requests in progress (10 ms each, every other
// arrival of one per 2.5 ms): both fail and the first takes it out for its
// fail_timeout of 1 s. It answers again at 3 s, when the pool's tick (every
// 250 ms, as the proxy's) returns it and slow start ramps its weight from
// 10 % to 100 % over 5 s in 20 steps of 250 ms. In each step the pool
// balances a by round(100 x factor) against b's 100, so smooth weighted
// round robin gives it that share of the step's 100 arrivals, within one
// request; in the first step its trial request holds it back for 10 ms (4
// arrivals), as nginx lets one request through to a returning backend.
TEST(SimSlowStartTest, TheRampAfterARecoveryGivesExactShares) {
  Scenario s = two_servers(0.01, 0.0025, 10);
  s.events = {parse_event("2s:a:fail"), parse_event("3s:a:recover")};
  s.fail_timeout_s = 1;
  s.slow_start_s = 5;
  s.bucket_s = 0.25;
  const SimResult r = simulate(s);
  const PolicyResult& p = r.policies[0];
  const ServerResult& a = p.servers[0];
  EXPECT_EQ(a.failed, 2u);
  ASSERT_EQ(a.share_series.size(), 40u);
  ASSERT_EQ(a.factor_series.size(), 40u);
  for (size_t b = 8; b < 12; ++b) EXPECT_EQ(a.share_series[b], 0) << "out from 2 s to 3 s: bucket " << b;
  for (size_t k = 0; k < upstream::kSlowStartSteps; ++k) {
    const size_t b = 12 + k;
    SCOPED_TRACE(fmt::format("ramp step {} ({} s)", k, 3 + 0.25 * static_cast<double>(k)));
    const double factor = upstream::kSlowStartFloor + (1 - upstream::kSlowStartFloor) * static_cast<double>(k) / 20;
    EXPECT_NEAR(a.factor_series[b], factor, 1e-12);
    const double weight = std::round(100 * factor);
    const double expected = 100 * weight / (weight + 100);
    EXPECT_NEAR(100 * a.share_series[b], expected, k == 0 ? 2 : 1);
  }
  for (size_t b = 32; b < 40; ++b) {
    EXPECT_EQ(a.factor_series[b], 1) << b;
    EXPECT_EQ(a.share_series[b], 0.5) << b;
  }
  ASSERT_EQ(p.weight_changes.size(), 2u);
  EXPECT_EQ(p.weight_changes[0].reason, upstream::WeightReason::slow_start);
  EXPECT_EQ(p.weight_changes[0].at_s, 3);
  EXPECT_EQ(p.weight_changes[0].server, "a");
  EXPECT_NEAR(p.weight_changes[0].factor_after, 0.1, 1e-12);
  EXPECT_EQ(p.weight_changes[1].reason, upstream::WeightReason::slow_start_done);
  EXPECT_EQ(p.weight_changes[1].at_s, 8);
  // Without slow start the pool gives it its share back at once.
  s.slow_start_s = 0;
  const PolicyResult plain = simulate(s).policies[0];
  EXPECT_TRUE(plain.servers[0].share_series.empty()) << "no dynamic weights: no series";
  EXPECT_TRUE(plain.weight_changes.empty());
  EXPECT_NEAR(static_cast<double>(plain.servers[0].requests), 0.5 * 4000 - 0.5 * 400, 3);
}

// Three equal servers of fixed 10 ms; s2 runs 4 times slower from 20 s.
// Adaptive weights (interval 5 s) evaluate at 5.25 s, 10.25 s, ... (the
// first tick at 250 ms starts the first interval): the interval ending at
// 20.25 s held 0.25 s of the slowdown, too little to lift its latency over
// twice the pool's median, and the next, all slow, cuts it at 25.25 s, by
// 25 %, and again every interval while it stays slow. Its share of the
// requests falls with its weight: 1/3 before, 0.75 / 2.75 after the cut.
TEST(SimAdaptiveTest, ASlowdownIsCutWithinAnIntervalAndTheShareFollows) {
  Scenario s = two_servers(0.01, 0.0025, 40);
  ServerSpec third = s.servers[1];
  third.name = "c";
  s.servers.push_back(third);
  s.events = {parse_event("20s:b:slow=4")};
  s.adaptive.enabled = true;
  s.adaptive.interval = std::chrono::seconds(5);
  s.bucket_s = 0.25;
  const SimResult r = simulate(s);
  const PolicyResult& p = r.policies[0];
  const WeightChange* cut = first_change(p, "b");
  ASSERT_NE(cut, nullptr);
  EXPECT_EQ(cut->reason, upstream::WeightReason::latency);
  EXPECT_GT(cut->at_s, 20);
  EXPECT_LE(cut->at_s, 20 + 5 + 0.25) << "within an interval (and a tick) of the slowdown";
  EXPECT_EQ(cut->at_s, 25.25);
  EXPECT_NEAR(cut->factor_after, 0.75, 1e-12);
  EXPECT_NE(cut->detail.find("> limit"), std::string::npos) << cut->detail;
  EXPECT_EQ(first_change(p, "a"), nullptr);
  EXPECT_EQ(first_change(p, "c"), nullptr);
  size_t cuts = 0;
  for (const WeightChange& c : p.weight_changes) cuts += c.server == "b" && c.reason == upstream::WeightReason::latency;
  EXPECT_GE(cuts, 2u) << "still slow: cut again";
  const ServerResult& b = p.servers[1];
  const size_t at_cut = static_cast<size_t>(25.25 / 0.25);
  EXPECT_NEAR(b.share_series[at_cut - 2], 1.0 / 3, 0.011);
  EXPECT_NEAR(b.factor_series[at_cut + 1], 0.75, 1e-12);
  EXPECT_NEAR(b.share_series[at_cut + 1], 0.75 / 2.75, 0.011);
  // Least connections moves work off it by itself, and the cut comes as well.
  s.policies = {PolicyKind::least_conn};
  const PolicyResult lc = simulate(s).policies[0];
  const WeightChange* lc_cut = first_change(lc, "b");
  ASSERT_NE(lc_cut, nullptr);
  EXPECT_EQ(lc_cut->at_s, 25.25);
}

// max_fails / fail_timeout as the pool counts them. Round robin over `a` and
// `b` (1 s each), a request every 0.1 s: a has the ones of 0 s and 0.2 s in
// progress when it fails at 0.35 s. With max_fails 1 the first failure
// takes it out; with 3 it takes the request of 0.4 s too, which fails at
// once, and is out after it; with 0 it is never taken out and every request
// round robin sends it fails (the two in progress, then one in two).
TEST(SimPassiveFailuresTest, MaxFailsFailuresTakeAServerOut) {
  Scenario s = two_servers(1, 0.1, 3);
  s.trace_times.clear();
  for (int i = 0; i < 30; ++i) s.trace_times.push_back(0.1 * i);
  s.policies = {PolicyKind::round_robin};
  s.events = {parse_event("0.35s:a:fail")};
  const auto a_after = [&](uint32_t max_fails) {
    Scenario run = s;
    run.max_fails = max_fails;
    return simulate(run).policies[0].servers[0];
  };
  const ServerResult one = a_after(1);
  EXPECT_EQ(one.failed, 2u);
  EXPECT_EQ(one.requests, 2u);
  const ServerResult three = a_after(3);
  EXPECT_EQ(three.failed, 3u);
  EXPECT_EQ(three.requests, 3u);
  const ServerResult never = a_after(0);
  EXPECT_EQ(never.requests, 15u);
  EXPECT_EQ(never.failed, 15u);
}

// After fail_timeout a server that still fails gets one trial request and is
// out again at its failure: one failed request per fail_timeout, as nginx.
// `a` fails at 0.35 s (two requests lost, out till 1.35 s), fail_timeout 1 s:
// the arrival at 1.35 s finds the out period over, the pick returns `a` on
// trial and round robin sends it that request, which fails; so again at
// 2.35, 3.35 and 4.35 s in a run of 5 s.
TEST(SimPassiveFailuresTest, AServerThatStillFailsGetsOneTrialPerFailTimeout) {
  Scenario s = two_servers(1, 0.1, 5);
  s.policies = {PolicyKind::round_robin};
  s.events = {parse_event("0.35s:a:fail")};
  s.fail_timeout_s = 1;
  const PolicyResult p = simulate(s).policies[0];
  EXPECT_EQ(p.servers[0].failed, 2u + 4u);
  EXPECT_EQ(p.servers[0].requests, p.servers[0].failed);
  EXPECT_EQ(p.servers[1].failed, 0u);
}

TEST(SimPoolSettingsTest, FlagsAndMembersAreParsedAndChecked) {
  ServerSpec server = parse_server("name=a,max_fails=3,fail_timeout=30s,slow_start=1m");
  EXPECT_EQ(server.max_fails, 3u);
  EXPECT_EQ(server.fail_timeout_s, 30);
  EXPECT_EQ(server.slow_start_s, 60);
  EXPECT_NE(error_of([] { parse_server("max_fails=1000001"); }).find("--server max_fails"), std::string::npos);
  EXPECT_NE(error_of([] { parse_server("max_fails=-1"); }).find("--server max_fails"), std::string::npos);
  EXPECT_EQ(parse_max_fails("0"), 0u);
  EXPECT_NE(error_of([] { parse_max_fails("x"); }).find("--max-fails"), std::string::npos);

  Scenario s;
  s.servers = {server};
  s.servers[0].fail_timeout_s = 0.0015;
  EXPECT_NE(error_of([&] { validate(s); }).find("server 'a': fail_timeout must be a whole number of milliseconds"),
            std::string::npos);
  s.servers[0].fail_timeout_s.reset();
  s.slow_start_s = 400 * 86400.0;
  EXPECT_NE(error_of([&] { validate(s); }).find("slow_start must be 0..365d"), std::string::npos);

  const upstream::AdaptiveOptions on = parse_adaptive("on", {});
  EXPECT_TRUE(on.enabled);
  EXPECT_EQ(on.interval, std::chrono::seconds(30));
  EXPECT_TRUE(parse_adaptive("", {}).enabled) << "bare --adaptive";
  EXPECT_FALSE(parse_adaptive("off", on).enabled);
  const upstream::AdaptiveOptions some = parse_adaptive("interval=5s, cut=50%,median_factor=3", {});
  EXPECT_TRUE(some.enabled);
  EXPECT_EQ(some.interval, std::chrono::seconds(5));
  EXPECT_EQ(some.cut, 0.5);
  EXPECT_EQ(some.median_factor, 3);
  EXPECT_EQ(some.min_weight_ratio, 0.1);
  EXPECT_NE(error_of([] { parse_adaptive("cut=0", {}); }).find("--adaptive cut must be a number above 0..1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_adaptive("median_factor=0.5", {}); }).find("--adaptive median_factor"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_adaptive("interval=0s", {}); }).find("greater than 0"), std::string::npos);
  EXPECT_NE(error_of([] { parse_adaptive("speed=2", {}); }).find("unknown option 'speed'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_adaptive("cut=1%,cut=2%", {}); }).find("given twice"), std::string::npos);

  const Scenario j = scenario_from_json(nlohmann::json::parse(R"({
      "max_fails": 2, "fail_timeout": "5s", "slow_start": 10,
      "adaptive": {"interval": "10s", "error_threshold": 0.1},
      "servers": [{"name": "a", "max_fails": 0, "slow_start": "2s"}]})"),
                                        nullptr);
  EXPECT_EQ(j.max_fails, 2u);
  EXPECT_EQ(j.fail_timeout_s, 5);
  EXPECT_EQ(j.slow_start_s, 10);
  EXPECT_TRUE(j.adaptive.enabled);
  EXPECT_EQ(j.adaptive.interval, std::chrono::seconds(10));
  EXPECT_EQ(j.adaptive.error_threshold, 0.1);
  EXPECT_EQ(j.servers[0].max_fails, 0u);
  EXPECT_EQ(j.servers[0].slow_start_s, 2);
  EXPECT_TRUE(scenario_from_json(nlohmann::json::parse(R"({"adaptive": true})"), nullptr).adaptive.enabled);
  const auto json_error = [](const char* text) {
    return error_of([&] { scenario_from_json(nlohmann::json::parse(text), nullptr); });
  };
  EXPECT_NE(json_error(R"({"adaptive": {"cut": 2}})").find("scenario: adaptive.cut"), std::string::npos);
  EXPECT_NE(json_error(R"({"adaptive": {"pace": 2}})").find("scenario: adaptive.pace: unknown key"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"adaptive": "yes"})").find("scenario: adaptive: must be true, false or an object"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"max_fails": -1})").find("scenario: max_fails"), std::string::npos);
  EXPECT_NE(json_error(R"({"fail_timeout": "1.5ms"})").find("fail_timeout must be a whole number of milliseconds"),
            std::string::npos);
  EXPECT_NE(json_error(R"({"servers": [{"slow_start": -1}]})").find("scenario: servers[0].slow_start"),
            std::string::npos);
}

// The outputs speak of weight factors only when the pool can change them
// (slow start or adaptive weights), and of max_fails / fail_timeout only
// when a server fails.
TEST(SimPoolOutputsTest, WeightDecisionsAndSeriesAreShown) {
  Scenario s = two_servers(0.01, 0.0025, 10);
  s.events = {parse_event("2s:a:fail"), parse_event("3s:a:recover")};
  s.fail_timeout_s = 1;
  s.slow_start_s = 5;
  s.adaptive = parse_adaptive("interval=2s", {});
  s.servers[1].max_fails = 2;
  const std::vector<SimResult> results = {simulate(s)};
  const std::string table = format_table(results);
  EXPECT_NE(table.find("  pool: max_fails 1, fail_timeout 1.00 s, slow_start 5.00 s, adaptive (interval 2 s, "
                       "median_factor 2, error_threshold 5%, cut 25%, min_weight_ratio 0.1)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("b (100 workers x 10.0 ms fixed, max_fails 2)"), std::string::npos) << table;
  EXPECT_NE(table.find("weights: 3 s a slow_start: 1.00 -> 0.10, back in service, ramping over 5000ms\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("weights = the pool's decisions"), std::string::npos);
  const auto j = results_to_json(results)["scenarios"][0];
  EXPECT_EQ(j["max_fails"], 1);
  EXPECT_EQ(j["fail_timeout_s"], 1);
  EXPECT_EQ(j["slow_start_s"], 5);
  EXPECT_EQ(j["adaptive"]["interval_s"], 2);
  EXPECT_EQ(j["servers"][1]["max_fails"], 2);
  const auto& jp = j["policies"][0];
  ASSERT_FALSE(jp["weight_changes"].empty());
  EXPECT_EQ(jp["weight_changes"][0]["at_s"], 3);
  EXPECT_EQ(jp["weight_changes"][0]["reason"], "slow_start");
  EXPECT_EQ(jp["weight_changes"][0]["factor_after"], 0.1);
  EXPECT_EQ(jp["servers"][0]["share_series"].size(), results[0].policies[0].servers[0].share_series.size());
  EXPECT_EQ(jp["servers"][0]["factor_series"].size(), jp["servers"][0]["utilisation_series"].size());
  const std::string svg = format_svg(results);
  EXPECT_NE(svg.find("weighted_round_robin: weight factor"), std::string::npos);
  EXPECT_NE(svg.find("slow start x adaptive"), std::string::npos);

  // Without slow start, adaptive weights or failures, none of it.
  Scenario plain = two_servers(0.01, 0.0025, 10);
  const std::vector<SimResult> none = {simulate(plain)};
  EXPECT_EQ(format_table(none).find("  pool:"), std::string::npos);
  EXPECT_EQ(format_table(none).find("weights"), std::string::npos);
  const auto jn = results_to_json(none)["scenarios"][0];
  for (const char* member : {"max_fails", "fail_timeout_s", "slow_start_s", "adaptive"})
    EXPECT_FALSE(jn.contains(member)) << member;
  EXPECT_FALSE(jn["policies"][0].contains("weight_changes"));
  EXPECT_FALSE(jn["policies"][0]["servers"][0].contains("share_series"));
  EXPECT_EQ(format_svg(none).find("weight factor"), std::string::npos);
  // A failure alone: the pool's max_fails and fail_timeout, no weights.
  plain.events = {parse_event("2s:a:fail")};
  const std::string failing = format_table({simulate(plain)});
  EXPECT_NE(failing.find("  pool: max_fails 1, fail_timeout 10.00 s\n"), std::string::npos) << failing;
}

// The pool's settings and decisions keep runs deterministic: same seed, same
// bytes; another seed, other results.
TEST(SimPoolOutputsTest, RunsWithThePoolsFeaturesAreDeterministic) {
  Scenario s;
  s.duration_s = 30;
  s.rate = 400;
  for (int i = 0; i < 3; ++i) {
    ServerSpec server;
    server.name = fmt::format("s{}", i + 1);
    server.size = 4;
    server.service_s = 0.02;
    server.max_conns = 8;
    s.servers.push_back(server);
  }
  s.queue = 100;
  s.queue_timeout_s = 0.5;
  s.slow_start_s = 4;
  s.fail_timeout_s = 2;
  s.adaptive = parse_adaptive("interval=3s", {});
  s.policies = {PolicyKind::weighted_round_robin, PolicyKind::least_conn, PolicyKind::p2c, PolicyKind::hash};
  s.events = {parse_event("5s:s1:fail"), parse_event("8s:s1:recover"), parse_event("15s:s2:slow=3"),
              parse_event("20s:weights=2,1,1")};
  const std::string a = results_to_json({simulate(s)}).dump();
  EXPECT_EQ(a, results_to_json({simulate(s)}).dump());
  const SimResult r = simulate(s);
  for (const PolicyResult& p : r.policies) {
    SCOPED_TRACE(balance::policy_name(p.policy));
    EXPECT_GT(p.servers[0].failed, 0u);
    EXPECT_NE(first_change(p, "s1"), nullptr) << "slow start after the recovery";
    uint64_t placed = p.unrouted + p.queue_timed_out;
    for (const ServerResult& server : p.servers) placed += server.requests;
    EXPECT_EQ(placed, p.arrivals);
  }
  s.seed = 2;
  EXPECT_NE(a, results_to_json({simulate(s)}).dump());
}

}  // namespace
}  // namespace heft::sim
