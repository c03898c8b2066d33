// Metrics and the access log tell the same story: over a run with a backend
// that fails half its requests, /metrics counts exactly the requests and 5xx
// that the access log has lines for, one valid JSON line per request.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <regex>
#include <set>
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

// heft (1 worker, admin API on `admin_port`) serving one site on `port`
// whose access log goes to `log_path`; `proxy` follows "reverse_proxy":
// its upstreams, or a block.
Process start_logged_heft(const std::string& dir, uint16_t admin_port, uint16_t port, const std::string& log_path,
                          const std::string& proxy) {
  return start_heft(dir,
                    fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {}\n"
                                "\tlog {{\n\t\toutput file {}\n\t}}\n}}\n",
                                admin_port, port, proxy, log_path),
                    port);
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
// CONNECT, an unknown host, a head not finished within header_timeout) are
// counted and logged too, as nginx logs its 400s, under the port's site; the
// size is the bytes of heft's own answer, the duration runs from where
// header_timeout's clock started (it was 0 for a refused head).
TEST(MetricsAndAccessLog, RefusedRequestsAreCountedAndLogged) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a");
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
	header_timeout 1s
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
  for (const std::string how : {"at once", "after 700 ms (parked)", "kept alive"}) {
    // Begun and never finished: 408 once header_timeout ran out, from the
    // connection for its first request (a connection silent for 500 ms is
    // parked: its clock still runs from the accept), from the first byte for
    // a later one.
    HttpClient stalled(port, 5s);
    ASSERT_TRUE(stalled.connect());
    if (how == "after 700 ms (parked)") std::this_thread::sleep_for(700ms);
    if (how == "kept alive") {
      EXPECT_EQ(stalled.request("GET / HTTP/1.1\r\nHost: app.test\r\n\r\n").status, 200);
      std::this_thread::sleep_for(300ms);  // idle, not part of the head's time
    }
    ASSERT_TRUE(stalled.send_raw("GET /stalled HTTP/1.1\r\nHost: app.test\r\n"));
    EXPECT_EQ(stalled.read_response().status, 408);
  }

  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin.request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin_port) + "\r\n\r\n");
    if (metric_sum(metrics.body, "heft_requests_total") >= 9) break;
    std::this_thread::sleep_for(20ms);
  }
  for (const char* code : {"400", "431", "501", "404"})
    EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", fmt::format("code=\"{}\"", code)), 1) << code;
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"200\""), 2);
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"408\""), 3);
  // The 408s' seconds are in the duration histogram too.
  EXPECT_GE(metric_sum(metrics.body, "heft_request_duration_seconds_sum"), 2.7) << metrics.body;

  std::vector<nlohmann::json> lines;
  for (int wait = 0; wait < 100 && lines.size() < 9; ++wait) {
    std::this_thread::sleep_for(50ms);
    lines.clear();
    std::ifstream in(log_path);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 9u);
  std::map<int, nlohmann::json> by_status;
  for (const auto& j : lines) {
    by_status[j["status"].get<int>()] = j;
    if (j["status"] != 408) continue;
    EXPECT_GE(j["duration"].get<double>(), 0.9) << j;
    EXPECT_LT(j["duration"].get<double>(), 1.25) << j << ": the idle time before the head counted";
  }
  EXPECT_EQ(by_status[400]["size"], std::string("400 Bad Request\n").size());
  EXPECT_EQ(by_status[501]["request"]["method"], "CONNECT");
  EXPECT_EQ(by_status[501]["request"]["host"], "app.test:443");  // the Host field (it was empty)
  EXPECT_EQ(by_status[404]["request"]["host"], "other.test");
  EXPECT_EQ(by_status[200]["upstream"], fmt::format("127.0.0.1:{}", a.port));
}

