// The capacity planner: the seed's worked example exactly, a second input set
// against formulas worked by hand here, rounding and validation.
#include "sim/planner.h"

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace heft::sim {
namespace {

constexpr double kTolerance = 1e-9;

TEST(PlannerTest, SeedExampleNumbers) {
  const Plan plan = make_plan(PlanInputs{});
  EXPECT_NEAR(plan.average_rps, 1e6 * 50 / 86400, kTolerance);
  EXPECT_EQ(round_rps(plan.average_rps), 579);
  EXPECT_EQ(round_rps(plan.peak_rps), 1157);
  EXPECT_NEAR(plan.peak_rps, 1157.4074074074074, 1e-9);
  EXPECT_EQ(round_equivalents(plan.small_server_equivalents), 9.65);
  EXPECT_EQ(plan.group_capacity, 5);
  EXPECT_EQ(plan.groups, 2);
  ASSERT_EQ(plan.servers.size(), 2u);
  EXPECT_EQ(plan.servers[0].size, 3);
  EXPECT_EQ(plan.servers[0].total, 2);
  EXPECT_EQ(plan.servers[1].size, 1);
  EXPECT_EQ(plan.servers[1].total, 4);
  EXPECT_EQ(plan.total_servers, 6);
  EXPECT_EQ(plan.total_capacity_rps, 2000);
  EXPECT_EQ(round_percent(plan.utilisation_weighted_percent), 58);
  EXPECT_NEAR(plan.equal_share_rps, 1157.4074074074074 / 6, 1e-9);
  ASSERT_EQ(plan.utilisation_unweighted.size(), 2u);
  EXPECT_EQ(round_percent(plan.utilisation_unweighted[0].busy_percent), 32);  // big
  EXPECT_EQ(round_percent(plan.utilisation_unweighted[1].busy_percent), 96);  // small
  EXPECT_EQ(plan.slow_server_capacity_rps, 300);
  EXPECT_NEAR(plan.fixed_share_big_rps, 1157.4074074074074 * 3 / 10, 1e-9);
  EXPECT_EQ(round_percent(plan.fixed_share_big_percent), 116);
  EXPECT_EQ(plan.reduced_capacity_rps, 1400);
  EXPECT_EQ(round_percent(plan.perfect_split_percent), 83);
}

TEST(PlannerTest, SeedExampleText) {
  const std::string text = format_plan_text(make_plan(PlanInputs{}));
  EXPECT_NE(text.find("1. Average requests per second"), std::string::npos);
  EXPECT_NE(text.find("DAU x requests per user per day / 86,400 = 1,000,000 x 50 / 86,400 = 579 req/s"),
            std::string::npos);
  EXPECT_NE(text.find("average x peak factor = 579 x 2 = 1,157 req/s"), std::string::npos);
  EXPECT_NE(text.find("9.65 small servers' worth"), std::string::npos);
  EXPECT_NE(text.find("one 3x and two 1x"), std::string::npos);
  EXPECT_NE(text.find("= 2 groups = 2 big + 4 small"), std::string::npos);
  EXPECT_NE(text.find("= 58%"), std::string::npos);
  EXPECT_NE(text.find("big server (3x): 193 / (3 x 200) = 32%"), std::string::npos);
  EXPECT_NE(text.find("small servers (1x): 193 / (1 x 200) = 96%"), std::string::npos);
  EXPECT_NE(text.find("6. If the big server slows to half speed"), std::string::npos);
  EXPECT_NE(text.find("= 116% [over 100%]"), std::string::npos);
  EXPECT_NE(text.find("= 83%"), std::string::npos);
  EXPECT_EQ(text.find("83% [over"), std::string::npos);
}

TEST(PlannerTest, SeedExampleJson) {
  const nlohmann::json json = plan_to_json(make_plan(PlanInputs{}));
  EXPECT_EQ(json["average_rps"]["rounded"], 579);
  EXPECT_NEAR(json["average_rps"]["value"].get<double>(), 578.7037037, 1e-6);
  EXPECT_EQ(json["peak_rps"]["display"], "1,157 req/s");
  EXPECT_EQ(json["small_server_equivalents"]["display"], "9.65");
  EXPECT_EQ(json["groups"], 2);
  EXPECT_EQ(json["servers"]["3"], 2);
  EXPECT_EQ(json["servers"]["1"], 4);
  EXPECT_EQ(json["utilisation_weighted"]["rounded"], 58);
  EXPECT_EQ(json["utilisation_weighted"]["over_100"], false);
  EXPECT_EQ(json["utilisation_unweighted"]["3"]["rounded"], 32);
  EXPECT_EQ(json["utilisation_unweighted"]["1"]["rounded"], 96);
  EXPECT_EQ(json["half_speed"]["fixed_share_big"]["rounded"], 116);
  EXPECT_EQ(json["half_speed"]["fixed_share_big"]["over_100"], true);
  EXPECT_EQ(json["half_speed"]["perfect_split"]["rounded"], 83);
  EXPECT_EQ(json["half_speed"]["perfect_split"]["display"], "83%");
}

TEST(PlannerTest, FourSizeGroupMatchesHandFormulas) {
  PlanInputs in;
  in.daily_active_users = 2'000'000;
  in.requests_per_user = 30;
  in.peak_factor = 3;
  in.server_rps = 100;
  in.target_busy_percent = 50;
  in.group = {4, 2, 1, 1};
  in.planned_peak = 1.2;
  const Plan plan = make_plan(in);

  const double average = 2'000'000.0 * 30 / 86'400;  // 694.4
  const double peak = average * 3;                    // 2083.3
  const double now = peak * 1.2;                      // 2500
  EXPECT_NEAR(plan.average_rps, average, kTolerance);
  EXPECT_NEAR(plan.peak_rps, peak, kTolerance);
  EXPECT_NEAR(plan.traffic_now_rps, 2500, 1e-9);
  EXPECT_NEAR(plan.small_server_equivalents, peak / (100 * 0.5), kTolerance);  // 41.67
  EXPECT_EQ(plan.group_capacity, 8);
  EXPECT_EQ(plan.groups, 6);  // ceil(41.67 / 8)
  ASSERT_EQ(plan.servers.size(), 3u);
  EXPECT_EQ(plan.servers[0].size, 4);
  EXPECT_EQ(plan.servers[0].total, 6);
  EXPECT_EQ(plan.servers[1].size, 2);
  EXPECT_EQ(plan.servers[1].total, 6);
  EXPECT_EQ(plan.servers[2].size, 1);
  EXPECT_EQ(plan.servers[2].per_group, 2);
  EXPECT_EQ(plan.servers[2].total, 12);
  EXPECT_EQ(plan.total_servers, 24);
  EXPECT_NEAR(plan.utilisation_weighted_percent, now / (6 * 8 * 100) * 100, 1e-9);  // 52.08
  const double share = now / 24;                                                      // 104.17
  EXPECT_NEAR(plan.equal_share_rps, share, 1e-9);
  EXPECT_NEAR(plan.utilisation_unweighted[0].busy_percent, share / 400 * 100, 1e-9);  // 26.04
  EXPECT_NEAR(plan.utilisation_unweighted[1].busy_percent, share / 200 * 100, 1e-9);  // 52.08
  EXPECT_NEAR(plan.utilisation_unweighted[2].busy_percent, share / 100 * 100, 1e-9);  // 104.17
  // Half speed: the one 4x server per group drops to 2x worth of capacity.
  EXPECT_NEAR(plan.fixed_share_big_rps, now * 4 / 48, 1e-9);                          // 208.3
  EXPECT_NEAR(plan.fixed_share_big_percent, now * 4 / 48 / 200 * 100, 1e-9);          // 104.17
  EXPECT_NEAR(plan.reduced_capacity_rps, 6 * (2 + 2 + 1 + 1) * 100, 1e-9);            // 3600
  EXPECT_NEAR(plan.perfect_split_percent, now / 3600 * 100, 1e-9);                    // 69.44

  const nlohmann::json json = plan_to_json(plan);
  EXPECT_EQ(json["servers"]["4"], 6);
  EXPECT_EQ(json["servers"]["2"], 6);
  EXPECT_EQ(json["servers"]["1"], 12);
  EXPECT_EQ(json["utilisation_unweighted"]["1"]["over_100"], true);
  EXPECT_EQ(json["utilisation_unweighted"]["2"]["over_100"], false);
  EXPECT_EQ(json["half_speed"]["fixed_share_big"]["over_100"], true);
  EXPECT_EQ(json["half_speed"]["perfect_split"]["rounded"], 69);

  const std::string text = format_plan_text(plan);
  EXPECT_NE(text.find("traffic now = peak x planned peak = 2,083 x 1.2 = 2,500 req/s"), std::string::npos);
  EXPECT_NE(text.find("6 of 4x + 6 of 2x + 12 of 1x"), std::string::npos);
  EXPECT_NE(text.find("small servers (1x): 104 / (1 x 100) = 104% [over 100%]"), std::string::npos);
}

TEST(PlannerTest, ExactFitDoesNotAddAGroup) {
  PlanInputs in;
  in.daily_active_users = 86'400;
  in.requests_per_user = 1000;  // 1000 req/s
  in.peak_factor = 1;
  in.server_rps = 100;
  in.target_busy_percent = 100;  // exactly 10 small servers' worth, 5 per group
  const Plan plan = make_plan(in);
  EXPECT_EQ(plan.groups, 2);
  EXPECT_NEAR(plan.utilisation_weighted_percent, 100, 1e-9);
  EXPECT_EQ(plan_to_json(plan)["utilisation_weighted"]["over_100"], false);
}

// An exact fit whose binary arithmetic lands a hair above 100 % (0.7 + 0.1 is
// 0.7999999999999999): step 3 finds one group enough, so step 4 is not "over".
TEST(PlannerTest, ExactFitInBinaryNoiseIsNotOver100) {
  PlanInputs in;
  in.daily_active_users = 69'120;  // 0.8 req/s
  in.requests_per_user = 1;
  in.peak_factor = 1;
  in.server_rps = 1;
  in.target_busy_percent = 100;
  in.group = {0.7, 0.1};
  const Plan plan = make_plan(in);
  EXPECT_EQ(plan.groups, 1);
  EXPECT_EQ(plan_to_json(plan)["utilisation_weighted"]["over_100"], false);
  const std::string text = format_plan_text(plan);
  const size_t step4 = text.find("\n4. "), step5 = text.find("\n5. ");
  ASSERT_LT(step4, step5) << text;
  EXPECT_EQ(text.substr(step4, step5 - step4).find("[over 100%]"), std::string::npos) << text;
  EXPECT_NE(text.find("(capacity 0.8)"), std::string::npos) << text;  // not 0.7999999999999999
}

TEST(PlannerTest, TinyTrafficStillNeedsOneGroup) {
  PlanInputs in;
  in.daily_active_users = 10;
  in.requests_per_user = 1;
  const Plan plan = make_plan(in);
  EXPECT_EQ(plan.groups, 1);
  EXPECT_EQ(plan.total_servers, 3);
}

TEST(PlannerTest, UniformGroupSlowsEveryServer) {
  PlanInputs in;
  in.group = {1, 1};
  const Plan plan = make_plan(in);
  ASSERT_EQ(plan.servers.size(), 1u);
  EXPECT_EQ(plan.servers[0].per_group, 2);
  // Every server is 'largest', so all halve: double the weighted utilisation.
  EXPECT_NEAR(plan.perfect_split_percent, 2 * plan.utilisation_weighted_percent, 1e-9);
  EXPECT_NEAR(plan.fixed_share_big_percent, 2 * plan.utilisation_weighted_percent, 1e-9);
}

TEST(PlannerTest, Rounding) {
  EXPECT_EQ(round_rps(578.7037), 579);
  EXPECT_EQ(round_rps(1157.4074), 1157);
  EXPECT_DOUBLE_EQ(round_rps(57.87), 57.9);
  EXPECT_DOUBLE_EQ(round_rps(0.05787), 0.0579);
  EXPECT_EQ(format_rps(1157.4074), "1,157");
  EXPECT_EQ(format_rps(1'234'567.8), "1,234,568");
  EXPECT_EQ(format_rps(57.87), "57.9");
  EXPECT_EQ(round_percent(115.74), 116);
  EXPECT_EQ(round_percent(82.67), 83);
  EXPECT_DOUBLE_EQ(round_equivalents(9.645061728), 9.65);
  EXPECT_EQ(format_size(1.5), "1.5");
  EXPECT_EQ(format_size(3), "3");
  EXPECT_EQ(format_size(0.1 + 0.2), "0.3");  // a group's capacity, summed in binary
  EXPECT_EQ(format_rps(1.16e-297), "1.16e-297");
  EXPECT_EQ(format_rps(0.1 + 0.2), "0.3");
}

TEST(PlannerTest, ParseGroup) {
  EXPECT_EQ(parse_group("3,1,1"), (std::vector<double>{3, 1, 1}));
  EXPECT_EQ(parse_group("2"), (std::vector<double>{2}));
  EXPECT_EQ(parse_group("1.5, 1"), (std::vector<double>{1.5, 1}));
  EXPECT_EQ(parse_group(" 3\t, 1 ,1\t"), (std::vector<double>{3, 1, 1}));  // blanks around sizes are trimmed
  for (const char* bad : {"", ",", "3,", "3,,1", "3, ,1", "\t", "a", "3,0", "3,-1", "3x", "inf", "nan"}) {
    EXPECT_THROW(parse_group(bad), std::invalid_argument) << bad;
  }
}

TEST(PlannerTest, InvalidInputsThrow) {
  auto with = [](auto change) {
    PlanInputs in;
    change(in);
    return in;
  };
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.daily_active_users = 0; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.requests_per_user = -1; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.peak_factor = 0; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.server_rps = 0; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.target_busy_percent = 0; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.target_busy_percent = 101; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.planned_peak = 0; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.group.clear(); })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.group = {3, 0}; })), std::invalid_argument);
  EXPECT_THROW(make_plan(with([](PlanInputs& in) { in.daily_active_users = 1e300; })), std::invalid_argument);
}

