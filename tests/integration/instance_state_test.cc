// One heft per state, state that is not lost, starts that fail fast: real heft
// processes with their state files in the test's own data directory
// (XDG_DATA_HOME), as an operator's would be in ~/.local/share/heft.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "integration/process_util.h"

namespace heft::test {
namespace {

using json = nlohmann::json;
const std::string kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

// The state files (not their locks, nor the temporary files of a write) in `dir`.
std::vector<std::string> state_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A heft configuration directory: its Heftfile, ports, backends and the data
// directory its state goes to by default.
struct Instance {
  std::string dir = make_temp_dir();
  std::string data = dir + "/data";  // XDG_DATA_HOME: the state directory is DATA/heft
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  Backend a = start_backend(dir, "a");
  Backend b = start_backend(dir, "b");
  std::string file = dir + "/Heftfile";

  Instance() { write(1, 1); }
  void write(int wa, int wb, const std::string& admin_line = "") const {
    write_file(file, fmt::format("{{\n\t{}\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} weight {}\n"
                                 "\t\tto 127.0.0.1:{} weight {}\n\t}}\n}}\n",
                                 admin_line.empty() ? fmt::format("admin 127.0.0.1:{}", admin_port) : admin_line, port,
                                 a.port, wa, b.port, wb));
  }
  // `heft ARGS...` with this instance's environment: its data directory, no systemd one.
  std::vector<std::string> command(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{"/usr/bin/env", "-u", "STATE_DIRECTORY", "XDG_DATA_HOME=" + data, HEFT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // `heft run --config FILE EXTRA...` (not waited for).
  Process spawn(const std::string& log, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args{"run", "--config", file};
    args.insert(args.end(), extra.begin(), extra.end());
    return Process(command(args), dir + "/" + log);
  }
  // spawn() and wait until it serves: its banner is out (the state saved, a
  // kept-aside one said), its ports answer.
  Process run(const std::string& log, const std::vector<std::string>& extra = {}) const {
    Process p = spawn(log, extra);
    if (!wait_for_log(p, "(SIGHUP reloads it)\n") || !wait_for_port(port) || !wait_for_port(admin_port))
      ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  // A `heft` command to its end (30 s at most); its exit code, stdout and stderr in `out`.
  int heft(const std::vector<std::string>& args, std::string& out) const {
    Process p(command(args), dir + "/cmd.log");
    const auto code = p.wait(30s);
    out = read_file(dir + "/cmd.log");
    return code.value_or(-1);
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") const {
    return admin_call(admin_port, method, path, body);
  }
  std::string weight(int i) const { return admin("GET", kUpstreams + "/" + std::to_string(i) + "/weight").body; }
  std::string state_dir() const { return data + "/heft"; }
  std::string address() const { return fmt::format("127.0.0.1:{}", admin_port); }
};

// Whether something accepts connections on 127.0.0.1:`port`.
bool accepts_on(uint16_t port) {
  const int fd = connect_to("127.0.0.1", port, 1s);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// Stops `p` with SIGTERM and waits for its exit 0.
void stop(Process& p) {
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(20s), std::optional<int>(0)) << p.log();
}

// The rest of the line of `log` after `marker`, or "".
std::string line_after(const std::string& log, const std::string& marker) {
  const size_t at = log.find(marker);
  if (at == std::string::npos) return "";
  const size_t start = at + marker.size();
  return log.substr(start, log.find('\n', start) - start);
}

// Two configurations on one host: a state file each, named from the file, and
// each --resume brings back its own (one resumed the other's).
TEST(InstanceState, TwoInstancesKeepSeparateStates) {
  Instance first, second;
  second.data = first.data;  // one data directory, as for one user
  Process p1 = first.run("heft.log");
  Process p2 = second.run("heft.log");
  ASSERT_EQ(first.admin("PATCH", kUpstreams + "/1/weight", "7").status, 200);
  const std::vector<std::string> files = state_files(first.state_dir());
  ASSERT_EQ(files.size(), 2u) << ::testing::PrintToString(files);
  EXPECT_TRUE(files[0].starts_with("Heftfile-") && files[1].starts_with("Heftfile-")) << files[0] << " " << files[1];
  EXPECT_NE(p1.log().find("Z info state file " + first.state_dir() + "/Heftfile-"), std::string::npos) << p1.log();
  // What each reports serving: its own file and its own state.
  const json one = json::parse(first.admin("GET", "/heft/instance").body, nullptr, false);
  const json two = json::parse(second.admin("GET", "/heft/instance").body, nullptr, false);
  EXPECT_EQ(one.value("config", ""), first.file) << one;
  EXPECT_EQ(two.value("config", ""), second.file) << two;
  EXPECT_NE(one.value("state", ""), two.value("state", "")) << one << two;
  EXPECT_EQ(one.value("pid", 0), p1.pid()) << one;
  p1.kill_now();
  p2.kill_now();
  Process r1 = first.run("resumed.log", {"--resume"});
  Process r2 = second.run("resumed.log", {"--resume"});
  EXPECT_EQ(first.weight(1), "7\n") << r1.log();
  EXPECT_EQ(second.weight(1), "1\n") << r2.log();
  EXPECT_EQ(first.admin("GET", "/config/apps/http/servers/srv0/listen").body,
            fmt::format("[\":{}\"]\n", first.port));
  EXPECT_EQ(second.admin("GET", "/config/apps/http/servers/srv0/listen").body,
            fmt::format("[\":{}\"]\n", second.port));
}

// A second heft on a state in use refuses at once, naming the state file and
// the PID holding it, before it binds anything; the first keeps its state.
TEST(InstanceState, ASecondInstanceOnTheSameStateIsRefused) {
  Instance first;
  Process p1 = first.run("first.log");
  const std::string state = line_after(p1.log(), "Z info state file ");
  ASSERT_FALSE(state.empty()) << p1.log();
  // The same configuration again (its default state), then another file on --state of the first.
  Process again = first.spawn("again.log");
  ASSERT_EQ(again.wait(10s), std::optional<int>(1)) << again.log();
  EXPECT_EQ(untimed(again.log()), fmt::format("error the state file {} is in use by another heft (PID {}): not "
                                              "starting. Each running heft needs a state file of its own: give this "
                                              "one another (--state FILE), or stop the other first.\n",
                                              state, p1.pid()));
  Instance other;
  Process crossed = other.spawn("crossed.log", {"--state", state});
  ASSERT_EQ(crossed.wait(10s), std::optional<int>(1)) << crossed.log();
  EXPECT_NE(crossed.log().find(fmt::format("{} is in use by another heft (PID {})", state, p1.pid())),
            std::string::npos)
      << crossed.log();
  EXPECT_FALSE(accepts_on(other.port)) << "the refused heft listened";
  EXPECT_EQ(first.admin("PATCH", kUpstreams + "/0/weight", "4").status, 200);
  EXPECT_NE(read_file(state).find("\"weight\": 4"), std::string::npos) << read_file(state);
}

// Starts `instance` and expects it to end with exit 1 and `message` within a
// second. On a host loaded by other work, starting a process at all can take
// that long: the best of three starts counts (each must fail the same way).
void expect_quick_refusal(const Instance& instance, const std::string& message) {
  std::chrono::milliseconds fastest = std::chrono::milliseconds::max();
  for (int attempt = 0; attempt < 3 && fastest > 1s; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    Process p = instance.spawn("refused.log");
    const std::optional<int> code = p.wait(10s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    ASSERT_EQ(code, std::optional<int>(1)) << p.log();
    EXPECT_EQ(untimed(p.log()), message);
    fastest = std::min(fastest, took);
  }
  EXPECT_LE(fastest, 1s) << "heft took " << fastest.count() << " ms to give up (best of 3)";
}

// A port another process holds ends the start with the address and the
// reason, exit 1 within a second: the proxy's, and the admin API's (which
// only warned, and heft served traffic without it).
TEST(InstanceState, ABusyPortEndsTheStartNamingTheAddress) {
  Instance instance;
  uint16_t taken = 0;
  const int holder = listen_on_loopback(taken);
  ASSERT_GE(holder, 0);
  instance.port = taken;
  instance.write(1, 1);
  expect_quick_refusal(instance,
                       fmt::format("error cannot listen on :{}: Address already in use\nerror not starting\n", taken));

  instance.port = free_port();
  instance.admin_port = taken;
  instance.write(1, 1);
  expect_quick_refusal(instance, fmt::format("error admin API cannot listen on 127.0.0.1:{}: Address already in use\n"
                                             "error not starting\n",
                                             taken));
  EXPECT_FALSE(accepts_on(instance.port)) << "the proxy port is still served";
  // Nothing was saved for a start that did not happen.
  EXPECT_TRUE(state_files(instance.state_dir()).empty());
  ::close(holder);
}

// kill -9 while admin writes come one after another: --resume has the last
// write that was answered 200 (or the one in flight, if it was saved before
// the kill), never an older one.
TEST(InstanceState, KillNineDuringAdminWritesThenResumeKeepsTheLastAcknowledgedWrite) {
  Instance instance;
  Process p = instance.run("heft.log");
  std::atomic<int> acknowledged{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int weight = 1; weight <= 500; ++weight) {
      if (instance.admin("PATCH", kUpstreams + "/1/weight", std::to_string(weight)).status != 200) break;
      acknowledged = weight;
    }
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (acknowledged < 150 && !done && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  p.kill_now();  // SIGKILL, a write most likely in flight
  writer.join();
  const int last = acknowledged;
  ASSERT_GE(last, 150) << "the writes did not get going:\n" << p.log();
  ASSERT_LT(last, 500) << "every write was done before the kill: nothing was in flight";
  Process resumed = instance.run("resumed.log", {"--resume"});
  const int saved = std::atoi(instance.weight(1).c_str());
  EXPECT_TRUE(saved == last || saved == last + 1) << "last acknowledged " << last << ", resumed " << saved;
  EXPECT_NE(resumed.log().find("Z info resuming from "), std::string::npos) << resumed.log();
}

// A state file that cannot be read stops --resume, naming the file, what is
// wrong and how to go on; it is left as it was, and a start without --resume
// keeps it aside instead of overwriting it.
TEST(InstanceState, ACorruptStateFileStopsTheResume) {
  Instance instance;
  const std::string state = instance.dir + "/state.json";
  write_file(state, "{\"apps\": {\"http\":");
  Process p = instance.spawn("corrupt.log", {"--state", state, "--resume"});
  ASSERT_EQ(p.wait(10s), std::optional<int>(1)) << p.log();
  EXPECT_EQ(untimed(p.log()), fmt::format("error {0}: not valid JSON at line 1, column 18: syntax error while parsing "
                                 "value - unexpected end of input; expected '[', '{{', or a literal\n"
                                 "error cannot resume from the state file {0} (above); not starting, and it is left "
                                 "as it is. Repair it and run with --resume again, or start from {1} without "
                                 "--resume (the state file is then kept aside under a time-stamped name, not lost).\n",
                                 state, instance.file));
  EXPECT_EQ(read_file(state), "{\"apps\": {\"http\":");
  // Valid JSON, but not a configuration: the same, with the field named.
  write_file(state, R"({"apps": {"http": {"workers": "two"}}})");
  Process invalid = instance.spawn("invalid.log", {"--state", state, "--resume"});
  ASSERT_EQ(invalid.wait(10s), std::optional<int>(1)) << invalid.log();
  EXPECT_NE(invalid.log().find(state + ": apps.http.workers: must be an integer 0..1024\n"), std::string::npos)
      << invalid.log();
  // A directory where the state file should be.
  const std::string directory = instance.dir + "/state-dir.json";
  std::filesystem::create_directory(directory);
  Process unreadable = instance.spawn("unreadable.log", {"--state", directory, "--resume"});
  ASSERT_EQ(unreadable.wait(10s), std::optional<int>(1)) << unreadable.log();
  EXPECT_NE(untimed(unreadable.log()).find(directory + ": is a directory, not a state file\nerror cannot resume from "
                                           "the state file " + directory),
            std::string::npos)
      << unreadable.log();

  // Without --resume: heft starts from the file; the unreadable state is kept aside, byte for byte.
  Process fresh = instance.run("fresh.log", {"--state", state});
  const std::string aside = line_after(fresh.log(), "; kept it as ");
  ASSERT_FALSE(aside.empty()) << fresh.log();
  EXPECT_NE(fresh.log().find(fmt::format("Z warn the state file {0} could not be read ({0}: apps.http.workers: must be "
                                         "an integer 0..1024; {0}: apps.http.servers: required); kept it as ",
                                         state)),
            std::string::npos)
      << fresh.log();
  EXPECT_EQ(read_file(aside), R"({"apps": {"http": {"workers": "two"}}})");
  EXPECT_NE(read_file(state).find("\"apps\""), std::string::npos);  // the new state: the file's configuration
}

// A start without --resume does not destroy the live changes of the last run:
// the state is kept aside under a time-stamped name, stderr says where, what
// differs and the command that resumes it; that command brings them back. A
// state that is what the file says is simply replaced.
TEST(InstanceState, ARestartWithoutResumeKeepsTheLiveChangesRecoverable) {
  Instance instance;
  {
    Process p = instance.run("first.log");
    stop(p);
  }
  {
    Process same = instance.run("same.log");  // nothing changed: replaced without a word
    EXPECT_EQ(same.log().find("kept it as"), std::string::npos) << same.log();
    EXPECT_EQ(state_files(instance.state_dir()).size(), 1u);
    ASSERT_EQ(instance.admin("PATCH", kUpstreams + "/1/weight", "7").status, 200);
    stop(same);
  }
  Process fresh = instance.run("fresh.log");
  const std::string log = fresh.log();
  const std::string state = line_after(log, "Z info state file ");
  const std::string aside = line_after(log, "; kept it as ").substr(0, line_after(log, "; kept it as ").find(", not lost"));
  ASSERT_FALSE(aside.empty()) << log;
  EXPECT_NE(untimed(log).find(fmt::format("warn the state file {} held 1 live change that {} does not have; kept it as "
                                         "{}, not lost (saved value → the file's):\nwarn   {}/1/weight: 7 → 1\n",
                                 state, instance.file, aside, kUpstreams.substr(7))),
            std::string::npos)
      << log;
  const std::string command = line_after(log, "stop this heft, then run: ");
  EXPECT_EQ(command, fmt::format("mv {} {} && {} run --config {} --resume", aside, state, HEFT_BINARY, instance.file));
  EXPECT_NE(read_file(aside).find("\"weight\": 7"), std::string::npos) << read_file(aside);
  EXPECT_EQ(instance.weight(1), "1\n");  // serving the file
  stop(fresh);
  // The printed command, as printed, but for an `exec` before heft: so that
  // heft is this test's child, which it stops (a grandchild would outlive it).
  std::string exec_command = command;
  exec_command.replace(exec_command.find(" && ") + 4, 0, "exec ");
  Process back({"/bin/sh", "-c", "exec env -u STATE_DIRECTORY XDG_DATA_HOME='" + instance.data + "' sh -c '" +
                                      exec_command + "'"},
               instance.dir + "/back.log");
  ASSERT_TRUE(wait_for_port(instance.port) && wait_for_port(instance.admin_port)) << back.log();
  EXPECT_EQ(instance.weight(1), "7\n") << back.log();
  EXPECT_FALSE(std::filesystem::exists(aside));
  stop(back);
}

// `heft reload` and SIGHUP still apply the file, but say what they undo:
// `heft reload --dry-run` lists it and changes nothing (tree, ETag, state
// file), `heft reload` prints it, and heft logs each undone change as a
// warning, whichever way the reload came.
TEST(InstanceState, ReloadsSayWhatTheyUndo) {
  Instance instance;
  Process p = instance.run("heft.log");
  const std::string state = line_after(p.log(), "Z info state file ");
  ASSERT_EQ(instance.admin("PATCH", kUpstreams + "/1/weight", "5").status, 200);
  const std::string etag = instance.admin("GET", "/config/").header("etag");
  const std::string saved = read_file(state);
  const std::string change = fmt::format("{}/1/weight: 5 → 1", kUpstreams.substr(7));

  std::string out;
  ASSERT_EQ(instance.heft({"reload", "--dry-run", instance.file}, out), 0) << out;
  EXPECT_EQ(out, fmt::format("heft: reloading {} would change 1 setting of the running configuration (running → "
                             "file), undoing any live change among them; nothing changed:\n{}\n",
                             instance.file, change));
  EXPECT_EQ(instance.weight(1), "5\n");
  EXPECT_EQ(instance.admin("GET", "/config/").header("etag"), etag);
  EXPECT_EQ(read_file(state), saved);
  EXPECT_EQ(p.log().find("undoes"), std::string::npos) << p.log();

  ASSERT_EQ(instance.heft({"reload", instance.file}, out), 0) << out;
  EXPECT_EQ(out, fmt::format("heft: reloaded {}, changing 1 setting of the running configuration (running → file):\n"
                             "{}\n",
                             instance.file, change));
  EXPECT_EQ(instance.weight(1), "1\n");
  EXPECT_TRUE(wait_for_log(p, "Z warn POST /load undoes " + change + "\n")) << p.log();
  ASSERT_EQ(instance.heft({"reload", "--dry-run", instance.file}, out), 0) << out;
  EXPECT_EQ(out, fmt::format("heft: reloading {} would change nothing\n", instance.file));

  ASSERT_EQ(instance.admin("PATCH", kUpstreams + "/0/weight", "9").status, 200);
  p.signal(SIGHUP);
  EXPECT_TRUE(wait_for_log(p, fmt::format("Z warn SIGHUP reload of {} undoes {}/0/weight: 9 → 1\n",
                                          instance.file, kUpstreams.substr(7))))
      << p.log();
  EXPECT_EQ(instance.weight(0), "1\n");
}

// Without an admin API (nothing can change live) a SIGHUP reload still says
// what it changes.
TEST(InstanceState, ASighupWithoutAnAdminApiSaysWhatItChanges) {
  Instance instance;
  instance.write(1, 1, "admin off");
  Process p = instance.spawn("heft.log");
  ASSERT_TRUE(wait_for_port(instance.port)) << p.log();
  ASSERT_TRUE(wait_for_log(p, "SIGHUP reloads it")) << p.log();
  instance.write(1, 3, "admin off");
  p.signal(SIGHUP);
  EXPECT_TRUE(wait_for_log(p, fmt::format("Z warn SIGHUP reload of {} undoes {}/1/weight: 1 → 3\n",
                                          instance.file, kUpstreams.substr(7))))
      << p.log();
  EXPECT_TRUE(wait_for_log(p, "Z info reloaded")) << p.log();
}

// The `heft` command checks it talks to the heft of the configuration it was
// given: with --config (reload's FILE) naming another heft's file, it refuses
// and says which file the heft at that address serves.
TEST(InstanceState, CommandsRefuseAHeftThatServesAnotherFile) {
  Instance one, two;
  Process p1 = one.run("heft.log");
  Process p2 = two.run("heft.log");
  std::string out;
  ASSERT_EQ(one.heft({"upstreams", "--config", one.file}, out), 0) << out;
  const std::string refusal = fmt::format("heft: the heft at {} serves {} (state file ", two.address(), two.file);
  EXPECT_EQ(one.heft({"upstreams", "--config", one.file, "--address", two.address()}, out), 1) << out;
  EXPECT_EQ(out.rfind(refusal, 0), 0u) << out;
  EXPECT_NE(out.find(fmt::format("), not {}: not reading it.", one.file)), std::string::npos) << out;
  EXPECT_EQ(one.heft({"weight", "0", fmt::format("127.0.0.1:{}", one.a.port), "3", "-c", one.file, "--address",
                      two.address()},
                     out),
            1)
      << out;
  EXPECT_EQ(out.rfind(refusal, 0), 0u) << out;
  EXPECT_EQ(one.heft({"reload", one.file, "--address", two.address()}, out), 1) << out;
  EXPECT_NE(out.find("not reloading"), std::string::npos) << out;
  EXPECT_EQ(one.heft({"stop", "-c", one.file, "--address", two.address()}, out), 1) << out;
  EXPECT_NE(out.find("not stopping it"), std::string::npos) << out;
  EXPECT_TRUE(p2.running());
  EXPECT_EQ(two.weight(0), "1\n");  // nothing changed there
  // Its own file, through a symbolic link and a relative path: the same file.
  std::filesystem::create_symlink(two.file, two.dir + "/link");
  EXPECT_EQ(two.heft({"upstreams", "-c", two.dir + "/./link"}, out), 0) << out;
  ASSERT_EQ(two.heft({"stop", "-c", two.file}, out), 0) << out;
  EXPECT_EQ(p2.wait(20s), std::optional<int>(0)) << p2.log();
}

}  // namespace
}  // namespace heft::test
