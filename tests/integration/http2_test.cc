// HTTP/2 with prior knowledge (h2c) through real heft and demo-backend
// processes, with real clients: curl, nghttp, h2load, and raw frames from
// tests/integration/http2_attack.py (Debian's python3-hyperframe / hpack).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "process_util.h"

namespace heft::test {
namespace {

// Debian's python3, where python3-h2 and python3-hyperframe are installed.
constexpr const char* kPython = "/usr/bin/python3";

struct Output {
  int exit_code = -1;
  std::string text;  // stdout and stderr
};

// Runs `command` through the shell, ended after `seconds` (timeout(1)).
Output run(const std::string& command, int seconds = 120) {
  Output out;
  FILE* pipe = popen(fmt::format("timeout -k 5 {} {} 2>&1", seconds, command).c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  for (std::size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.text.append(buffer, n);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Three demo backends at weights 5, 3, 2 behind one heft whose site speaks `protocols`.
struct H2Fleet {
  std::string dir = make_temp_dir();
  std::vector<Backend> backends;
  uint16_t port = free_port();
  Process heft;

  explicit H2Fleet(const std::string& protocols = "h1 h2c", int workers = 2, const std::string& global = "") {
    std::string pool;
    const int weights[] = {5, 3, 2};
    for (int i = 0; i < 3; ++i) {
      backends.push_back(start_backend(dir, std::string(1, char('a' + i))));
      pool += fmt::format("\t\tto 127.0.0.1:{} weight {}\n", backends.back().port, weights[i]);
    }
    const std::string speaks = protocols.empty() ? "" : fmt::format("\tprotocols {}\n", protocols);
    heft = start_heft(dir, fmt::format("{{\n\tworkers {}\n{}}}\n:{} {{\n{}\treverse_proxy {{\n{}\t}}\n}}\n", workers,
                                       global, port, speaks, pool),
                      port);
  }
  std::string url(const std::string& path = "/") const { return fmt::format("http://127.0.0.1:{}{}", port, path); }
  // Requests each backend has received before this look (its /_control/stats,
  // which counts itself: one less).
  std::vector<long> backend_requests() const {
    std::vector<long> out;
    for (const Backend& b : backends) {
      HttpClient client(b.port);
      const Response r = client.get("/_control/stats");
      std::smatch m;
      out.push_back(std::regex_search(r.body, m, std::regex("\"requests\":(\\d+)")) ? std::stol(m[1]) - 1 : -1);
    }
    return out;
  }
};

TEST(Http2, CurlAndNghttpWithPriorKnowledgeBesideHttp11) {
  H2Fleet f;
  const Output curl = run(fmt::format("curl -sS --http2-prior-knowledge -o /dev/null -w '%{{http_version}} %{{http_code}}' {}",
                                      f.url()));
  EXPECT_EQ(curl.text, "2 200") << curl.text;
  const Output nghttp = run("nghttp -nv " + f.url());
  EXPECT_EQ(nghttp.exit_code, 0) << nghttp.text;
  EXPECT_NE(nghttp.text.find(":status: 200"), std::string::npos) << nghttp.text;
  EXPECT_NE(nghttp.text.find("x-backend: "), std::string::npos) << nghttp.text;
  // No connection-specific field reaches an HTTP/2 client.
  EXPECT_EQ(nghttp.text.find("connection:"), std::string::npos) << nghttp.text;
  // HTTP/1.1 on the same port as before.
  HttpClient client(f.port);
  EXPECT_EQ(client.get("/").status, 200);
}

TEST(Http2, PlainListenersSpeakHttp11OnlyByDefault) {
  H2Fleet f("");
  const Output curl = run(fmt::format("curl -sS --http2-prior-knowledge -o /dev/null -w '%{{http_code}}' {}", f.url()));
  EXPECT_NE(curl.text, "200") << curl.text;
  HttpClient client(f.port);
  EXPECT_EQ(client.get("/").status, 200);
}

TEST(Http2, H2cOnlyListenerRefusesHttp11) {
  H2Fleet f("h2c");
  const Output curl = run(fmt::format("curl -sS --http2-prior-knowledge -o /dev/null -w '%{{http_code}}' {}", f.url()));
  EXPECT_EQ(curl.text, "200") << curl.text;
  HttpClient client(f.port, 3s);
  EXPECT_EQ(client.get("/").status, 0);  // no HTTP/1.1 answer
}

// h2load's summary line: "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout".
void expect_all_succeeded(const Output& out, int n) {
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find(fmt::format("{} succeeded, 0 failed, 0 errored, 0 timeout", n)), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("status codes: " + std::to_string(n) + " 2xx"), std::string::npos) << out.text;
}

TEST(Http2, ThousandRequestsOnOneConnectionSplitExactly) {
  H2Fleet f;
  expect_all_succeeded(run("h2load -n 1000 -c 1 -m 10 " + f.url()), 1000);
  EXPECT_EQ(f.backend_requests(), (std::vector<long>{500, 300, 200}));
}

TEST(Http2, ThousandRequestsOverTwentyConnectionsSplitExactly) {
  H2Fleet f;
  expect_all_succeeded(run("h2load -n 1000 -c 20 -m 10 " + f.url()), 1000);
  EXPECT_EQ(f.backend_requests(), (std::vector<long>{500, 300, 200}));
}

TEST(Http2, ManyStreamsOnManyConnectionsWithoutError) {
  H2Fleet f;
  expect_all_succeeded(run("h2load -n 20000 -c 20 -m 100 " + f.url(), 300), 20000);
}

TEST(Http2, RequestBodiesReachTheBackendIntact) {
  H2Fleet f;
  std::string body(1 << 20, '\0');
  std::mt19937 random(35);
  for (char& c : body) c = static_cast<char>(random());
  const std::string file = f.dir + "/body.bin";
  write_file(file, body);
  // With content-length (curl knows the file's size), and without (an
  // upload from a pipe: DATA frames until END_STREAM).
  const Output sized = run(fmt::format("curl -sS --http2-prior-knowledge --data-binary @{} -o {}/sized.out {}", file,
                                       f.dir, f.url("/echo")));
  EXPECT_EQ(sized.exit_code, 0) << sized.text;
  EXPECT_TRUE(read_file(f.dir + "/sized.out") == body) << "the sized body came back changed";
  const Output streamed = run(fmt::format("cat {} | curl -sS --http2-prior-knowledge -T - -o {}/streamed.out {}", file,
                                          f.dir, f.url("/echo")));
  EXPECT_EQ(streamed.exit_code, 0) << streamed.text;
  EXPECT_TRUE(read_file(f.dir + "/streamed.out") == body) << "the streamed body came back changed";
}

TEST(Http2, MalformedRequestsAreResetAndNeverForwarded) {
  H2Fleet f;
  const std::vector<long> before = f.backend_requests();
  const Output out = run(fmt::format("{} {}/tests/integration/http2_attack.py {} violations", kPython, HEFT_SOURCE_DIR, f.port));
  EXPECT_EQ(out.exit_code, 0) << out.text;
  // Every violation is reset; the well-formed request after them is served.
  EXPECT_NE(out.text.find("violations reset: all"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("control: 200"), std::string::npos) << out.text;
  std::vector<long> after = f.backend_requests();
  long forwarded = 0;
  for (std::size_t i = 0; i < after.size(); ++i) forwarded += after[i] - before[i] - 1;  // less the first look
  EXPECT_EQ(forwarded, 1) << "only the well-formed request reaches a backend";
}

// Every backend answers after `ms` milliseconds from now on.
void delay_backends(const H2Fleet& f, int ms) {
  for (const Backend& b : f.backends)
    ASSERT_EQ(run(fmt::format("curl -sS -X POST 'http://127.0.0.1:{}/_control/delay?ms={}'", b.port, ms)).exit_code, 0);
}

TEST(Http2, StopSendsGoawayAndServesStreamsInFlight) {
  H2Fleet f("h1 h2c", 2, "\tgrace_period 10s\n");
  delay_backends(f, 1000);
  Process client({"/usr/bin/nghttp", "-v", f.url()}, f.dir + "/nghttp.log");
  ASSERT_TRUE(wait_for_log(client, "send HEADERS frame", 5s)) << client.log();
  std::this_thread::sleep_for(200ms);
  f.heft.signal(SIGTERM);
  EXPECT_EQ(client.wait(10s), std::optional<int>(0)) << client.log();
  EXPECT_NE(client.log().find("recv GOAWAY frame"), std::string::npos) << client.log();
  EXPECT_NE(client.log().find(":status: 200"), std::string::npos) << client.log();
  EXPECT_EQ(f.heft.wait(10s), std::optional<int>(0)) << f.heft.log();
}

// Streams still in flight when the grace period ends are dropped with their
// connection, and heft exits 0 (nothing torn down with the worker may
// outlive what it refers to).
TEST(Http2, GracePeriodOverDropsStreamsAndExitsZero) {
  H2Fleet f("h1 h2c", 1, "\tgrace_period 300ms\n");
  delay_backends(f, 5000);
  Process client({"/usr/bin/h2load", "-n", "50", "-c", "2", "-m", "25", f.url()}, f.dir + "/h2load.log");
  std::this_thread::sleep_for(500ms);
  f.heft.signal(SIGTERM);
  EXPECT_EQ(f.heft.wait(5s), std::optional<int>(0)) << f.heft.log();
  client.wait(10s);
}

// An attack on one connection while an HTTP/1.1 client on the same worker
// keeps being served; heft's resident memory grows by less than 64 MiB.
void attack(const std::string& name, const std::string& expected_outcome) {
  H2Fleet f("h1 h2c", 1);
  HttpClient warm(f.port);
  ASSERT_EQ(warm.get("/").status, 200);
  const long rss_before = vm_rss_kib(f.heft.pid());
  std::atomic<bool> stop{false};
  std::atomic<int> served{0}, failed{0};
  std::thread other([&] {
    HttpClient client(f.port);
    for (int i = 0; i < 100000 && !stop; ++i) {
      if (client.get("/").status == 200) ++served;
      else ++failed;
      std::this_thread::sleep_for(5ms);
    }
  });
  Process attacker({kPython, std::string(HEFT_SOURCE_DIR) + "/tests/integration/http2_attack.py", std::to_string(f.port), name},
                   f.dir + "/attack.log");
  long rss_peak = rss_before;
  std::optional<int> exit_code;
  for (int i = 0; i < 700 && !exit_code; ++i) {  // 70 s at most
    rss_peak = std::max(rss_peak, vm_rss_kib(f.heft.pid()));
    exit_code = attacker.wait(100ms);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the other client's turn, after a quick attack too
  stop = true;
  other.join();
  const std::string outcome = read_file(f.dir + "/attack.log");
  EXPECT_EQ(exit_code, 0) << outcome;
  EXPECT_EQ(outcome.rfind(expected_outcome, 0), 0u) << "attack " << name << " ended: " << outcome;
  EXPECT_GT(served.load(), 0) << "the other client was not served during " << name;
  EXPECT_EQ(failed.load(), 0) << "the other client failed during " << name;
  EXPECT_LT(rss_peak - rss_before, 64 * 1024) << "heft's RSS rose by " << (rss_peak - rss_before) << " KiB";
  ASSERT_TRUE(f.heft.running());
  const Output after = run(fmt::format("curl -sS --http2-prior-knowledge -o /dev/null -w '%{{http_code}}' {}", f.url()));
  EXPECT_EQ(after.text, "200") << "after " << name;
}

TEST(Http2Attack, RapidReset) { attack("rapid_reset", "goaway"); }
TEST(Http2Attack, ContinuationFlood) { attack("continuation_flood", "goaway"); }
TEST(Http2Attack, HpackBomb) { attack("hpack_bomb", "reset"); }
TEST(Http2Attack, SettingsFlood) { attack("settings_flood", "goaway"); }
TEST(Http2Attack, PingFlood) { attack("ping_flood", "goaway"); }
TEST(Http2Attack, EmptyDataFlood) { attack("empty_data_flood", "goaway"); }
TEST(Http2Attack, WindowZeroReaderOfLargeResponse) { attack("window_zero_reader", "open"); }

}  // namespace
}  // namespace heft::test
