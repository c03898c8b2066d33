// The Prometheus exposition is valid text format 0.0.4 (checked by a strict
// parser written here) and its numbers are what was recorded.
#include "observe/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace heft::observe {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the exposition strictly; fails the test on any malformed line.
struct Exposition {
  std::map<std::string, std::string> types;  // family → type
  std::vector<Sample> samples;

  static Exposition parse(const std::string& text) {
    Exposition e;
    std::istringstream in(text);
    std::string line;
    const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
    const std::regex help_re("# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+");
    const std::regex type_re("# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)");
    const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)\")");
    std::set<std::string> helped;
    std::set<std::pair<std::string, std::map<std::string, std::string>>> series;
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    while (std::getline(in, line)) {
      std::smatch m;
      if (line.rfind("# HELP ", 0) == 0) {
        EXPECT_TRUE(std::regex_match(line, m, help_re)) << line;
        EXPECT_TRUE(helped.insert(m[1]).second) << "second HELP for " << m[1];
        continue;
      }
      if (line.rfind("# TYPE ", 0) == 0) {
        EXPECT_TRUE(std::regex_match(line, m, type_re)) << line;
        EXPECT_FALSE(e.types.count(m[1])) << "second TYPE for " << m[1];
        e.types[m[1]] = m[2];
        continue;
      }
      ADD_FAILURE_IF_EMPTY(line);
      Sample s;
      size_t i = 0;
      while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
      s.name = line.substr(0, i);
      EXPECT_TRUE(std::regex_match(s.name, name_re)) << line;
      if (i < line.size() && line[i] == '{') {
        size_t close = line.find("} ", i);
        EXPECT_NE(close, std::string::npos) << line;
        std::string body = line.substr(i + 1, close - i - 1);
        // Labels: name="value" separated by commas, nothing else.
        std::string rest = body;
        while (!rest.empty()) {
          EXPECT_TRUE(std::regex_search(rest, m, label_re, std::regex_constants::match_continuous)) << line;
          if (m.empty()) break;
          EXPECT_FALSE(s.labels.count(m[1])) << line;
          s.labels[m[1]] = m[2];
          rest = rest.substr(m.length());
          if (!rest.empty()) {
            EXPECT_EQ(rest[0], ',') << line;
            rest.erase(0, 1);
          }
        }
        i = close + 1;
      }
      EXPECT_EQ(line[i], ' ') << line;
      std::string value = line.substr(i + 1);
      size_t used = 0;
      if (value == "+Inf") {
        s.value = INFINITY;
      } else {
        s.value = std::stod(value, &used);
        EXPECT_EQ(used, value.size()) << line;
      }
      EXPECT_TRUE(series.emplace(s.name, s.labels).second) << "repeated series: " << line;
      // Every sample belongs to a family declared before it.
      std::string family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (!e.types.count(family) && family.size() > strlen(suffix) &&
            family.compare(family.size() - strlen(suffix), std::string::npos, suffix) == 0)
          family = family.substr(0, family.size() - strlen(suffix));
      EXPECT_TRUE(e.types.count(family)) << "no TYPE before " << line;
      if (e.types[family] == "counter") {
        EXPECT_TRUE(s.name.size() > 6 && s.name.ends_with("_total")) << line;
      }
      e.samples.push_back(std::move(s));
    }
    e.check_histograms();
    return e;
  }

  static void ADD_FAILURE_IF_EMPTY(const std::string& line) { EXPECT_FALSE(line.empty()) << "blank line"; }

  // Buckets cumulative and ascending, ending in +Inf == _count, with _sum.
  void check_histograms() const {
    for (const auto& [family, type] : types) {
      if (type != "histogram") continue;
      std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> series;
      std::map<std::map<std::string, std::string>, double> counts, sums;
      for (const Sample& s : samples) {
        auto labels = s.labels;
        if (s.name == family + "_bucket") {
          ASSERT_TRUE(labels.count("le"));
          double le = labels["le"] == "+Inf" ? INFINITY : std::stod(labels["le"]);
          labels.erase("le");
          series[labels].emplace_back(le, s.value);
        } else if (s.name == family + "_count") {
          counts[labels] = s.value;
        } else if (s.name == family + "_sum") {
          sums[labels] = s.value;
        }
      }
      for (const auto& [labels, buckets] : series) {
        ASSERT_FALSE(buckets.empty());
        for (size_t i = 1; i < buckets.size(); ++i) {
          EXPECT_LT(buckets[i - 1].first, buckets[i].first) << family;
          EXPECT_LE(buckets[i - 1].second, buckets[i].second) << family << " buckets not cumulative";
        }
        EXPECT_TRUE(std::isinf(buckets.back().first)) << family << " has no +Inf bucket";
        ASSERT_TRUE(counts.count(labels)) << family << "_count missing";
        EXPECT_TRUE(sums.count(labels)) << family << "_sum missing";
        EXPECT_EQ(buckets.back().second, counts[labels]);
      }
    }
  }

  double value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const Sample& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    return NAN;
  }

  // How many samples carry label `name` with `value` (a backend's, a pool's series).
  size_t count_with(const std::string& name, const std::string& value) const {
    size_t n = 0;
    for (const Sample& s : samples)
      if (auto it = s.labels.find(name); it != s.labels.end() && it->second == value) ++n;
    return n;
  }
};

