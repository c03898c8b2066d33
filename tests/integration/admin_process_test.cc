// The admin API through real processes: `heft run` with its admin API, the
// control commands (reload, weight, upstreams, stop), and kill -9 right after
// a 200 then `heft run --resume` keeps the change. Skipped while `heft run`
// does not yet start the admin API (it needs --resume / ProxyAdmin wiring).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "integration/process_util.h"

namespace heft::test {
namespace {

using json = nlohmann::json;
const char* kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

// Runs `heft ARGS...` to its end; returns the exit code, output in `out`.
int heft(const std::string& dir, const std::vector<std::string>& args, std::string& out) {
  std::vector<std::string> argv{HEFT_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, dir + "/cmd.log");
  auto code = p.wait(30s);
  out = read_file(dir + "/cmd.log");
  return code.value_or(-1);
}

// User plus system CPU time of process `pid` so far, from /proc/PID/stat.
double cpu_seconds(pid_t pid) {
  std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15 (1-based): utime, stime
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// How many of `fds` the peer has closed (recv() says end of stream) within `timeout`.
int count_closed_by_peer(const std::vector<int>& fds, std::chrono::milliseconds timeout) {
  std::vector<bool> closed(fds.size());
  int count = 0;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    for (size_t i = 0; i < fds.size(); ++i) {
      char byte;
      if (!closed[i] && ::recv(fds[i], &byte, 1, MSG_DONTWAIT) == 0) {
        closed[i] = true;
        ++count;
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  return count;
}

struct AdminProcessTest : ::testing::Test {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  std::string state = dir + "/state/autosave.json";

  void SetUp() override {
    backends.push_back(start_backend(dir, "a"));
    backends.push_back(start_backend(dir, "b"));
  }
  std::string heftfile(int wa, int wb) const {
    return fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n:{} {{\n\treverse_proxy {{\n"
                       "\t\tto 127.0.0.1:{} weight {}\n\t\tto 127.0.0.1:{} weight {}\n\t}}\n}}\n",
                       admin_port, port, backends[0].port, wa, backends[1].port, wb);
  }
  Process run(const std::string& log) {
    Process p({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--resume", "--state", state}, dir + "/" + log);
    if (!wait_for_port(port) || !wait_for_port(admin_port)) ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") {
    return admin_call(admin_port, method, path, body);
  }
  std::map<std::string, int> measure(int n) {
    HttpClient client(port);
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) counts[client.get("/").header("x-backend")]++;
    return counts;
  }
  std::string address() const { return fmt::format("127.0.0.1:{}", admin_port); }
  // `heft run` with its descriptor limit (soft and hard, which heft cannot raise) set to `nofile`.
  Process run_with_nofile(int nofile, const std::string& log) {
    write_file(dir + "/Heftfile", heftfile(1, 1));
    Process p({"/usr/bin/prlimit", fmt::format("--nofile={0}:{0}", nofile), HEFT_BINARY, "run", "--config",
               dir + "/Heftfile", "--state", state},
              dir + "/" + log);
    if (!wait_for_port(port) || !wait_for_port(admin_port)) ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  // Opens `n` connections to the admin port that send nothing.
  std::vector<int> idle_admin_connections(int n) const {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i)
      if (int fd = connect_to(admin_port, 2s); fd >= 0) fds.push_back(fd);
    return fds;
  }
  // Until an admin request is answered again (bounded), after idle connections went away.
  int admin_status_once_free() {
    int status = 0;
    for (int i = 0; i < 50 && status != 200; ++i) {
      status = admin("GET", "/config/").status;
      if (status != 200) std::this_thread::sleep_for(100ms);
    }
    return status;
  }
};

// The configuration a run starts with is saved, so --resume after a crash
// brings back what was serving, not what an earlier run saved (a change made
// in the first run came back, with every request going to a backend the
// second run's file no longer had). Not saved when resuming or without an API.
TEST_F(AdminProcessTest, ConfigurationServedFromTheStartIsWhatResumeBringsBack) {
  write_file(dir + "/Heftfile", heftfile(1, 1));
  {
    Process first({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state}, dir + "/first.log");
    ASSERT_TRUE(wait_for_port(port) && wait_for_port(admin_port)) << first.log();
    Response r = admin("PATCH", std::string(kUpstreams) + "/1/weight", "0");  // saved: b drained
    ASSERT_EQ(r.status, 200) << r.body;
    first.kill_now();
  }
  write_file(dir + "/Heftfile", heftfile(0, 1));  // another file: only b
  {
    Process second({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state}, dir + "/second.log");
    ASSERT_TRUE(wait_for_port(port) && wait_for_port(admin_port)) << second.log();
    EXPECT_EQ(measure(20)["b"], 20);
    second.kill_now();  // a crash before any change
  }
  write_file(dir + "/Heftfile", heftfile(1, 0));  // what --resume must not read
  Process third = run("third.log");
  EXPECT_NE(third.log().find("resuming from"), std::string::npos) << third.log();
  EXPECT_EQ(measure(20)["b"], 20);
}

// A resumed run's warnings name the state file it serves (JSON, no lines);
// they named no file at all: "warning: site :PORT: ...".
// No admin line and a site on :2019: heft served the site and ran without its
// admin API ("Address already in use"). It now refuses to start, naming the
// site, before it binds anything.
TEST_F(AdminProcessTest, RunRefusesASiteOnTheDefaultAdminAddress) {
  const std::string path = dir + "/Heftfile";
  write_file(path, fmt::format(":2019 {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", backends[0].port));
  Process p({HEFT_BINARY, "run", "--config", path, "--state", state}, dir + "/heft.log");
  EXPECT_EQ(p.wait(10s), std::optional<int>(1)) << p.log();
  EXPECT_EQ(untimed(p.log()), fmt::format("error {0}:1:1: the sites on port 2019 listen on every address, the admin "
                                          "API's default 127.0.0.1:2019 among them: set admin to another address in the "
                                          "global options, or admin off\nerror {0} is not valid, not starting\n",
                                          path));
}

TEST_F(AdminProcessTest, ResumedRunNamesTheStateFileInItsWarnings) {
  std::string file = heftfile(2, 1);
  file.insert(file.rfind("\t}\n}\n"), "\t\tlb_policy round_robin\n");
  write_file(dir + "/Heftfile", file);
  {
    Process first({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state}, dir + "/first.log");
    ASSERT_TRUE(wait_for_port(port) && wait_for_port(admin_port)) << first.log();
    EXPECT_TRUE(wait_for_log(first, fmt::format("Z warn {}/Heftfile:5: site :{}: lb_policy round_robin "
                                                "ignores the weights 2:1", dir, port)))
        << first.log();
    first.kill_now();
  }
  Process second = run("second.log");
  EXPECT_TRUE(wait_for_log(second, fmt::format("Z warn {}: site :{}: lb_policy round_robin ignores the "
                                               "weights 2:1", state, port)))
      << second.log();
}

TEST_F(AdminProcessTest, KillNineAfterA200ThenResumeKeepsTheChange) {
  write_file(dir + "/Heftfile", heftfile(1, 1));
  {
    Process first = run("first.log");
    Response r = admin("PATCH", std::string(kUpstreams) + "/1/weight", "0");
    ASSERT_EQ(r.status, 200) << r.body;
    first.kill_now();  // SIGKILL right after the 200
  }
  Process second = run("second.log");
  Response r = admin("GET", std::string(kUpstreams) + "/1/weight");
  EXPECT_EQ(r.body, "0\n");
  EXPECT_EQ(measure(100)["a"], 100);
}

// `heft sim --running` simulates the pool the running heft serves now: a
// weight changed through the admin API is the weight simulated.
TEST_F(AdminProcessTest, SimRunningTakesThePoolAsServedNow) {
  write_file(dir + "/Heftfile", heftfile(1, 1));
  Process p = run("heft.log");
  std::string out;
  const std::string b = fmt::format("127.0.0.1:{}", backends[1].port);
  ASSERT_EQ(heft(dir, {"weight", "0", b, "3", "--address", address()}, out), 0) << out;
  const std::vector<std::string> sim{"sim", "--running", "--address", address(), "--servers", "1x,1x",
                                     "--rate", "50", "--duration", "2s"};
  std::vector<std::string> json_args = sim;
  json_args.push_back("--json");
  ASSERT_EQ(heft(dir, json_args, out), 0) << out;
  const auto scenario = json::parse(out)["scenarios"][0];
  EXPECT_EQ(scenario["name"], "heft at " + address() + " site 0");
  EXPECT_EQ(scenario["servers"][0]["weight"], 1);
  EXPECT_EQ(scenario["servers"][1]["name"], b);
  EXPECT_EQ(scenario["servers"][1]["weight"], 3);
  EXPECT_EQ(scenario["policies"][0]["policy"], "weighted_round_robin");
  std::vector<std::string> wrong = sim;
  wrong[5] = "1x";
  EXPECT_EQ(heft(dir, wrong, out), 2);
  EXPECT_NE(out.find("--servers: 1 size for the 2 backends of site 0"), std::string::npos) << out;
  EXPECT_EQ(heft(dir, {"sim", "--address", address(), "--servers", "1x"}, out), 2);
  EXPECT_NE(out.find("--address needs --running"), std::string::npos) << out;
  EXPECT_EQ(heft(dir, {"sim", "--running", "--address", "127.0.0.1:1", "--servers", "1x"}, out), 2);
  EXPECT_NE(out.find("--running: cannot reach the admin API at 127.0.0.1:1"), std::string::npos) << out;
}

TEST_F(AdminProcessTest, ControlCommands) {
  write_file(dir + "/Heftfile", heftfile(1, 1));
  Process p = run("heft.log");
  std::string out;
  std::string b = fmt::format("127.0.0.1:{}", backends[1].port);
  ASSERT_EQ(heft(dir, {"weight", "0", b, "3", "--address", address()}, out), 0) << out;
  auto counts = measure(400);
  EXPECT_NEAR(counts["b"], 300, 2);  // smooth WRR carries its current weights across the change

  ASSERT_EQ(heft(dir, {"upstreams", "--address", address()}, out), 0) << out;
  EXPECT_NE(out.find(b), std::string::npos) << out;
  EXPECT_NE(out.find("SHARE"), std::string::npos) << out;
  const std::string b_row = out.substr(out.find(b), out.find('\n', out.find(b)) - out.find(b));
  EXPECT_NE(b_row.find(" primary "), std::string::npos) << out;  // ROLE: neither is a backup
  // SITE as :PORT too (the same weight: a no-op), and an unknown one named.
  EXPECT_EQ(heft(dir, {"weight", fmt::format(":{}", port), b, "3", "--address", address()}, out), 0) << out;
  EXPECT_EQ(heft(dir, {"weight", "Nosuch.Example", b, "3", "--address", address()}, out), 1) << out;
  EXPECT_NE(out.find("no site Nosuch.Example"), std::string::npos) << out;

  // A refused reload prints the API's reason and exits 1; the old config stays.
  write_file(dir + "/bad.json", R"({"apps":{"http":{"servers":{"srv0":{"listen":[":1"],"routes":[{"handle":[{"handler":"subroute","routes":[{"handle":[{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:1","weight":-3}]}]}]}]}]}}}}})");
  EXPECT_EQ(heft(dir, {"reload", "--config", dir + "/bad.json", "--address", address()}, out), 1);
  EXPECT_NE(out.find("weight"), std::string::npos) << out;
  // The file heft serves, edited: b drained. (Another file is refused: this heft does not serve it.)
  write_file(dir + "/Heftfile", heftfile(1, 0));
  ASSERT_EQ(heft(dir, {"reload", "--config", dir + "/Heftfile", "--address", address()}, out), 0) << out;
  EXPECT_EQ(measure(50)["a"], 50);

  ASSERT_EQ(heft(dir, {"stop", "--address", address()}, out), 0) << out;
  EXPECT_EQ(p.wait(20s), 0) << p.log();
  // Nobody there now: the system's reason, without Boost's source location.
  EXPECT_EQ(heft(dir, {"upstreams", "--address", address()}, out), 1) << out;
  EXPECT_EQ(out, fmt::format("heft: cannot reach the admin API at {}: Connection refused\n", address()));
}

