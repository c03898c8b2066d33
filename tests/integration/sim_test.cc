// `heft sim` as a user runs it: the real binary (HEFT_BINARY), byte-identical
// output for the same seed, the SVG report, and exit code 2 on bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

namespace {

struct Output {
  int exit_code = -1;
  std::string stdout_text;
};

// Runs a shell command and captures what it prints.
Output run_heft_capture(const std::string& command) {
  Output out;
  // coreutils' timeout: a command still running after 120 s ends with 124.
  FILE* pipe = popen(("timeout -k 5 120 " + command).c_str(), "r");
  if (!pipe) return out;
  char buffer[65536];
  for (size_t guard = 0; guard < (size_t{1} << 24); ++guard) {
    size_t n = fread(buffer, 1, sizeof buffer, pipe);
    if (n == 0) break;
    out.stdout_text.append(buffer, n);
  }
  int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (out.exit_code == 124) ADD_FAILURE() << "still running after 120 s: " << command;
  return out;
}

// Runs `heft <args>` through the shell; stderr goes to /dev/null.
Output run_heft(const std::string& args) {
  return run_heft_capture(std::string(HEFT_BINARY) + " " + args + " 2>/dev/null");
}

// Runs `heft <args>` and returns its exit code and stderr (stdout is dropped).
Output run_heft_stderr(const std::string& args) {
  return run_heft_capture(std::string(HEFT_BINARY) + " " + args + " 2>&1 >/dev/null");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SimCommandTest, SeedExampleJsonIsByteIdenticalAcrossRuns) {
  Output a = run_heft("sim --example seed --json");
  Output b = run_heft("sim --example seed --json");
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  EXPECT_EQ(a.stdout_text, b.stdout_text);
  auto j = nlohmann::json::parse(a.stdout_text);
  ASSERT_EQ(j["scenarios"].size(), 2u);
  EXPECT_EQ(j["scenarios"][0]["policies"].size(), 3u);
  EXPECT_EQ(j["scenarios"][1]["events"][0], "0s:big:slow=2");
}

TEST(SimCommandTest, TableAndCsv) {
  Output table = run_heft("sim --servers 3x,1x,1x --unit-workers 4 --service 20ms --rate 579 --duration 30s");
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.stdout_text.find("least_conn"), std::string::npos);
  EXPECT_NE(table.stdout_text.find("p99"), std::string::npos);
  Output csv = run_heft("sim --servers 2x,1x --rate 100 --duration 10s --policies round_robin --csv");
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_EQ(csv.stdout_text.rfind("scenario,policy,server", 0), 0u);
}