TEST(Metrics, ExpositionIsValidAndCountsWhatWasRecorded) {
  reset_metrics();
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < 4; ++w)
    workers.emplace_back([w] {
      for (int i = 0; i < 1000; ++i) {
        record_request(w, "srv0", i % 10 == 0 ? 503 : 200, 0.003);
        record_upstream(w, "srv0", "0", i % 2 ? "127.0.0.1:9001" : "127.0.0.1:9002", i % 10 == 0 ? 503 : 200, 0.002);
      }
      record_failure(w, "srv0", "0", "127.0.0.1:9001", "connect");
    });
  for (auto& t : workers) t.join();
  connection_opened();
  record_reload(true);
  record_reload(false);
  std::vector<UpstreamGauge> gauges{{"srv0", "0", "127.0.0.1:9001", 3, 95, 95, true, 1},
                                    {"srv0", "0", "weird\"name\\", 0, 5, 2.5, false, 1}};
  Exposition e = Exposition::parse(render_metrics(gauges));

  EXPECT_EQ(e.value("heft_requests_total", {{"server", "srv0"}, {"code", "200"}}), 3600);
  EXPECT_EQ(e.value("heft_requests_total", {{"server", "srv0"}, {"code", "503"}}), 400);
  EXPECT_EQ(e.value("heft_request_duration_seconds_count", {{"server", "srv0"}}), 4000);
  EXPECT_EQ(e.value("heft_request_duration_seconds_bucket", {{"server", "srv0"}, {"le", "0.0025"}}), 0);
  EXPECT_EQ(e.value("heft_request_duration_seconds_bucket", {{"server", "srv0"}, {"le", "0.005"}}), 4000);
  EXPECT_EQ(e.value("heft_upstream_requests_total",
                    {{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}, {"code", "200"}}),
            2000);
  EXPECT_EQ(e.value("heft_upstream_failures_total",
                    {{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}, {"reason", "connect"}}),
            4);
  EXPECT_EQ(e.value("heft_upstream_weight", {{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}}), 95);
  EXPECT_EQ(e.value("heft_upstream_effective_weight",
                    {{"server", "srv0"}, {"site", "0"}, {"upstream", "weird\\\"name\\\\"}}),
            2.5);
  EXPECT_EQ(e.value("heft_upstream_healthy", {{"server", "srv0"}, {"site", "0"}, {"upstream", "weird\\\"name\\\\"}}),
            0);
  EXPECT_EQ(e.value("heft_connections_active", {}), 1);
  EXPECT_EQ(e.value("heft_config_reloads_total", {{"result", "success"}}), 1);
  EXPECT_EQ(e.value("heft_config_reloads_total", {{"result", "failure"}}), 1);
  EXPECT_GT(e.value("process_resident_memory_bytes", {}), 0);
  EXPECT_GT(e.value("process_start_time_seconds", {}), 1.6e9);
  EXPECT_GT(e.value("process_open_fds", {}), 0);
  EXPECT_GE(e.value("process_cpu_seconds_total", {}), 0);
  EXPECT_EQ(e.types["heft_upstream_response_duration_seconds"], "histogram");
  connection_closed();
}

