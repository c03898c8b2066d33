// The README's first command: `heft run` where there is no Heftfile serves the
// embedded demo (a, b, c weighted 5, 3, 2 behind 127.0.0.1:8080, admin on
// 127.0.0.1:2019), on loopback unless --listen says otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "integration/process_util.h"

namespace heft::test {
namespace {

bool port_in_use(uint16_t port) {
  int fd = connect_to(port, std::chrono::milliseconds(500));
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// The demo in `dir` (no Heftfile there), its state in dir/data, with `args` after `heft run`.
Process run_demo(const std::string& dir, const std::string& args, const std::string& log) {
  return Process({"/bin/sh", "-c",
                  "cd '" + dir + "' && exec env -u STATE_DIRECTORY XDG_DATA_HOME='" + dir + "/data' '" HEFT_BINARY
                  "' run " + args},
                 dir + "/" + log);
}

bool accepts(const std::string& address, uint16_t port) {
  const int fd = connect_to(address, port, std::chrono::seconds(1));
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

TEST(EmbeddedDefault, ServesTheWeightedDemoOn8080) {
  // The demo binds fixed ports; on a machine where they are taken there is nothing to check.
  if (port_in_use(8080) || port_in_use(2019)) GTEST_SKIP() << "port 8080 or 2019 is in use here";
  std::string dir = make_temp_dir();  // no Heftfile in it
  Process heft = run_demo(dir, "", "heft.log");
  ASSERT_TRUE(wait_for_port(8080, std::chrono::seconds(10))) << heft.log();
  // On loopback only: 127.0.0.2 is this host too, but not 127.0.0.1.
  EXPECT_FALSE(accepts("127.0.0.2", 8080)) << heft.log();

  HttpClient client(8080);
  std::map<std::string, int> counts;
  for (int i = 0; i < 100; ++i) {
    Response r = client.get("/");
    ASSERT_EQ(r.status, 200) << heft.log();
    counts[r.header("x-backend")]++;
  }
  EXPECT_EQ(counts["a"], 50);
  EXPECT_EQ(counts["b"], 30);
  EXPECT_EQ(counts["c"], 20);
  std::string log = heft.log();
  EXPECT_NE(log.find("embedded demo"), std::string::npos) << log;
  EXPECT_NE(log.find("curl -si localhost:8080"), std::string::npos) << log;
  EXPECT_NE(log.find("behind 127.0.0.1:8080;"), std::string::npos) << log;
  // It reports itself as the demo, with a state file of its own.
  Response instance = admin_call(2019, "GET", "/heft/instance");
  EXPECT_EQ(instance.status, 200);
  EXPECT_NE(instance.body.find("\"config\":null"), std::string::npos) << instance.body;
  EXPECT_NE(instance.body.find(dir + "/data/heft/embedded-demo.json"), std::string::npos) << instance.body;

  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(std::chrono::seconds(15)), 0) << heft.log();

  // --listen puts it elsewhere (here another loopback address and a free port).
  const uint16_t port = free_port();
  Process moved = run_demo(dir, "--listen 127.0.0.2:" + std::to_string(port), "moved.log");
  bool listening = false;
  for (int i = 0; i < 500 && !listening; ++i) {
    listening = accepts("127.0.0.2", port);
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(listening) << moved.log();
  EXPECT_FALSE(accepts("127.0.0.1", port));
  EXPECT_EQ(HttpClient("127.0.0.2", port).get("/").status, 200) << moved.log();
  EXPECT_TRUE(wait_for_log(moved, "curl -si 127.0.0.2:" + std::to_string(port) + "\n")) << moved.log();
  moved.signal(SIGTERM);
  EXPECT_EQ(moved.wait(std::chrono::seconds(15)), 0) << moved.log();
}

// --listen is checked, and is the demo's alone: a Heftfile says where its sites listen.
TEST(EmbeddedDefault, ListenIsCheckedAndOnlyForTheDemo) {
  std::string dir = make_temp_dir();
  const auto refused = [&](const std::string& args, const std::string& message) {
    Process p = run_demo(dir, args, "refused.log");
    EXPECT_EQ(p.wait(std::chrono::seconds(10)), std::optional<int>(2)) << args;
    EXPECT_EQ(p.log(), "heft: " + message + "\n") << args;
  };
  refused("--listen localhost:8080",
          "--listen localhost:8080: the address must be an IP address (e.g. 127.0.0.1:8080, [::1]:8080, "
          "0.0.0.0:8080, or :8080 for every address), got \"localhost\"");
  refused("--listen 127.0.0.1:8080 --listen 127.0.0.2:8081",
          "--listen 127.0.0.2:8081: every --listen must use one port (the first uses 8080)");
  refused("--listen :8080 --listen 127.0.0.1:8080", ":PORT (every address) must be the only --listen");
  refused("--listen 127.0.0.1:2019",
          "--listen: port 2019 is the embedded demo's admin API's (127.0.0.1:2019): give another port");
  write_file(dir + "/Heftfile", ":8080 {\n\treverse_proxy 127.0.0.1:1\n}\n");
  refused("--listen 127.0.0.1:8080",
          "--listen is for the embedded demo only: Heftfile says where its sites listen (their addresses, bind, "
          "default_bind)");
}

}  // namespace
}  // namespace heft::test