// The access log's lines once `count` are there (the writer is off the
// request path: a bounded wait), each parsed.
std::vector<nlohmann::json> log_lines(const std::string& path, std::size_t count) {
  std::vector<nlohmann::json> lines;
  for (int wait = 0; wait < 100 && lines.size() < count; ++wait) {
    if (wait > 0) std::this_thread::sleep_for(50ms);
    lines.clear();
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// A request that waited in its pool's queue says how long in the access log
// (`queued`, HAProxy's Tw); one that did not wait has no such field.
TEST(MetricsAndAccessLog, QueuedRequestsLogTheirWait) {
  const std::string dir = make_temp_dir();
  Backend slow = start_backend(dir, "slow", {"--delay", "400ms"});
  const uint16_t port = free_port(), admin_port = free_port();
  const std::string log_path = dir + "/access.log";
  Process heft = start_logged_heft(dir, admin_port, port, log_path,
                                   fmt::format("{{\n\t\tto 127.0.0.1:{} max_conns 1\n\t\tqueue 5\n\t}}", slow.port));
  std::thread first([&] {
    HttpClient client(port);
    EXPECT_EQ(client.get("/first").status, 200);
  });
  // The second request goes once the first holds the backend's one place
  // (a fixed pause is too short on a busy machine).
  bool first_active = false;
  for (const auto deadline = std::chrono::steady_clock::now() + 10s;
       !first_active && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
    auto upstreams = nlohmann::json::parse(admin_call(admin_port, "GET", "/reverse_proxy/upstreams").body, nullptr, false);
    first_active = upstreams.is_array() && !upstreams.empty() && upstreams[0].value("active", 0) == 1;
  }
  if (!first_active) {
    first.join();
    FAIL() << "the first request did not reach the backend within 10 s";
  }
  HttpClient second(port);
  EXPECT_EQ(second.get("/second").status, 200);
  first.join();
  const std::vector<nlohmann::json> lines = log_lines(log_path, 2);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    if (line["request"]["uri"] == "/first") {
      EXPECT_FALSE(line.contains("queued")) << line;
    } else {
      ASSERT_TRUE(line.contains("queued")) << line;
      EXPECT_GT(line["queued"].get<double>(), 0.2) << line;  // the rest of the first one's 400 ms
      EXPECT_LT(line["queued"].get<double>(), line["duration"].get<double>()) << line;
    }
  }
}

// The last attempt's backend timings (nginx's $upstream_header_time and
// $upstream_response_time): to the response head, and to its end; a failed
// attempt has the second only.
TEST(MetricsAndAccessLog, RequestsLogTheBackendsTimes) {
  const std::string dir = make_temp_dir();
  Backend slow = start_backend(dir, "slow", {"--delay", "300ms"});
  const uint16_t port = free_port(), admin_port = free_port();
  const std::string log_path = dir + "/access.log";
  Process heft = start_logged_heft(dir, admin_port, port, log_path,
                                   fmt::format("{{\n\t\tto 127.0.0.1:{}\n\t\tmax_fails 0\n\t}}", slow.port));
  HttpClient client(port);
  EXPECT_EQ(client.get("/answered").status, 200);
  slow.process.kill_now();
  HttpClient again(port);
  EXPECT_EQ(again.get("/refused").status, 502);
  const std::vector<nlohmann::json> lines = log_lines(log_path, 2);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json& answered = lines[0]["request"]["uri"] == "/answered" ? lines[0] : lines[1];
  const nlohmann::json& refused = lines[0]["request"]["uri"] == "/refused" ? lines[0] : lines[1];
  ASSERT_TRUE(answered.contains("upstream_header_time")) << answered;
  ASSERT_TRUE(answered.contains("upstream_response_time")) << answered;
  EXPECT_GE(answered["upstream_header_time"].get<double>(), 0.3) << answered;  // the backend's delay
  EXPECT_LE(answered["upstream_header_time"].get<double>(), answered["upstream_response_time"].get<double>());
  EXPECT_LE(answered["upstream_response_time"].get<double>(), answered["duration"].get<double>());
  EXPECT_FALSE(refused.contains("upstream_header_time")) << refused;
  ASSERT_TRUE(refused.contains("upstream_response_time")) << refused;
  EXPECT_LT(refused["upstream_response_time"].get<double>(), 0.3) << refused;
}

// The log line of the request for `uri` (null if none or several).
nlohmann::json line_for(const std::vector<nlohmann::json>& lines, const std::string& uri) {
  nlohmann::json found;
  for (const auto& j : lines) {
    if (j["request"]["uri"] != uri) continue;
    if (!found.is_null()) return nullptr;
    found = j;
  }
  return found;
}

// A response cut short is logged and counted like any other, as nginx logs
// it: with the status whose head the client got and the body bytes written
// to it, whether the client left mid-body or the backend closed mid-body
// (sized or chunked); 499 when the client left before any head was sent.
TEST(MetricsAndAccessLog, ResponsesCutShortAreCountedAndLogged) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a");
  uint16_t origin_port = 0;
  const int listener = listen_on_loopback(origin_port, 10s);
  ASSERT_GE(listener, 0);
  // Two connections, each answered with a head and 1000 bytes of a longer body, then closed.
  std::thread origin([listener] {
    const std::string body(1000, 'x');
    const std::string replies[] = {"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + body,
                                   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" + body + "\r\n"};
    for (const std::string& reply : replies) {
      const int c = accept_scripted(listener);
      if (c < 0) return;
      std::string in;
      if (read_until_head(c, in)) ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  uint16_t port = free_port(), origin_site_port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
}}
:{} {{
	reverse_proxy 127.0.0.1:{}
	log {{
		output file {}
	}}
}}
:{} {{
	reverse_proxy {{
		to 127.0.0.1:{}
		max_fails 0
	}}
	log {{
		output file {}
	}}
}}
)", admin_port, port, a.port, log_path, origin_site_port, origin_port, log_path), port);
  ASSERT_TRUE(wait_for_port(origin_site_port));

  // The client leaves after 64 KiB of 50 MB.
  {
    const int fd = connect_to(port);
    ASSERT_GE(fd, 0);
    const std::string request = "GET /bytes/50000000 HTTP/1.1\r\nHost: localhost\r\n\r\n";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    std::size_t got = 0;
    char buffer[16384];
    for (ssize_t n; got < 64 * 1024 && (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) got += static_cast<std::size_t>(n);
    EXPECT_GE(got, 64u * 1024);
    ::close(fd);  // with unread bytes: a reset, heft's next write fails
  }
  // The backend closes after 1000 bytes, sized and chunked: the client gets
  // the head, those bytes and the end of the connection.
  for (const char* path : {"/sized", "/chunked"}) {
    HttpClient client(origin_site_port);
    ASSERT_TRUE(client.send_raw(fmt::format("GET {} HTTP/1.1\r\nHost: localhost\r\n\r\n", path)));
    const std::string got = client.read_all();
    EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << path << ": " << got.substr(0, 200);
    const std::size_t body_start = std::min(got.size(), got.find("\r\n\r\n"));
    EXPECT_EQ(std::count(got.begin() + body_start, got.end(), 'x'), 1000) << path;
  }
  origin.join();
  ::close(listener);
  // The client leaves while its body is read, before any response.
  {
    HttpClient client(port);
    ASSERT_TRUE(client.send_raw("POST /upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n0123456789"));
    client.close();
  }

  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin.request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin_port) + "\r\n\r\n");
    ASSERT_EQ(metrics.status, 200) << metrics.body;
    if (metric_sum(metrics.body, "heft_requests_total") >= 4) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total"), 4) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"200\""), 3);
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"499\""), 1);
  EXPECT_EQ(metric_sum(metrics.body, "heft_request_duration_seconds_count"), 4);

  const std::vector<nlohmann::json> lines = log_lines(log_path, 4);
  ASSERT_EQ(lines.size(), 4u) << heft.log();
  const nlohmann::json left = line_for(lines, "/bytes/50000000");
  EXPECT_EQ(left["status"], 200) << left;
  EXPECT_GE(left["size"].get<uint64_t>(), 64u * 1024 - 200) << left;  // 64 KiB read, less the head
  EXPECT_LT(left["size"].get<uint64_t>(), 50000000u) << left;
  EXPECT_EQ(left["upstream"], fmt::format("127.0.0.1:{}", a.port));
  for (const char* path : {"/sized", "/chunked"}) {
    const nlohmann::json cut = line_for(lines, path);
    EXPECT_EQ(cut["status"], 200) << path << ": " << cut;
    EXPECT_EQ(cut["size"], 1000) << path << ": " << cut;
    EXPECT_EQ(cut["tries"], 1) << path << ": " << cut;
  }
  const nlohmann::json gone = line_for(lines, "/upload");
  EXPECT_EQ(gone["status"], 499) << gone;
  EXPECT_EQ(gone["size"], 0) << gone;
  EXPECT_EQ(gone["upstream"], "") << gone;
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// A client that closes its connection while its request waits for the
// backend's answer: heft closes the backend's connection too (its work is
// for nobody now) and logs 499 with the backend's name, as nginx does
// ("client prematurely closed connection, so upstream connection is closed
// too"); the backend is not charged a failure. A client that stays gets its
// slow answer.
TEST(MetricsAndAccessLog, ClientGoneWhileWaitingClosesTheBackendConnectionAndLogs499) {
  std::string dir = make_temp_dir();
  uint16_t origin_port = 0;
  const int listener = listen_on_loopback(origin_port, 10s);
  ASSERT_GE(listener, 0);
  // First connection: read the request, answer nothing, wait up to 6 s for
  // heft to close. Second: answer after 1 s.
  std::atomic<bool> closed_by_heft{false};
  std::atomic<long> closed_after_ms{-1};
  std::thread origin([&] {
    int c = accept_scripted(listener);
    if (c < 0) return;
    std::string in;
    if (read_until_head(c, in)) {
      const auto start = std::chrono::steady_clock::now();
      timeval tv{6, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      char byte;
      if (::recv(c, &byte, 1, 0) == 0) {
        closed_by_heft = true;
        closed_after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      }
    }
    ::close(c);
    c = accept_scripted(listener);
    if (c < 0) return;
    in.clear();
    if (read_until_head(c, in)) {
      std::this_thread::sleep_for(1s);
      const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow";
      ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    ::close(c);
  });
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_logged_heft(dir, admin_port, port, log_path,
                                  fmt::format("{{\n\t\tto 127.0.0.1:{}\n\t\tmax_fails 1\n\t\tfail_timeout 30s\n\t}}",
                                              origin_port));

  {
    HttpClient client(port);
    ASSERT_TRUE(client.send_raw("GET /abandoned HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    std::this_thread::sleep_for(300ms);  // the request is at the backend by now
    client.close();
  }
  // The second request waits until the origin has seen the first end (or gave up).
  for (int wait = 0; wait < 80 && closed_after_ms < 0; ++wait) std::this_thread::sleep_for(100ms);
  HttpClient stays(port);
  const Response slow = stays.get("/stays");
  EXPECT_EQ(slow.status, 200) << slow.body;  // not aborted, and the backend was not taken out
  EXPECT_EQ(slow.body, "slow");
  origin.join();
  ::close(listener);
  EXPECT_TRUE(closed_by_heft) << "heft kept the backend's connection open after its client left";
  EXPECT_LT(closed_after_ms.load(), 3000) << "noticed only after " << closed_after_ms << " ms";

  const std::vector<nlohmann::json> lines = log_lines(log_path, 2);
  ASSERT_EQ(lines.size(), 2u) << heft.log();
  const nlohmann::json gone = line_for(lines, "/abandoned");
  EXPECT_EQ(gone["status"], 499) << gone;
  EXPECT_EQ(gone["size"], 0) << gone;
  EXPECT_EQ(gone["upstream"], fmt::format("127.0.0.1:{}", origin_port)) << gone;
  EXPECT_EQ(line_for(lines, "/stays")["status"], 200);
  HttpClient admin(admin_port);
  const Response metrics = admin.request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin_port) + "\r\n\r\n");
  ASSERT_EQ(metrics.status, 200) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", "code=\"499\""), 1) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_failures_total"), 0) << metrics.body;
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// The same watch for a streamed request body (larger than retry_body_limit),
// once the body is out (it was never checked); and a request with more
// pipelined behind it is not ended by a half-close that came after them
// (the first was cut as 499 and the second never served). The last one
// waits like any half-closed request: 499 (nginx's rule, docs/proxy.md).
TEST(MetricsAndAccessLog, ClientWatchCoversStreamedBodiesAndSparesPipelinedRequests) {
  std::string dir = make_temp_dir();
  Backend slow = start_backend(dir, "slow", {"--delay", "1500"});
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_logged_heft(
      dir, admin_port, port, log_path,
      fmt::format("{{\n\t\tto 127.0.0.1:{}\n\t\tretry_body_limit 1KiB\n\t}}", slow.port));
  {
    HttpClient client(port);
    ASSERT_TRUE(client.send_raw("POST /streamed HTTP/1.1\r\nHost: x\r\nContent-Length: 8192\r\n\r\n" +
                                std::string(8192, 'b')));
    std::this_thread::sleep_for(300ms);
    client.close();
  }
  {
    const int fd = connect_to(port, 10s);
    ASSERT_GE(fd, 0);
    const std::string two = "GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::send(fd, two.data(), two.size(), MSG_NOSIGNAL), static_cast<ssize_t>(two.size()));
    ::shutdown(fd, SHUT_WR);
    std::string got;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) got.append(buffer, static_cast<std::size_t>(n));
    ::close(fd);
    std::size_t answers = 0;
    for (std::size_t at = got.find("HTTP/1.1 200"); at != std::string::npos; at = got.find("HTTP/1.1 200", at + 1)) ++answers;
    EXPECT_EQ(answers, 1u) << got;
  }
  {
    // An empty line after the request is no pipelined request (it turned
    // the watch off).
    HttpClient client(port);
    ASSERT_TRUE(client.send_raw("GET /blank-after HTTP/1.1\r\nHost: x\r\n\r\n\r\n"));
    std::this_thread::sleep_for(300ms);
    client.close();
  }
  const std::vector<nlohmann::json> lines = log_lines(log_path, 4);
  ASSERT_EQ(lines.size(), 4u) << heft.log();
  const nlohmann::json blank_after = line_for(lines, "/blank-after");
  EXPECT_EQ(blank_after["status"], 499) << blank_after;
  const nlohmann::json streamed = line_for(lines, "/streamed");
  EXPECT_EQ(streamed["status"], 499) << streamed;
  EXPECT_LT(streamed["duration"].get<double>(), 1.4) << "the backend's answer was waited for: " << streamed;
  EXPECT_EQ(line_for(lines, "/first")["status"], 200);
  EXPECT_EQ(line_for(lines, "/second")["status"], 499);
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// ignore_client_abort on (nginx's proxy_ignore_client_abort): a client that
// half-closes after its request still gets the slow answer.
TEST(MetricsAndAccessLog, IgnoreClientAbortLetsTheRequestRun) {
  std::string dir = make_temp_dir();
  Backend slow = start_backend(dir, "slow", {"--delay", "800"});
  uint16_t port = free_port(), admin_port = free_port();
  Process heft = start_logged_heft(dir, admin_port, port, dir + "/access.log",
                                   fmt::format("{{\n\t\tto 127.0.0.1:{}\n\t\tignore_client_abort on\n\t}}", slow.port));
  const int fd = connect_to(port, 10s);
  ASSERT_GE(fd, 0);
  const std::string request = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  ::shutdown(fd, SHUT_WR);
  std::string got;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) got.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
}

