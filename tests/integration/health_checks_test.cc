// Active health checks and slow start through real `heft run` and
// `heft demo-backend` processes (docs/health.md).
#include <gtest/gtest.h>

#include "health_load_util.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;

struct Fleet {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  uint16_t admin = free_port();
  Process heft;

  void add(const std::string& name) { backends.push_back(start_backend(dir, name, {"--health-path", "/healthz"})); }
  void run(const std::string& to_options, const std::string& pool_options) {
    std::string tos;
    for (const Backend& b : backends) tos += fmt::format("\t\tto 127.0.0.1:{} {}\n", b.port, to_options);
    heft = start_heft(dir,
                      fmt::format("{{\n\tworkers 2\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy {{\n{}{}\t}}\n}}\n",
                                  admin, port, tos, pool_options),
                      port);
  }
};

// The first time after `from` at which `backend` got no response for `quiet`
// (returns the start of that quiet period), from the recorded samples.
std::optional<Clock::time_point> last_seen_before_quiet(const std::vector<Sample>& samples, const std::string& backend,
                                                         Clock::time_point from) {
  std::optional<Clock::time_point> last;
  for (const Sample& s : samples)
    if (s.backend == backend && s.at >= from) last = s.at;
  return last;
}

TEST(HealthChecks, UnhealthyBackendIsOutInTimeAndBackAfterRecoveryWithoutFailedRequests) {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.add(n);
  // interval 300ms x fails 2 + one interval = 900 ms bound.
  f.run("", "\t\thealth_uri /healthz\n\t\thealth_interval 300ms\n\t\thealth_timeout 200ms\n\t\thealth_fails 2\n"
            "\t\thealth_passes 1\n");
  Load load(f.port, 4);
  std::this_thread::sleep_for(800ms);
  const auto broken = Clock::now();
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=500"), 200);
  std::this_thread::sleep_for(2000ms);
  // b no longer answers after the bound (+100 ms scheduling slack).
  auto after_bound = load.between(broken + 1000ms, Clock::now());
  ASSERT_GT(after_bound.size(), 50u);
  EXPECT_EQ(share_of(after_bound, "b"), 0.0);
  auto last_b = last_seen_before_quiet(load.all(), "b", broken);
  ASSERT_TRUE(last_b);
  EXPECT_LT(*last_b - broken, 1000ms);
  // Recovery: back within interval x passes + one interval.
  const auto healed = Clock::now();
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=200"), 200);
  std::this_thread::sleep_for(1500ms);
  load.stop();
  auto back = load.between(healed + 700ms, Clock::now());
  EXPECT_GT(share_of(back, "b"), 0.2);
  // No client request failed at any time (the others served).
  EXPECT_EQ(failures(load.all()), 0u);
  std::string log = f.heft.log();
  EXPECT_NE(log.find("is now unhealthy"), std::string::npos) << log;
  EXPECT_NE(log.find("is now healthy"), std::string::npos) << log;
}

TEST(SlowStart, ReturningBackendShareRisesOverTheWindowToItsWeight) {
  Fleet f;
  for (const char* n : {"a", "b"}) f.add(n);
  // b comes back through the active check; the ramp is 4 s.
  f.run("", "\t\thealth_uri /healthz\n\t\thealth_interval 100ms\n\t\thealth_timeout 200ms\n\t\tslow_start 4s\n");
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=500"), 200);
  std::this_thread::sleep_for(600ms);
  Load load(f.port, 4);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=200"), 200);
  // Find b's return, then measure tenths of the window.
  std::optional<Clock::time_point> first_b;
  for (int i = 0; i < 100 && !first_b; ++i) {
    std::this_thread::sleep_for(20ms);
    for (const Sample& s : load.all())
      if (s.backend == "b") {
        first_b = s.at;
        break;
      }
  }
  ASSERT_TRUE(first_b);
  std::this_thread::sleep_for(4000ms + 1500ms - (Clock::now() - *first_b));
  load.stop();
  std::vector<double> shares;
  for (int tenth = 0; tenth < 10; ++tenth) {
    auto s = load.between(*first_b + tenth * 400ms, *first_b + (tenth + 1) * 400ms);
    ASSERT_GT(s.size(), 100u);
    shares.push_back(share_of(s, "b"));
  }
  std::string shown;
  for (double s : shares) shown += fmt::format("{:.3f} ", s);
  for (size_t i = 1; i < shares.size(); ++i) EXPECT_GE(shares[i] + 0.01, shares[i - 1]) << shown;
  EXPECT_LT(shares.front(), 0.2) << shown;
  EXPECT_GT(shares.back(), shares.front() + 0.2) << shown;
  // After the window: its weight share (1:1 -> 50 %) within 3 %.
  auto after = load.between(*first_b + 4300ms, *first_b + 5500ms);
  ASSERT_GT(after.size(), 200u);
  EXPECT_NEAR(share_of(after, "b"), 0.5, 0.03) << shown;
  EXPECT_EQ(failures(load.all()), 0u);
}

}  // namespace
}  // namespace heft::test
