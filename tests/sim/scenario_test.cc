// Input checks of `heft sim`'s scenario parsers (src/sim/scenario.h): every
// flag and JSON member is checked for type, sign, integer-ness and range, and
// the error names the flag or the JSON member's path.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/scenario.h"
#include "sim/simulator.h"

namespace heft::sim {
namespace {

// The message of the std::invalid_argument `parse` throws ("" if none).
template <typename F>
std::string error_of(F parse) {
  try {
    parse();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A one-server scenario with `server_member` added to the server object.
std::string scenario_error(const std::string& top_members, const std::string& server_member = "") {
  const std::string text = "{" + top_members + (top_members.empty() ? "" : ", ") +
                           R"("servers": [{"name": "a", "size": 4)" +
                           (server_member.empty() ? "" : ", " + server_member) + "}]}";
  return error_of([&] {
    Scenario s = scenario_from_json(nlohmann::json::parse(text), nullptr);
    validate(s);
  });
}

TEST(ScenarioJsonTest, EveryMemberIsCheckedAndNamed) {
  struct Case {
    std::string top, server, path;
  };
  const Case cases[] = {
      {"", R"("weight": -1)", "servers[0].weight"},
      {"", R"("weight": 1.5)", "servers[0].weight"},
      {"", R"("weight": 1000001)", "servers[0].weight"},
      {"", R"("weight": "3")", "servers[0].weight"},
      {"", R"("size": -2)", "servers[0].size"},
      {"", R"("size": 2.5)", "servers[0].size"},
      {"", R"("size": 0)", "servers[0].size"},
      {"", R"("size": "4")", "servers[0].size"},
      {"", R"("queue": -1)", "servers[0].queue"},
      {"", R"("queue": 1.5)", "servers[0].queue"},
      {"", R"("units": -1)", "servers[0].units"},
      {"", R"("units": 0)", "servers[0].units"},
      {"", R"("units": "3")", "servers[0].units"},
      {"", R"("sigma": -0.5)", "servers[0].sigma"},
      {"", R"("service": -0.02)", "servers[0].service"},
      {"", R"("service": "fast")", "servers[0].service"},
      {"", R"("timeout": -1)", "servers[0].timeout"},
      {"", R"("dist": 3)", "servers[0].dist"},
      {"", R"("dist": "pareto")", "servers[0].dist"},
      {"", R"("name": 7)", "servers[0].name"},
      {"", R"("colour": "red")", "servers[0].colour"},
      {R"("seed": -3)", "", "seed"},
      {R"("seed": 1.5)", "", "seed"},
      {R"("seed": "1")", "", "seed"},
      {R"("rate": -5)", "", "rate"},
      {R"("rate": "fast")", "", "rate"},
      {R"("duration": -5)", "", "duration"},
      {R"("duration": "soon")", "", "duration"},
      {R"("bucket": -1)", "", "bucket"},
      {R"("name": 1)", "", "name"},
      {R"("trace": 1)", "", "trace"},
      {R"("hash_strategy": "cube")", "", "hash_strategy"},
      {R"("policies": "least_conn")", "", "policies"},
      {R"("policies": ["least_conn", 3])", "", "policies[1]"},
      {R"("policies": ["fastest"])", "", "policies[0]"},
      {R"("events": ["1s:a:fail", "1s:a:weight=-1"])", "", "events[1]"},
      {R"("events": [5])", "", "events[0]"},
      {R"("events": ["1s:a:fail", "2s:nobody:fail"])", "", "events[1]"},
      {R"("duration": 0)", "", "duration"},
      {R"("policies": [])", "", "policies"},
      {"", R"("service": 0)", "servers[0].service"},
  };
  for (const Case& c : cases) {
    const std::string error = scenario_error(c.top, c.server);
    EXPECT_NE(error.find("scenario: " + c.path + ":"), std::string::npos)
        << c.top << c.server << " -> '" << error << "'";
  }
  EXPECT_NE(error_of([] { scenario_from_json(nlohmann::json::parse(R"({"servers": [3]})"), nullptr); })
                .find("servers[0]: must be an object"),
            std::string::npos);
  EXPECT_NE(error_of([] { scenario_from_json(nlohmann::json::parse(R"({"servers": {"a": 1}})"), nullptr); })
                .find("servers: must be an array"),
            std::string::npos);
}

TEST(ScenarioJsonTest, ValidValuesStillParse) {
  Scenario s = scenario_from_json(nlohmann::json::parse(R"({
    "seed": 18446744073709551615, "rate": 2.5, "duration": 30, "bucket": "1s",
    "servers": [{"name": "a", "size": 4, "units": 1.5, "weight": 1000000, "queue": 0, "sigma": 0,
                 "dist": "lognormal", "service": 0.02, "timeout": "1s"}]
  })"),
                                  nullptr);
  validate(s);
  EXPECT_EQ(s.seed, 18446744073709551615u);
  EXPECT_EQ(*s.servers[0].weight, 1'000'000u);
  EXPECT_EQ(*s.servers[0].queue_limit, 0u);
  EXPECT_DOUBLE_EQ(s.servers[0].units, 1.5);
}

// max_conns (a server's cap on requests assigned at once) is read from a
// --server and a scenario's server object, 0..1000000 as in the Heftfile; a
// bad value names the flag or the member and says what it must be.
TEST(ScenarioFlagsTest, MaxConnsIsParsedAndBounded) {
  EXPECT_EQ(parse_server("name=a,size=4,max_conns=16").max_conns, 16u);
  EXPECT_EQ(parse_server("name=a,max_conns=0").max_conns, 0u);
  EXPECT_EQ(parse_server("name=a,max_conns=1000000").max_conns, 1'000'000u);
  EXPECT_EQ(parse_server("name=a").max_conns, 0u);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=1000001"); })
                .find("--server max_conns: '1000001' is not an integer 0..1000000"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=4294967297"); }).find("--server max_conns: '4294967297'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=-1"); }).find("--server max_conns: '-1'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=many"); }).find("--server max_conns: 'many'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=1.5"); }).find("--server max_conns: '1.5'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,max_conns=1,max_conns=2"); }).find("key 'max_conns' is given twice"),
            std::string::npos);
}

// A backup server (the Heftfile's `backup`): true or false, nothing else.
TEST(ScenarioFlagsTest, BackupIsTrueOrFalse) {
  EXPECT_TRUE(parse_server("name=a,backup=true").backup);
  EXPECT_TRUE(parse_server("name=a,backup=1").backup);
  EXPECT_FALSE(parse_server("name=a,backup=false").backup);
  EXPECT_FALSE(parse_server("name=a").backup);
  EXPECT_NE(error_of([] { parse_server("name=a,backup=yes"); }).find("--server backup: 'yes' is not true or false"),
            std::string::npos);
  for (const std::string member : {R"("backup": 1)", R"("backup": "true")", R"("backup": null)"})
    EXPECT_NE(scenario_error("", member).find("scenario: servers[0].backup: must be true or false"), std::string::npos)
        << member << " -> '" << scenario_error("", member) << "'";
  Scenario s = scenario_from_json(
      nlohmann::json::parse(R"({"servers": [{"name": "a"}, {"name": "b", "backup": true}]})"), nullptr);
  EXPECT_FALSE(s.servers[0].backup);
  EXPECT_TRUE(s.servers[1].backup);
}

TEST(ScenarioJsonTest, MaxConnsIsCheckedAndNamed) {
  for (const std::string member : {R"("max_conns": -1)", R"("max_conns": 1.5)", R"("max_conns": "8")",
                                   R"("max_conns": 1000001)", R"("max_conns": null)"}) {
    EXPECT_NE(scenario_error("", member).find("scenario: servers[0].max_conns: must be an integer 0..1000000"),
              std::string::npos)
        << member << " -> '" << scenario_error("", member) << "'";
  }
  Scenario s = scenario_from_json(
      nlohmann::json::parse(R"({"servers": [{"name": "a", "size": 4, "max_conns": 8}, {"name": "b"}]})"), nullptr);
  validate(s);
  EXPECT_EQ(s.servers[0].max_conns, 8u);
  EXPECT_EQ(s.servers[1].max_conns, 0u);
  // Library callers that build a Scenario by hand are held to the same range.
  s.servers[1].max_conns = 1'000'001;
  EXPECT_NE(error_of([&] { validate(s); }).find("server 'b': max_conns must be 0..1000000"), std::string::npos);
}

// The pool queue (`--queue N`, `--queue-timeout DUR`, a scenario's "queue" and
// "queue_timeout"): the Heftfile's ranges, errors naming the flag or member,
// and a queue no request could enter (no server has max_conns) refused, as
// sim refuses every setting its run would not read; a timeout without a queue too.
TEST(ScenarioFlagsTest, PoolQueueIsParsedAndBounded) {
  EXPECT_EQ(parse_pool_queue("0"), 0u);
  EXPECT_EQ(parse_pool_queue(" 100 "), 100u);
  EXPECT_EQ(parse_pool_queue("1000000"), 1'000'000u);
  for (const char* bad : {"1000001", "-1", "1.5", "many", "", "18446744073709551617"})
    EXPECT_NE(error_of([&] { parse_pool_queue(bad); }).find(fmt::format("--queue: '{}' is not an integer 0..1000000",
                                                                       std::string_view(bad))),
              std::string::npos)
        << bad;
}

TEST(ScenarioJsonTest, PoolQueueIsCheckedAndNamed) {
  const std::string capped = R"("max_conns": 1)";
  for (const std::string member : {R"("queue": -1)", R"("queue": 1.5)", R"("queue": "8")", R"("queue": 1000001)",
                                   R"("queue": null)"}) {
    EXPECT_NE(scenario_error(member, capped).find("scenario: queue: must be an integer 0..1000000"), std::string::npos)
        << member << " -> '" << scenario_error(member, capped) << "'";
  }
  for (const std::string member : {R"("queue_timeout": 0)", R"("queue_timeout": "0s")", R"("queue_timeout": -1)",
                                   R"("queue_timeout": "soon")", R"("queue_timeout": true)"}) {
    EXPECT_NE(scenario_error(R"("queue": 5, )" + member, capped).find("scenario: queue_timeout: must be a"),
              std::string::npos)
        << member << " -> '" << scenario_error(R"("queue": 5, )" + member, capped) << "'";
  }
  Scenario s = scenario_from_json(
      nlohmann::json::parse(
          R"({"queue": 100, "queue_timeout": "1m30s", "servers": [{"name": "a", "size": 4, "max_conns": 8}]})"),
      nullptr);
  validate(s);
  EXPECT_EQ(s.queue, 100u);
  EXPECT_DOUBLE_EQ(s.queue_timeout(), 90);
  Scenario d = scenario_from_json(
      nlohmann::json::parse(R"({"queue": 1000000, "servers": [{"name": "a", "max_conns": 8}]})"), nullptr);
  validate(d);
  EXPECT_DOUBLE_EQ(d.queue_timeout(), 60) << "the Heftfile's default";
  EXPECT_EQ(scenario_from_json(nlohmann::json::parse(R"({"servers": [{"name": "a"}]})"), nullptr).queue, 0u);
  // A queue nobody can enter, and a timeout without a queue.
  EXPECT_NE(scenario_error(R"("queue": 5)").find("the pool queue (--queue, or the scenario's \"queue\") has no "
                                                 "effect: no server has max_conns"),
            std::string::npos)
      << scenario_error(R"("queue": 5)");
  EXPECT_NE(scenario_error(R"("queue_timeout": "1s")", capped)
                .find("the queue timeout (--queue-timeout, or the scenario's \"queue_timeout\") applies only to a "
                      "pool queue"),
            std::string::npos)
      << scenario_error(R"("queue_timeout": "1s")", capped);
  EXPECT_EQ(scenario_error(R"("queue": 0)"), "");
  // Library callers that build a Scenario by hand are held to the same.
  s.queue = 1'000'001;
  EXPECT_NE(error_of([&] { validate(s); }).find("must be 0..1000000"), std::string::npos);
  s.queue = 1;
  s.queue_timeout_s = 0;
  EXPECT_NE(error_of([&] { validate(s); }).find("must be positive and finite"), std::string::npos);
}

TEST(ScenarioFlagsTest, WeightsAreAtMostOneMillion) {
  EXPECT_EQ(parse_weights("1000000,0,1"), (std::vector<uint32_t>{1'000'000, 0, 1}));
  EXPECT_NE(error_of([] { parse_weights("1000001,1,1"); }).find("--weights: '1000001' is not an integer 0..1000000"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_weights("4294967297"); }).find("--weights"), std::string::npos);
  EXPECT_NE(error_of([] { parse_weights("-1"); }).find("--weights"), std::string::npos);
  EXPECT_NE(error_of([] { parse_event("5s:s1:weight=1000001"); }).find("--event weight"), std::string::npos);
  EXPECT_NE(error_of([] { parse_event("5s:weights=1,1000001"); }).find("--event weights"), std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,weight=1000001"); }).find("--server weight"), std::string::npos);
  // Library callers that build a Scenario by hand are held to the same range.
  Scenario s;
  ServerSpec server;
  server.weight = 1'000'001;
  s.servers.push_back(server);
  EXPECT_THROW(validate(s), std::invalid_argument);
}

TEST(ScenarioLimitsTest, WorkersAreParsedWithoutWrappingAndBounded) {
  EXPECT_EQ(parse_server("name=a,size=1000000").size, 1'000'000u);
  EXPECT_NE(error_of([] { parse_server("name=a,size=1000000000"); }).find("--server size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,size=4294967296"); }).find("--server size: '4294967296'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,size=-1"); }).find("--server size"), std::string::npos);
  Scenario s;
  for (int i = 0; i < 2; ++i) {
    ServerSpec server;
    server.size = 600'000;  // 1.2 million in all
    s.servers.push_back(server);
  }
  EXPECT_NE(error_of([&] { validate(s); }).find("1200000 workers in all"), std::string::npos);
  s.servers[1].size = 400'000;
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioLimitsTest, UtilisationSeriesIsBounded) {
  Scenario s;
  s.duration_s = 1000;
  s.bucket_s = 0.01;  // 100,000 buckets
  for (int i = 0; i < 200; ++i) s.servers.push_back(ServerSpec{});
  EXPECT_NE(error_of([&] { validate(s); }).find("utilisation points"), std::string::npos);
  s.servers.resize(100);
  EXPECT_NO_THROW(validate(s));
}