// An upgraded connection (WebSocket) is logged and counted at its 101, as
// documented: it was logged when the tunnel closed, with the tunnel's whole
// life as its duration and as the backend's response time (which adaptive
// weights then cut as latency). While the tunnel runs, the backend counts
// as active (least_conn), as nginx counts an upgraded connection.
TEST(MetricsAndAccessLog, UpgradedConnectionIsRecordedAtItsSwitch) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a");
  uint16_t port = free_port(), admin_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_logged_heft(dir, admin_port, port, log_path, fmt::format("127.0.0.1:{}", a.port));
  HttpClient ws(port);
  ASSERT_TRUE(ws.send_raw("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                          "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"));
  ASSERT_EQ(ws.read_response(true).status, 101);
  // The tunnel stays open: the line is there already.
  const std::vector<nlohmann::json> lines = log_lines(log_path, 1);
  ASSERT_EQ(lines.size(), 1u) << "no access log line while the tunnel is open";
  EXPECT_EQ(lines[0]["status"], 101);
  EXPECT_LT(lines[0]["duration"].get<double>(), 1.0) << lines[0];
  HttpClient admin(admin_port);
  const auto scrape = [&] {
    return admin.request(fmt::format("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin_port)).body;
  };
  const nlohmann::json upstreams = nlohmann::json::parse(
      admin.request(fmt::format("GET /reverse_proxy/upstreams HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin_port)).body);
  ASSERT_EQ(upstreams.size(), 1u);
  EXPECT_EQ(upstreams[0]["active"], 1) << "the tunnel's backend counts as active while it runs";
  std::this_thread::sleep_for(1500ms);
  ws.close();
  std::this_thread::sleep_for(200ms);
  const std::string metrics = scrape();
  EXPECT_LT(metric_sum(metrics, "heft_upstream_response_duration_seconds_sum"), 1.0) << metrics;
  EXPECT_LT(metric_sum(metrics, "heft_request_duration_seconds_sum"), 1.0) << metrics;
  EXPECT_EQ(metric_sum(metrics, "heft_requests_total", "code=\"101\""), 1) << metrics;
  EXPECT_EQ(log_lines(log_path, 1).size(), 1u) << "logged once";
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// Requests the end of the grace period cuts are logged as they stand: 499
// for one whose response head was not sent yet, the status and the body
// bytes sent for one whose was, both naming the backend they were at.
TEST(MetricsAndAccessLog, RequestsCutByTheGracePeriodAreLogged) {
  std::string dir = make_temp_dir();
  Backend slow = start_backend(dir, "slow", {"--delay", "5s"});
  uint16_t origin_port = 0;
  const int listener = listen_on_loopback(origin_port, 10s);
  ASSERT_GE(listener, 0);
  // A head and 1000 of 100000 bytes, then nothing until heft is gone.
  std::thread origin([listener] {
    const int c = accept_scripted(listener);
    if (c < 0) return;
    std::string in;
    if (read_until_head(c, in)) {
      const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + std::string(1000, 'x');
      ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      char byte;
      ::recv(c, &byte, 1, 0);  // the end (or the 10 s read timeout)
    }
    ::close(c);
  });
  uint16_t port = free_port(), origin_site_port = free_port();
  std::string log_path = dir + "/access.log";
  Process heft = start_heft(dir, fmt::format(R"({{
	workers 2
	grace_period 1s
}}
:{} {{
	reverse_proxy 127.0.0.1:{}
	log {{
		output file {}
	}}
}}
:{} {{
	reverse_proxy 127.0.0.1:{}
	log {{
		output file {}
	}}
}}
)", port, slow.port, log_path, origin_site_port, origin_port, log_path), port);
  ASSERT_TRUE(wait_for_port(origin_site_port));

  constexpr int kWaiting = 3;
  std::vector<std::thread> clients;
  for (int i = 0; i < kWaiting; ++i)
    clients.emplace_back([port, i] { HttpClient(port, 10s).get("/waiting/" + std::to_string(i)); });
  HttpClient started(origin_site_port);
  ASSERT_TRUE(started.send_raw("GET /started HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::string head;
  ASSERT_TRUE(read_until_head(started.fd(), head));
  // Every waiting request is at the backend (it counts requests as they
  // arrive, these looks at its stats included).
  HttpClient stats(slow.port);
  for (int looks = 1; looks <= 200; ++looks) {
    const Response r = stats.get("/_control/stats");
    ASSERT_EQ(r.status, 200);
    if (nlohmann::json::parse(r.body).at("requests").get<int>() - looks >= kWaiting) break;
    std::this_thread::sleep_for(20ms);
  }

  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(10s), std::optional<int>(0)) << heft.log();
  for (std::thread& t : clients) t.join();
  origin.join();
  ::close(listener);

  const std::vector<nlohmann::json> lines = log_lines(log_path, kWaiting + 1);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kWaiting + 1)) << heft.log();
  for (int i = 0; i < kWaiting; ++i) {
    const nlohmann::json waiting = line_for(lines, "/waiting/" + std::to_string(i));
    EXPECT_EQ(waiting["status"], 499) << waiting;
    EXPECT_EQ(waiting["size"], 0) << waiting;
    EXPECT_EQ(waiting["upstream"], fmt::format("127.0.0.1:{}", slow.port)) << waiting;
    EXPECT_EQ(waiting["tries"], 1) << waiting;
    EXPECT_GE(waiting["duration"].get<double>(), 0.9) << waiting;  // cut at the end of the 1 s grace period
  }
  const nlohmann::json cut = line_for(lines, "/started");
  EXPECT_EQ(cut["status"], 200) << cut;
  EXPECT_EQ(cut["size"], 1000) << cut;
  EXPECT_EQ(cut["upstream"], fmt::format("127.0.0.1:{}", origin_port)) << cut;
  EXPECT_NE(heft.log().find("GET /started: cut by the end of the grace period"), std::string::npos) << heft.log();
}

// Sites sharing a port are one server with a pool each: every per-backend
// and per-pool series names its site as /reverse_proxy/upstreams does, so
// none is repeated and each site's traffic is counted apart.
// The `server` label is the port, not the server's position: a reload that
// removed an earlier port renumbered the servers, and the remaining port's
// requests carried on the removed one's srv0 series (5 + 7 = 12).
TEST(MetricsAndAccessLog, ServerSeriesFollowTheirPortAcrossAReload) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a");
  uint16_t first = free_port(), second = free_port(), admin_port = free_port();
  const auto file = [&](bool with_first) {
    std::string text = fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n", admin_port);
    if (with_first) text += fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", first, a.port);
    return text + fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", second, a.port);
  };
  Process heft = start_heft(dir, file(true), first);
  ASSERT_TRUE(wait_for_port(second));
  const auto requests = [](uint16_t port, int n) {
    HttpClient client(port);
    for (int i = 0; i < n; ++i) ASSERT_EQ(client.get("/").status, 200);
  };
  requests(first, 5);
  requests(second, 10);
  write_file(dir + "/Heftfile", file(false));
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "Z info reloaded"));
  requests(second, 7);
  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {  // a request is counted once its response is sent
    metrics = admin.request(fmt::format("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin_port));
    if (metric_sum(metrics.body, "heft_requests_total") >= 22) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", fmt::format("server=\":{}\"", first)), 5) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_requests_total", fmt::format("server=\":{}\"", second)), 17) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", fmt::format("server=\":{}\"", second)), 17);
}