TEST(SimCommandTest, SvgReportHasAxesAndLegend) {
  auto path = std::filesystem::temp_directory_path() / ("heft_sim_test_" + std::to_string(::getpid()) + ".svg");
  Output out = run_heft("sim --servers 3x,1x,1x --rate 300 --duration 20s --event 10s:s1:slow=2 --svg " +
                        path.string());
  ASSERT_EQ(out.exit_code, 0);
  std::string svg = read_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("time (s)"), std::string::npos);
  EXPECT_NE(svg.find("utilisation (%)"), std::string::npos);
  EXPECT_NE(svg.find("fraction of requests"), std::string::npos);
  EXPECT_NE(svg.find("weighted_round_robin"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(SimCommandTest, ScenarioFile) {
  auto path = std::filesystem::temp_directory_path() / ("heft_sim_test_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"name": "file", "duration": "20s", "rate": 200,
    "servers": [{"name": "a", "size": 4, "service": "20ms"}, {"name": "b", "size": 4, "service": "20ms"}],
    "policies": ["least_conn"], "events": ["10s:b:fail"]})";
  Output out = run_heft("sim --scenario " + path.string() + " --json");
  std::filesystem::remove(path);
  ASSERT_EQ(out.exit_code, 0);
  auto j = nlohmann::json::parse(out.stdout_text);
  EXPECT_EQ(j["scenarios"][0]["name"], "file");
  EXPECT_GT(j["scenarios"][0]["policies"][0]["servers"][0]["share"].get<double>(), 0.7);
}

// `--config`: a site's pool as heft would run it (backends by address, their
// weights and max_conns, a `down` one at 0, backups, the pool's policy and
// queue), sized by --servers.
TEST(SimCommandTest, ConfigSimulatesASitesPoolAsConfigured) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_sim_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string heftfile = (dir / "Heftfile").string();
  std::ofstream(heftfile) << ":8080 {\n\treverse_proxy {\n\t\tto 10.0.0.1:80 weight 3 max_conns 12\n"
                             "\t\tto 10.0.0.2:80 max_conns 4\n\t\tto 10.0.0.3:80 down\n\t\tto 10.0.0.9:80 backup\n"
                             "\t\tlb_policy least_conn\n\t\tqueue 50\n\t\tqueue_timeout 2s\n\t}\n}\n"
                             "other.test:8080 {\n\treverse_proxy 10.0.1.1:80\n}\n";
  const std::string run = "sim --config " + heftfile + " --site 0 --servers 3x,1x,1x,1x --unit-workers 4 "
                          "--service 20ms --rate 500 --duration 10s";
  Output out = run_heft(run + " --json");
  ASSERT_EQ(out.exit_code, 0) << out.stdout_text;
  const auto sc = nlohmann::json::parse(out.stdout_text)["scenarios"][0];
  ASSERT_EQ(sc["servers"].size(), 4u);
  EXPECT_EQ(sc["servers"][0]["name"], "10.0.0.1:80");
  EXPECT_EQ(sc["servers"][0]["weight"], 3);
  EXPECT_EQ(sc["servers"][0]["max_conns"], 12);
  EXPECT_EQ(sc["servers"][0]["size"], 12);
  EXPECT_EQ(sc["servers"][1]["weight"], 1);
  EXPECT_EQ(sc["servers"][1]["max_conns"], 4);
  EXPECT_EQ(sc["servers"][2]["weight"], 1) << "down, not drained";
  EXPECT_EQ(sc["servers"][2]["down"], true);
  EXPECT_FALSE(sc["servers"][1].contains("down"));
  EXPECT_FALSE(sc["servers"][0].contains("backup"));
  EXPECT_EQ(sc["servers"][3]["name"], "10.0.0.9:80");
  EXPECT_EQ(sc["servers"][3]["backup"], true);
  EXPECT_EQ(sc["queue"], 50);
  EXPECT_EQ(sc["queue_timeout_s"], 2);
  ASSERT_EQ(sc["policies"].size(), 1u);
  EXPECT_EQ(sc["policies"][0]["policy"], "least_conn");
  EXPECT_EQ(sc["policies"][0]["servers"][2]["requests"], 0);
  EXPECT_GT(sc["policies"][0]["servers"][0]["requests"].get<uint64_t>(), 0u);
  // Flags still refine it: other policies, no queue.
  out = run_heft(run + " --policies weighted_round_robin,round_robin --queue 0 --json");
  ASSERT_EQ(out.exit_code, 0) << out.stdout_text;
  const auto other = nlohmann::json::parse(out.stdout_text)["scenarios"][0];
  EXPECT_EQ(other["policies"].size(), 2u);
  EXPECT_FALSE(other.contains("queue"));
  // The second site, a JSON configuration, and the errors.
  out = run_heft("sim --config " + heftfile + " --site 1 --servers 2x --rate 50 --duration 2s --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][0]["name"], "10.0.1.1:80");
  const std::string json_config = (dir / "heft.json").string();
  ASSERT_EQ(run_heft_capture(std::string(HEFT_BINARY) + " adapt --config " + heftfile + " > " + json_config).exit_code, 0);
  out = run_heft("sim --config " + json_config + " --site 0 --servers 3x,1x,1x,1x --rate 50 --duration 2s --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][0]["weight"], 3);
  const auto rejected = [](const std::string& args, const std::string& names) {
    Output err = run_heft_stderr(args);
    EXPECT_EQ(err.exit_code, 2) << args;
    EXPECT_NE(err.stdout_text.find(names), std::string::npos) << args << ": " << err.stdout_text;
  };
  rejected("sim --config " + heftfile + " --site 0", "--config needs --servers");
  rejected("sim --config " + heftfile + " --servers 1x,1x,1x", "has 2 sites: choose one with --site N (0..1");
  rejected("sim --config " + heftfile + " --site 2 --servers 1x", "--site '2': no site 2 (give a host, HOST:PORT, :PORT or the site's index); '" + heftfile + "' has 2 sites (0..1: ");
  rejected("sim --config " + heftfile + " --site 0 --servers 1x,1x", "--servers: 2 sizes for the 4 backends of site 0");
  rejected("sim --site 0 --servers 1x", "--site needs --config");
  // What heft run and heft validate warn of for the site simulated, and only for it.
  const std::string warned = (dir / "Warned").string();
  std::ofstream(warned) << ":8080 {\n\treverse_proxy {\n\t\tto 10.0.0.1:80\n\t\tqueue 10\n\t}\n}\n"
                           ":8081 {\n\treverse_proxy {\n\t\tto 10.0.0.2:80 weight 3\n\t\tto 10.0.0.3:80\n"
                           "\t\tlb_policy round_robin\n\t}\n}\n";
  out = run_heft_stderr("sim --config " + warned + " --site :8080 --servers 1x --rate 50 --duration 2s --json");
  EXPECT_EQ(out.exit_code, 0) << out.stdout_text;
  EXPECT_NE(out.stdout_text.find("warning: " + warned + ":1: site :8080: queue 10 has no effect: no backend has "
                                 "max_conns"),
            std::string::npos)
      << out.stdout_text;
  EXPECT_EQ(out.stdout_text.find("round_robin ignores"), std::string::npos) << out.stdout_text;
  out = run_heft_stderr("sim --config " + warned + " --site :8081 --servers 1x,1x --rate 50 --duration 2s --json");
  EXPECT_EQ(out.exit_code, 0) << out.stdout_text;
  EXPECT_NE(out.stdout_text.find("round_robin ignores the weights 3:1"), std::string::npos) << out.stdout_text;
  EXPECT_EQ(out.stdout_text.find("queue 10"), std::string::npos) << out.stdout_text;
  const std::string bad = (dir / "Bad").string();
  std::ofstream(bad) << ":1 {\n\treverse_proxy a:1 {\n\t\twieght 3\n\t}\n}\n";
  rejected("sim --config " + bad + " --servers 1x", bad + ":3:3: unknown option \"wieght\"");
  std::filesystem::remove_all(dir);
}

// A `down` backend is down in the simulation as in the proxy, where a weight
// given to it (heft weight, a reload's) leaves it down. --config made it
// weight 0 instead, so --weights or a weight event sent it requests the
// proxy never would (21 % here), and a hashed pool lost its ring place.
TEST(SimCommandTest, ConfigDownBackendStaysDownWhateverItsWeight) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_sim_down_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string heftfile = (dir / "Heftfile").string();
  std::ofstream(heftfile) << ":8080 {\n\treverse_proxy {\n\t\tto 10.0.0.1:80 weight 5\n\t\tto 10.0.0.2:80 weight 3\n"
                             "\t\tto 10.0.0.3:80 weight 2 down\n\t}\n}\n";
  const std::string sim = "sim --config " + heftfile + " --servers 1x,1x,1x --rate 100 --duration 2s --json";
  for (const std::string& change : {std::string(" --event 1s:10.0.0.3:80:weight=5"), std::string(" --weights 5,3,2"),
                                    std::string(" --event 1s:weights=0,0,5"),
                                    std::string(" --policies hash,round_robin,least_conn,random,p2c,first")}) {
    Output out = run_heft(sim + change);
    ASSERT_EQ(out.exit_code, 0) << change;
    const auto policies = nlohmann::json::parse(out.stdout_text)["scenarios"][0]["policies"];
    ASSERT_EQ(policies.size(), change.starts_with(" --policies") ? 6u : 1u) << change;
    for (const auto& policy : policies)
      EXPECT_EQ(policy["servers"][2]["requests"], 0) << change << ": " << policy["policy"];
  }
  std::filesystem::remove_all(dir);
}

TEST(SimCommandTest, BadArgumentsExitTwo) {
  EXPECT_EQ(run_heft("sim --example nowhere").exit_code, 2);
  EXPECT_EQ(run_heft("sim --servers 3x,1x --policies fastest").exit_code, 2);
  EXPECT_EQ(run_heft("sim --servers 3x,1x --event 10s:nobody:fail").exit_code, 2);
  EXPECT_EQ(run_heft("sim --servers 3x,1x --duration soon").exit_code, 2);
  EXPECT_EQ(run_heft("sim").exit_code, 2);
  EXPECT_EQ(run_heft("sim --example seed --json --csv").exit_code, 2);
  EXPECT_EQ(run_heft("sim --scenario /nonexistent/file.json").exit_code, 2);
  EXPECT_EQ(run_heft("sim --servers 1x --rate 10 --duration 2s --service 1e308h").exit_code, 2);
  EXPECT_EQ(run_heft("sim --servers 1x --rate 10 --duration 2s --event 1e308h:s1:slow=2").exit_code, 2);
}

// A bad argument: exit 2 and one line on stderr that contains `names`.
void expect_rejected(const std::string& args, const std::string& names) {
  Output out = run_heft_stderr(args);
  EXPECT_EQ(out.exit_code, 2) << args << ": " << out.stdout_text;
  EXPECT_EQ(std::count(out.stdout_text.begin(), out.stdout_text.end(), '\n'), 1) << args << ": " << out.stdout_text;
  EXPECT_NE(out.stdout_text.find(names), std::string::npos) << args << ": " << out.stdout_text;
}

// --site is heft's index of the site (heft weight's, /reverse_proxy/upstreams'
// `site`): sites grouped by port, so here c.test is 1 and b.test 2, not the
// file's order the errors claimed; they now list the sites. It is read as
// given: CLI11 wrapped "-1" into 18446744073709551615, which the error then
// named, and took an empty value for site 0.
TEST(SimCommandTest, ConfigSiteIsTheIndexAsGivenAndErrorsListTheSites) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_sim_site_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string heftfile = (dir / "Heftfile").string();
  std::ofstream(heftfile) << "a.test:8080 {\n\treverse_proxy 10.0.0.1:80\n}\n"
                             "b.test:9090 {\n\treverse_proxy 10.0.0.2:80 10.0.0.3:80\n}\n"
                             "c.test:8080 {\n\treverse_proxy 10.0.0.4:80\n}\n";
  const std::string sim = "sim --config " + heftfile + " --rate 10 --duration 1s";
  const std::string sites = "'" + heftfile + "' has 3 sites (0..2: 0 a.test:8080, 1 c.test:8080, 2 b.test:9090)";
  expect_rejected(sim + " --servers 1x", "'" + heftfile +
                                             "' has 3 sites: choose one with --site N (0..2: 0 a.test:8080, "
                                             "1 c.test:8080, 2 b.test:9090)");
  const std::string kinds = " (give a host, HOST:PORT, :PORT or the site's index); ";
  expect_rejected(sim + " --servers 1x --site -1", "heft: --site '-1': no site -1" + kinds + sites);
  expect_rejected(sim + " --servers 1x --site ''", "heft: --site '': no site given" + kinds + sites);
  expect_rejected(sim + " --servers 1x --site 3", "heft: --site '3': no site 3" + kinds + sites);
  expect_rejected(sim + " --servers 1x --site 99999999999999999999",
                  "heft: --site '99999999999999999999': no site 99999999999999999999" + kinds + sites);
  expect_rejected(sim + " --servers 1x --site a.test:9090", "heft: --site 'a.test:9090': no site a.test:9090" + kinds + sites);
  // As heft weight reads SITE: a host name (any case), HOST:PORT or :PORT too.
  for (const std::string site : {"1", "c.test", "C.TEST:8080"}) {
    Output out = run_heft(sim + " --site " + site + " --servers 1x --json");
    ASSERT_EQ(out.exit_code, 0) << site << ": " << out.stdout_text;
    EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][0]["name"], "10.0.0.4:80") << site;
  }
  {
    Output out = run_heft(sim + " --site :9090 --servers 1x,1x --json");
    ASSERT_EQ(out.exit_code, 0) << out.stdout_text;
    EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][1]["name"], "10.0.0.3:80");
  }
  Output out = run_heft(sim + " --site 1 --servers 1x --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][0]["name"], "10.0.0.4:80");
  out = run_heft(sim + " --site 2 --servers 1x,1x --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"][1]["name"], "10.0.0.3:80");
  std::filesystem::remove_all(dir);
}

