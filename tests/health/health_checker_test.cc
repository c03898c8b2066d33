// Active health checks against in-process demo backends (health/health_checker.h).
#include <gtest/gtest.h>

#include "test_deadline.h"

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "health/health_checker.h"
#include "demo/demo_backend.h"

namespace heft::health {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

TEST(HealthStatus, Patterns) {
  EXPECT_TRUE(status_matches("", 200));
  EXPECT_TRUE(status_matches("", 299));
  EXPECT_FALSE(status_matches("", 301));
  EXPECT_TRUE(status_matches("200", 200));
  EXPECT_FALSE(status_matches("200", 204));
  EXPECT_TRUE(status_matches("2xx", 204));
  EXPECT_FALSE(status_matches("2xx", 500));
  EXPECT_TRUE(status_matches("5xx", 503));
  EXPECT_TRUE(status_matches("200-399", 302));
  EXPECT_FALSE(status_matches("200-399", 404));
}

TEST(HealthCounter, ConsecutiveResults) {
  HealthCounter c;
  EXPECT_EQ(c.record(false, true, 2, 3), std::nullopt);
  EXPECT_EQ(c.record(false, true, 2, 3), std::nullopt);
  EXPECT_EQ(c.record(true, true, 2, 3), std::nullopt);  // streak broken
  EXPECT_EQ(c.record(false, true, 2, 3), std::nullopt);
  EXPECT_EQ(c.record(false, true, 2, 3), std::nullopt);
  EXPECT_EQ(c.record(false, true, 2, 3), false);
  EXPECT_EQ(c.record(true, false, 2, 3), std::nullopt);
  EXPECT_EQ(c.record(true, false, 2, 3), true);
}

void control(uint16_t port, const std::string& target) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::empty_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "x");
  req.set(http::field::connection, "close");
  http::write(socket, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
}

