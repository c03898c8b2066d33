// max_conns through real `heft run` and `heft demo-backend` processes: a
// backend with max_conns requests in flight is passed over, every backend full
// is a 503, backups take the overflow, and the limit holds across workers.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_util.h"

namespace heft::test {
namespace {

// `clients` requests at once, one connection each; the answers by backend
// name ("503" for a 503, "status N" for anything else).
std::map<std::string, int> burst(uint16_t port, int clients) {
  std::mutex mu;
  std::map<std::string, int> got;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      HttpClient client(port);
      Response r = client.get("/");
      std::string what = r.status == 200 ? r.header("x-backend")
                         : r.status == 503 && r.body == "503 every backend is at its max_conns\n"
                             ? "503"
                             : fmt::format("status {} {}", r.status, r.body);
      std::lock_guard lock(mu);
      ++got[what];
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

TEST(MaxConns, FullBackendsArePassedOverAndAllFullIsA503) {
  const std::string dir = make_temp_dir();
  // Slow enough that every request of the burst arrives while the first are in flight.
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  Backend b = start_backend(dir, "b", {"--delay", "1500ms"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  // Two workers: the limit is one count per backend, not one per worker.
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 2\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy {{\n"
                                        "\t\tto 127.0.0.1:{} weight 5 max_conns 2\n"
                                        "\t\tto 127.0.0.1:{}?max_conns=1\n\t}}\n}}\n",
                                        admin_port, port, a.port, b.port),
                            port);
  std::map<std::string, int> got;
  std::thread load([&] { got = burst(port, 7); });
  // While the burst is in flight the admin API shows each backend full.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  Response view = admin_call(admin_port, "GET", "/reverse_proxy/upstreams");
  load.join();
  ASSERT_EQ(view.status, 200) << view.body;
  auto list = nlohmann::json::parse(view.body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["max_conns"], 2);
  EXPECT_EQ(list[0]["active"], 2);
  EXPECT_EQ(list[1]["max_conns"], 1);
  EXPECT_EQ(list[1]["active"], 1);
  EXPECT_EQ(got["a"], 2);
  EXPECT_EQ(got["b"], 1);
  EXPECT_EQ(got["503"], 4);
  EXPECT_EQ(got.size(), 3u) << "unexpected answers";
  const std::string metrics = admin_call(admin_port, "GET", "/metrics").body;
  EXPECT_EQ(sample_value(metrics, fmt::format("heft_upstream_max_conns{{server=\":{}\",site=\":{}\",upstream=\"127.0.0.1:{}\"}}",
                                              port, port, a.port)),
            2);
  // The places are free again once those requests ended.
  HttpClient client(port);
  EXPECT_EQ(client.get("/").status, 200);
  EXPECT_NE(heft.log().find("every backend is at its max_conns"), std::string::npos);
}

TEST(MaxConns, BackupsTakeTheOverflow) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  Backend spare = start_backend(dir, "spare");
  const uint16_t port = free_port();
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {{\n"
                                        "\t\tto 127.0.0.1:{} max_conns 1\n"
                                        "\t\tto 127.0.0.1:{} backup\n\t}}\n}}\n",
                                        port, a.port, spare.port),
                            port);
  auto got = burst(port, 4);
  EXPECT_EQ(got["a"], 1);
  EXPECT_EQ(got["spare"], 3);
  EXPECT_EQ(got.size(), 2u) << "unexpected answers";
}

// A limit set live through the admin API applies to the next request; a
// rejected value leaves the running one as it was.
TEST(MaxConns, SetLiveThroughTheAdminApi) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 1\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy {{\n"
                                        "\t\tto 127.0.0.1:{}\n\t}}\n}}\n",
                                        admin_port, port, a.port),
                            port);
  const std::string path =
      "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/0/max_conns";
  Response refused = admin_call(admin_port, "PUT", path, "-1");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("max_conns"), std::string::npos) << refused.body;
  auto got = burst(port, 3);
  EXPECT_EQ(got["a"], 3) << "no limit yet";
  Response set = admin_call(admin_port, "PUT", path, "2");
  ASSERT_EQ(set.status, 200) << set.body;
  got = burst(port, 3);
  EXPECT_EQ(got["a"], 2);
  EXPECT_EQ(got["503"], 1);
}

}  // namespace
}  // namespace heft::test
