// heft run's own log through real processes (docs/proxy.md, "heft's log"):
// every line has its time and level, as text or JSON lines; every change is
// one audit line with before → after and the revision — an admin API write,
// `heft reload`, SIGHUP, a health transition — and GET /config/history
// answers them; a flood of refused requests is a bounded number of lines and
// a summary.
#include <gtest/gtest.h>

#include <cctype>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "health_load_util.h"

namespace heft::test {
namespace {

using json = nlohmann::json;
const std::string kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A flood of `expected` messages of one kind, limited by a LogLimit: waits
// (up to `timeout`) until the log accounts for all of them, as lines holding
// `line_mark` plus the counts of the summaries holding `summary` ("…and
// 4,312 more like it"); returns the lines written and the count summed up.
std::pair<size_t, size_t> wait_for_flood_accounted(const Process& p, const std::string& line_mark,
                                                   const std::string& summary, size_t expected,
                                                   std::chrono::milliseconds timeout) {
  auto accounted = [&] {
    size_t lines = 0, summed = 0;
    for (const std::string& line : lines_of(p.log())) {
      if (line.find(line_mark) != std::string::npos) ++lines;
      if (const size_t at = line.find(summary); at != std::string::npos) {
        std::string digits;  // "4,312 more like it ..." -> "4312"
        for (size_t i = at + summary.size(); i < line.size() && (std::isdigit(line[i]) || line[i] == ','); ++i)
          if (line[i] != ',') digits += line[i];
        summed += digits.empty() ? 0 : std::stoul(digits);
      }
    }
    return std::pair{lines, summed};
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto counts = accounted();
  while (counts.first + counts.second < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    counts = accounted();
  }
  return counts;
}

// Waits until `what` appears `times` times in the process's log.
bool wait_for_count(const Process& p, const std::string& what, size_t times, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (count_of(p.log(), what) >= times) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

struct HeftLogTest : ::testing::Test {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  uint16_t admin_port = free_port();

  void SetUp() override {
    for (const char* name : {"a", "b"}) backends.push_back(start_backend(dir, name, {"--health-path", "/healthz"}));
  }
  std::string heftfile(const std::string& global, int weight_b) const {
    return fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n{}}}\n:{} {{\n\treverse_proxy {{\n"
                       "\t\tto 127.0.0.1:{} weight 3\n\t\tto 127.0.0.1:{} weight {}\n\t\thealth_uri /healthz\n"
                       "\t\thealth_interval 200ms\n\t}}\n}}\n",
                       admin_port, global, port, backends[0].port, backends[1].port, weight_b);
  }
  // Runs a heft command to its end; its exit code, its output in `out`.
  int command(const std::vector<std::string>& args, std::string& out) {
    std::vector<std::string> argv{HEFT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    Process p(argv, dir + "/cmd.log");
    const auto code = p.wait(30s);
    out = read_file(dir + "/cmd.log");
    return code.value_or(-1);
  }
};

TEST_F(HeftLogTest, EveryChangeIsOneAuditLineAndTheHistoryAnswersThem) {
  Process heft = start_heft(dir, heftfile("", 1), port);
  // An admin API write.
  const Response patched = admin_call(admin_port, "PATCH", kUpstreams + "/1/weight", "4");
  ASSERT_EQ(patched.status, 200) << patched.body;
  const std::string etag = patched.header("etag");
  ASSERT_TRUE(wait_for_count(heft, "audit #2 config revision 2", 1, 5s)) << heft.log();
  // `heft reload` of the file (weight 2): an admin API write from heft's own client.
  write_file(dir + "/Heftfile", heftfile("", 2));
  std::string out;
  ASSERT_EQ(command({"reload", dir + "/Heftfile"}, out), 0) << out;
  ASSERT_TRUE(wait_for_count(heft, "audit #3 config revision 3", 1, 5s)) << heft.log();
  // SIGHUP of the file (weight 6).
  write_file(dir + "/Heftfile", heftfile("", 6));
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_count(heft, "audit #4 config revision 4", 1, 5s)) << heft.log();
  // A health transition: b fails its checks.
  ASSERT_EQ(control(backends[1].port, "/_control/health?status=500"), 200);
  ASSERT_TRUE(wait_for_count(heft, "healthy \u2192 unhealthy", 1, 5s)) << heft.log();

  const std::string log = heft.log();
  const std::string weight = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/1/weight";
  EXPECT_NE(log.find("Z info audit #1 config revision 1: start: " + dir + "/Heftfile\n"), std::string::npos) << log;
  const std::regex admin_write("Z info audit #2 config revision 2 \\(" + etag + "\\): admin API PATCH " + kUpstreams +
                               "/1/weight from 127\\.0\\.0\\.1:[0-9]+: " + weight + ": 1 \u2192 4\n");
  EXPECT_TRUE(std::regex_search(log, admin_write)) << log;
  const std::regex reload("Z info audit #3 config revision 3 \\(\"[0-9a-f]+\"\\): admin API POST /load from "
                          "127\\.0\\.0\\.1:[0-9]+ \\(heft-cli\\): " + weight + ": 4 \u2192 2\n");
  EXPECT_TRUE(std::regex_search(log, reload)) << log;
  EXPECT_NE(log.find("Z info audit #4 config revision 4 (\""), std::string::npos) << log;
  EXPECT_NE(log.find("): SIGHUP reload of " + dir + "/Heftfile: " + weight + ": 2 \u2192 6\n"), std::string::npos) << log;
  EXPECT_NE(log.find(fmt::format("Z warn audit #5 health (revision 4): pool site0 backend 127.0.0.1:{}: healthy \u2192 "
                                 "unhealthy (status 500",
                                 backends[1].port)),
            std::string::npos)
      << log;
  // One line each: no change is audited twice.
  EXPECT_EQ(count_of(log, "audit #"), 5u) << log;

  // The history has the same entries, in order.
  const Response history = admin_call(admin_port, "GET", "/config/history");
  ASSERT_EQ(history.status, 200) << history.body;
  const json entries = json::parse(history.body);
  ASSERT_EQ(entries.size(), 5u) << history.body;
  for (size_t i = 0; i < entries.size(); ++i) EXPECT_EQ(entries[i]["seq"], i + 1) << entries[i];
  EXPECT_EQ(entries[0]["source"], "start: " + dir + "/Heftfile");
  EXPECT_EQ(entries[1]["method"], "PATCH");
  EXPECT_EQ(entries[1]["etag"], etag);
  EXPECT_EQ(entries[1]["changes"], json::array({weight + ": 1 \u2192 4"}));
  EXPECT_EQ(entries[2]["path"], "/load");
  EXPECT_EQ(entries[2]["user_agent"], "heft-cli");
  EXPECT_EQ(entries[3]["source"], "SIGHUP reload of " + dir + "/Heftfile");
  EXPECT_EQ(entries[3]["revision"], 4);
  EXPECT_EQ(entries[4]["kind"], "health");
  EXPECT_EQ(entries[4]["revision"], 4);
  EXPECT_EQ(entries[4]["after"], "unhealthy");
  EXPECT_EQ(json::parse(admin_call(admin_port, "GET", "/config/history?limit=2").body).front()["seq"], 4);
}

// Every line heft writes has its time and a level, as text; with
// `log_format json`, every line is a JSON object with them; a reload may
// change the format.
TEST_F(HeftLogTest, LinesAreTimedAndLevelledAsTextOrJson) {
  Process heft = start_heft(dir, heftfile("", 1), port);
  ASSERT_EQ(admin_call(admin_port, "PATCH", kUpstreams + "/1/weight", "\"x\"").status, 400);
  write_file(dir + "/Heftfile", heftfile("\tlog_format json\n", 1));
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "\"msg\":\"reloaded ")) << heft.log();
  ASSERT_EQ(admin_call(admin_port, "PATCH", kUpstreams + "/1/weight", "5").status, 200);
  ASSERT_TRUE(wait_for_log(heft, "\"msg\":\"audit #3 config revision 3")) << heft.log();
  heft.signal(SIGTERM);
  ASSERT_EQ(heft.wait(20s), std::optional<int>(0)) << heft.log();

  const std::regex text_line(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info|warn|error) .+)");
  const std::regex time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  size_t text = 0, json_lines = 0;
  bool json_from_here = false;
  for (const std::string& line : lines_of(heft.log())) {
    if (line.starts_with("{")) json_from_here = true;
    if (!json_from_here) {
      EXPECT_TRUE(std::regex_match(line, text_line)) << line;
      ++text;
      continue;
    }
    const json parsed = json::parse(line, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << line;
    EXPECT_TRUE(std::regex_match(parsed.value("ts", ""), time)) << line;
    EXPECT_TRUE(parsed["level"] == "info" || parsed["level"] == "warn" || parsed["level"] == "error") << line;
    EXPECT_TRUE(parsed["msg"].is_string()) << line;
    ++json_lines;
    if (parsed["msg"].get<std::string>().starts_with("audit #3 ")) {
      EXPECT_EQ(parsed["audit"]["seq"], 3) << line;
      EXPECT_EQ(parsed["audit"]["method"], "PATCH") << line;
    }
  }
  EXPECT_GT(text, 4u);  // the start (listeners, the audit line) and the refused write
  EXPECT_GT(json_lines, 3u);  // the reload, its audit line, the write's, the stop
  EXPECT_NE(heft.log().find("Z warn admin API: PATCH " + kUpstreams + "/1/weight from 127.0.0.1:"), std::string::npos);
  EXPECT_NE(heft.log().find("\"msg\":\"stopped\""), std::string::npos) << heft.log();
}

// A client sending bad requests in a loop: one line a refusal at first, then
// none until the 10 s window ends and one line sums up the rest; every
// refusal is accounted for.
TEST_F(HeftLogTest, AFloodOfRefusalsIsABoundedNumberOfLinesAndASummary) {
  Process heft = start_heft(dir, heftfile("", 1), port);
  constexpr int kRefused = 2000;
  HttpClient client(admin_port);
  const std::string bad = fmt::format("PATCH {}/1/weight HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: "
                                      "application/json\r\nContent-Length: 3\r\n\r\n\"x\"",
                                      kUpstreams, admin_port);
  for (int i = 0; i < kRefused; ++i) ASSERT_EQ(client.request(bad).status, 400) << i;
  // The window of the last refusal ends within 10 s; its summary follows
  // within the proxy's next tick (250 ms).
  const std::string summary = "admin API requests refused: \u2026and ";
  const auto [lines, summed] = wait_for_flood_accounted(heft, "Z warn admin API: PATCH ", summary, kRefused, 12s);
  EXPECT_EQ(lines + summed, size_t{kRefused}) << heft.log();
  // The refusals took a few seconds at most: two windows, ten lines each.
  EXPECT_LE(lines, 20u) << heft.log();
  EXPECT_GE(lines, 10u) << heft.log();
  const size_t summaries = count_of(heft.log(), summary);
  EXPECT_GE(summaries, 1u);
  EXPECT_LE(summaries, 2u);
  EXPECT_NE(heft.log().find(" more like it in the last 10 s\n"), std::string::npos) << heft.log();
}

// The proxy's messages are limited the same way: a client flooding the proxy
// port with malformed requests (each a 400 and a closed connection) makes at
// most ten lines a window and a summary of the rest.
TEST_F(HeftLogTest, AFloodOfBadRequestsToTheProxyIsABoundedNumberOfLinesAndASummary) {
  Process heft = start_heft(dir, heftfile("", 1), port);
  constexpr int kRefused = 1000;
  for (int i = 0; i < kRefused; ++i) {
    HttpClient client(port);
    ASSERT_EQ(client.request("GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n").status, 400) << i;
  }
  const auto [lines, summed] = wait_for_flood_accounted(
      heft, "Z info 400 from 127.0.0.1: ", "400 from clients: malformed request heads: \u2026and ", kRefused, 12s);
  EXPECT_EQ(lines + summed, size_t{kRefused}) << heft.log();
  EXPECT_LE(lines, 20u) << heft.log();
  EXPECT_GE(lines, 10u) << heft.log();
  EXPECT_EQ(heft.log().find("heft: 400 from"), std::string::npos) << "an unlimited line of the old form";
}

}  // namespace
}  // namespace heft::test