// A flag given an empty value is an error, never a value nobody gave: CLI11
// read --sigma '' as 0 and the run went on with sigma 0.
TEST(SimCommandTest, EmptySigmaIsAnError) {
  expect_rejected("sim --servers 1x --dist lognormal --sigma '' --rate 10 --duration 1s", "--sigma: is empty");
  EXPECT_EQ(run_heft("sim --servers 1x --dist lognormal --sigma 0 --rate 10 --duration 1s").exit_code, 0);
}

// Errors name the flag, member or file; a number beyond a double in a scenario
// file (which the JSON parser reports by exception) is one of them, not an abort.
TEST(SimCommandTest, ErrorsNameTheFlagOrTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_sim_names_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string huge = (dir / "huge.json").string();
  std::ofstream(huge) << R"({"rate": 1e400, "servers": [{"name": "a", "size": 1, "service": "1ms"}]})";
  expect_rejected("sim --scenario " + huge, "--scenario '" + huge + "': ");
  expect_rejected("sim --scenario " + dir.string(), "is a directory");
  const std::string trace = (dir / "trace.txt").string();
  std::ofstream(trace) << "0.1\n-1\n";
  expect_rejected("sim --servers 1x --trace " + trace, "--trace '" + trace + "': trace line 2: ");
  std::ofstream(trace) << "0.1\n0.2\n";
  expect_rejected("sim --servers 1x --trace " + trace + " --rate 5", "--rate does not apply to a trace");
  expect_rejected("sim --servers 1x --bucket -1s", "--bucket: '-1s' is negative");
  expect_rejected("sim --servers 1x --service abc", "--service: 'abc' is not a duration");
  expect_rejected("sim --server name=big,service=abc", "--server service: 'abc'");
  expect_rejected("sim --servers 1x --event xs:s1:fail", "--event time: 'xs'");
  expect_rejected("sim --servers 1x --duration 1e15s --rate 1e-10", "too long for the shortest service time");
  std::filesystem::remove_all(dir);
}

// Writes a scenario file with one server object and returns its path.
std::filesystem::path write_scenario(const std::string& server_members, const std::string& top = "") {
  static int counter = 0;
  auto path = std::filesystem::temp_directory_path() /
              ("heft_sim_bad_" + std::to_string(::getpid()) + "_" + std::to_string(++counter) + ".json");
  std::ofstream(path) << "{" << top << (top.empty() ? "" : ", ") << R"("duration": "2s", "rate": 10,)"
                      << R"( "servers": [{"name": "a", "size": 2)" << (server_members.empty() ? "" : ", ")
                      << server_members << "}]}";
  return path;
}

TEST(SimCommandTest, ScenarioFileErrorsNameTheMember) {
  const std::pair<std::string, std::string> servers[] = {
      {R"("weight": -1)", "servers[0].weight"}, {R"("size": -2)", "servers[0].size"},
      {R"("queue": -1)", "servers[0].queue"},   {R"("units": -1)", "servers[0].units"},
      {R"("weight": 1.5)", "servers[0].weight"}, {R"("size": 2.5)", "servers[0].size"},
      {R"("weight": "x")", "servers[0].weight"}, {R"("weight": 1000001)", "servers[0].weight"},
  };
  for (const auto& [member, path] : servers) {
    auto file = write_scenario(member);
    expect_rejected("sim --scenario " + file.string(), path);
    std::filesystem::remove(file);
  }
  auto file = write_scenario("", R"("seed": -3)");
  expect_rejected("sim --scenario " + file.string(), "seed");
  std::filesystem::remove(file);
}

TEST(SimCommandTest, WeightsAreAtMostOneMillion) {
  expect_rejected("sim --servers 1x,1x,1x --rate 10 --duration 1s --weights 1000001,1,1", "--weights");
  expect_rejected("sim --servers 1x,1x,1x --rate 10 --duration 1s --event 5s:s1:weight=1000001", "--event weight");
  expect_rejected("sim --servers 1x,1x --rate 10 --duration 1s --event 5s:weights=1,1000001", "--event weights");
  expect_rejected("sim --server name=a,weight=1000001 --rate 10 --duration 1s", "--server weight");
  EXPECT_EQ(run_heft("sim --servers 1x,1x --rate 10 --duration 1s --weights 1000000,1").exit_code, 0);
}

TEST(SimCommandTest, HugeSizesAreRejectedNotAllocated) {
  expect_rejected("sim --rate 300 --duration 2s --servers 3x --unit-workers 1000000000", "--unit-workers");
  expect_rejected("sim --rate 300 --duration 2s --servers 1000000000x", "--servers");
  expect_rejected("sim --rate 300 --duration 2s --server name=a,size=1000000000", "--server size");
  expect_rejected("sim --rate 300 --duration 2s --server name=a,size=4294967296", "--server size");
  expect_rejected("sim --rate 300 --duration 2s --servers 1x,1x --unit-workers 600000", "workers in all");
  EXPECT_EQ(run_heft("sim --rate 300 --duration 2s --servers 1x --unit-workers 1000000").exit_code, 0);
}

TEST(SimCommandTest, InfiniteRateAndEndlessRunsAreRejected) {
  expect_rejected("sim --servers 1x --rate inf --duration 2s", "--rate");
  expect_rejected("sim --servers 1x --rate nan --duration 2s", "--rate");
  expect_rejected("sim --servers 1x --rate 1000000 --duration 60s", "expected arrivals");
  auto file = std::filesystem::temp_directory_path() / ("heft_sim_rate_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"duration": "2s", "rate": 1e308, "servers": [{"name": "a", "size": 2}]})";
  expect_rejected("sim --scenario " + file.string(), "expected arrivals");
  std::filesystem::remove(file);
}

TEST(SimCommandTest, WeightsFollowFractionalSizes) {
  Output out = run_heft("sim --servers 1.5x,1x --unit-workers 4 --rate 100 --duration 2s --json");
  ASSERT_EQ(out.exit_code, 0);
  auto servers = nlohmann::json::parse(out.stdout_text)["scenarios"][0]["servers"];
  EXPECT_EQ(servers[0]["size"], 6);
  EXPECT_EQ(servers[1]["size"], 4);
  EXPECT_EQ(servers[0]["weight"], 3);
  EXPECT_EQ(servers[1]["weight"], 2);
}

TEST(SimCommandTest, LognormalSigmaIsBounded) {
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --dist lognormal --sigma 50", "--sigma");
  expect_rejected("sim --server name=a,dist=lognormal,sigma=50 --rate 10 --duration 2s", "--server sigma");
  EXPECT_EQ(run_heft("sim --servers 1x --rate 10 --duration 2s --dist lognormal --sigma 4").exit_code, 0);
}

TEST(SimCommandTest, UnroutedRequestsAreLabelledInTableAndCsv) {
  const std::string args = "sim --servers 1x,1x --rate 100 --duration 2s --weights 0,0 --policies round_robin";
  Output table = run_heft(args);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.stdout_text.find("(unrouted)"), std::string::npos) << table.stdout_text;
  EXPECT_EQ(table.stdout_text.find(" -"), std::string::npos) << table.stdout_text;
  Output csv = run_heft(args + " --csv");
  ASSERT_EQ(csv.exit_code, 0);
  Output json = run_heft(args + " --json");
  const auto unrouted = nlohmann::json::parse(json.stdout_text)["scenarios"][0]["policies"][0]["unrouted"];
  ASSERT_GT(unrouted.get<uint64_t>(), 0u);
  EXPECT_NE(csv.stdout_text.find(",unrouted\n"), std::string::npos) << csv.stdout_text;
  EXPECT_NE(csv.stdout_text.find("(all)"), std::string::npos);
  const std::string last_field = std::string(",").append(unrouted.dump()).append("\n");
  EXPECT_NE(csv.stdout_text.find(last_field), std::string::npos) << csv.stdout_text;
}