// docs/plan.md: every number must be finite. Inputs that are each fine but whose
// products overflow (or underflow to 0) are rejected, naming the flags.
TEST(PlannerTest, OverflowingResultsThrowNamingTheFlags) {
  auto error = [](auto change) -> std::string {
    PlanInputs in;
    change(in);
    try {
      make_plan(in);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error([](PlanInputs& in) { in.server_rps = 9e18; }).find("--server-rps"), std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.group = {1e308, 1e308}; }).find("--group"), std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.group = {1, 1e-300}; }).find("--group"), std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.requests_per_user = 1e300; }).find("--requests-per-user"),
            std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.peak_factor = 1e300; }).find("--peak-factor"), std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.planned_peak = 1e300; }).find("--planned-peak"), std::string::npos);
  EXPECT_NE(error([](PlanInputs& in) { in.daily_active_users = 1e-320; }).find("too small"), std::string::npos);
  // Big but representable inputs still plan, and every JSON number is finite.
  PlanInputs big;
  big.daily_active_users = 1e12;
  big.server_rps = 1e6;
  const nlohmann::json j = plan_to_json(make_plan(big));
  EXPECT_EQ(j.dump().find("null"), std::string::npos) << j.dump();
}

// Too many groups: the error names the flags whose quotient the count is
// ("the plan needs 9.6e+300 groups" named none of them).
TEST(PlannerTest, TooManyGroupsNamesTheFlags) {
  PlanInputs in;
  in.group = {1e-300};
  std::string error;
  try {
    make_plan(in);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  for (const char* flag : {"--dau", "--requests-per-user", "--peak-factor", "--server-rps", "--target-busy", "--group"})
    EXPECT_NE(error.find(flag), std::string::npos) << flag << ": " << error;
  EXPECT_NE(error.find("groups"), std::string::npos) << error;
}

TEST(PlannerTest, OneGroupIsSingular) {
  PlanInputs in;
  in.daily_active_users = 10;
  const std::string text = format_plan_text(make_plan(in));
  EXPECT_EQ(text.find("1 groups"), std::string::npos) << text;
  EXPECT_NE(text.find("(1 group x 5 x 200"), std::string::npos) << text;
}

// A group of one server read "in groups of one 2x servers".
TEST(PlannerTest, AOneServerGroupIsSingular) {
  PlanInputs in;
  in.group = {2};
  const std::string text = format_plan_text(make_plan(in));
  EXPECT_NE(text.find("in groups of one 2x server (capacity 2)"), std::string::npos) << text;
  in.group = {1, 1};
  EXPECT_NE(format_plan_text(make_plan(in)).find("in groups of two 1x servers (capacity 2)"), std::string::npos);
  in.group = {3, 1, 1};
  EXPECT_NE(format_plan_text(make_plan(in)).find("in groups of one 3x and two 1x servers (capacity 5)"),
            std::string::npos);
}

}  // namespace
}  // namespace heft::sim
