// Active health checks and slow start through real `heft run` and
// `heft demo-backend` processes (docs/health.md).
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

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
                      two_worker_pool(admin, port, tos + pool_options),
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
  EXPECT_NE(log.find("healthy → unhealthy"), std::string::npos) << log;
  EXPECT_NE(log.find("unhealthy → healthy"), std::string::npos) << log;
}

// Reloads as frequent as the admin API allows do not postpone probes: with a
// weight change of a every 250 ms (each one a reload), b, failing, is still
// probed every interval and out within interval x fails + one interval. (Every
// reload used to restart all probe loops, and b, backend 1 of 2, waited half an
// interval for its first probe again and again: never probed, never out.)
TEST(HealthChecks, FrequentReloadsDoNotPostponeProbes) {
  Fleet f;
  for (const char* n : {"a", "b"}) f.add(n);
  write_file(f.dir + "/Heftfile",
             two_worker_pool(f.admin, f.port,
                             fmt::format("\t\tto 127.0.0.1:{}\n\t\tto 127.0.0.1:{}\n"
                                         "\t\thealth_uri /healthz\n\t\thealth_interval 1s\n\t\thealth_timeout 500ms\n"
                                         "\t\thealth_fails 2\n",
                                         f.backends[0].port, f.backends[1].port)));
  // Its own state file: every weight change is saved.
  f.heft = Process({HEFT_BINARY, "run", "--config", f.dir + "/Heftfile", "--state", f.dir + "/state.json"},
                   f.dir + "/heft.log");
  ASSERT_TRUE(wait_for_port(f.port) && wait_for_port(f.admin)) << f.heft.log();
  auto admin = [&f](const std::string& method, const std::string& path, const std::string& body = "") {
    HttpClient client(f.admin);
    return client.request(fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n"
                                      "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                                      method, path, f.admin, body.size(), body));
  };
  const std::string b_address = fmt::format("127.0.0.1:{}", f.backends[1].port);
  auto b_state = [&] {
    auto all = nlohmann::json::parse(admin("GET", "/reverse_proxy/upstreams").body, nullptr, false);
    if (all.is_array())
      for (const auto& u : all)
        if (u.value("address", "") == b_address) return u.value("state", "");
    return std::string();
  };
  std::atomic<bool> stop{false};
  std::atomic<int> changes{0}, refused{0};
  std::thread reweigh([&] {
    const std::string weight =
        "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/0/weight";
    for (auto next = Clock::now(); !stop; next += 250ms) {
      std::this_thread::sleep_until(next);
      (admin("POST", weight, changes % 2 ? "1" : "2").status == 200 ? changes : refused)++;
    }
  });
  std::this_thread::sleep_for(1500ms);  // several reloads before b fails
  EXPECT_EQ(b_state(), "up");
  const auto broken = Clock::now();
  EXPECT_EQ(control(f.backends[1].port, "/_control/health?status=500"), 200);
  std::optional<Clock::duration> out_after;
  while (!out_after && Clock::now() - broken < 6s) {
    if (b_state() == "unhealthy") out_after = Clock::now() - broken;
    std::this_thread::sleep_for(50ms);
  }
  stop = true;
  reweigh.join();
  // Reloads kept coming all along.
  EXPECT_GE(changes.load(), 10) << f.heft.log();
  EXPECT_EQ(refused.load(), 0) << f.heft.log();
  // interval 1 s x fails 2 + one interval, + 400 ms slack.
  ASSERT_TRUE(out_after) << "b never marked unhealthy; log:\n" << f.heft.log();
  EXPECT_LT(*out_after, 3400ms) << f.heft.log();
  EXPECT_NE(f.heft.log().find(fmt::format("backend {}: healthy → unhealthy (status 500", b_address)), std::string::npos)
      << f.heft.log();
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

// Passive failures with slow start: both backends fail (503, which next_upstream
// counts), both are out; fail_timeout later, with nothing asked meanwhile, the
// admin API reports them up and the very first requests are served. (They used
// to stay "out" until a request came, and that request and the next ones got
// 503 "no available backend" until the next tick, up to 250 ms later.)
TEST(SlowStart, BackendsAllOutServeTheFirstRequestsAfterFailTimeout) {
  Fleet f;
  for (const char* n : {"a", "b"}) f.add(n);
  f.run("", "\t\tmax_fails 1\n\t\tfail_timeout 2s\n\t\tslow_start 5s\n\t\tnext_upstream error timeout http_503\n");
  const auto states = [&] {
    std::string shown;
    HttpClient admin(f.admin);
    const Response r = admin.request(fmt::format(
        "GET /reverse_proxy/upstreams HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", f.admin));
    auto all = nlohmann::json::parse(r.body, nullptr, false);
    if (!all.is_array()) return fmt::format("{} {}", r.status, r.body);
    if (all.is_array())
      for (const auto& u : all) shown += u.value("state", "?") + " ";
    return shown;
  };
  for (const Backend& b : f.backends) ASSERT_EQ(control(b.port, "/_control/fail_rate?value=1"), 200);
  HttpClient client(f.port);
  EXPECT_EQ(client.get("/").status, 503);  // a, then b: both fail, both out
  // b's 503 reaches the client before its attempt is reported to the pool (a
  // loaded host may run the admin request in between): bounded, well within
  // fail_timeout.
  std::string out = states();
  for (int look = 0; look < 20 && out != "out out "; ++look) {
    std::this_thread::sleep_for(25ms);
    out = states();
  }
  EXPECT_EQ(out, "out out ");
  const Response none = client.get("/");
  EXPECT_EQ(none.status, 503);
  EXPECT_EQ(none.body, "503 no available backend\n");
  for (const Backend& b : f.backends) ASSERT_EQ(control(b.port, "/_control/fail_rate?value=0"), 200);
  // fail_timeout and a tick, with no request (bounded: a loaded host ticks late).
  std::string shown = states();
  for (int look = 0; look < 100 && shown != "up up "; ++look) {
    std::this_thread::sleep_for(50ms);
    shown = states();
  }
  EXPECT_EQ(shown, "up up ");
  for (int i = 0; i < 5; ++i) {
    const Response r = client.get("/");
    EXPECT_EQ(r.status, 200) << "request " << i << ": " << r.body << f.heft.log();
  }
  // Only the request asked while both were out was answered so.
  const std::string log = f.heft.log();
  const size_t first = log.find("no available backend");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("no available backend", first + 1), std::string::npos) << log;
}

// heft_upstream_health_changes_total and heft_upstream_weight_decisions_total
// only go up: a reload that takes a backend out and brings it back (its
// state, and the pool's counts in it, start afresh), or one that gives the
// site a new pool (another host), does not take them back.
// A reload that moves a site to another index renames its pool: its weight
// events named the index it had ("pool site1") while health lines and
// `heft upstreams` used the new one.
TEST(SlowStart, WeightEventsNameTheSitesIndexAfterAReloadMovedIt) {
  std::string dir = make_temp_dir();
  Backend good = start_backend(dir, "good");
  const uint16_t first = free_port(), second = free_port(), dead = free_port();
  const std::string moved = fmt::format(
      ":{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} 127.0.0.1:{}\n\t\tmax_fails 1\n\t\tfail_timeout 1s\n"
      "\t\tslow_start 2s\n\t}}\n}}\n",
      second, good.port, dead);
  Process heft = start_heft(dir, fmt::format("{{\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n{}", first,
                                             good.port, moved),
                            second);
  write_file(dir + "/Heftfile", "{\n\tadmin off\n\tworkers 1\n}\n" + moved);  // the site moves to index 0
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "Z info reloaded")) << heft.log();
  HttpClient client(second);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(client.get("/").status, 200);  // one meets the dead backend, retried
  // Back after fail_timeout, on trial and ramping: a slow_start event.
  EXPECT_TRUE(wait_for_log(heft, fmt::format("pool site0 backend 127.0.0.1:{}: weight factor", dead), 10s)) << heft.log();
  EXPECT_EQ(heft.log().find("pool site1 backend"), std::string::npos) << heft.log();
}