// --server max_conns=N and a scenario's "max_conns": a server of one worker
// capped at 1 never queues and the other takes its overflow; with every server
// capped and too little room, the rest is unrouted, as the proxy's 503.
TEST(SimCommandTest, MaxConnsCapsAServerAndEveryServerFullIsUnrouted) {
  const std::string a = "--server name=a,size=1,service=10ms,dist=fixed,max_conns=1 ";
  Output one = run_heft("sim " + a +
                        "--server name=b,size=4,service=10ms,dist=fixed,weight=1 --rate 300 --duration 10s "
                        "--policies round_robin,least_conn --json");
  ASSERT_EQ(one.exit_code, 0);
  auto j = nlohmann::json::parse(one.stdout_text)["scenarios"][0];
  EXPECT_EQ(j["servers"][0]["max_conns"], 1);
  EXPECT_FALSE(j["servers"][1].contains("max_conns"));
  for (const auto& p : j["policies"]) {
    EXPECT_EQ(p["servers"][0]["peak_queue"], 0) << p["policy"];
    EXPECT_GT(p["servers"][1]["requests"].get<uint64_t>(), p["arrivals"].get<uint64_t>() / 2) << p["policy"];
    EXPECT_EQ(p["unrouted"], 0) << p["policy"];
    EXPECT_EQ(p["unrouted_full"], 0) << p["policy"];
  }

  const std::string both = "sim " + a + "--server name=b,size=1,service=10ms,dist=fixed,max_conns=1 --rate 300 "
                           "--duration 10s --policies round_robin";
  Output full = run_heft(both + " --json");
  ASSERT_EQ(full.exit_code, 0);
  const auto p = nlohmann::json::parse(full.stdout_text)["scenarios"][0]["policies"][0];
  EXPECT_GT(p["unrouted"].get<uint64_t>(), 0u);
  EXPECT_EQ(p["unrouted_full"], p["unrouted"]);
  Output table = run_heft(both);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.stdout_text.find("a (1 worker x 10.0 ms fixed, max_conns 1)"), std::string::npos)
      << table.stdout_text;
  EXPECT_NE(table.stdout_text.find("(unrouted)"), std::string::npos) << table.stdout_text;
  EXPECT_NE(table.stdout_text.find("or every server at its max_conns"), std::string::npos) << table.stdout_text;

  auto file = write_scenario(R"("service": "10ms", "dist": "fixed", "max_conns": 2)", R"("policies": ["least_conn"])");
  Output scenario = run_heft("sim --scenario " + file.string() + " --rate 1000 --json");
  std::filesystem::remove(file);
  ASSERT_EQ(scenario.exit_code, 0);
  const auto js = nlohmann::json::parse(scenario.stdout_text)["scenarios"][0];
  EXPECT_EQ(js["servers"][0]["max_conns"], 2);
  EXPECT_EQ(js["policies"][0]["servers"][0]["peak_queue"], 0);  // 2 workers, max_conns 2
  EXPECT_GT(js["policies"][0]["unrouted_full"].get<uint64_t>(), 0u);
}

TEST(SimCommandTest, MaxConnsErrorsNameTheFlagOrTheMember) {
  expect_rejected("sim --server name=a,max_conns=1000001 --rate 10 --duration 1s",
                  "--server max_conns: '1000001' is not an integer 0..1000000");
  expect_rejected("sim --server name=a,max_conns=lots --rate 10 --duration 1s", "--server max_conns: 'lots'");
  expect_rejected("sim --server name=a,max_conns=1,max_conns=2 --rate 10 --duration 1s",
                  "key 'max_conns' is given twice");
  for (const std::string member : {R"("max_conns": -1)", R"("max_conns": 2.5)", R"("max_conns": 1000001)"}) {
    auto file = write_scenario(member);
    expect_rejected("sim --scenario " + file.string(), "servers[0].max_conns: must be an integer 0..1000000");
    std::filesystem::remove(file);
  }
  EXPECT_EQ(run_heft("sim --server name=a,max_conns=1000000 --rate 10 --duration 1s").exit_code, 0);
  EXPECT_NE(run_heft("sim --help").stdout_text.find("units=3,max_conns=16"), std::string::npos);
}

TEST(SimCommandTest, SeedSvgPathAndPlurals) {
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --seed -1", "--seed");
  Output big = run_heft("sim --servers 1x --rate 10 --duration 2s --seed 18446744073709551615");
  ASSERT_EQ(big.exit_code, 0);
  EXPECT_NE(big.stdout_text.find("seed 18446744073709551615"), std::string::npos) << big.stdout_text;
  // An SVG path that cannot be written: a bad argument, named, before any run.
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --svg /nonexistent/dir/report.svg",
                  "/nonexistent/dir/report.svg");
  // "1 worker", not "1 workers".
  EXPECT_NE(big.stdout_text.find("s1 (1 worker x"), std::string::npos) << big.stdout_text;
  Output four = run_heft("sim --servers 1x --unit-workers 4 --rate 10 --duration 2s");
  EXPECT_NE(four.stdout_text.find("s1 (4 workers x"), std::string::npos) << four.stdout_text;
}

// A temporary directory for one test's files, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream((path / name).string(), std::ios::binary) << text;
    return (path / name).string();
  }
};

// A trace of `count` arrivals `gap_s` apart from 0, one time per line.
std::string even_trace(int count, double gap_s) {
  std::string text;
  for (int i = 0; i < count; ++i) text += std::to_string(gap_s * i) + "\n";
  return text;
}