TEST(ScenarioLimitsTest, RateIsFiniteAndArrivalsBounded) {
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.duration_s = 100;
  for (double rate : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 0.0, -1.0})
    EXPECT_NE(error_of([&] {
                Scenario t = s;
                t.rate = rate;
                validate(t);
              }).find("--rate must be a positive, finite number"),
              std::string::npos)
        << rate;
  s.rate = 500'001;  // just over 50 million expected arrivals in 100 s
  EXPECT_NE(error_of([&] { validate(s); }).find("expected arrivals; at most 50000000"), std::string::npos);
  s.rate = 500'000;
  EXPECT_NO_THROW(validate(s));
  // A scenario file's rate is held to the same bound.
  EXPECT_NE(scenario_error(R"("rate": 1e308)").find("expected arrivals"), std::string::npos);
  // So is a trace: only the arrivals before the duration count.
  Scenario traced;
  traced.servers.push_back(ServerSpec{});
  traced.duration_s = 10;
  load_trace("1\n2\n20\n", traced);
  EXPECT_NO_THROW(validate(traced));
}

// The weights validate() gives servers with these units and no explicit weight.
std::vector<uint32_t> default_weights(const std::vector<double>& units) {
  Scenario s;
  for (double u : units) {
    ServerSpec server;
    server.units = u;
    s.servers.push_back(server);
  }
  validate(s);
  std::vector<uint32_t> out;
  for (const ServerSpec& server : s.servers) out.push_back(initial_weight(server));
  return out;
}