// Without --address the commands find the admin API where the configuration
// puts it, with its token, as `caddy reload` / `caddy stop` do: heft reload's
// FILE, --config for the others. They all went to 127.0.0.1:2019, so with any
// other `admin` line every command needed --address (and --token) repeated.
TEST_F(AdminProcessTest, CommandsFindTheAdminAddressAndTokenInTheConfiguration) {
  const auto with_token = [&](int wa, int wb) {
    std::string text = heftfile(wa, wb);
    text.insert(text.find("\tworkers"), "\tadmin_token s3cret\n");
    return text;
  };
  write_file(dir + "/Heftfile", with_token(1, 1));
  Process p = run("heft.log");
  std::string out;
  const std::string heftfile_path = dir + "/Heftfile";
  const std::string b = fmt::format("127.0.0.1:{}", backends[1].port);
  ASSERT_EQ(heft(dir, {"upstreams", "--config", heftfile_path}, out), 0) << out;
  EXPECT_NE(out.find(b), std::string::npos) << out;
  ASSERT_EQ(heft(dir, {"weight", "0", b, "3", "-c", heftfile_path}, out), 0) << out;
  EXPECT_NEAR(measure(400)["b"], 300, 2);
  // reload's own FILE says where: the served file, edited to drain b.
  write_file(heftfile_path, with_token(1, 0));
  ASSERT_EQ(heft(dir, {"reload", heftfile_path}, out), 0) << out;
  EXPECT_EQ(measure(50)["a"], 50);
  // --address and --token still win over the file.
  EXPECT_EQ(heft(dir, {"upstreams", "-c", heftfile_path, "--address", "127.0.0.1:1"}, out), 1) << out;
  EXPECT_NE(out.find("cannot reach the admin API at 127.0.0.1:1"), std::string::npos) << out;
  EXPECT_EQ(heft(dir, {"upstreams", "-c", heftfile_path, "--token", "wrong"}, out), 1) << out;
  // Only the global options count: a site's error, or a variable only heft's
  // own environment has, does not keep the command from its admin API.
  // (The served file itself, edited: a --config naming another file is refused.)
  std::string broken = with_token(1, 0);
  broken.replace(broken.find("\t\tto "), 0, "\t\tto {$HEFT_TEST_NOT_HERE}\n");
  write_file(heftfile_path, broken);
  EXPECT_EQ(heft(dir, {"upstreams", "-c", heftfile_path}, out), 0) << out;
  write_file(heftfile_path, with_token(1, 0));
  // A --config whose admin settings are not valid, or that has no admin API, names the reason.
  write_file(dir + "/Bad", "{\n\tadmin 127.0.0.1:1\n\twieght 2\n}\n");
  EXPECT_EQ(heft(dir, {"stop", "-c", dir + "/Bad"}, out), 2) << out;
  EXPECT_NE(out.find("Bad:3:2"), std::string::npos) << out;
  EXPECT_NE(out.find("its admin settings are not valid"), std::string::npos) << out;
  write_file(dir + "/Off", fmt::format("{{\n\tadmin off\n}}\n:{} {{\n\treverse_proxy {}\n}}\n", port, b));
  EXPECT_EQ(heft(dir, {"stop", "-c", dir + "/Off"}, out), 2) << out;
  EXPECT_NE(out.find("turns the admin API off"), std::string::npos) << out;

  ASSERT_EQ(heft(dir, {"stop", "--config", heftfile_path}, out), 0) << out;
  EXPECT_EQ(p.wait(20s), 0) << p.log();
}