// Two sites on one port are one server with a pool each: a backend in both
// has a series per site, none repeated, each with its own site's numbers.
TEST(Metrics, PoolsOfSitesSharingAServerAreToldApart) {
  reset_metrics();
  for (int i = 0; i < 3; ++i) record_upstream(0, "srv0", "0", "127.0.0.1:9001", 200, 0.002);
  record_upstream(1, "srv0", "1", "127.0.0.1:9001", 200, 0.002);
  record_failure(0, "srv0", "1", "127.0.0.1:9001", "error");
  std::vector<UpstreamGauge> gauges{{"srv0", "0", "127.0.0.1:9001", 0, 5, 5, true, 1},
                                    {"srv0", "0", "127.0.0.1:9002", 0, 1, 1, true, 1},
                                    {"srv0", "1", "127.0.0.1:9001", 0, 1, 1, true, 1},
                                    {"srv0", "1", "127.0.0.1:9002", 0, 1, 1, true, 1},
                                    {"srv0", "1", "127.0.0.1:9003", 0, 1, 1, true, 1}};
  Exposition e = Exposition::parse(render_metrics(gauges));  // fails on a repeated series
  EXPECT_EQ(e.value("heft_upstream_weight", {{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}}), 5);
  EXPECT_EQ(e.value("heft_upstream_weight", {{"server", "srv0"}, {"site", "1"}, {"upstream", "127.0.0.1:9001"}}), 1);
  EXPECT_EQ(e.value("heft_upstream_requests_total",
                    {{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}, {"code", "200"}}),
            3);
  EXPECT_EQ(e.value("heft_upstream_requests_total",
                    {{"server", "srv0"}, {"site", "1"}, {"upstream", "127.0.0.1:9001"}, {"code", "200"}}),
            1);
  EXPECT_EQ(e.value("heft_upstream_failures_total",
                    {{"server", "srv0"}, {"site", "1"}, {"upstream", "127.0.0.1:9001"}, {"reason", "error"}}),
            1);
  for (const char* site : {"0", "1"})
    EXPECT_EQ(e.value("heft_upstream_weight_decisions_total", {{"server", "srv0"}, {"site", site}, {"reason", "latency"}}),
              0)
        << site;
}

