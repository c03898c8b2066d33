// `heft calibrate` against real demo backends and a real heft (docs/calibrate.md):
// capacities measured by the ramp, a shedding backend capped, a down one
// reported, --apply under load and its rollback, --from-log. Small fleets and
// short --duration keep this short; the full 6:2:1 fleet in under 60 s is
// bench/calibrate_bench.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "health_load_util.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

struct Ended {
  int code = -1;
  std::string out, err;  // stdout (the report), stderr (progress)
  json report;           // stdout parsed, when --json
};

// `heft calibrate ARGS` to its end (at most `limit`), stdout and stderr apart.
Ended calibrate(const std::string& dir, const std::vector<std::string>& args, std::chrono::seconds limit = 60s) {
  std::string command = fmt::format("exec {} calibrate", HEFT_BINARY);
  for (const std::string& a : args) command += " '" + a + "'";
  command += fmt::format(" 2>'{}/calibrate.err'", dir);
  Process p({"/bin/sh", "-c", command}, dir + "/calibrate.out");
  Ended e;
  const auto code = p.wait(limit);
  if (!code) ADD_FAILURE() << "heft calibrate did not end within " << limit.count() << " s";
  e.code = code.value_or(-1);
  e.out = read_file(dir + "/calibrate.out");
  e.err = read_file(dir + "/calibrate.err");
  e.report = json::parse(e.out, nullptr, false);
  return e;
}

std::string dial(const Backend& b) { return fmt::format("127.0.0.1:{}", b.port); }

// The report's entry for `address`, or null.
json entry(const json& report, const std::string& address) {
  for (const json& b : report.value("backends", json::array()))
    if (b.value("address", "") == address) return b;
  return json();
}

// A Heftfile with no admin API: calibrate measures the backends it lists directly.
std::string pool_file(const std::string& dir, const std::vector<std::string>& dials) {
  std::string text = fmt::format("{{\n\tadmin off\n}}\n:{} {{\n\treverse_proxy {{\n", free_port());
  for (const std::string& d : dials) text += "\t\tto " + d + "\n";
  text += "\t}\n}\n";
  const std::string path = dir + "/Heftfile";
  write_file(path, text);
  return path;
}

