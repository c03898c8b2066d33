// `heft rollout` against a running heft and demo backends (docs/rollout.md).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "health_load_util.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;

struct RolloutFleet {
  std::string dir = make_temp_dir();
  Backend stable, canary;
  uint16_t port = free_port();
  uint16_t admin = free_port();
  Process heft;

  // `proxy_lines`: more lines for the reverse_proxy block ("lb_policy first\n").
  explicit RolloutFleet(const std::vector<std::string>& canary_options = {},
                        const std::string& canary_config = "weight 0", const std::string& proxy_lines = "") {
    stable = start_backend(dir, "stable");
    canary = start_backend(dir, "canary", canary_options);
    heft = start_heft(dir,
                      two_worker_pool(admin, port,
                                      fmt::format("\t\tto 127.0.0.1:{} weight 100\n\t\tto 127.0.0.1:{} {}\n{}",
                                                  stable.port, canary.port, canary_config, proxy_lines)),
                      port);
    if (!wait_for_port(admin, 10s)) throw std::runtime_error("no admin API; log:\n" + heft.log());
  }
  // heft again on the same files with --resume (the state file holds the admin changes),
  // `gap` after the old one exited.
  void restart_heft_resuming(std::chrono::milliseconds gap = 0ms) {
    heft.signal(SIGTERM);
    if (!heft.wait(20s)) throw std::runtime_error("heft did not stop; log:\n" + heft.log());
    std::this_thread::sleep_for(gap);
    heft = Process({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--resume", "--state", dir + "/autosave.json"},
                   dir + "/heft2.log");
    if (!wait_for_port(port, 10s) || !wait_for_port(admin, 10s))
      throw std::runtime_error("heft did not start again; log:\n" + heft.log());
  }
  // The site's upstreams array as the admin API has it.
  nlohmann::json upstreams() {
    HttpClient c(admin);
    Response config = c.request(fmt::format("GET /config/ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin));
    auto parsed = nlohmann::json::parse(config.body, nullptr, false);
    const nlohmann::json::json_pointer at("/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams");
    return parsed.is_object() && parsed.contains(at) ? parsed[at] : nlohmann::json();
  }
  Process start_rollout(const std::vector<std::string>& extra) {
    std::vector<std::string> args{HEFT_BINARY, "rollout", "--site", fmt::format(":{}", port), "--stable",
                                  fmt::format("127.0.0.1:{}", stable.port), "--canary",
                                  fmt::format("127.0.0.1:{}", canary.port), "--address",
                                  fmt::format("127.0.0.1:{}", admin)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Process(args, dir + "/rollout.log");
  }
  // Runs heft rollout to completion; returns (exit code, output).
  std::pair<int, std::string> rollout(const std::vector<std::string>& extra) {
    Process p = start_rollout(extra);
    auto code = p.wait(60s);
    return {code.value_or(-1), p.log()};
  }
  // Who answers now (20 sequential requests).
  std::map<std::string, int> answers() {
    std::map<std::string, int> out;
    HttpClient c(port);
    for (int i = 0; i < 20; ++i) out[c.get("/").header("x-backend")]++;
    return out;
  }
};

TEST(Rollout, BadArgumentsExitTwo) {
  std::string dir = make_temp_dir();
  Process p({HEFT_BINARY, "rollout", "--site", ":1", "--stable", "a:1", "--canary", "b:1", "--stages", "95-5"},
            dir + "/log");
  EXPECT_EQ(p.wait(10s).value_or(-1), 2);
  EXPECT_NE(p.log().find("bad stage"), std::string::npos) << p.log();
}

TEST(Rollout, UnreachableAdminApiExitsTwoWithTheSystemsReason) {
  std::string dir = make_temp_dir();
  uint16_t nobody = free_port();
  Process p({HEFT_BINARY, "rollout", "--site", ":1", "--stable", "a:1", "--canary", "b:1", "--address",
             fmt::format("127.0.0.1:{}", nobody)},
            dir + "/log");
  EXPECT_EQ(p.wait(10s).value_or(-1), 2);
  EXPECT_NE(p.log().find(fmt::format("cannot reach the admin API at 127.0.0.1:{}: Connection refused\n", nobody)),
            std::string::npos)
      << p.log();
}

// A backup takes no traffic while a primary is up: refused before anything
// changes (its "rollback" would have drained the pool's failover).
TEST(Rollout, BackupCanaryIsRefusedAndNothingChanges) {
  RolloutFleet f({}, "backup");
  auto [code, out] = f.rollout({"--stages", "50:50", "--hold", "1s"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("is a backup server"), std::string::npos) << out;
  HttpClient admin(f.admin);
  Response config = admin.request(fmt::format("GET /config/ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", f.admin));
  auto upstreams = nlohmann::json::parse(config.body)["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]
                                                      ["routes"][0]["handle"][0]["upstreams"];
  EXPECT_EQ(upstreams[1].value("backup", false), true) << upstreams;
  EXPECT_EQ(upstreams[1].value("weight", 1), 1) << upstreams;
  EXPECT_EQ(upstreams[0].value("weight", 1), 100) << upstreams;
}

TEST(Rollout, HealthyCanaryReachesFullTraffic) {
  RolloutFleet f;
  Load load(f.port, 3);
  auto [code, out] = f.rollout({"--stages", "95:5,50:50,0:100", "--hold", "2s", "--min-requests", "20",
                                "--max-error-rate", "1%"});
  // Traffic now all on the canary.
  std::this_thread::sleep_for(300ms);
  auto t = Clock::now();
  std::this_thread::sleep_for(500ms);
  load.stop();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("rollout complete"), std::string::npos) << out;
  EXPECT_NE(out.find("stage 3/3 0:100"), std::string::npos) << out;
  EXPECT_EQ(share_of(load.between(t, t + 500ms), "canary"), 1.0);
  EXPECT_EQ(failures(load.all()), 0u);
}

TEST(Rollout, FailingCanaryRolledBackWithinOneHoldWindow) {
  RolloutFleet f({"--fail-rate", "0.2"});
  Load load(f.port, 3);
  Process p = f.start_rollout({"--stages", "80:20,50:50,0:100", "--hold", "3s", "--min-requests", "50",
                               "--max-error-rate", "5%"});
  // From the stage's application to the breach, as the rollout prints them
  // (an admin write's fsync can take seconds on a busy disk: not counted).
  std::optional<Clock::time_point> applied, breached;
  std::optional<int> code;
  const auto end = Clock::now() + 60s;
  while (!code && Clock::now() < end) {
    const std::string so_far = p.log();
    if (!applied && so_far.find("applied, holding") != std::string::npos) applied = Clock::now();
    if (!breached && so_far.find("BREACH") != std::string::npos) breached = Clock::now();
    code = p.wait(20ms);
  }
  const std::string out = p.log();
  load.stop();
  // Lines that came with the exit, between two looks: seen now (later than they came).
  if (!applied && out.find("applied, holding") != std::string::npos) applied = Clock::now();
  if (!breached && out.find("BREACH") != std::string::npos) breached = Clock::now();
  EXPECT_EQ(code, std::optional<int>(1)) << out;
  ASSERT_TRUE(applied && breached) << out;
  EXPECT_LT(*breached - *applied, 3s) << out;  // within the first stage's hold window
  EXPECT_EQ(out.find("stage 2/3"), std::string::npos) << out;
  EXPECT_NE(out.find("ROLLED BACK"), std::string::npos) << out;
  EXPECT_NE(out.find("canary 5xx rate"), std::string::npos) << out;
  // After the rollback the canary gets nothing.
  HttpClient c(f.port);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.get("/").header("x-backend"), "stable");
}

// Ctrl-C leaves the last applied stage, reported; with --rollback-on-abort, 100:0.
TEST(Rollout, InterruptLeavesAConsistentReportedState) {
  RolloutFleet f;
  {
    Process p = f.start_rollout({"--stages", "50:50,0:100", "--hold", "30s"});
    std::this_thread::sleep_for(1000ms);
    p.signal(SIGINT);
    EXPECT_EQ(p.wait(5s).value_or(-1), 130) << p.log();
    EXPECT_NE(p.log().find("INTERRUPTED during stage 1/2"), std::string::npos) << p.log();
    auto who = f.answers();
    EXPECT_EQ(who["stable"], 10);
    EXPECT_EQ(who["canary"], 10);
  }
  {
    Process p = f.start_rollout({"--stages", "50:50,0:100", "--hold", "30s", "--rollback-on-abort"});
    std::this_thread::sleep_for(1000ms);
    p.signal(SIGINT);
    EXPECT_EQ(p.wait(5s).value_or(-1), 130) << p.log();
    EXPECT_NE(p.log().find("ROLLED BACK"), std::string::npos) << p.log();
    EXPECT_EQ(f.answers()["stable"], 20);
  }
}

// Ctrl-C while the rollout waits on a heft that does not answer (stopped):
// handled at once, exit 130. The signal used to be lost: the read went on
// (std::signal's SA_RESTART) and, the hold being over when heft answered,
// the rollout reported "rollout complete" with exit 0.
TEST(Rollout, InterruptWhileHeftDoesNotAnswerIsNotLost) {
  RolloutFleet f;
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "2s", "--poll", "250ms", "--min-requests", "0"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  f.heft.signal(SIGSTOP);
  std::this_thread::sleep_for(2500ms);  // past the hold: the rollout waits in a read
  p.signal(SIGINT);
  auto code = p.wait(3s);  // while heft is still stopped
  const bool while_stopped = code.has_value();
  f.heft.signal(SIGCONT);
  if (!code) code = p.wait(20s);
  EXPECT_EQ(code.value_or(-1), 130) << p.log();
  EXPECT_TRUE(while_stopped) << "the interrupt waited for heft to answer";
  EXPECT_EQ(p.log().find("rollout complete"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("INTERRUPTED during stage 1/1: left at"), std::string::npos) << p.log();
}

// --rollback-on-abort with the admin API gone: the rollback fails, and the
// state line says the weights are unknown (it said "(rolled back)" whatever
// happened).
TEST(Rollout, FailedRollbackOnAbortIsNotReportedAsRolledBack) {
  RolloutFleet f;
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "30s", "--poll", "5s", "--rollback-on-abort"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  std::this_thread::sleep_for(300ms);  // past the stage's first read; the next is seconds away
  f.heft.kill_now();
  p.signal(SIGINT);
  EXPECT_EQ(p.wait(20s).value_or(-1), 130) << p.log();
  const std::string out = p.log();
  EXPECT_NE(out.find("ROLLBACK FAILED"), std::string::npos) << out;
  EXPECT_EQ(out.find("(rolled back)"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("state: unknown, the rollback was not confirmed (before it: 127.0.0.1:{} 50 : "
                                 "127.0.0.1:{} 50, the last applied stage)",
                                 f.stable.port, f.canary.port)),
            std::string::npos)
      << out;
}

// Whether process `pid` is stopped (SIGSTOP): state T in /proc/PID/stat.
bool is_stopped(pid_t pid) {
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

// How many sockets process `pid` has open.
int open_sockets(pid_t pid) {
  int count = 0;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec))
    if (std::filesystem::read_symlink(fd.path(), ec).string().starts_with("socket:")) ++count;
  return count;
}

// SIGSTOPs `p` at a moment it is between two admin requests (no socket open),
// so that what happens to heft meanwhile cannot fail a request half done.
bool stop_between_requests(Process& p) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    p.signal(SIGSTOP);
    for (int i = 0; i < 100 && !is_stopped(p.pid()); ++i) std::this_thread::sleep_for(1ms);
    if (is_stopped(p.pid()) && open_sockets(p.pid()) == 0) return true;
    p.signal(SIGCONT);
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// `n` sequential requests through heft; false if one got no answer.
bool send_requests(uint16_t port, int n) {
  HttpClient c(port);
  for (int i = 0; i < n; ++i)
    if (c.get("/").status == 0) return false;
  return true;
}

// heft restarted with --resume during a stage: its counters start from 0
// again. The canary had 200 requests, 20 of them 5xx, at the stage's start;
// after the restart it serves 300, 12 of them 5xx (4 % < 5 %). Judged on
// 300 - 200 = 100 requests beside the raw 12 errors (12 %), it was a false
// breach; now the whole window counts from the restart.
TEST(Rollout, CountersGoingDownWithARestartAreJudgedFromTheRestart) {
  RolloutFleet f({"--fail-rate", "0.1"}, "weight 100");
  ASSERT_TRUE(send_requests(f.port, 400));  // 200 each, the canary's every 10th failed
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "3s", "--poll", "1s", "--min-requests", "50",
                               "--max-error-rate", "5%"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  std::this_thread::sleep_for(200ms);  // past the stage's first read
  ASSERT_TRUE(stop_between_requests(p)) << p.log();
  f.restart_heft_resuming();
  HttpClient control(f.canary.port);
  ASSERT_EQ(control.request("POST /_control/fail_rate?value=0.04 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                .status,
            200);
  ASSERT_TRUE(send_requests(f.port, 600));  // 300 each, the canary's every 25th failed
  p.signal(SIGCONT);
  auto code = p.wait(30s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 0) << out;
  EXPECT_EQ(out.find("BREACH"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("the counters of 127.0.0.1:{} went down", f.canary.port)), std::string::npos) << out;
  EXPECT_NE(out.find("canary 300 req, "), std::string::npos) << out;
  EXPECT_NE(out.find("rollout complete"), std::string::npos) << out;
}

// heft restarted with --resume during a stage, its admin API gone for 1.5 s
// (several polls): the rollout waits for it and goes on. It used to take the
// first unanswered poll for unreadable counters and roll back, which failed
// too (heft was down): "ROLLBACK FAILED", exit 1, the canary left at the
// stage's weight with nothing watching it.
TEST(Rollout, HeftRestartedDuringAStageIsWaitedFor) {
  RolloutFleet f;
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "4s", "--poll", "250ms", "--min-requests", "0"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  f.restart_heft_resuming(1500ms);
  auto code = p.wait(40s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 0) << out;
  EXPECT_NE(out.find(fmt::format("stage 1/1: no answer from the admin API (cannot reach the admin API at "
                                 "127.0.0.1:{}: Connection refused); waiting up to 30s for it",
                                 f.admin)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stage 1/1: the admin API answers again after "), std::string::npos) << out;
  EXPECT_EQ(out.find("ROLLBACK FAILED"), std::string::npos) << out;
  EXPECT_NE(out.find("rollout complete"), std::string::npos) << out;
  auto upstreams = f.upstreams();
  ASSERT_TRUE(upstreams.is_array()) << upstreams;
  EXPECT_EQ(upstreams[0].value("weight", 1), 50) << upstreams;
  EXPECT_EQ(upstreams[1].value("weight", 1), 50) << upstreams;
}

// A reload puts the Heftfile's weights back during a stage: the rollout stops
// (exit 1) and leaves them, instead of judging weights it did not set and
// reporting success.
TEST(Rollout, StageUndoneByAReloadStopsTheRollout) {
  RolloutFleet f;
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "3s", "--poll", "250ms", "--min-requests", "0"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  Process reload({HEFT_BINARY, "reload", "--config", f.dir + "/Heftfile", "--address",
                  fmt::format("127.0.0.1:{}", f.admin)},
                 f.dir + "/reload.log");
  ASSERT_EQ(reload.wait(30s).value_or(-1), 0) << reload.log();
  auto code = p.wait(30s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 1) << out;
  EXPECT_NE(out.find(fmt::format("STOPPED at stage 1/1 50:50: the weights are no longer the stage's: 127.0.0.1:{} "
                                 "100 : 127.0.0.1:{} 0 now",
                                 f.stable.port, f.canary.port)),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("rollout complete"), std::string::npos) << out;
  EXPECT_EQ(out.find("ROLLED BACK"), std::string::npos) << out;
  auto upstreams = f.upstreams();
  ASSERT_TRUE(upstreams.is_array()) << upstreams;
  EXPECT_EQ(upstreams[0].value("weight", 1), 100) << upstreams;
  EXPECT_EQ(upstreams[1].value("weight", 1), 0) << upstreams;
}

// Options with a negative number are refused before anything changes (CLI11
// read --min-requests -5 into its unsigned as 18446744073709551611 and the
// rollout went ahead).
TEST(Rollout, NegativeNumbersAreRefusedAndNothingChanges) {
  RolloutFleet f;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--min-requests", "-5"}, "bad --min-requests \"-5\""},
      {{"--min-requests=-1"}, "bad --min-requests \"-1\""},
      {{"--min-requests", "2.5"}, "bad --min-requests \"2.5\""},
      {{"--hold=-1s"}, "bad --hold"},
      {{"--poll=-250ms"}, "bad --poll"},
      {{"--max-p99=-5ms"}, "bad --max-p99"},
      {{"--max-error-rate=-1%"}, "bad --max-error-rate"},
      // Not negative, but as sure a mistake: 1 is 100 %, a guard that never trips.
      {{"--max-error-rate", "1"}, "--max-error-rate \"1\" would be 100% (never rolled back for errors)"},
      {{"--max-error-rate", "1.0"}, "write 1% for one percent, or 100% if that is meant"},
      {{"--stages", "95:-5"}, "bad stage \"95:-5\""},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> extra = args;
    if (args[0] != "--stages") extra.insert(extra.end(), {"--stages", "50:50"});
    if (!args[0].starts_with("--hold")) extra.insert(extra.end(), {"--hold", "1s"});
    auto [code, out] = f.rollout(extra);
    EXPECT_EQ(code, 2) << args[0] << ": " << out;
    EXPECT_NE(out.find(message), std::string::npos) << args[0] << ": " << out;
    EXPECT_EQ(out.find("applied"), std::string::npos) << out;
  }
  auto upstreams = f.upstreams();
  ASSERT_TRUE(upstreams.is_array()) << upstreams;
  EXPECT_EQ(upstreams[0].value("weight", 1), 100) << upstreams;
  EXPECT_EQ(upstreams[1].value("weight", 1), 0) << upstreams;
}

// A pool whose policy ignores weights would give the "5 %" canary an equal
// turn (round_robin) or all or nothing (first): refused up front, naming the
// policy, nothing changed.
TEST(Rollout, PolicyThatIgnoresWeightsIsRefusedAndNothingChanges) {
  for (const std::string policy : {"round_robin", "first"}) {
    RolloutFleet f({}, "weight 0", "\t\tlb_policy " + policy + "\n");
    auto [code, out] = f.rollout({"--stages", "95:5,0:100", "--hold", "1s", "--min-requests", "0"});
    EXPECT_EQ(code, 2) << policy << ": " << out;
    EXPECT_NE(out.find("balances with lb_policy " + policy + ", which ignores weights"), std::string::npos) << out;
    EXPECT_EQ(out.find("applied"), std::string::npos) << out;
    auto upstreams = f.upstreams();
    ASSERT_TRUE(upstreams.is_array()) << upstreams;
    EXPECT_EQ(upstreams[0].value("weight", 1), 100) << upstreams;
    EXPECT_EQ(upstreams[1].value("weight", 1), 0) << upstreams;
  }
}

// A site of five backends, a (stable) 5, b 3, c (canary) 2, d 1, e 1, with its
// own state file; the admin API as other operators use it during a rollout.
struct SharedSite {
  static constexpr const char* kUpstreams =
      "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  Process heft;

  SharedSite() {
    std::string tos;
    const int weights[] = {5, 3, 2, 1, 1};
    for (int i = 0; i < 5; ++i) {
      backends.push_back(start_backend(dir, std::string(1, char('a' + i))));
      tos += fmt::format("\t\tto 127.0.0.1:{} weight {}\n", backends.back().port, weights[i]);
    }
    write_file(dir + "/Heftfile", two_worker_pool(admin_port, port, tos));
    heft = Process({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", dir + "/state.json"},
                   dir + "/heft.log");
    if (!wait_for_port(port) || !wait_for_port(admin_port)) throw std::runtime_error("heft did not start:\n" + heft.log());
  }
  std::string dial(size_t i) const { return fmt::format("127.0.0.1:{}", backends[i].port); }
  Process start_rollout(const std::vector<std::string>& stages_and_hold) {
    std::vector<std::string> args{HEFT_BINARY, "rollout", "--site", fmt::format(":{}", port), "--stable", dial(0),
                                  "--canary", dial(2), "--min-requests", "20", "--poll", "250ms", "--address",
                                  fmt::format("127.0.0.1:{}", admin_port)};
    args.insert(args.end(), stages_and_hold.begin(), stages_and_hold.end());
    return Process(args, dir + "/rollout.log");
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") {
    return admin_call(admin_port, method, path, body);
  }
  nlohmann::json upstreams() { return nlohmann::json::parse(admin("GET", kUpstreams).body, nullptr, false); }
  // Who answers now (100 sequential requests).
  std::map<std::string, int> answers() {
    std::map<std::string, int> out;
    HttpClient c(port);
    for (int i = 0; i < 100; ++i) out[c.get("/").header("x-backend")]++;
    return out;
  }
};

// Other operators' changes to the site during a rollout survive it: each stage
// sets only the stable's and canary's weights, in the upstreams as they are
// then. (Every stage used to PATCH the whole array as read at the start: b came
// back up at stage 2, d got its old weight back, and e, removed, was re-added.)
TEST(Rollout, ConcurrentChangesToOtherUpstreamsSurviveIt) {
  SharedSite site;
  Load load(site.port, 3);
  Process rollout = site.start_rollout({"--stages", "95:5,50:50", "--hold", "2s"});
  ASSERT_TRUE(wait_for_log(rollout, "stage 1/2: ", 30s)) << rollout.log();
  // During stage 1: b marked down, d re-weighted, e removed (the last index, so none moves).
  const std::string upstreams = SharedSite::kUpstreams;
  ASSERT_EQ(site.admin("POST", upstreams + "/1/down", "true").status, 200);
  ASSERT_EQ(site.admin("POST", upstreams + "/3/weight", "4").status, 200);
  ASSERT_EQ(site.admin("DELETE", upstreams + "/4").status, 200);
  auto code = rollout.wait(30s);
  load.stop();
  ASSERT_EQ(code.value_or(-1), 0) << rollout.log();
  EXPECT_NE(rollout.log().find("rollout complete"), std::string::npos) << rollout.log();
  auto after = site.upstreams();
  ASSERT_TRUE(after.is_array()) << after;
  ASSERT_EQ(after.size(), 4u) << after;  // e stays removed
  EXPECT_EQ(after[0].value("dial", ""), site.dial(0)) << after;
  EXPECT_EQ(after[0].value("weight", 1), 50) << after;
  EXPECT_EQ(after[1].value("down", false), true) << after;
  EXPECT_EQ(after[1].value("weight", 1), 3) << after;
  EXPECT_EQ(after[2].value("dial", ""), site.dial(2)) << after;
  EXPECT_EQ(after[2].value("weight", 1), 50) << after;
  EXPECT_EQ(after[3].value("weight", 1), 4) << after;
  auto who = site.answers();
  EXPECT_EQ(who["b"], 0);
  EXPECT_EQ(who["e"], 0);
  EXPECT_EQ(who["a"] + who["c"] + who["d"], 100);
}

// The canary removed by someone else during a rollout: it stops with exit 1
// and says so, without re-adding it or touching anything else.
TEST(Rollout, CanaryRemovedMeanwhileStopsWithoutReAddingIt) {
  SharedSite site;
  Load load(site.port, 3);
  Process rollout = site.start_rollout({"--stages", "95:5,50:50", "--hold", "3s"});
  ASSERT_TRUE(wait_for_log(rollout, "stage 1/2: ", 30s)) << rollout.log();
  ASSERT_EQ(site.admin("DELETE", std::string(SharedSite::kUpstreams) + "/2").status, 200);
  auto code = rollout.wait(30s);
  load.stop();
  EXPECT_EQ(code.value_or(-1), 1) << rollout.log();
  EXPECT_NE(rollout.log().find("STOPPED"), std::string::npos) << rollout.log();
  EXPECT_NE(rollout.log().find(fmt::format("the canary upstream {} is no longer in site", site.dial(2))),
            std::string::npos)
      << rollout.log();
  auto after = site.upstreams();
  ASSERT_TRUE(after.is_array()) << after;
  ASSERT_EQ(after.size(), 4u) << after;
  for (const auto& u : after) EXPECT_NE(u.value("dial", ""), site.dial(2)) << after;
  EXPECT_EQ(after[0].value("weight", 1), 95) << after;  // stage 1 left as it was
}


// One host name served by two sites (two ports) with the same two upstreams:
// `--site HOST` names neither, and is refused with the sites it could mean
// (exit 2, nothing changed). It used to take the first one silently: the
// rollout moved (and judged) one port's traffic only, reported as the host's.
TEST(Rollout, HostNameOfSeveralSitesIsRefusedAsAmbiguous) {
  const std::string dir = make_temp_dir();
  Backend stable = start_backend(dir, "stable"), canary = start_backend(dir, "canary");
  const uint16_t first = free_port(), second = free_port(), admin = free_port();
  std::string sites;
  for (uint16_t port : {first, second})
    sites += fmt::format("app.test:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} weight 100\n\t\tto 127.0.0.1:{} "
                         "weight 0\n\t}}\n}}\n",
                         port, stable.port, canary.port);
  Process heft = start_heft(dir, fmt::format("{{\n\tadmin 127.0.0.1:{}\n}}\n{}", admin, sites), first);
  ASSERT_TRUE(wait_for_port(second) && wait_for_port(admin)) << heft.log();
  const std::string address = fmt::format("127.0.0.1:{}", admin);
  const std::string stable_dial = fmt::format("127.0.0.1:{}", stable.port);
  const std::string canary_dial = fmt::format("127.0.0.1:{}", canary.port);
  const auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{HEFT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--address", address});
    Process p(argv, dir + "/command.log");
    const int code = p.wait(30s).value_or(-1);
    return std::pair{code, p.log()};
  };
  const std::string candidates =
      fmt::format("app.test:{} (site 0), app.test:{} (site 1)", first, second);

  auto [code, out] = run({"rollout", "--site", "APP.test", "--stable", stable_dial, "--canary", canary_dial,
                          "--stages", "50:50", "--hold", "1s", "--min-requests", "0"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("site APP.test is ambiguous: " + candidates), std::string::npos) << out;
  EXPECT_EQ(out.find("applied"), std::string::npos) << out;

  std::tie(code, out) = run({"weight", "app.test", canary_dial, "7"});
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("site app.test is ambiguous: " + candidates), std::string::npos) << out;

  // Nothing changed on either site.
  HttpClient c(admin);
  auto config = nlohmann::json::parse(
      c.request(fmt::format("GET /config/ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin)).body, nullptr, false);
  for (const char* server : {"srv0", "srv1"}) {
    const nlohmann::json::json_pointer at(fmt::format(
        "/apps/http/servers/{}/routes/0/handle/0/routes/0/handle/0/upstreams", server));
    ASSERT_TRUE(config.contains(at)) << config;
    EXPECT_EQ(config[at][0].value("weight", 1), 100) << server << config[at];
    EXPECT_EQ(config[at][1].value("weight", 1), 0) << server << config[at];
  }

  // HOST:PORT picks one.
  std::tie(code, out) = run({"rollout", "--site", fmt::format("app.test:{}", second), "--stable", stable_dial,
                             "--canary", canary_dial, "--dry-run"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("/config/apps/http/servers/srv1/routes/0/"), std::string::npos) << out;
}


// A site index past any integer type is no site (exit 2 for rollout, 1 for
// weight), said so; it aborted both commands (std::stoul threw out_of_range,
// exit 134).
TEST(Rollout, SiteIndexTooLargeIsNoSite) {
  RolloutFleet f;
  const std::string index = "99999999999999999999";
  auto [code, out] = f.rollout({"--dry-run"});
  ASSERT_EQ(code, 0) << out;  // the fleet's own site, by :PORT
  Process rollout({HEFT_BINARY, "rollout", "--site", index, "--stable", fmt::format("127.0.0.1:{}", f.stable.port),
                   "--canary", fmt::format("127.0.0.1:{}", f.canary.port), "--dry-run", "--address",
                   fmt::format("127.0.0.1:{}", f.admin)},
                  f.dir + "/big.log");
  EXPECT_EQ(rollout.wait(30s).value_or(-1), 2) << rollout.log();
  EXPECT_NE(rollout.log().find("heft: rollout: no site " + index + " (give a host"), std::string::npos)
      << rollout.log();
  Process weight({HEFT_BINARY, "weight", index, fmt::format("127.0.0.1:{}", f.canary.port), "3", "--address",
                  fmt::format("127.0.0.1:{}", f.admin)},
                 f.dir + "/weight.log");
  EXPECT_EQ(weight.wait(30s).value_or(-1), 1) << weight.log();
  EXPECT_NE(weight.log().find("heft: no site " + index + " (give a host"), std::string::npos) << weight.log();
}


// Two sites on one port, a.test (site 0) and b.test (site 1), with the same
// stable and canary (a.test's at 7 : 3), a canary failing half its requests,
// and a third site, c.test, to insert before both during a rollout of b.test:
// b.test becomes site 2 and site 1 is a.test.
struct TwoSites {
  std::string dir = make_temp_dir();
  Backend stable = start_backend(dir, "stable");
  Backend canary = start_backend(dir, "canary", {"--fail-rate", "0.5"});
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  Process heft;

  TwoSites() {
    std::string sites;
    for (const auto& [host, stable_weight, canary_weight] : {std::tuple{"a.test", 7, 3}, std::tuple{"b.test", 100, 0}})
      sites += fmt::format("{}:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} weight {}\n\t\tto 127.0.0.1:{} "
                           "weight {}\n\t}}\n}}\n",
                           host, port, stable.port, stable_weight, canary.port, canary_weight);
    heft = start_heft(dir, fmt::format("{{\n\tworkers 2\n\tadmin 127.0.0.1:{}\n}}\n{}", admin_port, sites), port);
  }
  std::string dial(const Backend& b) const { return fmt::format("127.0.0.1:{}", b.port); }
  Process start_rollout(const std::string& site, const std::vector<std::string>& extra) {
    std::vector<std::string> args{HEFT_BINARY, "rollout", "--site", site, "--stable", dial(stable), "--canary",
                                  dial(canary), "--poll", "250ms", "--address", fmt::format("127.0.0.1:{}", admin_port)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Process(args, dir + "/rollout.log");
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") {
    return admin_call(admin_port, method, path, body);
  }
  nlohmann::json routes() {
    auto config = nlohmann::json::parse(admin("GET", "/config/").body, nullptr, false);
    const nlohmann::json::json_pointer at("/apps/http/servers/srv0/routes");
    return config.is_object() && config.contains(at) ? config[at] : nlohmann::json();
  }
  // Site c.test (a copy of b.test as it is now) inserted as the port's first route.
  int insert_site_before() {
    nlohmann::json route = routes().at(1);
    route["match"] = nlohmann::json::array({{{"host", {"c.test"}}}});
    return admin("PUT", "/config/apps/http/servers/srv0/routes/0", route.dump()).status;
  }
  // The (stable, canary) weights of the route that matches `host`.
  std::pair<int, int> weights(const std::string& host) {
    for (const auto& route : routes()) {
      if (route.at("match").at(0).at("host").at(0) != host) continue;
      const auto& upstreams = route.at("handle").at(0).at("routes").at(0).at("handle").at(0).at("upstreams");
      return {upstreams.at(0).value("weight", 1), upstreams.at(1).value("weight", 1)};
    }
    return {-1, -1};
  }
  // `n` sequential requests for `host`; false if one got no answer.
  bool send_requests(const std::string& host, int n) {
    HttpClient c(port);
    for (int i = 0; i < n; ++i)
      if (c.request(fmt::format("GET / HTTP/1.1\r\nHost: {}:{}\r\n\r\n", host, port)).status == 0) return false;
    return true;
  }
};

// A site inserted before the rolled-out one during a stage: the rollout
// follows b.test by its address to its new index, judges its canary (whose
// errors breach) and rolls b.test back; a.test keeps its 7 : 3. It used to
// keep reading site 1, now a.test: its weights (7 : 3, not the stage's)
// stopped the rollout, b.test left at 50 : 50 with the failing canary.
TEST(Rollout, SiteInsertedBeforeItIsFollowedByItsAddress) {
  TwoSites f;
  Process p = f.start_rollout("b.test", {"--stages", "50:50", "--hold", "5s", "--min-requests", "20",
                                         "--max-error-rate", "5%"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  ASSERT_EQ(f.insert_site_before(), 200) << f.heft.log();
  ASSERT_TRUE(f.send_requests("b.test", 100));
  auto code = p.wait(30s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 1) << out;
  EXPECT_NE(out.find(fmt::format("stage 1/1: site b.test:{} is site 2 now (was 1)", f.port)), std::string::npos)
      << out;
  EXPECT_NE(out.find("-> BREACH"), std::string::npos) << out;
  EXPECT_NE(out.find("ROLLED BACK to " + f.dial(f.stable) + " 100 : " + f.dial(f.canary) + " 0 — canary 5xx rate"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("STOPPED"), std::string::npos) << out;
  EXPECT_EQ(f.weights("b.test"), std::pair(100, 0));
  EXPECT_EQ(f.weights("a.test"), std::pair(7, 3));
  EXPECT_EQ(f.weights("c.test"), std::pair(50, 50));  // inserted as b.test was: not the rollout's
}

// --site as an index names the site it is at the start; a site inserted
// before it during stage 1 does not move the rollout: stage 2 is written to
// b.test, now site 2, and a.test, now site 1, is left alone. It used to
// judge site 1 from then on (stopped, a.test's weights not the stage's) and
// would have written stage 2 to it.
TEST(Rollout, SiteGivenByIndexIsFollowedByItsAddress) {
  TwoSites f;
  Process p = f.start_rollout("1", {"--stages", "50:50,20:80", "--hold", "2s", "--min-requests", "0"});
  ASSERT_TRUE(wait_for_log(p, "stage 1/2: ", 30s)) << p.log();
  ASSERT_EQ(f.insert_site_before(), 200) << f.heft.log();
  auto code = p.wait(30s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 0) << out;
  EXPECT_NE(out.find(fmt::format("rollout of site 1 (b.test:{}, /config/apps/http/servers/srv0/routes/1/", f.port)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("rollout complete"), std::string::npos) << out;
  EXPECT_EQ(f.weights("b.test"), std::pair(20, 80));
  EXPECT_EQ(f.weights("a.test"), std::pair(7, 3));
  EXPECT_EQ(f.weights("c.test"), std::pair(50, 50));
}

// A breach whose rollback fails (heft refuses the write: its state file
// cannot be saved) ends with the state left as far as known, as an
// interrupt's failed rollback does, exit 1. It ended at "ROLLBACK FAILED"
// with no state line.
TEST(Rollout, FailedRollbackAfterABreachEndsWithTheStateLeft) {
  RolloutFleet f({"--fail-rate", "0.5"});
  Process p = f.start_rollout({"--stages", "50:50", "--hold", "5s", "--poll", "250ms", "--min-requests", "20",
                               "--max-error-rate", "5%"});
  ASSERT_TRUE(wait_for_log(p, "applied, holding", 30s)) << p.log();
  // heft saves a change in a temporary file beside the state file before it
  // applies it: a directory in that file's place makes heft refuse the change
  // (root too), while it keeps answering.
  std::filesystem::create_directory(fmt::format("{}/autosave.json.tmp.{}", f.dir, f.heft.pid()));
  ASSERT_TRUE(send_requests(f.port, 100));
  auto code = p.wait(30s);
  const std::string out = p.log();
  EXPECT_EQ(code.value_or(-1), 1) << out;
  EXPECT_NE(out.find("-> BREACH"), std::string::npos) << out;
  EXPECT_NE(out.find("ROLLBACK FAILED: canary 5xx rate"), std::string::npos) << out;
  const std::string last_line = fmt::format(
      "state: unknown, the rollback was not confirmed (before it: 127.0.0.1:{} 50 : 127.0.0.1:{} 50, the last "
      "applied stage)\n",
      f.stable.port, f.canary.port);
  EXPECT_TRUE(out.ends_with(last_line)) << out;
  // As the line says: heft refused the rollback, the stage is still in place.
  auto upstreams = f.upstreams();
  ASSERT_TRUE(upstreams.is_array()) << upstreams;
  EXPECT_EQ(upstreams[0].value("weight", 1), 50) << upstreams;
  EXPECT_EQ(upstreams[1].value("weight", 1), 50) << upstreams;
}

}  // namespace
}  // namespace heft::test
