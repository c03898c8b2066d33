// Weighted splitting through real `heft run` and `heft demo-backend` processes.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "process_util.h"

namespace heft::test {
namespace {

struct Fleet {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  Process heft;

  void add(const std::string& name, const std::vector<std::string>& extra = {}) {
    backends.push_back(start_backend(dir, name, extra));
  }
  // `to` lines from (name -> "weight 5 ...") in backend order.
  std::string to_lines(const std::vector<std::string>& options) const {
    std::string out;
    for (std::size_t i = 0; i < backends.size(); ++i)
      out += fmt::format("\t\tto 127.0.0.1:{} {}\n", backends[i].port, options[i]);
    return out;
  }
  void run(const std::string& global, const std::string& pool_body) {
    heft = start_heft(dir, fmt::format("{{\n{}\n}}\n:{} {{\n\treverse_proxy {{\n{}\t}}\n}}\n", global, port, pool_body),
                      port);
  }
};

std::map<std::string, int> count_sequential(uint16_t port, int n) {
  std::map<std::string, int> counts;
  HttpClient client(port);
  for (int i = 0; i < n; ++i) {
    Response r = client.get("/");
    EXPECT_EQ(r.status, 200) << "request " << i;
    counts[r.header("x-backend")]++;
  }
  return counts;
}

TEST(ProxyWeights, SequentialExactSplit) {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.add(n);
  f.run("\tworkers 1", f.to_lines({"weight 5", "weight 3", "weight 2"}));
  auto counts = count_sequential(f.port, 1000);
  EXPECT_EQ(counts["a"], 500);
  EXPECT_EQ(counts["b"], 300);
  EXPECT_EQ(counts["c"], 200);
}

TEST(ProxyWeights, TwoWorkersSixteenClientsExactSplit) {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.add(n);
  f.run("\tworkers 2", f.to_lines({"weight 5", "weight 3", "weight 2"}));
  std::mutex mu;
  std::map<std::string, int> counts;
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(f.port);
      int n = c < 8 ? 63 : 62;  // 8 x 63 + 8 x 62 = 1000
      for (int i = 0; i < n; ++i) {
        Response r = client.get("/");
        if (r.status != 200) {
          ++failures;
          continue;
        }
        std::lock_guard lock(mu);
        counts[r.header("x-backend")]++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(counts["a"], 500);
  EXPECT_EQ(counts["b"], 300);
  EXPECT_EQ(counts["c"], 200);
}

TEST(ProxyWeights, WeightZeroAndBackup) {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.add(n);
  f.run("\tworkers 1", f.to_lines({"weight 1", "weight 0", "weight 1 backup"}));
  auto counts = count_sequential(f.port, 100);
  EXPECT_EQ(counts["a"], 100);
  EXPECT_EQ(counts["b"], 0);  // drained
  EXPECT_EQ(counts["c"], 0);  // backup: a is up
  // With the only primary gone, the backup takes over (the drained one never).
  f.backends[0].process.kill_now();
  HttpClient client(f.port);
  int from_c = 0;
  for (int i = 0; i < 20; ++i) {
    Response r = client.get("/");
    EXPECT_EQ(r.status, 200) << i;
    if (r.header("x-backend") == "c") ++from_c;
    EXPECT_NE(r.header("x-backend"), "b");
  }
  EXPECT_EQ(from_c, 20);
}

// hash cookie: a key always reaches the same backend (found in any Cookie
// line); requests without it are spread in proportion to the weights, not
// all hashed to one backend.
TEST(ProxyWeights, HashCookieKeepsKeysAndSpreadsKeylessRequests) {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.add(n);
  f.run("\tworkers 2", f.to_lines({"weight 1", "weight 1", "weight 2"}) + "\t\tlb_policy hash cookie sid\n");
  HttpClient client(f.port);
  std::map<std::string, std::string> first;
  for (int round = 0; round < 3; ++round)
    for (int k = 0; k < 40; ++k) {
      const std::string cookie = round == 2 ? fmt::format("theme=dark\r\nCookie: sid=k{}", k) : fmt::format("sid=k{}", k);
      Response r = client.get("/", "Cookie: " + cookie + "\r\n");
      ASSERT_EQ(r.status, 200);
      auto [at, fresh] = first.emplace(fmt::format("k{}", k), r.header("x-backend"));
      EXPECT_EQ(at->second, r.header("x-backend")) << "key k" << k << " round " << round;
    }
  std::map<std::string, int> keyless;
  for (int i = 0; i < 400; ++i) keyless[client.get("/", "Cookie: other=1\r\n").header("x-backend")]++;
  // Expected 100/100/200 (binomial sd <= 10): all three well represented.
  EXPECT_GT(keyless["a"], 50) << keyless["a"] << "/" << keyless["b"] << "/" << keyless["c"];
  EXPECT_GT(keyless["b"], 50) << keyless["a"] << "/" << keyless["b"] << "/" << keyless["c"];
  EXPECT_GT(keyless["c"], 130) << keyless["a"] << "/" << keyless["b"] << "/" << keyless["c"];
}

TEST(ProxyWeights, LeastConnPrefersTheFasterBackend) {
  Fleet f;
  f.add("fast");
  f.add("slow", {"--delay", "40ms"});
  f.run("\tworkers 1", f.to_lines({"weight 1", "weight 1"}) + "\t\tlb_policy least_conn\n");
  std::mutex mu;
  std::map<std::string, int> counts;
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&] {
      HttpClient client(f.port);
      for (int i = 0; i < 40; ++i) {
        Response r = client.get("/");
        std::lock_guard lock(mu);
        counts[r.header("x-backend")]++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(counts["fast"] + counts["slow"], 320);
  EXPECT_GT(counts["fast"], 2 * counts["slow"]);
}

TEST(ProxyWeights, HeadersForwardedAndHopByHopRemoved) {
  Fleet f;
  f.add("a");
  f.run("\tworkers 1", f.to_lines({"weight 1"}));
  HttpClient client(f.port);
  // The demo backend echoes nothing but X-Backend; check the response side and keep-alive.
  Response r = client.request("GET / HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("x-backend"), "a");
  EXPECT_EQ(r.header("connection"), "");
  EXPECT_EQ(r.body.size(), 1024u);
  // Pipelined requests are answered in order on one connection.
  ASSERT_TRUE(client.send_raw("GET /bytes/10 HTTP/1.1\r\nHost: x\r\n\r\nGET /bytes/20 HTTP/1.1\r\nHost: x\r\n\r\n"
                              "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(client.read_response().body.size(), 10u);
  EXPECT_EQ(client.read_response().body.size(), 20u);
  Response head = client.read_response(true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("content-length"), "1024");
  EXPECT_EQ(client.get("/").status, 200);
}

}  // namespace
}  // namespace heft::test
