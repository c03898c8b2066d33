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
  // interval 500ms; cut 75% per interval down to 1 % of the weight.
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 2\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy {{\n{}"
                                        "\t\tadaptive {{\n\t\t\tinterval 500ms\n\t\t\tcut 75%\n"
                                        "\t\t\tmin_weight_ratio 0.01\n\t\t}}\n\t}}\n}}\n",
                                        free_port(), port, tos),
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
  EXPECT_NEAR(share_of(before, "c"), 1.0 / 3, 0.03);
  // Within 3 intervals its share falls.
  auto early = load.between(slowed + 1000ms, slowed + 1500ms);
  EXPECT_LT(share_of(early, "c"), 0.2);
  // Static weights would keep a third of the requests on c, so their p99 would
  // be >= 200 ms; adaptive weights bring the pool's p99 below that.
  auto settled = load.between(slowed + 2000ms, fixed);
  ASSERT_GT(settled.size(), 300u);
  EXPECT_LT(share_of(settled, "c"), 0.01);
  EXPECT_LT(p99_ms(settled), 150.0);
  // Back to its weight within the documented bound: EWMA decay (a ~500x
  // slowdown: 4 intervals) + recovery steps (0.01 -> 1 with cut 75 %: 2) = 6
  // intervals = 3 s (+ a partly slow interval); measure from 4 s.
  auto restored = load.between(fixed + 4000ms, fixed + 5500ms);
  ASSERT_GT(restored.size(), 300u);
  EXPECT_NEAR(share_of(restored, "c"), 1.0 / 3, 0.04);
  EXPECT_EQ(failures(load.all()), 0u);
  std::string log = heft.log();
  EXPECT_NE(log.find("(latency: latency"), std::string::npos) << log;
  EXPECT_NE(log.find("(recover:"), std::string::npos) << log;
}

}  // namespace
}  // namespace heft::test