TEST(ScenarioWeightsTest, DefaultWeightsFollowFractionalSizesExactly) {
  using W = std::vector<uint32_t>;
  // Whole sizes are their own weights, as before (2x,2x stays 2,2).
  EXPECT_EQ(default_weights({3, 1, 1}), (W{3, 1, 1}));
  EXPECT_EQ(default_weights({2, 2}), (W{2, 2}));
  EXPECT_EQ(default_weights({1'000'000, 1}), (W{1'000'000, 1}));
  // Fractional sizes: the smallest whole weights with the same ratios.
  EXPECT_EQ(default_weights({1.5, 1}), (W{3, 2}));
  EXPECT_EQ(default_weights({2.5, 1, 0.5}), (W{5, 2, 1}));
  EXPECT_EQ(default_weights({0.25, 1}), (W{1, 4}));
  EXPECT_EQ(default_weights({0.1, 0.3}), (W{1, 3}));
  EXPECT_EQ(default_weights({0.333333333333, 1}), (W{1, 3}));
  EXPECT_EQ(default_weights({1.5, 2.25}), (W{6, 9}));
  // No whole-number ratio within the weight range: an error, not a rounded guess.
  EXPECT_NE(error_of([] { default_weights({1.0000001, 1}); }).find("no whole-number ratio"), std::string::npos);
  EXPECT_NE(error_of([] { default_weights({999'999.5, 1}); }).find("no whole-number ratio"), std::string::npos);
  // Explicit weights are kept; the others are scaled among themselves.
  Scenario s;
  for (double u : {1.5, 1.0, 7.0}) {
    ServerSpec server;
    server.units = u;
    s.servers.push_back(server);
  }
  s.servers[2].weight = 5;
  validate(s);
  EXPECT_EQ(*s.servers[0].weight, 3u);
  EXPECT_EQ(*s.servers[1].weight, 2u);
  EXPECT_EQ(*s.servers[2].weight, 5u);
  // Units are checked: positive, at most the largest weight.
  EXPECT_NE(error_of([] { default_weights({0, 1}); }).find("units"), std::string::npos);
  EXPECT_NE(error_of([] { default_weights({-1, 1}); }).find("units"), std::string::npos);
  EXPECT_NE(error_of([] { default_weights({2e6}); }).find("units"), std::string::npos);
}

TEST(ScenarioLimitsTest, SigmaKeepsTheLognormalMean) {
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.servers[0].dist = ServiceDist::lognormal;
  s.servers[0].sigma = kMaxSigma;
  EXPECT_NO_THROW(validate(s));
  for (double sigma : {4.01, 50.0, -0.1, std::numeric_limits<double>::quiet_NaN()}) {
    s.servers[0].sigma = sigma;
    EXPECT_NE(error_of([&] { validate(s); }).find("sigma must be 0..4"), std::string::npos) << sigma;
  }
  EXPECT_NE(error_of([] { parse_server("name=a,dist=lognormal,sigma=50"); }).find("--server sigma"),
            std::string::npos);
  EXPECT_NE(scenario_error("", R"("sigma": 50)").find("servers[0].sigma: must be 0..4"), std::string::npos);
}

// Only the lognormal has a sigma: given with another distribution, it is an
// error naming the member and the distribution (it was accepted and ignored).
TEST(ScenarioFlagsTest, SigmaNeedsTheLognormal) {
  EXPECT_NE(error_of([] { parse_server("name=a,sigma=1"); })
                .find("--server sigma= applies only to dist=lognormal; dist is exp (the default)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,sigma=1,dist=fixed"); }).find("dist is fixed"), std::string::npos);
  EXPECT_EQ(error_of([] { parse_server("name=a,sigma=1,dist=lognormal"); }), "");
  EXPECT_EQ(error_of([] { parse_server("name=a,dist=fixed"); }), "");
  EXPECT_NE(scenario_error("", R"("sigma": 1)")
                .find("scenario: servers[0].sigma: applies only to \"dist\": \"lognormal\"; servers[0].dist is exp "
                      "(the default)"),
            std::string::npos);
  EXPECT_NE(scenario_error("", R"("dist": "fixed", "sigma": 1)").find("servers[0].dist is fixed"), std::string::npos);
  EXPECT_EQ(scenario_error("", R"("sigma": 1, "dist": "lognormal")"), "");
}

// A trace with no arrivals is an error, not the default 60 s with nothing arriving.
TEST(TraceTest, ATraceWithNoArrivalsIsAnError) {
  for (const char* text : {"", "\n", "# time key\n  \t\n# later\n"}) {
    Scenario s;
    EXPECT_NE(error_of([&] { load_trace(text, s); }).find("the trace has no arrivals"), std::string::npos)
        << "'" << text << "'";
  }
  // A Scenario built by hand is held to the same.
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.has_trace = true;
  EXPECT_NE(error_of([&] { validate(s); }).find("the trace has no arrivals"), std::string::npos);
}

// Up to the bound the simulated lognormal keeps its mean: with workers to spare
// (no queueing), mean latency is the mean service time.
TEST(ScenarioLimitsTest, LognormalKeepsItsMeanAtModerateSigma) {
  Scenario s;
  s.duration_s = 1000;
  s.rate = 1000;
  ServerSpec server;
  server.size = 100;
  server.service_s = 0.005;
  server.dist = ServiceDist::lognormal;
  server.sigma = 1.5;
  s.servers.push_back(server);
  s.policies = {balance::PolicyKind::round_robin};
  const SimResult r = simulate(s);
  EXPECT_NEAR(r.policies[0].latency.mean_s, 0.005, 0.005 * 0.03);
}

TEST(ScenarioLimitsTest, DurationsAreFinite) {
  EXPECT_NE(error_of([] { parse_duration("1e308h"); }).find("too large"), std::string::npos);
  EXPECT_NE(error_of([] { parse_server("name=a,service=1e308h"); }).find("too large"), std::string::npos);
  EXPECT_NE(error_of([] { parse_event("1e308h:a:fail"); }).find("too large"), std::string::npos);
  EXPECT_DOUBLE_EQ(parse_duration("1e300s"), 1e300);
  // Library callers too.
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.servers[0].service_s = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { validate(s); }).find("service time"), std::string::npos);
  s.servers[0].service_s = 0.005;
  s.servers[0].timeout_s = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { validate(s); }).find("timeout"), std::string::npos);
  s.servers[0].timeout_s = 0;
  s.bucket_s = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { validate(s); }).find("--bucket"), std::string::npos);
  s.bucket_s = 0;
  Event e;
  e.at_s = std::numeric_limits<double>::infinity();
  e.kind = Event::Kind::fail;
  e.server = "s1";
  s.events.push_back(e);
  EXPECT_NE(error_of([&] { validate(s); }).find("event times"), std::string::npos);
}

