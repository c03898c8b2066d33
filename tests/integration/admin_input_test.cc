// Bad admin bodies against a real `heft run`: each gets a 4xx whose reason
// says where the body is wrong, heft lives, and the configuration in service
// is unchanged; large bodies, refused, leave heft's memory bounded (VmHWM,
// its peak) and given back (VmRSS). A PUT of 200 KB of nested '[' overflowed
// the admin thread's stack and killed heft; a refused 59 MB body took it to
// 2.3 GB and kept 767 MB; duplicate keys were taken, the last one winning.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "integration/process_util.h"

namespace heft::test {
namespace {

using json = nlohmann::json;
const std::string kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

// Resident memory of a process now (VmRSS), in KiB; 0 if unknown.
long vm_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

std::string repeated(const std::string& piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

struct AdminInputTest : ::testing::Test {
  std::string dir = make_temp_dir();
  Backend backend = start_backend(dir, "a");
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n:{} {{\n\treverse_proxy "
                                        "127.0.0.1:{}\n}}\n",
                                        admin_port, port, backend.port),
                            port);

  // One request with `body` under `content_type` (Content-Length, or chunked in 1 MiB chunks).
  Response send(const std::string& method, const std::string& path, const std::string& body,
                const std::string& content_type = "application/json", bool chunked = false) {
    HttpClient client(admin_port, 30s);
    std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Type: {}\r\n",
                                   method, path, admin_port, content_type);
    if (!chunked) return client.request(head + fmt::format("Content-Length: {}\r\n\r\n", body.size()) + body);
    std::string framed = head + "Transfer-Encoding: chunked\r\n\r\n";
    framed.reserve(framed.size() + body.size() + 1024);
    for (size_t at = 0; at < body.size(); at += 1 << 20) {
      const std::string piece = body.substr(at, 1 << 20);
      framed += fmt::format("{:x}\r\n", piece.size()) + piece + "\r\n";
    }
    return client.request(framed + "0\r\n\r\n");
  }
};

TEST_F(AdminInputTest, BadBodiesGetALocated4xxAndChangeNothing) {
  const Response before = admin_call(admin_port, "GET", "/config/");
  ASSERT_EQ(before.status, 200);
  const std::string tag = before.header("etag");
  struct Case {
    std::string method, path, body, content_type;
    int status;
    std::string reason;  // what the error must say, its place included
  };
  const std::string deep_arrays = repeated("[", 1'000'000) + repeated("]", 1'000'000);
  const std::string deep_objects = repeated("{\"a\":", 1'000'000) + "1" + repeated("}", 1'000'000);
  std::string many_values = "[";
  many_values += repeated("0,", 1'000'000);
  many_values += "0]";
  const std::vector<Case> cases = {
      {"PUT", kUpstreams + "/0", deep_arrays, "application/json", 400,
       "request body is nested deeper than 64 levels at line 1, column 65 (JSON pointer /0/0/0/"},
      {"PUT", "/config/apps", deep_objects, "application/json", 400,
       "request body is nested deeper than 64 levels at line 1, column 321 (JSON pointer /a/a/a/"},
      {"POST", "/load", repeated("[", 1'000'000), "application/json", 400, "nested deeper than 64 levels at line 1"},
      {"POST", "/load", R"({"admin": {}, "admin": {}})", "application/json", 400,
       "request body is ambiguous: duplicate key \"admin\" at line 1, column 21 (JSON pointer /admin)"},
      {"PATCH", kUpstreams + "/0", "{\"dial\": \"127.0.0.1:1\",\n \"weight\": 2,\n \"weight\": 3}", "application/json", 400,
       "duplicate key \"weight\" at line 3, column 9 (JSON pointer /weight)"},
      {"POST", "/load", R"({"apps": {"http": {"servers": {"srv0": {"listen": [":1"], "listen": [":2"]}}}}})",
       "application/json", 400, "duplicate key \"listen\" at line 1, column 66 (JSON pointer /apps/http/servers/srv0/listen)"},
      {"POST", "/load", many_values, "application/json", 400,
       "too large: more than 1000000 JSON values and keys at line 1, column 2000001 (JSON pointer /999999)"},
      {"POST", "/load", "[1e400]", "application/json", 400, "not valid JSON at line 1, column 7: number overflow"},
      {"POST", "/load", "{\"apps\": \"\xff\"}", "application/json", 400, "not valid JSON at line 1, column 11"},
      {"POST", "/load", "{\"apps\": {}} {}", "application/json", 400, "not valid JSON at line 1, column 14"},
      {"POST", "/load", ":80 {\n\treverse_proxy 127.0.0.1:1\n" + repeated("{ ", 100'000) + "\n}\n", "text/heftfile", 400,
       "request body:3:"},
      {"POST", "/load", std::string((8 << 20) + 1, ' '), "application/json", 413,
       "request body larger than 8388608 bytes, the most a body of Content-Type \"application/json\" may have"},
      {"POST", "/load", std::string((256 << 10) + 1, '#'), "text/heftfile", 413, "larger than 262144 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body.substr(0, 40));
    const Response r = send(c.method, c.path, c.body, c.content_type);
    EXPECT_EQ(r.status, c.status) << r.body.substr(0, 300);
    const json error = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << r.body.substr(0, 300);
    EXPECT_NE(error["error"].get<std::string>().find(c.reason), std::string::npos) << r.body.substr(0, 300);
    ASSERT_TRUE(heft.running()) << heft.log();
    const Response after = admin_call(admin_port, "GET", "/config/");
    EXPECT_EQ(after.body, before.body);
    EXPECT_EQ(after.header("etag"), tag);
  }
  // The same body as chunks: the limit holds as they come.
  const Response chunked = send("POST", "/load", std::string(9 << 20, ' '), "application/json", true);
  EXPECT_EQ(chunked.status, 413) << chunked.body;
  // And the API still takes a good write.
  const Response weight = admin_call(admin_port, "PATCH", kUpstreams + "/0/weight", "5");
  EXPECT_EQ(weight.status, 200) << weight.body;
  EXPECT_EQ(admin_call(admin_port, "GET", kUpstreams + "/0/weight").body, "5\n");
}

// The issue's figure: a refused 60 MB body must leave heft's peak resident
// memory under 256 MiB; so must the bodies under the limit whose documents
// take the most memory for their size, and what they took is given back.
TEST_F(AdminInputTest, RefusedLargeBodiesLeaveMemoryBounded) {
  constexpr long kPeakLimitKib = 256 * 1024;
  const long rss_at_start = vm_rss_kib(heft.pid());
  ASSERT_GT(rss_at_start, 0);
  std::string empty_objects = "[";  // ~80 bytes of memory each for 3 bytes of text
  empty_objects += repeated("{},", 1'200'000);
  empty_objects += "{}]";
  std::string members = "{";  // a key and an empty object each
  for (int i = 0; i < 600'000; ++i) members += fmt::format("\"k{}\":{{}},", i);
  members.back() = '}';
  struct Case {
    std::string name, method, path, body;
    bool chunked;
    int status;
  };
  const std::vector<Case> cases = {
      {"60 MB, Content-Length", "POST", "/load", std::string(60'000'000, '['), false, 413},
      {"60 MB, chunked", "POST", "/load", std::string(60'000'000, '['), true, 413},
      {"empty objects", "POST", "/load", empty_objects, false, 400},
      {"members", "PUT", "/config/admin", members, false, 400},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Response r = send(c.method, c.path, c.body, "application/json", c.chunked);
    EXPECT_EQ(r.status, c.status) << r.body.substr(0, 300);
    ASSERT_TRUE(heft.running()) << heft.log();
    const long peak = vm_hwm_kib(heft.pid());
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, kPeakLimitKib) << "VmHWM " << peak << " KiB";
    // Given back once answered: within 32 MiB of the start again, in 5 s.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    long rss = vm_rss_kib(heft.pid());
    while (rss > rss_at_start + 32 * 1024 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      rss = vm_rss_kib(heft.pid());
    }
    EXPECT_LE(rss, rss_at_start + 32 * 1024) << "VmRSS " << rss << " KiB after, " << rss_at_start << " KiB at start";
  }
}

// Bodies held at once by all admin connections are bounded (16 MiB, two of
// the largest): while two clients hold 8 MiB each, a third body is answered
// 503 with Retry-After; once they are done, it is taken.
TEST_F(AdminInputTest, BodiesHeldAtOnceAreBounded) {
  const std::string head = fmt::format("POST /load HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n"
                                       "Content-Length: {}\r\n\r\n",
                                       admin_port, 8 << 20);
  const std::string almost((8 << 20) - 1, ' ');  // all but the last byte
  HttpClient first(admin_port, 30s), second(admin_port, 30s);
  ASSERT_TRUE(first.send_raw(head + almost));
  ASSERT_TRUE(second.send_raw(head + almost));
  // Once heft has read both (it reads as bytes come), a small body waits its turn.
  const std::string small = "{\"apps\": 1}";
  Response refused;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    refused = send("POST", "/load", small);
    if (refused.status == 503) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.header("retry-after"), "1");
  EXPECT_NE(refused.body.find("reading other large bodies"), std::string::npos) << refused.body;
  // The two complete (whitespace is no JSON: 400), and the budget is free again.
  ASSERT_TRUE(first.send_raw(" "));
  ASSERT_TRUE(second.send_raw(" "));
  EXPECT_EQ(first.read_response().status, 400);
  EXPECT_EQ(second.read_response().status, 400);
  const Response taken = send("POST", "/load", small);
  EXPECT_EQ(taken.status, 400) << taken.body;  // read and judged: "apps: must be an object"
  EXPECT_NE(taken.body.find("apps"), std::string::npos) << taken.body;
  EXPECT_TRUE(heft.running());
}

}  // namespace
}  // namespace heft::test