// A configuration whose JSON is over 1 MiB (1,500 sites) reloads through the
// admin API as it starts: the body limit was 1 MiB, and `heft reload` (and a
// GET /config/ posted back to /load) got 413 for what `heft run` served.
TEST_F(AdminProcessTest, ReloadOfALargeConfiguration) {
  write_file(dir + "/Heftfile", heftfile(1, 1));
  Process p = run("heft.log");
  std::string big = fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n", admin_port);
  for (int i = 0; i < 1500; ++i)
    big += fmt::format("site{}.test:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", i, port, backends[i % 2].port);
  write_file(dir + "/Heftfile", big);  // the file heft serves, grown
  std::string out;
  ASSERT_EQ(heft(dir, {"reload", "--config", dir + "/Heftfile", "--address", address()}, out), 0) << out;
  const std::string config = admin("GET", "/config/").body;
  EXPECT_GT(config.size(), 1u << 20);
  HttpClient client(port);
  const auto get = [&](const std::string& host) { return client.request("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"); };
  EXPECT_EQ(get("site1499.test").header("x-backend"), "b");
  EXPECT_EQ(get("site1498.test").header("x-backend"), "a");
  EXPECT_EQ(get("nosuch.test").status, 404);
  // The running configuration posted back as it was given (Caddy's round trip).
  EXPECT_EQ(admin("POST", "/load", config).status, 200);
  EXPECT_EQ(get("site1499.test").header("x-backend"), "b");
}

