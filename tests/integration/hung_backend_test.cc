// A hung backend (SIGSTOP: it accepts connections, never answers) does not
// take the pool down: its requests past the stall limit count as failures,
// and idempotent requests still waiting on it go elsewhere (docs/health.md,
// "A hung backend"). Real heft and demo-backend processes.
#include <gtest/gtest.h>

#include <csignal>

#include <nlohmann/json.hpp>

#include "health_load_util.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;

// Continues a stopped backend whatever happens: a stopped process would
// keep its client connections (and this test's Load threads) waiting.
struct Stopped {
  explicit Stopped(const Process& p) : process(p) { process.signal(SIGSTOP); }
  ~Stopped() { process.signal(SIGCONT); }
  const Process& process;
};

struct HungFleet {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  uint16_t admin = free_port();
  Process heft;

  explicit HungFleet(const std::string& pool_options, const std::vector<std::string>& backend_args = {}) {
    std::string tos;
    for (const char* name : {"a", "b", "c"}) {
      backends.push_back(start_backend(dir, name, backend_args));
      tos += fmt::format("\t\tto 127.0.0.1:{}\n", backends.back().port);
    }
    heft = start_heft(dir, two_worker_pool(admin, port, tos + pool_options), port);
  }
};

size_t answered_by(const std::vector<Sample>& samples, const std::string& backend) {
  size_t n = 0;
  for (const Sample& s : samples) n += s.backend == backend && s.status == 200;
  return n;
}

// The stall limit (at least 1 s) takes b out by passive failure; the GETs
// waiting on it are retried on a and c. Throughput is back within 2 s.
TEST(HungBackend, StoppedBackendIsOutAfterItsStallLimitAndNoRequestFails) {
  // read_timeout far beyond the test: only the stall limit can move them.
  HungFleet f("\t\tread_timeout 60s\n");
  Load load(f.port, 6);
  std::this_thread::sleep_for(2500ms);  // every backend has a recent p99 (>= 20 responses each)
  const auto before_from = Clock::now() - 1500ms;
  const auto stopped_at = Clock::now();
  {
    Stopped stop(f.backends[1].process);
    std::this_thread::sleep_for(4000ms);
    const auto until = Clock::now();
    const auto before = load.between(before_from, stopped_at);
    const auto after = load.between(stopped_at + 2000ms, until);
    ASSERT_GT(before.size(), 100u) << "too little load before the stop to compare";
    const double rate_before = double(before.size()) / 1.5, rate_after = double(after.size()) / 2.0;
    EXPECT_GT(rate_after, 0.5 * rate_before)
        << fmt::format("throughput {:.0f}/s before b stopped, {:.0f}/s from 2 s after", rate_before, rate_after);
    EXPECT_EQ(answered_by(after, "b"), 0u);
    EXPECT_GT(answered_by(after, "a"), 0u);
    EXPECT_GT(answered_by(after, "c"), 0u);
  }
  load.stop();
  const auto all = load.all();
  EXPECT_EQ(failures(all), 0u) << "a GET failed while b hung";
  auto response = HttpClient(f.admin).request(fmt::format(
      "GET /reverse_proxy/upstreams HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", f.admin));
  ASSERT_EQ(response.status, 200);
  auto upstreams = nlohmann::json::parse(response.body);
  ASSERT_EQ(upstreams.size(), 3u);
  EXPECT_GE(upstreams[0].value("stall_limit_ms", 0), 1000) << upstreams.dump();
  const std::string log = f.heft.log();
  EXPECT_NE(log.find("stall"), std::string::npos) << log;
}

// max_fails 0: stalls never take b out; its failed health check does, and
// the GETs waiting on it then move to a and c instead of waiting 60 s.
TEST(HungBackend, FailedHealthCheckMovesIdempotentRequestsWaitingOnIt) {
  HungFleet f("\t\tread_timeout 60s\n\t\tmax_fails 0\n\t\thealth_uri /healthz\n\t\thealth_interval 300ms\n"
              "\t\thealth_timeout 200ms\n\t\thealth_fails 1\n\t\thealth_passes 1\n",
              {"--health-path", "/healthz"});
  Load load(f.port, 6);
  std::this_thread::sleep_for(1500ms);
  const auto stopped_at = Clock::now();
  {
    Stopped stop(f.backends[1].process);
    std::this_thread::sleep_for(3000ms);
    const auto after = load.between(stopped_at + 1500ms, Clock::now());
    ASSERT_GT(after.size(), 50u) << "the pool served too little while b hung";
    EXPECT_EQ(answered_by(after, "b"), 0u);
  }
  load.stop();
  EXPECT_EQ(failures(load.all()), 0u) << "a GET failed while b hung";
  // Every request that reached b before the check failed was answered by
  // another backend long before read_timeout (the client's own is 5 s).
  for (const Sample& s : load.all()) EXPECT_LT(s.ms, 4000) << s.backend;
}

// A POST (not idempotent) waiting on a hung backend is not sent twice: it
// waits for b (read_timeout), while b's stall, past its limit, has already
// taken b out for the requests that come meanwhile.
TEST(HungBackend, PostWaitingOnHungBackendIsNotRetriedAndItsStallTakesTheBackendOut) {
  HungFleet f("\t\tread_timeout 4s\n\t\tlb_policy round_robin\n");
  {
    HttpClient warm(f.port);
    for (int k = 0; k < 90; ++k) ASSERT_EQ(warm.get("/").status, 200);  // 30 responses each
  }
  Stopped stop(f.backends[1].process);
  // Round robin: of three POSTs, one goes to b and waits for it.
  std::vector<std::thread> posts;
  std::atomic<int> gateway_timeouts{0}, ok{0};
  for (int k = 0; k < 3; ++k)
    posts.emplace_back([&] {
      HttpClient c(f.port, 10s);
      Response r = c.request("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
      if (r.status == 504) ++gateway_timeouts;
      if (r.status == 200) ++ok;
    });
  // Past b's stall limit (1 s), before the POST's read_timeout (4 s): b is
  // out, and GETs go to a and c at once.
  std::this_thread::sleep_for(1600ms);
  HttpClient c(f.port, 5s);
  for (int k = 0; k < 6; ++k) {
    const auto start = Clock::now();
    Response r = c.get("/");
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.header("x-backend"), "b");
    EXPECT_LT(Clock::now() - start, 1000ms) << "a GET waited on b";
  }
  for (auto& t : posts) t.join();
  EXPECT_EQ(gateway_timeouts.load(), 1) << "the POST sent to b is answered 504 at read_timeout, not retried";
  EXPECT_EQ(ok.load(), 2);
}

}  // namespace
}  // namespace heft::test