// Health changes and weight decisions are recorded here, not read from pool
// state a reload may replace: they stay when their backend or pool is gone
// from the gauges, and a backend or pool without any shows 0.
TEST(Metrics, HealthChangesAndWeightDecisionsOnlyGoUp) {
  reset_metrics();
  record_health_change("srv0", "0", "127.0.0.1:9001");
  record_health_change("srv0", "0", "127.0.0.1:9001");
  record_weight_decision("srv0", "0", "slow_start");
  const std::vector<UpstreamGauge> both{{"srv0", "0", "127.0.0.1:9001", 0, 1, 1, true, 1},
                                       {"srv0", "0", "127.0.0.1:9002", 0, 1, 1, true, 1}};
  Exposition e = Exposition::parse(render_metrics(both));
  const std::map<std::string, std::string> first{{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9001"}};
  const std::map<std::string, std::string> second{{"server", "srv0"}, {"site", "0"}, {"upstream", "127.0.0.1:9002"}};
  const std::map<std::string, std::string> slow_start{{"server", "srv0"}, {"site", "0"}, {"reason", "slow_start"}};
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", first), 2);
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", second), 0);
  EXPECT_EQ(e.value("heft_upstream_weight_decisions_total", slow_start), 1);
  EXPECT_EQ(e.value("heft_upstream_weight_decisions_total",
                    {{"server", "srv0"}, {"site", "0"}, {"reason", "slow_start_done"}}),
            0);
  // The first backend gone (a reload without it), then back; the second gone:
  // its zero series stay too (they vanished).
  e = Exposition::parse(render_metrics({{"srv0", "0", "127.0.0.1:9002", 0, 1, 1, true, 1}}));
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", first), 2);
  e = Exposition::parse(render_metrics({{"srv0", "0", "127.0.0.1:9001", 0, 1, 1, true, 1}}));
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", second), 0);
  e = Exposition::parse(render_metrics(both));
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", first), 2);
  EXPECT_EQ(e.value("heft_upstream_weight_decisions_total", slow_start), 1);
}

// A backend no pool holds any more keeps its series at their last values for
// kRemovedSeriesKept, then they are forgotten (a fleet whose addresses change
// with every deploy would otherwise grow the registry and every scrape
// without bound); so are the weight decisions of a pool no site has. One put
// back within that time continues its counts.
TEST(Metrics, RemovedBackendsSeriesAreForgottenAfterTheyWereKept) {
  reset_metrics();
  record_upstream(0, ":8080", "a:8080", "10.0.0.1:80", 200, 0.002);
  record_upstream(1, ":8080", "a:8080", "10.0.0.1:80", 502, 0.002);
  record_failure(0, ":8080", "a:8080", "10.0.0.1:80", "status");
  record_health_change(":8080", "a:8080", "10.0.0.1:80");
  record_upstream(0, ":8080", "a:8080", "10.0.0.2:80", 200, 0.002);
  record_weight_decision(":8080", "b:8080", "slow_start");  // a pool about to go
  record_upstream(0, ":8080", "b:8080", "10.0.0.3:80", 200, 0.002);
  const std::vector<UpstreamGauge> only_second{{":8080", "a:8080", "10.0.0.2:80", 0, 1, 1, true, 1}};
  const std::map<std::string, std::string> first{{"server", ":8080"}, {"site", "a:8080"}, {"upstream", "10.0.0.1:80"}};
  const auto t0 = std::chrono::steady_clock::now();
  forget_removed_series(only_second, t0);  // a reload removed 10.0.0.1 and site b
  Exposition e = Exposition::parse(render_metrics(only_second));
  EXPECT_EQ(e.value("heft_upstream_health_changes_total", first), 1);
  EXPECT_GT(e.count_with("upstream", "10.0.0.1:80"), 0u);
  EXPECT_GT(e.count_with("site", "b:8080"), 0u);
  forget_removed_series(only_second, t0 + kRemovedSeriesKept - std::chrono::seconds(1));
  e = Exposition::parse(render_metrics(only_second));
  auto with_first = first;
  with_first["code"] = "502";
  EXPECT_EQ(e.value("heft_upstream_requests_total", with_first), 1);
  forget_removed_series(only_second, t0 + kRemovedSeriesKept);
  e = Exposition::parse(render_metrics(only_second));
  EXPECT_EQ(e.count_with("upstream", "10.0.0.1:80"), 0u);
  EXPECT_EQ(e.count_with("site", "b:8080"), 0u);
  auto second = first;
  second["upstream"] = "10.0.0.2:80";
  second["code"] = "200";
  EXPECT_EQ(e.value("heft_upstream_requests_total", second), 1);  // the live backend is untouched
  // A request that was in flight to the removed backend still records: a new
  // series from 0 (the workers' cached slots were let go with the old ones).
  record_upstream(0, ":8080", "a:8080", "10.0.0.1:80", 200, 0.002);
  record_upstream(0, ":8080", "a:8080", "10.0.0.2:80", 200, 0.002);
  e = Exposition::parse(render_metrics(only_second));
  with_first["code"] = "200";
  EXPECT_EQ(e.value("heft_upstream_requests_total", with_first), 1);
  EXPECT_EQ(e.value("heft_upstream_requests_total", second), 2);
  // Put back within the time kept, then removed again: counted on, and timed
  // afresh from its second removal. (Simulated times from t0 + 1000 s on:
  // render_metrics() times absences by the real clock, near t0.)
  const std::vector<UpstreamGauge> with_fourth{{":8080", "a:8080", "10.0.0.2:80", 0, 1, 1, true, 1},
                                               {":8080", "a:8080", "10.0.0.4:80", 0, 1, 1, true, 1}};
  auto fourth = second;
  fourth["upstream"] = "10.0.0.4:80";
  const auto t1 = t0 + std::chrono::seconds(1000);
  record_upstream(0, ":8080", "a:8080", "10.0.0.4:80", 200, 0.002);
  forget_removed_series(only_second, t1);
  forget_removed_series(with_fourth, t1 + kRemovedSeriesKept / 2);
  record_upstream(0, ":8080", "a:8080", "10.0.0.4:80", 200, 0.002);
  forget_removed_series(only_second, t1 + kRemovedSeriesKept);
  forget_removed_series(only_second, t1 + kRemovedSeriesKept * 3 / 2);
  e = Exposition::parse(render_metrics(only_second));
  EXPECT_EQ(e.value("heft_upstream_requests_total", fourth), 2);
}

TEST(Metrics, EmptyRegistryIsStillValid) {
  reset_metrics();
  Exposition::parse(render_metrics({}));
}

}  // namespace
}  // namespace heft::observe