TEST(HealthChecks, HealthChangeAndWeightDecisionCountersOnlyGoUp) {
  Fleet f;
  for (const char* n : {"a", "b"}) f.add(n);
  f.run("", "\t\thealth_uri /healthz\n\t\thealth_interval 100ms\n\t\thealth_timeout 500ms\n\t\tslow_start 1s\n");
  HttpClient admin(f.admin);
  const auto admin_call = [&](const std::string& method, const std::string& path, const std::string& type = "",
                              const std::string& body = "") {
    std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", method, path, f.admin);
    if (!type.empty()) head += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", type, body.size());
    return admin.request(head + "\r\n" + body);
  };
  const std::string b_changes = fmt::format(
      "heft_upstream_health_changes_total{{server=\":{}\",site=\":{}\",upstream=\"127.0.0.1:{}\"}}", f.port, f.port,
      f.backends[1].port);
  const std::string slow_starts =
      fmt::format("heft_upstream_weight_decisions_total{{server=\":{}\",site=\":{}\",reason=\"slow_start\"}}", f.port,
                  f.port);
  std::string metrics;
  const auto wait_until = [&](const std::function<bool()>& done) {
    for (int look = 0; look < 200; ++look) {
      metrics = admin_call("GET", "/metrics").body;
      if (done()) return true;
      std::this_thread::sleep_for(25ms);
    }
    return false;
  };
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=500"), 200);
  ASSERT_TRUE(wait_until([&] { return sample_value(metrics, b_changes) == 1; })) << metrics;
  ASSERT_EQ(control(f.backends[1].port, "/_control/health?status=200"), 200);
  // Back in service: a slow start.
  ASSERT_TRUE(wait_until([&] { return sample_value(metrics, b_changes) == 2 && sample_value(metrics, slow_starts) >= 1; }))
      << metrics;
  double decisions = sample_value(metrics, slow_starts);

  const std::string upstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";
  ASSERT_EQ(admin_call("DELETE", upstreams + "/1").status, 200);
  ASSERT_EQ(admin_call("POST", upstreams, "application/json",
                       fmt::format(R"({{"dial":"127.0.0.1:{}"}})", f.backends[1].port))
                .status,
            200);
  metrics = admin_call("GET", "/metrics").body;
  EXPECT_EQ(sample_value(metrics, b_changes), 2) << metrics;
  EXPECT_GE(sample_value(metrics, slow_starts), decisions) << metrics;
  decisions = sample_value(metrics, slow_starts);

  const std::string new_host = fmt::format(
      "{{\n\tworkers 2\n\tadmin 127.0.0.1:{}\n}}\napp.test:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{}\n"
      "\t\tto 127.0.0.1:{}\n\t\thealth_uri /healthz\n\t\thealth_interval 100ms\n\t\thealth_timeout 500ms\n"
      "\t\tslow_start 1s\n\t}}\n}}\n",
      f.admin, f.port, f.backends[0].port, f.backends[1].port);
  const Response loaded = admin_call("POST", "/load", "text/heftfile", new_host);
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  metrics = admin_call("GET", "/metrics").body;
  EXPECT_EQ(sample_value(metrics, b_changes), 2) << metrics;
  EXPECT_GE(sample_value(metrics, slow_starts), decisions) << metrics;
  f.heft.signal(SIGTERM);
  EXPECT_EQ(f.heft.wait(15s), std::optional<int>(0));
}


