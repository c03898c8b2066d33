// Metrics and the access log tell the same story: over a run with a backend
// that fails half its requests, /metrics counts exactly the requests and 5xx
// that the access log has lines for, one valid JSON line per request.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "integration/process_util.h"

namespace heft::test {
namespace {

// Sum of a metric's samples whose labels contain `label_filter` (a substring).
double metric_sum(const std::string& text, const std::string& name, const std::string& label_filter = "") {
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    if (!label_filter.empty() && line.find(label_filter) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

TEST(MetricsAndAccessLog, AgreeOverARun) {
  std::string dir = make_temp_dir();
  Backend good = start_backend(dir, "good");
  Backend flaky = start_backend(dir, "flaky", {"--fail-rate", "0.5"});
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 2
}}
:{} {{
	reverse_proxy {{
		to 127.0.0.1:{} weight 3
		to 127.0.0.1:{} weight 1
		max_fails 0
	}}
	log {{
		output file {}
	}}
}}
)", admin_port, port, good.port, flaky.port, log_path), port);

  const int kRequests = 400;
  HttpClient client(port);
  int answered_5xx = 0;
  for (int i = 0; i < kRequests; ++i) {
    Response r = client.get("/item/" + std::to_string(i));
    ASSERT_NE(r.status, 0) << heft.log();
    if (r.status >= 500) ++answered_5xx;
  }
  EXPECT_EQ(answered_5xx, kRequests / 4 / 2);  // the flaky quarter fails every other request

  // A request is counted once its response is sent (as nginx logs it), so the
  // last one may be counted a moment after the client has read it: bounded wait.
  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin.request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin_port) + "\r\n\r\n");
    ASSERT_EQ(metrics.status, 200) << metrics.body;
    if (metric_sum(metrics.body, "heft_request_duration_seconds_count") >= kRequests &&
        metric_sum(metrics.body, "heft_requests_total") >= kRequests)
      break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total"), kRequests);
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"5"), answered_5xx);
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", "code=\"503\""), answered_5xx);
  EXPECT_EQ(metric_sum(metrics.body, "heft_request_duration_seconds_count"), kRequests);

  // The log is written off the request path: give the writer a moment, bounded.
  std::vector<std::string> lines;
  for (int wait = 0; wait < 100 && static_cast<int>(lines.size()) < kRequests; ++wait) {
    std::this_thread::sleep_for(50ms);
    lines.clear();
    std::ifstream in(log_path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(static_cast<int>(lines.size()), kRequests);
  int log_5xx = 0;
  for (const std::string& line : lines) {
    nlohmann::json j = nlohmann::json::parse(line);  // throws (fails the test) on a torn line
    EXPECT_TRUE(j["request"]["uri"].get<std::string>().rfind("/item/", 0) == 0);
    EXPECT_EQ(j["tries"], 1);
    if (line.find("\"status\":5") != std::string::npos) ++log_5xx;  // the seed's grep
  }
  EXPECT_EQ(log_5xx, answered_5xx);
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// Requests heft refuses itself (a smuggling attempt, an oversized head,
// CONNECT, an unknown host) are counted and logged too, as nginx logs its
// 400s, under the port's site; the size is the bytes of heft's own answer.
TEST(MetricsAndAccessLog, RefusedRequestsAreCountedAndLogged) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a");
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
}}
app.test:{} {{
	reverse_proxy 127.0.0.1:{}
	log {{
		output file {}
	}}
}}
)", admin_port, port, a.port, log_path), port);
  const auto status_of = [&](const std::string& raw) { return HttpClient(port).request(raw).status; };
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"), 200);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status_of("CONNECT app.test:443 HTTP/1.1\r\nHost: app.test:443\r\n\r\n"), 501);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"), 404);

  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin.request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin_port) + "\r\n\r\n");
    if (metric_sum(metrics.body, "heft_requests_total") >= 5) break;
    std::this_thread::sleep_for(20ms);
  }
  for (const char* code : {"200", "400", "431", "501", "404"})
    EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", fmt::format("code=\"{}\"", code)), 1) << code;

  std::vector<nlohmann::json> lines;
  for (int wait = 0; wait < 100 && lines.size() < 5; ++wait) {
    std::this_thread::sleep_for(50ms);
    lines.clear();
    std::ifstream in(log_path);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 5u);
  std::map<int, nlohmann::json> by_status;
  for (const auto& j : lines) by_status[j["status"].get<int>()] = j;
  EXPECT_EQ(by_status[400]["size"], std::string("400 Bad Request\n").size());
  EXPECT_EQ(by_status[501]["request"]["method"], "CONNECT");
  EXPECT_EQ(by_status[404]["request"]["host"], "other.test");
  EXPECT_EQ(by_status[200]["upstream"], fmt::format("127.0.0.1:{}", a.port));
}

}  // namespace
}  // namespace heft::test