// A trace replaces the Poisson rate: giving both is an error, not a silent choice.
TEST(ScenarioJsonTest, RateAndTraceAreExclusive) {
  EXPECT_NE(error_of([] {
              scenario_from_json(nlohmann::json::parse(R"({"rate": 5, "trace": "t.txt", "servers": []})"), nullptr);
            }).find("rate and trace are exclusive"),
            std::string::npos);
}

// Simulated time is a double: a duration whose step would swallow the service
// time (1e15 s against 5 ms) is refused instead of giving wrong latencies.
TEST(ScenarioValidateTest, DurationBeyondTheClocksPrecisionIsRefused) {
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.servers[0].service_s = 0.005;
  s.rate = 1e-10;
  s.duration_s = 1e15;
  EXPECT_NE(error_of([&] { validate(s); }).find("too long for the shortest service time"), std::string::npos);
  s.duration_s = 2e7;  // 231 days of 5 ms services: still resolved
  EXPECT_EQ(error_of([&] { validate(s); }), "");
}

// A trace of Unix timestamps makes the duration ~1.7e9 s, past the clock's
// precision for a 5 ms service: the error says the times look absolute
// (it named only the duration and the service time).
TEST(ScenarioValidateTest, ATraceOfAbsoluteTimestampsIsNamedAsSuch) {
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.servers[0].service_s = 0.005;
  load_trace("1764600000.000\n1764600000.250\n1764600001.000\n", s);
  const std::string error = error_of([&] { validate(s); });
  EXPECT_NE(error.find("too long for the shortest service time"), std::string::npos) << error;
  EXPECT_NE(error.find("its times look like absolute timestamps"), std::string::npos) << error;
  // Relative times are simulated, with no such words.
  load_trace("0\n0.250\n1.000\n", s);
  s.duration_s = 0;
  EXPECT_EQ(error_of([&] { validate(s); }), "");
}