// A listener that accepts and never answers (a hung heft, something else on
// the port): every command gives up after the admin request timeout (10 s)
// and says so. The client's synchronous calls ignored its timeout, and each
// command waited for good.
TEST_F(AdminProcessTest, ListenerThatNeverAnswersTimesEveryCommandOut) {
  uint16_t silent_port = 0;
  const int listener = listen_on_loopback(silent_port, 1s);
  ASSERT_GE(listener, 0);
  std::atomic<bool> done{false};
  std::vector<int> accepted;
  std::thread acceptor([&] {
    while (!done)  // accept() gives up every second (SO_RCVTIMEO) to look at `done`
      if (const int c = ::accept(listener, nullptr, nullptr); c >= 0) accepted.push_back(c);
  });
  const std::string silent = fmt::format("127.0.0.1:{}", silent_port);
  write_file(dir + "/Heftfile", heftfile(1, 1));
  const std::vector<std::vector<std::string>> commands = {
      {"upstreams"},
      {"weight", "0", "127.0.0.1:1", "2"},
      {"reload", "--config", dir + "/Heftfile"},
      {"stop"},
      {"rollout", "--site", "0", "--stable", "127.0.0.1:1", "--canary", "127.0.0.1:2"},
  };
  // All at once, so the test waits one timeout, not five.
  std::vector<Process> running;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < commands.size(); ++i) {
    std::vector<std::string> argv{HEFT_BINARY};
    argv.insert(argv.end(), commands[i].begin(), commands[i].end());
    argv.insert(argv.end(), {"--address", silent});
    running.emplace_back(argv, fmt::format("{}/cmd{}.log", dir, i));
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    const auto code = running[i].wait(20s);  // the 10 s timeout and a margin
    const auto took = std::chrono::steady_clock::now() - start;
    const std::string out = running[i].log();
    EXPECT_EQ(code.value_or(-1), commands[i][0] == "rollout" ? 2 : 1) << commands[i][0] << ": " << out;
    EXPECT_GE(took, 9s) << commands[i][0];
    EXPECT_LT(took, 16s) << commands[i][0];
    EXPECT_NE(out.find(fmt::format("cannot reach the admin API at {}: timed out after 10s (connected, but no answer)",
                                   silent)),
              std::string::npos)
        << commands[i][0] << ": " << out;
  }
  done = true;
  acceptor.join();
  for (int c : accepted) ::close(c);
  ::close(listener);
}