// --queue N and --queue-timeout DUR (a scenario's "queue", "queue_timeout"):
// when every server is at its max_conns a request waits in the pool queue for
// a place, as the proxy's `queue`. One worker of fixed 10 ms, max_conns 1, at
// 150 req/s: a long queue serves everything, a short one turns the rest
// away, a short timeout lets some give up.
TEST(SimCommandTest, PoolQueueHoldsRequestsForAPlace) {
  const std::string run =
      "sim --server name=a,size=1,service=10ms,dist=fixed,max_conns=1 --duration 10s "
      "--policies round_robin,least_conn ";
  const std::string at150 = run + "--rate 150 ";
  Output none = run_heft(at150 + "--json");
  Output longq = run_heft(at150 + "--queue 100000 --queue-timeout 1h --json");
  ASSERT_EQ(none.exit_code, 0);
  ASSERT_EQ(longq.exit_code, 0);
  EXPECT_EQ(longq.stdout_text, run_heft(at150 + "--queue 100000 --queue-timeout 1h --json").stdout_text);
  const auto j = nlohmann::json::parse(longq.stdout_text)["scenarios"][0];
  EXPECT_EQ(j["queue"], 100000);
  EXPECT_EQ(j["queue_timeout_s"], 3600);
  for (const auto& p : j["policies"]) {
    EXPECT_EQ(p["unrouted"], 0) << p["policy"];
    EXPECT_EQ(p["completed"], p["arrivals"]) << p["policy"];
    EXPECT_GT(p["pool_queue"]["waited"].get<uint64_t>(), p["arrivals"].get<uint64_t>() / 2) << p["policy"];
    EXPECT_EQ(p["pool_queue"]["timed_out"], 0) << p["policy"];
    EXPECT_GT(p["pool_queue"]["peak"].get<uint64_t>(), 300u) << p["policy"];
    EXPECT_GT(p["latency"]["max_s"].get<double>(), 3) << "the backlog is served in turn";
  }
  // The document outlives the loop (a range-for over a member of a temporary would not).
  const auto none_doc = nlohmann::json::parse(none.stdout_text);
  for (const auto& p : none_doc["scenarios"][0]["policies"]) {
    EXPECT_GT(p["unrouted"].get<uint64_t>(), 0u);
    EXPECT_FALSE(p.contains("pool_queue"));
  }

  Output shortq = run_heft(run + "--queue 2 --rate 300 --json");
  ASSERT_EQ(shortq.exit_code, 0);
  const auto shortq_doc = nlohmann::json::parse(shortq.stdout_text);
  for (const auto& p : shortq_doc["scenarios"][0]["policies"]) {
    EXPECT_GT(p["unrouted"].get<uint64_t>(), p["arrivals"].get<uint64_t>() / 2) << p["policy"];
    EXPECT_EQ(p["unrouted_full"], p["unrouted"]);
    EXPECT_EQ(p["pool_queue"]["peak"], 2);
  }

  Output table = run_heft(at150 + "--queue 1000 --queue-timeout 50ms");
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.stdout_text.find("  pool queue: 1000 at most, timeout 50.0 ms\n"), std::string::npos)
      << table.stdout_text;
  EXPECT_NE(table.stdout_text.find("(queue timeout)"), std::string::npos) << table.stdout_text;
  EXPECT_NE(table.stdout_text.find(" timed out, peak "), std::string::npos) << table.stdout_text;
  Output csv = run_heft(at150 + "--queue 1000 --queue-timeout 50ms --csv");
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_NE(csv.stdout_text.find(",unrouted,pool_queue_waited,pool_queue_timed_out,pool_queue_peak,"
                                 "pool_queue_at_end\n"),
            std::string::npos)
      << csv.stdout_text;

  TempDir dir("heft_sim_queue");
  const std::string file = dir.file("q.json", R"({"duration": "10s", "rate": 150, "queue": 1000,
    "queue_timeout": "50ms", "policies": ["round_robin"],
    "servers": [{"name": "a", "size": 1, "service": "10ms", "dist": "fixed", "max_conns": 1}]})");
  Output scenario = run_heft("sim --scenario " + file + " --json");
  ASSERT_EQ(scenario.exit_code, 0);
  const auto p = nlohmann::json::parse(scenario.stdout_text)["scenarios"][0]["policies"][0];
  EXPECT_GT(p["pool_queue"]["timed_out"].get<uint64_t>(), 0u);
  EXPECT_EQ(p["unrouted"], 0);
  // Flags refine the file's queue.
  Output refined = run_heft("sim --scenario " + file + " --queue 2 --json");
  ASSERT_EQ(refined.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(refined.stdout_text)["scenarios"][0]["queue"], 2);
}

// Without --queue (or with --queue 0) the outputs are what they were before
// the pool queue existed: no member, column or line speaks of it.
TEST(SimCommandTest, WithoutAPoolQueueOutputsAreUnchanged) {
  const std::string run =
      "sim --server name=a,size=1,service=10ms,dist=fixed,max_conns=1 --server name=b,size=2,service=10ms "
      "--rate 400 --duration 5s --policies round_robin,least_conn,p2c ";
  for (const std::string format : {"", "--json", "--csv"}) {
    Output plain = run_heft(run + format);
    ASSERT_EQ(plain.exit_code, 0);
    EXPECT_EQ(plain.stdout_text, run_heft(run + "--queue 0 " + format).stdout_text) << format;
    EXPECT_EQ(plain.stdout_text.find("pool"), std::string::npos) << plain.stdout_text;
    EXPECT_EQ(plain.stdout_text.find("queue timeout"), std::string::npos) << plain.stdout_text;
  }
}

TEST(SimCommandTest, PoolQueueErrorsNameTheFlagOrTheMember) {
  const std::string run = "sim --server name=a,max_conns=1 --rate 10 --duration 1s ";
  expect_rejected(run + "--queue 1000001", "heft: --queue: '1000001' is not an integer 0..1000000\n");
  expect_rejected(run + "--queue -1", "heft: --queue: '-1' is not an integer 0..1000000\n");
  expect_rejected(run + "--queue lots", "heft: --queue: 'lots' is not an integer 0..1000000\n");
  expect_rejected(run + "--queue ''", "heft: --queue: '' is not an integer 0..1000000\n");
  expect_rejected(run + "--queue 5 --queue-timeout 0s", "heft: --queue-timeout must be positive\n");
  expect_rejected(run + "--queue 5 --queue-timeout soon", "heft: --queue-timeout: 'soon' is not a duration");
  expect_rejected(run + "--queue 5 --queue-timeout -1s", "heft: --queue-timeout: '-1s' is negative\n");
  expect_rejected(run + "--queue-timeout 1s", "heft: --queue-timeout applies only to a pool queue; give --queue N\n");
  expect_rejected(run + "--queue 0 --queue-timeout 1s", "heft: --queue-timeout applies only to a pool queue; "
                                                         "--queue is 0\n");
  expect_rejected("sim --servers 1x --rate 10 --duration 1s --queue 5",
                  "heft: --queue 5 has no effect: no server has max_conns");
  expect_rejected("sim --example seed --duration 1s --queue 5", "heft: --queue 5 has no effect");
  EXPECT_EQ(run_heft(run + "--queue 1000000 --queue-timeout 1m30s").exit_code, 0);
  EXPECT_EQ(run_heft(run + "--queue 0").exit_code, 0);
  TempDir dir("heft_sim_queue_bad");
  for (const std::string member : {R"("queue": -1)", R"("queue": 1.5)", R"("queue": 1000001)"})
    expect_rejected("sim --scenario " + dir.file("a.json", "{" + member + R"(, "duration": "1s",
      "servers": [{"name": "a", "max_conns": 1}]})"),
                    "heft: scenario: queue: must be an integer 0..1000000, got ");
  expect_rejected("sim --scenario " + dir.file("b.json", R"({"queue": 2, "queue_timeout": "0s", "duration": "1s",
      "servers": [{"name": "a", "max_conns": 1}]})"),
                  "heft: scenario: queue_timeout: must be a positive duration, got \"0s\"\n");
  expect_rejected("sim --scenario " + dir.file("c.json", R"({"queue": 2, "duration": "1s",
      "servers": [{"name": "a"}]})"),
                  "heft: scenario: queue: has no effect: no server has max_conns");
  const std::string timeout_only = dir.file("d.json", R"({"queue_timeout": "2s", "duration": "1s",
      "servers": [{"name": "a", "max_conns": 1}]})");
  expect_rejected("sim --scenario " + timeout_only,
                  "heft: scenario: queue_timeout: applies only to a pool queue; give --queue N\n");
  EXPECT_EQ(run_heft("sim --scenario " + timeout_only + " --queue 3").exit_code, 0);
  const std::string help = run_heft("sim --help").stdout_text;
  EXPECT_NE(help.find("--queue "), std::string::npos);
  EXPECT_NE(help.find("--queue-timeout"), std::string::npos);
}