// 60 s in 1.2 ms buckets is 50,000 of them (the division gives 50000.000000000007),
// so 200 servers are exactly at the 10,000,000-point limit, not over it.
TEST(ScenarioValidateTest, BucketCountIsNotRoundedUpByBinaryNoise) {
  Scenario s;
  s.duration_s = 60;
  s.bucket_s = 0.0012;
  s.rate = 10;
  for (int i = 0; i < 200; ++i) s.servers.push_back(ServerSpec{});
  EXPECT_EQ(error_of([&] { validate(s); }), "");
  EXPECT_EQ(bucket_count(s), 50'000u);
  s.bucket_s = 0.007;  // 8,571.4 buckets: the partial one counts
  EXPECT_EQ(bucket_count(s), 8'572u);
}

// A '#' starts a comment anywhere on a trace line: "0.010   # arrival 0" is
// an arrival without a key (the comment was hashed as its key).
TEST(TraceTest, CommentsAreStrippedBeforeTheKey) {
  Scenario s;
  load_trace("# time key\n0.010   # arrival 0\n0.020#no space\n  # indented\n", s);
  EXPECT_EQ(s.trace_times, (std::vector<double>{0.010, 0.020}));
  EXPECT_TRUE(s.trace_keys.empty()) << "no line has a key";
  load_trace("0.010 bob # first\n0.020 bob\n", s);
  ASSERT_EQ(s.trace_keys.size(), 2u);
  EXPECT_EQ(s.trace_keys[0], s.trace_keys[1]);
}

// Durations read as the Heftfile's do ("1m30s", "1.5s", "1d"), plus "us" and a
// bare number of seconds; an error echoes the whole text.
TEST(ScenarioFlagsTest, DurationsTakeTheHeftfilesForms) {
  EXPECT_DOUBLE_EQ(parse_duration("1m30s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("1d"), 86400);
  EXPECT_DOUBLE_EQ(parse_duration("1s500ms"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("250us"), 250e-6);
  EXPECT_DOUBLE_EQ(parse_duration("0"), 0);
  EXPECT_DOUBLE_EQ(parse_duration("90"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("1e-3s"), 1e-3);
  EXPECT_NE(error_of([] { parse_duration("1m30", "--duration"); }).find("--duration: '1m30' is not a duration"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("1x", "--duration"); }).find("'1x'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("1m-30s", "--duration"); }).find("negative"), std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("s", "--duration"); }).find("'s'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("", "--duration"); }).find("--duration"), std::string::npos);
}

// TIME:SERVER:ACTION splits at the first and the last colon, so a server may be
// named after the address the proxy hashes by ("127.0.0.1:22001").
TEST(ScenarioFlagsTest, EventServerNamesMayHoldColons) {
  const Event failed = parse_event("10s:127.0.0.1:22001:fail");
  EXPECT_EQ(failed.server, "127.0.0.1:22001");
  EXPECT_EQ(failed.kind, Event::Kind::fail);
  const Event slow = parse_event("10s:[::1]:22001:slow=2");
  EXPECT_EQ(slow.server, "[::1]:22001");
  EXPECT_EQ(slow.kind, Event::Kind::slow);
  EXPECT_DOUBLE_EQ(slow.factor, 2);
  EXPECT_EQ(event_text(slow), "10s:[::1]:22001:slow=2");
  EXPECT_EQ(parse_event("5s:weights=1,2").weights, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(parse_event("5s:a:weight=3").server, "a");
}

// A slow factor far outside 1e-6..1e6 saturated the latency histogram
// (p99 18374686479.67 s for slow=1e300): an error naming the event.
TEST(ScenarioFlagsTest, SlowFactorIsBounded) {
  EXPECT_NE(error_of([] { parse_event("1s:s1:slow=1e300"); }).find("--event '1s:s1:slow=1e300'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_event("1s:s1:slow=1e-300"); }).find("slow"), std::string::npos);
  EXPECT_DOUBLE_EQ(parse_event("1s:s1:slow=1e6").factor, 1e6);
  EXPECT_DOUBLE_EQ(parse_event("1s:s1:slow=1e-6").factor, 1e-6);
  EXPECT_NE(scenario_error(R"("events": ["1s:a:slow=1e9"])").find("scenario: events[0]"), std::string::npos);
  // Library callers too.
  Scenario s;
  s.servers.push_back(ServerSpec{});
  s.events.push_back(parse_event("1s:s1:slow=2"));
  s.events[0].factor = 1e7;
  EXPECT_NE(error_of([&] { validate(s); }).find("slow factor"), std::string::npos);
}

// A weights= event with one weight too many or too few (a server added, the
// event not): the error said "event weights: 2 weights for 1 servers", naming
// neither the event nor, in a file, its place.
TEST(ScenarioJsonTest, AWeightsEventOfTheWrongLengthIsNamed) {
  const std::string in_file = scenario_error(R"("events": ["1s:a:fail", "2s:weights=1,2"])");
  EXPECT_NE(in_file.find("scenario: events[1]: 2 weights for 1 server"), std::string::npos) << in_file;
  Scenario s;
  s.servers.resize(3);
  s.events.push_back(parse_event("5s:weights=1,2"));
  const std::string from_flag = error_of([&] { validate(s); });
  EXPECT_NE(from_flag.find("--event '5s:weights=1,2': 2 weights for 3 servers"), std::string::npos) << from_flag;
}

// A scenario file's bucket too small for its duration was reported as
// "--bucket is too small", a flag the user never gave, without the numbers.
TEST(ScenarioJsonTest, ATooSmallBucketIsNamedWithItsNumbers) {
  const std::string in_file = scenario_error(R"("bucket": "1ms", "duration": "1000s")");
  EXPECT_NE(in_file.find("the scenario's \"bucket\""), std::string::npos) << in_file;
  EXPECT_NE(in_file.find("0.001s over 1000s is 1000000 buckets"), std::string::npos) << in_file;
  Scenario s;
  s.duration_s = 1000;
  s.bucket_s = 0.01;  // 100,000 buckets
  s.servers.resize(200);
  const std::string points = error_of([&] { validate(s); });
  EXPECT_NE(points.find("the scenario's \"bucket\""), std::string::npos) << points;
  EXPECT_NE(points.find("20000000 utilisation points"), std::string::npos) << points;
}

// A scenario file's rate x duration beyond the arrivals limit was reported as
// "--rate 1e+06 x --duration 600s", flags the user never gave.
TEST(ScenarioJsonTest, TooManyArrivalsNameTheScenarioMembersToo) {
  const std::string in_file = scenario_error(R"("rate": 1000000, "duration": "600s")");
  EXPECT_NE(in_file.find("rate 1e+06 req/s x duration 600s is 6e+08 expected arrivals"), std::string::npos)
      << in_file;
  EXPECT_NE(in_file.find("the scenario's \"rate\" and \"duration\""), std::string::npos) << in_file;
}

// A zero bucket was silently replaced by duration / 60; two servers of one name
// are an error in a file as on the command line.
TEST(ScenarioJsonTest, ZeroBucketAndDuplicateNamesAreRejected) {
  EXPECT_NE(scenario_error(R"("bucket": "0s")").find("scenario: bucket:"), std::string::npos);
  EXPECT_NE(scenario_error(R"("bucket": 0)").find("scenario: bucket:"), std::string::npos);
  const std::string twice = error_of([] {
    Scenario s = scenario_from_json(
        nlohmann::json::parse(R"({"servers": [{"name": "a", "size": 1}, {"name": "a", "size": 2}]})"), nullptr);
    validate(s);
  });
  EXPECT_NE(twice.find("'a'"), std::string::npos) << twice;
  // A member twice in one object (the parser kept the last): named by its path.
  EXPECT_NE(error_of([] { parse_scenario_text(R"({"duration": "2s", "duration": "9s"})"); })
                .find("scenario: duration: is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_scenario_text(R"({"events": ["1s:a:fail", [1, {"x": 2}]], "servers": [{"name": "a", "size": 1},
                                      {"name": "b", "size": 1, "name": "c"}]})");
            }).find("scenario: servers[1].name: is given twice"),
            std::string::npos);
  // The same key in different objects is fine.
  EXPECT_EQ(parse_scenario_text(R"({"servers": [{"name": "a"}, {"name": "b"}], "name": "x"})")["name"], "x");
  EXPECT_NE(error_of([] { parse_server("name=a,size=2,name=b"); }).find("--server: key 'name' is given twice"),
            std::string::npos);
}

}  // namespace
}  // namespace heft::sim
