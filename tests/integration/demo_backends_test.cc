// demo_backends: a Heftfile whose backends are heft's own demo origin
// servers (the packaged /etc/heft/Heftfile is one), served by one real heft
// process and nothing else; fixed at start, as workers is.
#include <gtest/gtest.h>

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_util.h"

namespace heft::test {
namespace {

struct Ports {
  uint16_t admin = free_port(), site = free_port(), a = free_port(), b = free_port(), c = free_port();
};

std::string demo_file(const Ports& p, bool with_demo = true) {
  return fmt::format(
      "{{\n\tadmin 127.0.0.1:{}\n{}}}\n:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} weight 5\n\t\tto 127.0.0.1:{} "
      "weight 3\n\t\tto 127.0.0.1:{} weight 2\n\t}}\n}}\n",
      p.admin,
      with_demo ? fmt::format("\tdemo_backends a=127.0.0.1:{} b=127.0.0.1:{} c=127.0.0.1:{}\n", p.a, p.b, p.c) : "",
      p.site, p.a, p.b, p.c);
}

std::map<std::string, int> split(uint16_t port, int requests) {
  std::map<std::string, int> seen;
  HttpClient client(port);
  for (int i = 0; i < requests; ++i) {
    Response r = client.get("/");
    ++seen[r.status == 200 ? r.header("x-backend") : "status " + std::to_string(r.status)];
  }
  return seen;
}

const std::map<std::string, int> kDemoSplit{{"a", 5}, {"b", 3}, {"c", 2}};

TEST(DemoBackends, OneHeftServesTheSplitWithItsOwnDemoServers) {
  const std::string dir = make_temp_dir();
  const Ports ports;
  Process heft = start_heft(dir, demo_file(ports), ports.site);
  EXPECT_TRUE(wait_for_log(heft, fmt::format("info demo backends (demo_backends, served by this heft): a on "
                                             "127.0.0.1:{}, b on 127.0.0.1:{}, c on 127.0.0.1:{}",
                                             ports.a, ports.b, ports.c)))
      << heft.log();
  EXPECT_EQ(split(ports.site, 10), kDemoSplit) << heft.log();
  // They are origin servers of their own, as heft demo-backend is.
  HttpClient direct(ports.b);
  EXPECT_EQ(direct.get("/").header("x-backend"), "b");
  // In the configuration tree, as the file wrote them.
  const auto tree = nlohmann::json::parse(admin_call(ports.admin, "GET", "/config/apps/demo/backends/2").body);
  EXPECT_EQ(tree, nlohmann::json({{"name", "c"}, {"listen", fmt::format("127.0.0.1:{}", ports.c)}}));
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0) << heft.log();
  EXPECT_LT(connect_to(ports.a, 1s), 0) << "demo backend a still listens after heft stopped";
}

TEST(DemoBackends, FixedAtStartAReloadLeavingThemOutKeepsThemAnotherListIsRefused) {
  const std::string dir = make_temp_dir();
  const Ports ports;
  Process heft = start_heft(dir, demo_file(ports), ports.site);

  // The file without the line: reloaded, and the demo servers still serve.
  write_file(dir + "/Heftfile", demo_file(ports, false));
  Process reload({HEFT_BINARY, "reload", "--config", dir + "/Heftfile"}, dir + "/reload.log");
  EXPECT_EQ(reload.wait(15s), 0) << reload.log();
  EXPECT_EQ(split(ports.site, 10), kDemoSplit) << heft.log();
  EXPECT_EQ(admin_call(ports.admin, "GET", "/config/apps/demo/backends/0/name").body, "\"a\"\n");

  // Another list: refused, nothing changes.
  const uint16_t other = free_port();
  std::string changed = demo_file(ports);
  const std::string c = fmt::format("c=127.0.0.1:{}", ports.c);
  changed.replace(changed.find(c), c.size(), fmt::format("d=127.0.0.1:{}", other));
  write_file(dir + "/Heftfile", changed);
  Process refused({HEFT_BINARY, "reload", "--config", dir + "/Heftfile"}, dir + "/refused.log");
  EXPECT_EQ(refused.wait(15s), 1) << refused.log();
  EXPECT_NE(refused.log().find("demo_backends) takes effect only at start"), std::string::npos) << refused.log();
  EXPECT_EQ(split(ports.site, 10), kDemoSplit) << heft.log();
  EXPECT_LT(connect_to(other, 1s), 0);
}

TEST(DemoBackendsStart, ABusyDemoAddressEndsTheStartBeforeAnythingIsServed) {
  const std::string dir = make_temp_dir();
  Ports ports;
  uint16_t busy_port = 0;
  const int busy = listen_on_loopback(busy_port);
  ASSERT_GE(busy, 0);
  ports.b = busy_port;
  write_file(dir + "/Heftfile", demo_file(ports));
  Process heft({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", dir + "/state.json"}, dir + "/heft.log");
  EXPECT_EQ(heft.wait(15s), 1) << heft.log();
  EXPECT_NE(heft.log().find(fmt::format("heft: demo backend b cannot listen on 127.0.0.1:{}", busy_port)),
            std::string::npos)
      << heft.log();
  EXPECT_LT(connect_to(ports.site, 1s), 0);
  ::close(busy);
}

}  // namespace
}  // namespace heft::test