// Idle admin connections cannot take heft's descriptors: past the cap (64) a
// new one is closed as soon as it is accepted, and the proxy, whose
// descriptor limit 200 idle connections would otherwise use up, keeps serving.
TEST_F(AdminProcessTest, AdminConnectionsOverTheCapAreClosedAndTheProxyKeepsServing) {
  Process p = run_with_nofile(200, "heft.log");
  std::vector<int> idle = idle_admin_connections(200);
  ASSERT_EQ(idle.size(), 200u);
  EXPECT_EQ(count_closed_by_peer(idle, 3s), 200 - 64);
  EXPECT_EQ(HttpClient(port, 5s).get("/").status, 200) << p.log();
  EXPECT_EQ(admin("GET", "/config/").status, 0);  // at the cap: closed unanswered
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(admin_status_once_free(), 200);
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(10s), std::optional<int>(0)) << p.log();
}

// Out of descriptors (EMFILE), the admin accept loop backs off as the proxy's
// does instead of retrying accept() flat out: heft uses little CPU while
// connections wait in the admin port's queue, and serves again once they go.
// The limit (48) is below the connection cap, so accept() fails first.
TEST_F(AdminProcessTest, AcceptFailingForWantOfDescriptorsDoesNotSpin) {
  Process p = run_with_nofile(48, "heft.log");
  std::vector<int> idle = idle_admin_connections(80);  // those heft cannot accept wait in the queue
  ASSERT_EQ(idle.size(), 80u);
  std::this_thread::sleep_for(300ms);
  const double before = cpu_seconds(p.pid());
  std::this_thread::sleep_for(1s);
  const double used = cpu_seconds(p.pid()) - before;
  EXPECT_LT(used, 0.3) << "CPU seconds in one second with accept() failing";
  for (int fd : idle) ::close(fd);
  EXPECT_EQ(admin_status_once_free(), 200);
  EXPECT_EQ(HttpClient(port, 5s).get("/").status, 200) << p.log();
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(10s), std::optional<int>(0)) << p.log();
}