// health_body on a large body: std::regex matched by recursion, one stack
// frame per character a repetition takes, so a pattern like "^[^!]+" (or
// "UP.*" on a one-line JSON document) over a few tens of KiB overflowed the
// checker thread's stack and heft died of SIGSEGV at the first probe. The
// probes now pass (the pattern matches the 256 KiB body) and heft serves on,
// and a pattern no body matches still fails them.
TEST(HealthChecks, ABodyPatternOverALargeBodyIsMatchedWithoutCrashing) {
  Fleet f;
  for (const char* n : {"a", "b"}) f.add(n);
  const uint16_t other = free_port();
  const auto config = [&](bool checks) {
    std::string out = "{\n\tadmin off\n\tworkers 1\n}\n";
    for (const auto& [port, pattern] : {std::pair<uint16_t, std::string>{f.port, "^[^!]+"}, {other, "![0-9]"}}) {
      out += fmt::format(":{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} 127.0.0.1:{}\n", port, f.backends[0].port,
                         f.backends[1].port);
      if (checks)
        out += fmt::format("\t\thealth_uri /bytes/262144\n\t\thealth_body \"{}\"\n\t\thealth_interval 100ms\n"
                           "\t\thealth_timeout 2s\n",
                           pattern);
      out += "\t}\n}\n";
    }
    return out;
  };
  // Started without the checks, which a reload then adds: the first probes
  // come once heft is surely up.
  f.heft = start_heft(f.dir, config(false), f.port);
  write_file(f.dir + "/Heftfile", config(true));
  f.heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(f.heft, "Z info reloaded")) << f.heft.log();
  // The other site's probes fail (its backends are marked unhealthy); by
  // then the first site's have run too.
  EXPECT_TRUE(wait_for_log(f.heft, "body does not match /![0-9]/", 5s)) << f.heft.log();
  std::this_thread::sleep_for(500ms);  // several probes of each backend
  ASSERT_TRUE(f.heft.running()) << f.heft.log();
  // The first site's backends stayed healthy: they serve.
  HttpClient client(f.port);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(client.get("/").status, 200) << f.heft.log();
  const std::string log = f.heft.log();
  size_t unhealthy = 0;
  for (size_t at = log.find("healthy → unhealthy"); at != std::string::npos; at = log.find("healthy → unhealthy", at + 1))
    ++unhealthy;
  EXPECT_EQ(unhealthy, 2u) << log;  // the other site's two
}
}  // namespace
}  // namespace heft::test
