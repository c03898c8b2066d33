// Adaptive weights through real processes: a backend that turns slow loses its
// share, the pool's p99 drops below what static weights give, and its weight
// returns once it is fast again (docs/health.md).
#include <gtest/gtest.h>

#include "health_load_util.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;

TEST(AdaptiveWeights, SlowBackendCutThenRestored) {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  for (const char* n : {"a", "b", "c"}) backends.push_back(start_backend(dir, n));
  uint16_t port = free_port();
  std::string tos;
  for (const Backend& b : backends) tos += fmt::format("\t\tto 127.0.0.1:{} weight 1\n", b.port);
  // interval 500ms; cut 75% per interval down to 1 % of the weight. An
  // explicit threshold: this test is about the cut and the restore through
  // the proxy; the relative rules (peers, own baseline, the 5 ms noise floor)
  // have their own tests (below, and tests/upstream/weights_test.cc).
  Process heft = start_heft(dir,
                            two_worker_pool(free_port(), port,
                                            tos + "\t\tadaptive {\n\t\t\tinterval 500ms\n\t\t\tcut 75%\n"
                                                  "\t\t\tlatency_threshold 50ms\n"
                                                  "\t\t\tmin_weight_ratio 0.01\n\t\t}\n"),
                            port);
  Load load(port, 6);
  std::this_thread::sleep_for(2000ms);
  const auto slowed = Clock::now();
  ASSERT_EQ(control(backends[2].port, "/_control/delay?ms=200"), 200);
  std::this_thread::sleep_for(4000ms);
  const auto fixed = Clock::now();
  ASSERT_EQ(control(backends[2].port, "/_control/delay?ms=0"), 200);
  std::this_thread::sleep_for(5500ms);
  load.stop();

  auto before = load.between(slowed - 1500ms, slowed);
  EXPECT_NEAR(share_of(before, "c"), 1.0 / 3, 0.03) << before.size() << " responses";
  // Within 3 intervals its share falls.
  auto early = load.between(slowed + 1000ms, slowed + 1500ms);
  EXPECT_LT(share_of(early, "c"), 0.2);
  // Static weights would keep a third of the requests on c, so their p99 would
  // be >= 200 ms; adaptive weights bring the pool's p99 below that.
  auto settled = load.between(slowed + 2000ms, fixed);
  ASSERT_GT(settled.size(), 300u);
  EXPECT_LT(share_of(settled, "c"), 0.01);
  EXPECT_LT(p99_ms(settled), 150.0);
  // Back to its weight within the documented bound: EWMA decay (200 ms to
  // below 0.8 x 50 ms: 2 intervals) + recovery steps (0.01 -> 1 with cut 75 %:
  // 2) = 4 intervals = 2 s, + a partly slow interval, + intervals carried
  // while c, at 1 %, gets fewer than 5 responses in one; measure from 4 s.
  auto restored = load.between(fixed + 4000ms, fixed + 5500ms);
  ASSERT_GT(restored.size(), 300u);
  EXPECT_NEAR(share_of(restored, "c"), 1.0 / 3, 0.04) << restored.size() << " responses";
  EXPECT_EQ(failures(load.all()), 0u);
  std::string log = heft.log();
  EXPECT_NE(log.find("(latency: latency"), std::string::npos) << log;
  EXPECT_NE(log.find("(recover:"), std::string::npos) << log;
}

// A backend with half the capacity and half the weight is as fast as the
// others at its share: adaptive weights leave it alone (no decision at all, so
// no oscillation). The load (4 closed-loop clients, at most 200 req/s) stays
// below the fleet's capacity (300 req/s: 4 + 2 slots of 20 ms): at exactly
// full capacity both queues would be saturated and how the clients spread over
// them would drift at random, making "small" slow by chance, not by its weight.
TEST(AdaptiveWeights, ProportionallySlowerBackendIsNotPunished) {
  std::string dir = make_temp_dir();
  Backend big = start_backend(dir, "big", {"--workers", "4", "--delay", "20ms"});
  Backend small = start_backend(dir, "small", {"--workers", "2", "--delay", "20ms"});
  uint16_t port = free_port(), admin = free_port();
  Process heft = start_heft(dir,
                            two_worker_pool(admin, port,
                                            fmt::format("\t\tto 127.0.0.1:{} weight 2\n\t\tto 127.0.0.1:{} weight 1\n"
                                                        "\t\tadaptive {{\n\t\t\tinterval 500ms\n\t\t}}\n",
                                                        big.port, small.port)),
                            port);
  Load load(port, 4);
  std::this_thread::sleep_for(4000ms);
  load.stop();
  auto all = load.all();
  ASSERT_GT(all.size(), 300u);
  EXPECT_NEAR(share_of(all, "small"), 1.0 / 3, 0.02);
  EXPECT_EQ(failures(all), 0u);
  HttpClient c(admin);
  Response m = c.request(fmt::format("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin));
  ASSERT_EQ(m.status, 200);
  for (const char* reason : {"latency", "errors"})
    EXPECT_NE(m.body.find(fmt::format("heft_upstream_weight_decisions_total{{server=\":{}\",site=\":{}\",reason=\"{}\"}} 0",
                                      port, port, reason)),
              std::string::npos)
        << m.body;
  EXPECT_EQ(heft.log().find("weight factor"), std::string::npos) << heft.log();
}

}  // namespace
}  // namespace heft::test