TEST(MetricsAndAccessLog, SitesSharingAPortHaveTheirOwnSeries) {
  std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a"), b = start_backend(dir, "b"), c = start_backend(dir, "c");
  uint16_t port = free_port(), admin_port = free_port();
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
}}
b.test:{} {{
	reverse_proxy {{
		to 127.0.0.1:{} weight 5
		to 127.0.0.1:{}
	}}
}}
c.test:{} {{
	reverse_proxy 127.0.0.1:{} 127.0.0.1:{} 127.0.0.1:{}
}}
)", admin_port, port, a.port, b.port, port, a.port, b.port, c.port), port);
  HttpClient client(port);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(client.request("GET / HTTP/1.1\r\nHost: b.test\r\n\r\n").status, 200);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client.request("GET / HTTP/1.1\r\nHost: c.test\r\n\r\n").status, 200);

  HttpClient admin(admin_port);
  const auto admin_get = [&](const std::string& path) {
    return admin.request(fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", path, admin_port));
  };
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {  // an attempt is counted right after its response is relayed
    metrics = admin_get("/metrics");
    ASSERT_EQ(metrics.status, 200) << metrics.body;
    if (metric_sum(metrics.body, "heft_upstream_requests_total") >= 9) break;
    std::this_thread::sleep_for(20ms);
  }
  std::set<std::string> series;
  std::istringstream in(metrics.body);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("#")) {
      EXPECT_TRUE(series.insert(line.substr(0, line.rfind(' '))).second) << "repeated: " << line;
    }
  }

  const std::string dial_a = fmt::format("127.0.0.1:{}", a.port);
  const std::string site_b = fmt::format("b.test:{}", port), site_c = fmt::format("c.test:{}", port);
  EXPECT_EQ(sample_value(metrics.body, fmt::format("heft_upstream_weight{{server=\":{}\",site=\"{}\",upstream=\"{}\"}}",
                                                   port, site_b, dial_a)),
            5);
  EXPECT_EQ(sample_value(metrics.body, fmt::format("heft_upstream_weight{{server=\":{}\",site=\"{}\",upstream=\"{}\"}}",
                                                   port, site_c, dial_a)),
            1);
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", "site=\"" + site_b + "\""), 6);
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", "site=\"" + site_c + "\""), 3);
  for (const std::string& site : {site_b, site_c})
    EXPECT_EQ(sample_value(metrics.body, fmt::format("heft_upstream_weight_decisions_total{{server=\":{}\",site=\"{}\","
                                                     "reason=\"slow_start\"}}", port, site)),
              0)
        << site;
  // The labels are the upstreams view's server, site address and address.
  const nlohmann::json upstreams = nlohmann::json::parse(admin_get("/reverse_proxy/upstreams").body);
  ASSERT_EQ(upstreams.size(), 5u);
  for (const nlohmann::json& u : upstreams)
    EXPECT_EQ(sample_value(metrics.body, fmt::format("heft_upstream_weight{{server=\"{}\",site=\"{}\",upstream=\"{}\"}}",
                                                     u["server"].get<std::string>(), u["site_address"].get<std::string>(),
                                                     u["address"].get<std::string>())),
              u["weight"].get<double>())
        << u;

  // A reload without b.test makes c.test the first site: its series keep
  // their label and carry on, b.test's stay where they stopped (with the
  // index as the label, c.test's requests were added to b.test's series).
  const std::string without_b = fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\nc.test:{} {{\n\treverse_proxy "
                                            "127.0.0.1:{} 127.0.0.1:{} 127.0.0.1:{}\n}}\n",
                                            admin_port, port, a.port, b.port, c.port);
  Response loaded = admin.request(fmt::format("POST /load HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: text/heftfile\r\n"
                                              "Content-Length: {}\r\n\r\n{}",
                                              admin_port, without_b.size(), without_b));
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  HttpClient again(port);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(again.request("GET / HTTP/1.1\r\nHost: c.test\r\n\r\n").status, 200);
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin_get("/metrics");
    if (metric_sum(metrics.body, "heft_upstream_requests_total") >= 13) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", "site=\"" + site_b + "\""), 6);
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_requests_total", "site=\"" + site_c + "\""), 7);
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(15s), 0);
}