// A site named by an IPv6 literal is found as the JSON form writes its host
// ("::1", no brackets) as well as bracketed; "::1" was split at its last colon.
TEST_F(AdminProcessTest, SiteNamedByAnIPv6LiteralIsFoundWithOrWithoutBrackets) {
  write_file(dir + "/Heftfile",
             // a.test listens where the [::1] site does: the sites of a port share their addresses.
             fmt::format("{{\n\tadmin 127.0.0.1:{}\n}}\n[::1]:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n"
                         "a.test:{} {{\n\tbind ::1\n\treverse_proxy 127.0.0.1:{}\n}}\n",
                         admin_port, port, backends[0].port, port, backends[1].port));
  // Port `port` is served on ::1 alone now: wait for the admin API only.
  Process p({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state}, dir + "/heft.log");
  ASSERT_TRUE(wait_for_port(admin_port)) << p.log();
  std::string out;
  const std::string a = fmt::format("127.0.0.1:{}", backends[0].port);
  EXPECT_EQ(heft(dir, {"weight", "::1", a, "3", "--address", address()}, out), 0) << out;
  EXPECT_EQ(heft(dir, {"weight", "[::1]", a, "4", "--address", address()}, out), 0) << out;
  EXPECT_EQ(heft(dir, {"weight", fmt::format("[::1]:{}", port), a, "5", "--address", address()}, out), 0) << out;
  EXPECT_EQ(admin("GET", std::string(kUpstreams) + "/0/weight").body, "5\n");
}

// Host names ignore case: "admin LOCALHOST:P" passed `heft validate`, but
// heft ran without its admin API ("not an IP address"). And validate now
// refuses what run cannot listen on (a name other than localhost).
TEST_F(AdminProcessTest, LocalhostInAnyCaseIsTheLoopbackAddress) {
  std::string file = heftfile(1, 1);
  file.replace(file.find("admin 127.0.0.1:"), std::string("admin 127.0.0.1:").size(), "admin LOCALHOST:");
  write_file(dir + "/Heftfile", file);
  std::string out;
  EXPECT_EQ(heft(dir, {"validate", dir + "/Heftfile"}, out), 0) << out;
  Process p = run("heft.log");
  EXPECT_EQ(admin("GET", "/config/").status, 200) << p.log();
  EXPECT_EQ(p.log().find("admin API not started"), std::string::npos) << p.log();
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(10s), std::optional<int>(0)) << p.log();

  write_file(dir + "/Named", fmt::format("{{\n\tadmin Admin.test:{}\n\tadmin_token t\n}}\n:{} {{\n\treverse_proxy "
                                         "127.0.0.1:{}\n}}\n",
                                         admin_port, port, backends[0].port));
  EXPECT_EQ(heft(dir, {"validate", dir + "/Named"}, out), 1) << out;
  EXPECT_NE(out.find(fmt::format("Named:2:8: invalid admin address \"Admin.test:{}\": the host must be an IP address "
                                 "or localhost (the admin API resolves no other name)",
                                 admin_port)),
            std::string::npos)
      << out;
}

TEST_F(AdminProcessTest, AnswerFromSomethingElseIsShownAsOneShortLine) {
  // A demo backend answers any path with 200 and a body of several lines: no
  // command takes that for heft's (reload and stop reported success), and the
  // error quotes one escaped line, not the whole body.
  std::string out;
  std::string other = fmt::format("127.0.0.1:{}", backends[0].port);
  write_file(dir + "/Heftfile", heftfile(1, 1));
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"upstreams"}, {"stop"}, {"reload", dir + "/Heftfile"}, {"weight", "0", other, "2"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--address", other});
    EXPECT_EQ(heft(dir, args, out), 1) << command[0] << ": " << out;
    EXPECT_NE(out.find(fmt::format("the answer from {} is not heft's admin API (HTTP 200: ", other)), std::string::npos)
        << command[0] << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_LT(out.size(), 400u) << out;
  }
}

}  // namespace
}  // namespace heft::test