template <typename F>
bool eventually(F f, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

// The lines a HealthChecker logs, collected from its thread.
class LogLines {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu_);
      lines_.push_back(line);
    };
  }
  std::string text() {
    std::lock_guard lock(mu_);
    std::string all;
    for (const std::string& line : lines_) all += line + "\n";
    return all;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// Two in-process demo backends, a_ and b_, answering /healthz, served by a
// thread of their own until the test ends.
class HealthChecking : public ::testing::Test {
 protected:
  HealthChecking() : a_(io_, options("a")), b_(io_, options("b")) {
    a_.start();
    b_.start();
    runner_ = std::thread([this] { io_.run(); });
  }
  ~HealthChecking() override {
    a_.stop();
    b_.stop();
    runner_.join();
  }
  static demo::DemoBackendOptions options(const std::string& name) {
    demo::DemoBackendOptions o;
    o.name = name;
    o.health_path = "/healthz";
    return o;
  }
  static upstream::BackendConfig backend(uint16_t port) {
    upstream::BackendConfig bc;
    bc.name = bc.address = "127.0.0.1:" + std::to_string(port);
    return bc;
  }
  // A pool "site0" of the given backends.
  static std::shared_ptr<upstream::Pool> pool_of(const std::vector<upstream::BackendConfig>& backends) {
    upstream::PoolConfig pc;
    pc.name = "site0";
    pc.backends = backends;
    return std::make_shared<upstream::Pool>(pc);
  }

  asio::io_context io_;
  demo::DemoBackend a_, b_;
  std::thread runner_;
};

TEST_F(HealthChecking, TakesOutAndBringsBackAndClearsPassive) {
  std::vector<upstream::BackendConfig> backends{backend(a_.port()), backend(b_.port())};
  for (auto& bc : backends) bc.fail_timeout = 60s;
  auto pool = pool_of(backends);
  config::PoolConfig cfg;
  cfg.health_uri = "/healthz";
  cfg.health_interval = 100ms;
  cfg.health_timeout = 500ms;
  cfg.health_fails = 2;
  cfg.health_body = "^ok";
  LogLines log;
  {
    HealthChecker checker(log.sink());
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    std::this_thread::sleep_for(250ms);
    EXPECT_TRUE(pool->snapshot()->available(1));
    control(b_.port(), "/_control/health?status=500");
    auto t = std::chrono::steady_clock::now();
    // Out within interval x fails + one interval (+ slack).
    EXPECT_TRUE(eventually([&] { return !pool->snapshot()->available(1); }, 600ms));
    EXPECT_LT(std::chrono::steady_clock::now() - t, 400ms);
    EXPECT_EQ(pool->snapshot()->state(1).health_changes_total.load(), 1u);
    control(b_.port(), "/_control/health?status=200");
    EXPECT_TRUE(eventually([&] { return pool->snapshot()->available(1); }, 400ms));
    // Passive failure on a: out for 60 s, but the next passing probe brings it back.
    pool->snapshot()->report_failure(0, std::chrono::steady_clock::now());
    EXPECT_FALSE(pool->snapshot()->available(0));
    EXPECT_TRUE(eventually([&] { return pool->snapshot()->available(0); }, 400ms));
    EXPECT_GT(checker.checks_passed(), 4u);
    EXPECT_GE(checker.checks_failed(), 2u);
  }
  const std::string all = log.text();
  EXPECT_NE(all.find("healthy → unhealthy (status 500"), std::string::npos) << all;
  EXPECT_NE(all.find("unhealthy → healthy"), std::string::npos) << all;
  EXPECT_NE(all.find("back from passive failures"), std::string::npos) << all;
  // health_fails 2, health_passes 1: the count agrees with its noun.
  EXPECT_NE(all.find("; 2 consecutive failures)"), std::string::npos) << all;
  EXPECT_NE(all.find("; 1 consecutive pass)"), std::string::npos) << all;
  EXPECT_EQ(all.find("1 consecutive passes"), std::string::npos) << all;
}

// After a reload the checker follows the same Pool object: a backend added to
// it is probed too, and one that stayed keeps its state.
TEST_F(HealthChecking, FollowsThePoolAcrossReloads) {
  upstream::PoolConfig pc;
  pc.name = "site0";
  pc.backends = {backend(a_.port())};
  auto pool = std::make_shared<upstream::Pool>(pc);
  config::PoolConfig cfg;
  cfg.health_uri = "/healthz";
  cfg.health_interval = 100ms;
  {
    HealthChecker checker([](const std::string&) {});
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    control(b_.port(), "/_control/health?status=503");
    pc.backends.push_back(backend(b_.port()));
    pool->update(pc);  // a reload that keeps the site: same Pool, one more backend
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    EXPECT_TRUE(eventually([&] { return !pool->snapshot()->available(1); }, 500ms));
    EXPECT_TRUE(pool->snapshot()->available(0));
    // The options follow the reload too: expecting 503 makes b healthy and a unhealthy.
    cfg.health_status = "503";
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    EXPECT_TRUE(eventually([&] { return pool->snapshot()->available(1) && !pool->snapshot()->available(0); }, 500ms));
    // A reload that turns the checks off: nothing would bring a back, so it is healthy at once.
    cfg.health_uri.clear();
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    EXPECT_TRUE(eventually([&] { return pool->snapshot()->available(0) && pool->snapshot()->available(1); }, 500ms));
  }
}

// Reloads that leave a backend's checks as they were do not restart its
// probes: set_pools() with the same options every 50 ms (b's first probe is
// 100 ms after a restart) still marks failing b out within interval x fails +
// one interval, and keeps its consecutive count across the reloads. A changed
// option starts its checks afresh (FollowsThePoolAcrossReloads).
TEST_F(HealthChecking, FrequentReloadsKeepTheProbeSchedule) {
  auto pool = pool_of({backend(a_.port()), backend(b_.port())});
  config::PoolConfig cfg;
  cfg.health_uri = "/healthz";
  cfg.health_interval = 200ms;
  cfg.health_timeout = 100ms;
  cfg.health_fails = 2;
  {
    HealthChecker checker([](const std::string&) {});
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    control(b_.port(), "/_control/health?status=500");
    const auto broken = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::duration> out_after;
    while (!out_after && std::chrono::steady_clock::now() - broken < 2s) {
      checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});  // a reload that changes nothing for the checks
      std::this_thread::sleep_for(50ms);
      if (!pool->snapshot()->available(1)) out_after = std::chrono::steady_clock::now() - broken;
    }
    // 200 ms x 2 + 200 ms, + slack.
    EXPECT_TRUE(out_after) << "b was never marked unhealthy";
    if (out_after) {
      EXPECT_LT(*out_after, 800ms);
    }
    EXPECT_TRUE(pool->snapshot()->available(0));
    EXPECT_GE(checker.checks_failed(), 2u);
  }
}