// A backend's latency starts when heft has the (buffered) body and turns to
// the backend, not at the request head: a slow client's upload is the
// request's time, not the backend's (nginx's $upstream_response_time). It
// was counted as the backend's, and adaptive weights cut a healthy backend
// for slow uploads.
TEST(MetricsAndAccessLog, BackendLatencyLeavesOutTheClientsUpload) {
  std::string dir = make_temp_dir();
  Backend backend = start_backend(dir, "a");
  uint16_t port = free_port(), admin_port = free_port();
  Process heft = start_heft(dir, fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n:{} {{\n"
                                             "\treverse_proxy 127.0.0.1:{}\n}}\n",
                                             admin_port, port, backend.port),
                            port);
  HttpClient client(port);
  ASSERT_TRUE(client.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n"));
  for (int piece = 0; piece < 3; ++piece) {
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(client.send_raw(std::string(100, 'u')));
  }
  Response r = client.read_response();
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.body.size(), 300u);
  HttpClient admin(admin_port);
  Response metrics;
  for (int wait = 0; wait < 100; ++wait) {
    metrics = admin.request(fmt::format("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", admin_port));
    if (metric_sum(metrics.body, "heft_request_duration_seconds_count") >= 1) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GE(metric_sum(metrics.body, "heft_request_duration_seconds_sum"), 0.55) << metrics.body;
  EXPECT_EQ(metric_sum(metrics.body, "heft_upstream_response_duration_seconds_count"), 1) << metrics.body;
  EXPECT_LT(metric_sum(metrics.body, "heft_upstream_response_duration_seconds_sum"), 0.3) << metrics.body;
}

}  // namespace
}  // namespace heft::test