TEST(Calibrate, BadArgumentsExitTwoWithTheReason) {
  const std::string dir = make_temp_dir();
  Ended e = calibrate(dir, {"--capacities", "1,2", "--max-weight", "0"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("bad --max-weight \"0\""), std::string::npos) << e.err;
  e = calibrate(dir, {"--capacities", "1,2", "--max-error", "1"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("would be 100%"), std::string::npos) << e.err;
  e = calibrate(dir, {"--config", dir + "/missing", "--p95", "soon"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("bad --p95 \"soon\""), std::string::npos) << e.err;
  e = calibrate(dir, {"--config", pool_file(dir, {"127.0.0.1:1"}), "--site", "nowhere.test"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("nowhere.test"), std::string::npos) << e.err;
}

// The weights: least error against the exact ratios, small numbers on a tie.
TEST(Calibrate, GivenCapacitiesGetTheSmallWeightsWithLeastError) {
  const std::string dir = make_temp_dir();
  Ended e = calibrate(dir, {"--capacities", "a.test:80=87,b.test:80=143", "--json"});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_EQ(e.report["weights"], json({{"a.test:80", 3}, {"b.test:80", 5}})) << e.out;
  const json& candidates = e.report["candidates"];
  ASSERT_GE(candidates.size(), 4u) << e.out;
  EXPECT_EQ(candidates[0]["weights"], json({1, 1}));
  size_t chosen = 0;
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (candidates[k]["chosen"]) chosen = k;
    EXPECT_GE(candidates[k]["error"].get<double>(), 0.0);
  }
  EXPECT_EQ(candidates[chosen]["weights"], json({3, 5}));
  for (const json& c : candidates) EXPECT_GE(c["error"].get<double>(), candidates[chosen]["error"].get<double>());
  // 3:5 against 87:143: a's share 37.5 % of 37.8 %.
  EXPECT_NEAR(candidates[chosen]["error"].get<double>(), 0.0086, 0.001);

  e = calibrate(dir, {"--capacities", "a.test:80=560,b.test:80=187,c.test:80=93", "--heftfile"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, "\tto a.test:80 weight 6\n\tto b.test:80 weight 2\n\tto c.test:80 weight 1\n");
  e = calibrate(dir, {"--capacities", "560,187,93", "--max-weight", "3"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("3:1:1"), std::string::npos) << e.out;
  EXPECT_EQ(e.out.find("6:2:1"), std::string::npos) << e.out;
}

// The judged fleet: --workers 6, 2, 1 with --delay 10ms (a request takes
// about 10.7 ms: about 560, 187 and 93 req/s).
TEST(Calibrate, RampMeasuresTheFleetAndWeighsIt6To2To1) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--workers", "6", "--delay", "10ms"});
  Backend b = start_backend(dir, "b", {"--workers", "2", "--delay", "10ms"});
  Backend c = start_backend(dir, "c", {"--workers", "1", "--delay", "10ms"});
  const auto start = Clock::now();
  Ended e = calibrate(dir, {"--config", pool_file(dir, {dial(a), dial(b), dial(c)}), "--duration", "12s", "--json"});
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_LT(seconds, 12 + 5) << "--duration bounds the run";
  const double expected[] = {560, 187, 93};
  const Backend* fleet[] = {&a, &b, &c};
  for (int i = 0; i < 3; ++i) {
    const json got = entry(e.report, dial(*fleet[i]));
    EXPECT_EQ(got.value("status", ""), "measured") << got;
    // Tolerant of a busy machine; the bench holds it to 15 %.
    EXPECT_NEAR(got.value("capacity", 0.0), expected[i], expected[i] * 0.2) << fleet[i]->name << ": " << got;
    EXPECT_FALSE(got.value("lower_bound", true)) << got;
  }
  // 6:2:1, or one off it: short steps (--duration 12s) measure to within
  // about 5 % on a busy machine, and a ratio of 6.5 is where 7:2:1 fits as
  // well. The bench's 60 s run holds it to 6:2:1.
  std::vector<double> shares;
  double sum = 0;
  for (const Backend* backend : fleet) {
    shares.push_back(entry(e.report, dial(*backend)).value("weight", 0));
    sum += shares.back();
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(shares[i] / sum / (expected[i] / (560 + 187 + 93)), 1, 0.12) << "weights " << e.report["weights"];
  // Progress as it goes: a line per step, on stderr.
  EXPECT_NE(e.err.find(fmt::format("[1/3] {}: ", dial(a))), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("req/s for"), std::string::npos) << e.err;
}

// A backend that sheds load past 60 req/s is capped there; one that is down
// is reported and gets no weight.
TEST(Calibrate, RampCapsASheddingBackendAndReportsADownOne) {
  const std::string dir = make_temp_dir();
  Backend steady = start_backend(dir, "steady", {"--workers", "2", "--delay", "10ms"});
  Backend shedding = start_backend(dir, "shedding", {"--fail-above", "60"});
  const std::string down = fmt::format("127.0.0.1:{}", free_port());
  Ended e = calibrate(dir, {"--config", pool_file(dir, {dial(steady), dial(shedding), down}), "--duration", "8s",
                            "--max-rate", "400", "--json"});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const json capped = entry(e.report, dial(shedding));
  EXPECT_EQ(capped.value("status", ""), "measured") << capped;
  EXPECT_NEAR(capped.value("capacity", 0.0), 60, 60 * 0.15) << capped;
  const json gone = entry(e.report, down);
  EXPECT_EQ(gone.value("status", ""), "down") << gone;
  EXPECT_EQ(gone.count("weight"), 0u) << gone;
  EXPECT_NE(gone.value("note", "").find("refused"), std::string::npos) << gone;
  // About 187 : 60 req/s: 3:1 or 10:3, whichever is nearer what was measured.
  ASSERT_EQ(e.report["weights"].size(), 2u) << e.out;
  const double ratio = e.report["weights"][dial(steady)].get<double>() / e.report["weights"][dial(shedding)].get<double>();
  EXPECT_NEAR(ratio, 187.0 / 60, 0.5) << e.report["weights"];
  EXPECT_NE(e.out.find(fmt::format("# {}: down", down)), std::string::npos) << e.out;
}

// A running heft with two backends at weight 1 each, its admin API on `admin`.
struct RunningPool {
  std::string dir = make_temp_dir();
  Backend fast, slow;
  uint16_t port = free_port(), admin = free_port();
  Process heft;
  RunningPool(const std::vector<std::string>& fast_options, const std::vector<std::string>& slow_options,
              const std::string& more = "") {
    fast = start_backend(dir, "fast", fast_options);
    slow = start_backend(dir, "slow", slow_options);
    heft = start_heft(dir,
                      two_worker_pool(admin, port,
                                      fmt::format("\t\tto {} weight 1\n\t\tto {} weight 1\n{}", dial(fast), dial(slow),
                                                  more)),
                      port);
  }
  std::string address() const { return fmt::format("127.0.0.1:{}", admin); }
  // Each upstream's weight as the admin API has it.
  std::vector<int> weights() {
    Response r = admin_call(admin, "GET", "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams");
    std::vector<int> out;
    for (const json& u : json::parse(r.body, nullptr, false)) out.push_back(u.value("weight", -1));
    return out;
  }
};

TEST(Calibrate, ApplyUnderLoadChangesTheSplitWithNoFailedRequest) {
  RunningPool pool({"--workers", "4", "--delay", "10ms"}, {"--workers", "2", "--delay", "10ms"});
  Load load(pool.port, 4);
  Ended e = calibrate(pool.dir, {"--address", pool.address(), "--duration", "8s", "--apply", "--stages", "2", "--hold",
                                 "2s", "--min-requests", "10", "--poll", "250ms"},
                      90s);
  const auto applied = Clock::now();
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  // Each backend drained from heft's traffic for its ramp, and put back.
  EXPECT_NE(e.err.find(fmt::format("[1/2] {}: drained (weight 1 -> 0)", dial(pool.fast))), std::string::npos) << e.err;
  EXPECT_NE(e.err.find(fmt::format("[2/2] {}: weight 1 restored", dial(pool.slow))), std::string::npos) << e.err;
  // About 375 : 187 req/s, measured beside heft and its clients on a busy
  // machine: 2:1 or near it. Whatever was measured is what heft has now.
  int fast_weight = 0, slow_weight = 0;
  const std::string done = fmt::format("calibrated weights applied: {} {{}} : {} {{}}", dial(pool.fast), dial(pool.slow));
  const size_t at = e.out.find("calibrated weights applied: ");
  ASSERT_NE(at, std::string::npos) << e.out;
  ASSERT_EQ(std::sscanf(e.out.c_str() + at + done.find('{'), "%d", &fast_weight), 1) << e.out;
  ASSERT_EQ(std::sscanf(e.out.c_str() + e.out.find(" : ", at) + 3 + dial(pool.slow).size(), "%d", &slow_weight), 1)
      << e.out;
  EXPECT_NEAR(double(fast_weight) / slow_weight, 2, 0.4) << e.out;
  EXPECT_EQ(pool.weights(), (std::vector<int>{fast_weight, slow_weight})) << e.out << e.err;
  std::this_thread::sleep_for(1500ms);
  load.stop();
  const std::vector<Sample> all = load.all();
  ASSERT_GT(all.size(), 200u);
  for (const Sample& s : all) ASSERT_EQ(s.status, 200) << "a request failed while calibrating: " << e.out << e.err;
  int fast = 0, total = 0;
  for (const Sample& s : load.between(applied + 200ms, Clock::now())) {
    ++total;
    fast += s.backend == "fast";
  }
  ASSERT_GT(total, 50);
  EXPECT_NEAR(double(fast) / total, double(fast_weight) / (fast_weight + slow_weight), 0.1) << fast << " of " << total;
}

// A wrong measurement (the failing backend "measured" as the strong one):
// the first stage that gives it more traffic breaches and rolls back.
TEST(Calibrate, ApplyRollsBackABadStep) {
  RunningPool pool({}, {});
  ASSERT_EQ(admin_call(pool.slow.port, "POST", "/_control/fail_rate?value=0.3").status, 200);
  Load load(pool.port, 3);
  Ended e = calibrate(pool.dir, {"--address", pool.address(), "--capacities",
                                 fmt::format("{}=100,{}=900", dial(pool.fast), dial(pool.slow)), "--apply", "--stages",
                                 "3", "--hold", "3s", "--min-requests", "10", "--poll", "250ms"});
  load.stop();
  EXPECT_EQ(e.code, 1) << e.out << e.err;
  EXPECT_NE(e.out.find("-> BREACH"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find(fmt::format("ROLLED BACK to {} 1 : {} 1", dial(pool.fast), dial(pool.slow))), std::string::npos)
      << e.out;
  EXPECT_EQ(e.out.find("calibrated weights applied"), std::string::npos) << e.out;
  EXPECT_EQ(pool.weights(), (std::vector<int>{1, 1}));
}

// The access log heft writes under a known fleet (least_conn and enough
// clients that both backends queue) gives the fleet's weights, 3:1.
TEST(Calibrate, FromLogGivesTheFleetsWeights) {
  const std::string log_path = make_temp_dir() + "/access.log";
  // (The reverse_proxy block's last line, then the site's log block, which
  // two_worker_pool() closes.)
  RunningPool pool({"--workers", "3", "--delay", "10ms"}, {"--workers", "1", "--delay", "10ms"},
                   fmt::format("\t\tlb_policy least_conn\n\t}}\n\tlog {{\n\t\toutput file {}\n", log_path));
  {
    // A quiet moment first (its requests show each backend's time unloaded), then a busy one.
    Load quiet(pool.port, 1);
    std::this_thread::sleep_for(1500ms);
    quiet.stop();
    Load busy(pool.port, 12);
    std::this_thread::sleep_for(4500ms);
  }
  std::this_thread::sleep_for(500ms);  // the log's writer thread
  Ended from_log = calibrate(pool.dir, {"--from-log", log_path, "--address", pool.address(), "--json"});
  ASSERT_EQ(from_log.code, 0) << from_log.out << from_log.err;
  for (const Backend* b : {&pool.fast, &pool.slow}) {
    const json got = entry(from_log.report, dial(*b));
    EXPECT_FALSE(got.value("lower_bound", true)) << "it queued: " << got;
  }
  EXPECT_NEAR(entry(from_log.report, dial(pool.fast)).value("capacity", 0.0), 280, 280 * 0.25) << from_log.out;
  EXPECT_NEAR(entry(from_log.report, dial(pool.slow)).value("capacity", 0.0), 93, 93 * 0.25) << from_log.out;
  // The weights the ramp gives this fleet (RampMeasuresTheFleetAndWeighsIt6To2To1 for its measure).
  EXPECT_EQ(from_log.report["weights"], json({{dial(pool.fast), 3}, {dial(pool.slow), 1}})) << from_log.out;
}

}  // namespace
}  // namespace heft::test