// A trace is measured over its own span unless a duration is given; arrivals a
// given duration cuts off are named on stderr (they were dropped silently, and
// a 6 s trace was measured over 60 s: 10 % busy instead of 100 %).
TEST(SimCommandTest, TraceDurationIsItsSpanAndCutArrivalsAreNamed) {
  TempDir dir("heft_sim_span");
  const std::string trace = dir.file("six.txt", even_trace(6000, 0.001));
  const std::string args =
      "sim --servers 1x --service 1ms --dist fixed --policies round_robin --json --trace " + trace;
  Output span = run_heft(args);
  ASSERT_EQ(span.exit_code, 0);
  const auto j = nlohmann::json::parse(span.stdout_text)["scenarios"][0];
  EXPECT_NEAR(j["duration_s"].get<double>(), 6.0, 1e-9);
  EXPECT_NEAR(j["policies"][0]["servers"][0]["utilisation"].get<double>(), 1.0, 1e-6);
  EXPECT_EQ(run_heft_stderr(args).stdout_text, "") << "nothing cut, nothing to say";
  Output cut = run_heft_stderr(args + " --duration 2s");
  EXPECT_EQ(cut.exit_code, 0);
  EXPECT_EQ(cut.stdout_text, "heft sim: 4000 trace arrivals at or after --duration 2s were not replayed\n");
  const std::string scenario = dir.file(
      "s.json", R"({"duration": "3s", "trace": "six.txt", "servers": [{"name": "a", "service": "1ms"}]})");
  Output file_cut = run_heft_stderr("sim --scenario " + scenario);
  EXPECT_EQ(file_cut.exit_code, 0);
  EXPECT_NE(file_cut.stdout_text.find("3000 trace arrivals at or after the scenario's duration 3s"),
            std::string::npos)
      << file_cut.stdout_text;
}

// Values that were silently replaced are errors naming the flag or member:
// a zero bucket (it became duration / 60), an empty --policies (the defaults),
// a server name used twice (the last one was kept), a key twice in one object.
TEST(SimCommandTest, ZeroBucketEmptyPoliciesAndDuplicatesAreRejected) {
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --bucket 0s", "--bucket");
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --bucket 0", "--bucket");
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --policies ''", "--policies");
  expect_rejected("sim --servers 1x --rate 10 --duration ''", "--duration");
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --weights ''", "--weights");
  expect_rejected("sim --servers 1x --duration 2s --trace ''", "--trace");
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --hash-strategy ''", "--hash-strategy");
  expect_rejected("sim --server name=a --server name=a --rate 10 --duration 2s", "'a'");
  expect_rejected("sim --server name=a,name=b --rate 10 --duration 2s", "--server: key 'name' is given twice");
  TempDir dir("heft_sim_dup");
  expect_rejected("sim --scenario " + dir.file("b.json", R"({"bucket": "0s", "servers": [{"name": "a"}]})"),
                  "scenario: bucket:");
  expect_rejected("sim --scenario " + dir.file("n.json", R"({"servers": [{"name": "a"}, {"name": "a"}]})"), "'a'");
  expect_rejected(
      "sim --scenario " + dir.file("k.json", R"({"duration": "2s", "duration": "9s", "servers": [{"name": "a"}]})"),
      "scenario: duration: is given twice");
  expect_rejected(
      "sim --scenario " + dir.file("ks.json", R"({"servers": [{"name": "a", "size": 1, "size": 2}]})"),
      "scenario: servers[0].size: is given twice");
}

// --servers's options do nothing for --server or --example: an error, not silence.
TEST(SimCommandTest, ServersOptionsNeedServers) {
  for (const char* option : {"--service 1ms", "--dist fixed", "--sigma 1", "--unit-workers 4"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find(' '));
    expect_rejected(std::string("sim --server name=a --rate 10 --duration 2s ") + option, name + " needs --servers");
    expect_rejected(std::string("sim --example seed --duration 2s ") + option, name + " needs --servers");
  }
}

// A setting the run never reads is an error naming it, the value that makes it
// moot and what it applies to: a hash strategy without the hash policy, a
// sigma without the lognormal (both were accepted and did nothing).
TEST(SimCommandTest, SettingsTheRunDoesNotReadAreRejected) {
  const std::string run = "sim --servers 1x --rate 10 --duration 2s ";
  const std::string applies = "applies only to the hash policy (hash, or its alias ip_hash); ";
  expect_rejected(run + "--hash-strategy maglev",
                  "heft: --hash-strategy " + applies +
                      "the policies are the default round_robin,weighted_round_robin,least_conn\n");
  expect_rejected(run + "--policies round_robin,least_conn --hash-strategy ring",
                  "heft: --hash-strategy " + applies + "--policies is round_robin,least_conn\n");
  expect_rejected("sim --example seed --duration 2s --hash-strategy maglev", "heft: --hash-strategy " + applies);
  EXPECT_EQ(run_heft(run + "--policies ip_hash,least_conn --hash-strategy maglev").exit_code, 0);
  TempDir dir("heft_sim_moot");
  const std::string file = dir.file("h.json", R"({"duration": "2s", "rate": 10, "hash_strategy": "maglev",
    "policies": ["least_conn"], "servers": [{"name": "a"}]})");
  expect_rejected("sim --scenario " + file,
                  "heft: scenario: hash_strategy: " + applies + "the scenario's policies are least_conn\n");
  expect_rejected("sim --scenario " + file + " --policies random", "heft: scenario: hash_strategy: " + applies +
                                                                       "--policies is random\n");
  EXPECT_EQ(run_heft("sim --scenario " + file + " --policies hash").exit_code, 0);
  const std::string no_policies =
      dir.file("d.json", R"({"duration": "2s", "rate": 10, "hash_strategy": "ring", "servers": [{"name": "a"}]})");
  expect_rejected("sim --scenario " + no_policies, "heft: scenario: hash_strategy: " + applies +
                                                       "the policies are the default round_robin,"
                                                       "weighted_round_robin,least_conn\n");

  expect_rejected(run + "--sigma 1", "heft: --sigma applies only to --dist lognormal; --dist is exp (the default)\n");
  expect_rejected(run + "--dist fixed --sigma 1", "heft: --sigma applies only to --dist lognormal; --dist is fixed\n");
  EXPECT_EQ(run_heft(run + "--dist lognormal --sigma 1").exit_code, 0);
  const std::string server = "sim --rate 10 --duration 2s --server ";
  expect_rejected(server + "name=a,sigma=1",
                  "heft: --server sigma= applies only to dist=lognormal; dist is exp (the default)\n");
  expect_rejected(server + "name=a,sigma=1,dist=fixed", "; dist is fixed\n");
  EXPECT_EQ(run_heft(server + "name=a,sigma=1,dist=lognormal").exit_code, 0);
  const std::string sigma = dir.file("s.json", R"({"duration": "2s", "rate": 10,
    "servers": [{"name": "a"}, {"name": "b", "dist": "exp", "sigma": 0.8}]})");
  expect_rejected("sim --scenario " + sigma,
                  "heft: scenario: servers[1].sigma: applies only to \"dist\": \"lognormal\"; servers[1].dist is "
                  "exp\n");
}

// A trace with no arrivals is an error naming the file: it ran the default
// 60 s with nothing arriving (a wrong file, or one cut short).
TEST(SimCommandTest, ATraceWithNoArrivalsIsAnError) {
  TempDir dir("heft_sim_empty_trace");
  const std::string message = "the trace has no arrivals (every line is blank or a comment)\n";
  for (const char* text : {"", "\n\n", "# time key\n   \n# nothing yet\n"}) {
    const std::string trace = dir.file("empty.txt", text);
    expect_rejected("sim --servers 1x --trace " + trace, "heft: --trace '" + trace + "': " + message);
  }
  const std::string scenario =
      dir.file("s.json", R"({"trace": "empty.txt", "servers": [{"name": "a", "service": "1ms"}]})");
  expect_rejected("sim --scenario " + scenario, "heft: scenario trace '" + (dir.path / "empty.txt").string() + "': " +
                                                    message);
}

