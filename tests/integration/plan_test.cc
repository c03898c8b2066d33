// `heft plan` as a process: --json fields for the seed example and another group
// shape, the human output, and bad arguments exiting 2 with a one-line error.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

ProcessResult run_heft(const std::string& args) {
  ProcessResult run;
  // coreutils' timeout: a command still running after 120 s ends with 124.
  const std::string command = std::string("timeout -k 5 120 '") + HEFT_BINARY + "' " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (run.exit_code == 124) ADD_FAILURE() << "still running after 120 s: heft " << args;
  return run;
}

TEST(PlanCommandTest, JsonForTheSeedExample) {
  const ProcessResult run = run_heft("plan --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  EXPECT_NEAR(json["average_rps"]["value"].get<double>(), 1e6 * 50 / 86400, 1e-9);
  EXPECT_EQ(json["average_rps"]["rounded"], 579);
  EXPECT_EQ(json["peak_rps"]["rounded"], 1157);
  EXPECT_EQ(json["small_server_equivalents"]["rounded"], 9.65);
  EXPECT_EQ(json["groups"], 2);
  EXPECT_EQ(json["servers"]["3"], 2);
  EXPECT_EQ(json["servers"]["1"], 4);
  EXPECT_EQ(json["utilisation_weighted"]["rounded"], 58);
  EXPECT_EQ(json["utilisation_unweighted"]["3"]["rounded"], 32);
  EXPECT_EQ(json["utilisation_unweighted"]["1"]["rounded"], 96);
  EXPECT_EQ(json["half_speed"]["fixed_share_big"]["rounded"], 116);
  EXPECT_EQ(json["half_speed"]["fixed_share_big"]["over_100"], true);
  EXPECT_EQ(json["half_speed"]["perfect_split"]["rounded"], 83);
  EXPECT_EQ(json["half_speed"]["perfect_split"]["over_100"], false);
}

TEST(PlanCommandTest, JsonForAnotherGroupShape) {
  const ProcessResult run = run_heft("plan --json --group 4,2,1,1 --server-rps 100 --target-busy 50 --planned-peak 1.5");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto json = nlohmann::json::parse(run.output);
  const double peak = 1e6 * 50 / 86400 * 2;
  const double now = peak * 1.5;
  const int groups = 3;  // ceil(peak / 50 / 8) = ceil(2.89)
  EXPECT_EQ(json["groups"], groups);
  EXPECT_EQ(json["servers"]["4"], 3);
  EXPECT_EQ(json["servers"]["2"], 3);
  EXPECT_EQ(json["servers"]["1"], 6);
  EXPECT_NEAR(json["utilisation_weighted"]["value"].get<double>(), now / (groups * 8 * 100) * 100, 1e-9);
  EXPECT_NEAR(json["utilisation_unweighted"]["2"]["value"].get<double>(), now / 12 / 200 * 100, 1e-9);
  EXPECT_NEAR(json["half_speed"]["perfect_split"]["value"].get<double>(), now / (groups * 6 * 100) * 100, 1e-9);
}

TEST(PlanCommandTest, HumanOutputShowsTheSteps) {
  const ProcessResult run = run_heft("plan");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("1,000,000 x 50 / 86,400 = 579 req/s"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("2 big + 4 small"), std::string::npos);
  EXPECT_NE(run.output.find("116% [over 100%]"), std::string::npos);
}

// docs/plan.md's worked example is the command's real output (it showed the
// numbers in another layout).
TEST(PlanCommandTest, WorkedExampleInTheDocsIsTheRealOutput) {
  std::ifstream in(std::string(HEFT_SOURCE_DIR) + "/docs/plan.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::size_t section = doc.find("## Worked example (the defaults)");
  ASSERT_NE(section, std::string::npos);
  const std::size_t open = doc.find("```\n", section);
  ASSERT_NE(open, std::string::npos);
  const std::size_t close = doc.find("```\n", open + 4);
  ASSERT_NE(close, std::string::npos);
  const ProcessResult run = run_heft("plan");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(doc.substr(open + 4, close - open - 4), run.output);
}

// Spaces and tabs around --group's sizes are trimmed, as heft pick's and heft
// sim's lists are (a tab after a size was an error); an empty size is not.
TEST(PlanCommandTest, GroupSizesAreTrimmed) {
  const ProcessResult spaced = run_heft("plan --json --group ' 3 ,\t1\t, 1'");
  ASSERT_EQ(spaced.exit_code, 0) << spaced.output;
  EXPECT_EQ(spaced.output, run_heft("plan --json --group 3,1,1").output);
  const ProcessResult empty = run_heft("plan --group '3, ,1'");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("--group must be comma-separated positive server sizes"), std::string::npos)
      << empty.output;
}

TEST(PlanCommandTest, BadArgumentsExitTwoWithOneLine) {
  for (const char* args : {"plan --dau 0", "plan --group 3,x", "plan --target-busy 150", "plan --server-rps -5",
                           "plan --dau many", "plan --server-rps 9e18", "plan --group 1e308,1e308",
                           "plan --group 1e308,1e308 --json", "plan --planned-peak 1e300"}) {
    const ProcessResult run = run_heft(args);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_EQ(run.output.rfind("heft: ", 0), 0u) << run.output;
    EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << run.output;
  }
}

}  // namespace