// A probe takes a response as the proxy would: interim 1xx responses before
// the final one, a head as large as the proxy forwards (12 KB), and a body
// over 1 MiB whose start health_body matches all pass (each failed before:
// "status 103 (expected 2xx)", "header limit exceeded", "body limit exceeded").
TEST(HealthProbe, TakesInterimResponsesLargeHeadsAndLargeBodies) {
  asio::io_context origin_io;  // blocking calls only: never run
  tcp::acceptor acceptor(origin_io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = acceptor.local_endpoint().port();
  const std::vector<std::string> replies{
      "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/1.1 200 OK\r\nX-Pad: " + std::string(12000, 'p') + "\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(2 + (2 << 20)) + "\r\n\r\nok" + std::string(2 << 20, 'b')};
  std::atomic<int> answered{0};
  std::atomic<bool> done{false};
  std::thread origin([&] {
    // Each probe gets the next reply, in turn; bounded by `done` and 9 answers.
    for (int k = 0; k < 9 && !done; ++k) {
      boost::system::error_code ec;
      tcp::socket peer(origin_io);
      acceptor.accept(peer, ec);
      if (ec || done) return;
      boost::beast::flat_buffer in;
      http::request<http::empty_body> req;
      http::read(peer, in, req, ec);
      if (ec) continue;
      asio::write(peer, asio::buffer(replies[k % replies.size()]), ec);
      peer.shutdown(tcp::socket::shutdown_send, ec);
      if (!ec) ++answered;
    }
  });
  upstream::BackendConfig bc;
  bc.name = bc.address = "127.0.0.1:" + std::to_string(port);
  upstream::PoolConfig pc;
  pc.name = "site0";
  pc.backends = {bc};
  auto pool = std::make_shared<upstream::Pool>(pc);
  config::PoolConfig cfg;
  cfg.health_uri = "/healthz";
  cfg.health_interval = 100ms;
  cfg.health_timeout = 2s;
  cfg.health_fails = 1;
  cfg.health_body = "^ok";
  LogLines log;
  {
    HealthChecker checker(log.sink());
    checker.set_pools({{"site0", pool, cfg, "srv0", "0"}});
    EXPECT_TRUE(eventually([&] { return checker.checks_passed() + checker.checks_failed() >= 6; }, 10s));
    EXPECT_EQ(checker.checks_failed(), 0u);
    EXPECT_GE(checker.checks_passed(), 6u);
    done = true;
  }
  // Unblock the origin's accept if it waits for a probe that will not come.
  {
    boost::system::error_code ec;
    tcp::socket poke(origin_io);
    poke.connect(acceptor.local_endpoint(), ec);
  }
  test::WaitingFor waiting("the origin thread to end (its accept and read have no timeout)");
  origin.join();
  EXPECT_GE(answered.load(), 6);
  const std::string all = log.text();
  EXPECT_EQ(all.find("unhealthy"), std::string::npos) << all;
}

}  // namespace
}  // namespace heft::health