// Durations as the Heftfile writes them ("1m30s" was "'1m30' is not a number").
TEST(SimCommandTest, CompoundDurations) {
  Output run = run_heft("sim --servers 1x,1x --rate 10 --duration 1m30s --event 1m:s1:fail --bucket 1.5s "
                        "--policies round_robin --json");
  ASSERT_EQ(run.exit_code, 0);
  const auto j = nlohmann::json::parse(run.stdout_text)["scenarios"][0];
  EXPECT_DOUBLE_EQ(j["duration_s"].get<double>(), 90);
  EXPECT_DOUBLE_EQ(j["bucket_s"].get<double>(), 1.5);
  EXPECT_EQ(j["events"][0], "60s:s1:fail");
  expect_rejected("sim --servers 1x --rate 10 --duration 1m30", "--duration: '1m30' is not a duration");
}

// Events for servers named by address, as the proxy's hash identities are.
TEST(SimCommandTest, AddressNamedServers) {
  Output run = run_heft(
      "sim --server name=127.0.0.1:22001 --server name=127.0.0.1:22002 --rate 10 --duration 10s "
      "--event 5s:127.0.0.1:22001:fail --policies round_robin --json");
  ASSERT_EQ(run.exit_code, 0);
  const auto j = nlohmann::json::parse(run.stdout_text)["scenarios"][0];
  EXPECT_EQ(j["events"][0], "5s:127.0.0.1:22001:fail");
  EXPECT_GT(j["policies"][0]["servers"][1]["share"].get<double>(), 0.7);
}

// A slow rate keeps its digits in the header ("0.0 req/s" before), and a trace
// scenario's JSON counts its arrivals (it said "trace").
TEST(SimCommandTest, SmallRatesAndTraceArrivalCounts) {
  Output slow = run_heft("sim --servers 1x --rate 0.001 --duration 2s");
  ASSERT_EQ(slow.exit_code, 0);
  EXPECT_NE(slow.stdout_text.find("0.001 req/s Poisson"), std::string::npos) << slow.stdout_text;
  Output usual = run_heft("sim --servers 1x --rate 578.7 --duration 2s");
  EXPECT_NE(usual.stdout_text.find("578.7 req/s Poisson"), std::string::npos) << usual.stdout_text;
  TempDir dir("heft_sim_count");
  const std::string trace = dir.file("t.txt", even_trace(50, 0.01));
  Output traced = run_heft("sim --servers 1x --duration 0.3s --json --trace " + trace);
  ASSERT_EQ(traced.exit_code, 0);
  const auto j = nlohmann::json::parse(traced.stdout_text)["scenarios"][0];
  EXPECT_EQ(j["arrivals"], 30);
  EXPECT_EQ(j["policies"][0]["arrivals"], 30);
}

// The slow factor is bounded (1e300 saturated the latency histogram).
TEST(SimCommandTest, SlowFactorIsBounded) {
  expect_rejected("sim --servers 1x --rate 10 --duration 2s --event 1s:s1:slow=1e300", "--event '1s:s1:slow=1e300'");
  EXPECT_EQ(run_heft("sim --servers 1x --rate 10 --duration 2s --event 1s:s1:slow=1000").exit_code, 0);
}

// A keyless line of a keyed trace is placed at random by weight (it was
// hashed as key 0: 99.9 % on one server).
TEST(SimCommandTest, KeylessTraceLinesAreSpreadByWeight) {
  TempDir dir("heft_sim_keys");
  std::string text = "0.000 alice\n";
  for (int i = 1; i < 1000; ++i) text += std::to_string(0.001 * i) + "\n";
  const std::string trace = dir.file("t.txt", text);
  Output run = run_heft("sim --trace " + trace +
                        " --duration 2s --servers 1x,1x,1x --weights 5,3,2 --policies hash --service 1ms --json");
  ASSERT_EQ(run.exit_code, 0);
  const auto servers = nlohmann::json::parse(run.stdout_text)["scenarios"][0]["policies"][0]["servers"];
  EXPECT_NEAR(servers[0]["share"].get<double>(), 0.5, 0.05);
  EXPECT_NEAR(servers[1]["share"].get<double>(), 0.3, 0.05);
  EXPECT_NEAR(servers[2]["share"].get<double>(), 0.2, 0.05);
}

// Times in the JSON are to the nanosecond: 700 ms was printed as
// 0.7000000000000001 s and percentiles as 0.0045547520000000005.
TEST(SimCommandTest, JsonTimesCarryNoBinaryNoise) {
  Output out = run_heft("sim --servers 3x,1x --rate 100 --service 7ms --duration 700ms --json");
  ASSERT_EQ(out.exit_code, 0);
  EXPECT_NE(out.stdout_text.find("\"duration_s\": 0.7,"), std::string::npos) << out.stdout_text.substr(0, 400);
  const auto j = nlohmann::json::parse(out.stdout_text)["scenarios"][0];
  EXPECT_DOUBLE_EQ(j["duration_s"].get<double>(), 0.7);
  // No number in the output is written with more than nine decimals.
  static const std::regex long_fraction(R"(\.[0-9]{10,})");
  std::string times;
  for (const auto& p : j["policies"])
    for (const auto& [key, value] : p["latency"].items()) times += key + "=" + value.dump() + " ";
  EXPECT_FALSE(std::regex_search(times, long_fraction)) << times;
  EXPECT_GT(j["policies"][0]["latency"]["p99_s"].get<double>(), 0.0);
}

// A server name that is not valid UTF-8 (Latin-1 "caf\xe9" from a terminal)
// aborted heft sim --json (exit 134: the JSON writer threw); the name is now
// written with U+FFFD in place of the bad byte.
TEST(SimCommandTest, NamesThatAreNotUtf8DoNotAbortJson) {
  Output out = run_heft("sim --server 'name=caf\xe9' --rate 10 --duration 1s --policies round_robin --json");
  ASSERT_EQ(out.exit_code, 0);
  const auto j = nlohmann::json::parse(out.stdout_text);
  EXPECT_EQ(j["scenarios"][0]["servers"][0]["name"], "caf\xEF\xBF\xBD");
  EXPECT_EQ(j["scenarios"][0]["policies"][0]["servers"][0]["name"], "caf\xEF\xBF\xBD");
}

// The text between the ``` (or ```json) fence after `heading` in docs/sim.md and the closing fence.
std::string sim_doc_block(const std::string& heading, const std::string& fence) {
  const std::string doc = read_file(std::filesystem::path(HEFT_SOURCE_DIR) / "docs" / "sim.md");
  const std::size_t section = doc.find(heading);
  if (section == std::string::npos) return {};
  const std::size_t open = doc.find(fence + "\n", section);
  if (open == std::string::npos) return {};
  const std::size_t close = doc.find("```\n", open + fence.size() + 1);
  if (close == std::string::npos) return {};
  return doc.substr(open + fence.size() + 1, close - open - fence.size() - 1);
}

// docs/sim.md's example scenario gives small2, a 1x server of 4 workers,
// weight 1 (it had weight 4, its size, and weighted round robin sent it the
// most: 100% busy, 127 s mean latency); its quoted seed run is the real output.
TEST(SimCommandTest, DocumentedScenarioAndOutputAreTrue) {
  const std::string scenario = sim_doc_block("## Scenario file", "```json");
  ASSERT_FALSE(scenario.empty());
  auto path = std::filesystem::temp_directory_path() / ("heft_sim_doc_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << scenario;
  Output out = run_heft("sim --scenario " + path.string() + " --json");
  std::filesystem::remove(path);
  ASSERT_EQ(out.exit_code, 0);
  const auto j = nlohmann::json::parse(out.stdout_text);
  for (const auto& policy : j["scenarios"][0]["policies"]) {
    std::map<std::string, int> weights;
    for (const auto& server : policy["servers"]) weights[server["name"]] = server["weight"].get<int>();
    EXPECT_EQ(weights, (std::map<std::string, int>{{"big", 3}, {"small1", 1}, {"small2", 1}}));
    for (const auto& server : policy["servers"]) {
      if (server["name"] == "small2") {
        EXPECT_LT(server["utilisation"].get<double>(), 0.9) << policy["policy"];
      }
    }
  }
  EXPECT_EQ(run_heft("sim --example seed").stdout_text, sim_doc_block("## `heft sim --example seed`", "```"));
}

// The pool the proxy runs, in `heft sim`: s1 fails at 20 s (its failures take
// it out for the default fail_timeout of 10 s) and answers again at 30 s,
// when the pool takes it back and slow start ramps its weight over 10 s; s2
// runs 4 times slower from 50 s and adaptive weights (interval 5 s) cut it
// within an interval. The table lists the pool's decisions, the JSON has
// them and each server's share and weight factor per bucket, the SVG a
// weight factor panel per policy.
TEST(SimCommandTest, SlowStartAfterARecoveryAndAnAdaptiveCutAfterASlowdown) {
  const std::string run =
      "sim --servers 1x,1x,1x --unit-workers 4 --service 20ms --rate 300 --duration 90s "
      "--policies weighted_round_robin --event 20s:s1:fail --event 30s:s1:recover --slow-start 10s "
      "--event 50s:s2:slow=4 --adaptive interval=5s --bucket 1s";
  const Output table = run_heft(run);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.stdout_text.find("  pool: max_fails 1, fail_timeout 10.00 s, slow_start 10.00 s, adaptive "
                                   "(interval 5 s, median_factor 2, error_threshold 5%, cut 25%, min_weight_ratio "
                                   "0.1)\n"),
            std::string::npos)
      << table.stdout_text;
  EXPECT_NE(table.stdout_text.find("weights: 30 s s1 slow_start: 1.00 -> 0.10, back in service, ramping over 10000ms"),
            std::string::npos)
      << table.stdout_text;
  EXPECT_NE(table.stdout_text.find("40 s s1 slow_start_done: 0.96 -> 1.00, ramp complete"), std::string::npos)
      << table.stdout_text;
  EXPECT_NE(table.stdout_text.find(" s s2 latency: 1.00 -> 0.75, latency "), std::string::npos) << table.stdout_text;

  const Output out = run_heft(run + " --json");
  ASSERT_EQ(out.exit_code, 0);
  const auto policy = nlohmann::json::parse(out.stdout_text)["scenarios"][0]["policies"][0];
  double ramp_at = -1, cut_at = -1;
  for (const auto& change : policy["weight_changes"]) {
    if (change["server"] == "s1" && change["reason"] == "slow_start" && ramp_at < 0) ramp_at = change["at_s"];
    if (change["server"] == "s2" && change["reason"] == "latency" && cut_at < 0) cut_at = change["at_s"];
  }
  EXPECT_EQ(ramp_at, 30) << policy["weight_changes"].dump();
  EXPECT_GT(cut_at, 50) << policy["weight_changes"].dump();
  EXPECT_LE(cut_at, 55.25) << "within an adaptive interval (and a tick) of the slowdown";
  const auto& s1 = policy["servers"][0];
  const auto& s2 = policy["servers"][1];
  ASSERT_EQ(s1["share_series"].size(), 90u);
  ASSERT_EQ(s1["factor_series"].size(), 90u);
  EXPECT_EQ(s1["share_series"][25], 0) << "out from 20 s to 30 s";
  // The ramp: 10 % of its weight at 30 s, more each second, all of it from 40 s.
  EXPECT_NEAR(s1["factor_series"][30].get<double>(), (0.1 + 0.145) / 2, 1e-9) << "steps of 0.5 s: 0.1, 0.145";
  for (int b = 31; b < 40; ++b) {
    EXPECT_GT(s1["factor_series"][b].get<double>(), s1["factor_series"][b - 1].get<double>()) << b;
    EXPECT_GT(s1["share_series"][b].get<double>(), s1["share_series"][b - 2].get<double>()) << b;
  }
  EXPECT_LT(s1["share_series"][30].get<double>(), 0.1);
  EXPECT_NEAR(s1["share_series"][45].get<double>(), 1.0 / 3, 0.06);
  // The cut: s2's factor and share fall after it.
  const int cut_bucket = static_cast<int>(cut_at) + 1;
  EXPECT_EQ(s2["factor_series"][cut_bucket - 2], 1);
  EXPECT_NEAR(s2["factor_series"][cut_bucket].get<double>(), 0.75, 1e-9);
  EXPECT_LT(s2["share_series"][cut_bucket + 1].get<double>(), 0.3);

  const auto svg = std::filesystem::temp_directory_path() / ("heft_sim_pool_" + std::to_string(::getpid()) + ".svg");
  ASSERT_EQ(run_heft(run + " --svg " + svg.string()).exit_code, 0);
  const std::string picture = read_file(svg);
  std::filesystem::remove(svg);
  EXPECT_NE(picture.find("weighted_round_robin: weight factor"), std::string::npos);
  EXPECT_NE(picture.find("s2: weight factor down to"), std::string::npos);
}

// The pool's settings from a Heftfile, as heft run takes them: the pool's
// max_fails, fail_timeout, slow_start and adaptive options, and a backend's
// own max_fails and fail_timeout.
TEST(SimCommandTest, ConfigCarriesThePoolsFailureAndWeightSettings) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_sim_pool_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string heftfile = (dir / "Heftfile").string();
  std::ofstream(heftfile) << ":8080 {\n\treverse_proxy {\n\t\tto 10.0.0.1:80 max_fails 3 fail_timeout 30s\n"
                             "\t\tto 10.0.0.2:80\n\t\tmax_fails 2\n\t\tfail_timeout 5s\n\t\tslow_start 20s\n"
                             "\t\tadaptive {\n\t\t\tinterval 10s\n\t\t\tcut 50%\n\t\t}\n\t}\n}\n";
  const Output out = run_heft("sim --config " + heftfile +
                              " --servers 1x,1x --rate 100 --duration 20s --event 5s:10.0.0.2:80:fail --json");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(out.exit_code, 0) << out.stdout_text;
  const auto sc = nlohmann::json::parse(out.stdout_text)["scenarios"][0];
  EXPECT_EQ(sc["max_fails"], 2);
  EXPECT_EQ(sc["fail_timeout_s"], 5);
  EXPECT_EQ(sc["slow_start_s"], 20);
  EXPECT_EQ(sc["adaptive"]["interval_s"], 10);
  EXPECT_EQ(sc["adaptive"]["cut"], 0.5);
  EXPECT_EQ(sc["servers"][0]["max_fails"], 3);
  EXPECT_EQ(sc["servers"][0]["fail_timeout_s"], 30);
  EXPECT_FALSE(sc["servers"][1].contains("max_fails"));
  EXPECT_GT(sc["policies"][0]["servers"][1]["failed"].get<int>(), 0);
}

// The pool's flags are checked and name themselves; those only a failure
// reads are errors without a fail event.
TEST(SimCommandTest, PoolFlagsAreCheckedAndNamed) {
  expect_rejected("sim --servers 1x,1x --slow-start 10s", "--slow-start applies only when a server fails");
  expect_rejected("sim --servers 1x,1x --max-fails 3", "--max-fails applies only when a server fails");
  expect_rejected("sim --servers 1x,1x --event 1s:s1:fail --max-fails -1", "--max-fails: '-1' is not an integer");
  expect_rejected("sim --servers 1x,1x --event 1s:s1:fail --fail-timeout 1.5ms",
                  "--fail-timeout must be a whole number of milliseconds");
  expect_rejected("sim --servers 1x,1x --adaptive cut=0", "--adaptive cut must be a number above 0..1, got 0");
  expect_rejected("sim --servers 1x,1x --adaptive speed=2", "--adaptive: unknown option 'speed'");
  const Output bare = run_heft("sim --adaptive --servers 1x,1x --rate 10 --duration 2s --json");
  ASSERT_EQ(bare.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(bare.stdout_text)["scenarios"][0]["adaptive"]["interval_s"], 30);
}

}  // namespace
