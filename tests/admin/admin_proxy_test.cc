// The admin API wired to a real in-process Proxy (admin/proxy_admin.h) with
// demo backends: the guide's canary script moves traffic stage by stage,
// bad inputs change nothing, /reverse_proxy/upstreams and /metrics report.
#include "admin/proxy_admin.h"

#include <gtest/gtest.h>

#include "test_deadline.h"
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/heftfile.h"
#include "config/json.h"
#include "integration/process_util.h"
#include "demo/demo_backend.h"
#include "proxy/proxy.h"
#include "admin/proxy_stack.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using test::HttpClient;
using test::Response;
const char* kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

// Two demo backends ("v1", "v2"), a proxy on a free port and its admin API.
struct Stack : test_stack::ProxyStack {
  explicit Stack(const std::string& weights = "weight 100|weight 0") {
    start_backends({"v1", "v2", "v3"}, 16);  // v3 is not configured: tests add it
    const auto bar = weights.find('|');
    start(
        [&](uint16_t port, uint16_t admin_port) {
          return fmt::format(
              "{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} {}\n"
              "\t\tto 127.0.0.1:{} {}\n\t}}\n}}\n",
              admin_port, port, backends[0]->port(), weights.substr(0, bar), backends[1]->port(),
              weights.substr(bar + 1));
        },
        // As `heft run --config DIR/Heftfile` would report itself (the tests write that file).
        {{"config", dir + "/Heftfile"}, {"state", dir + "/autosave.json"}});
  }
  std::string dial(int i) const { return fmt::format("127.0.0.1:{}", backends[i]->port()); }

  // Sends `n` requests and counts who answered.
  std::map<std::string, int> measure(int n) {
    HttpClient client(port);
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) counts[client.get("/").header("x-backend")]++;
    return counts;
  }
};

// The guide's canary_rollout.sh (seed 000), verbatim but for: its addresses,
// the log path, and `sleep 300`, which hands the stage to the test and waits.
const char* kCanaryScript = R"SCRIPT(#!/bin/bash
# canary_rollout.sh

CADDY_API_UPSTREAMS="http://localhost:2019/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams"

# Array of Canary percentage stages (weights of v1 vs v2)
# Stage 1: 95 vs 5, Stage 2: 80 vs 20, Stage 3: 50 vs 50, Stage 4: 0 vs 100
stages=("95:5" "80:20" "50:50" "0:100")

check_health() {
    # Check the 5xx error rate in the last minute of Caddy logs
    error_count=$(tail -n 100 /var/log/caddy/access.log | grep -c '"status":5')
    if [ "$error_count" -gt 5 ]; then
        echo "WARNING: Detected $error_count errors. Canceling the release (Rollback)!"
        # Instant rollback to 100% v1
        curl -X PUT "$CADDY_API_UPSTREAMS" \
          -H "Content-Type: application/json" \
          -d '[{"dial":"app-v1-node1:3000","weight":100},{"dial":"app-v2-canary:3000","weight":0}]'
        exit 1
    fi
}

for stage in "${stages[@]}"; do
    w1=$(echo $stage | cut -d':' -f1)
    w2=$(echo $stage | cut -d':' -f2)
    
    echo "Starting Canary Stage: v1=$w1%, v2=$w2%"
    
    # Update the weights dynamically in Caddy's memory
    curl -s -X PUT "$CADDY_API_UPSTREAMS" \
      -H "Content-Type: application/json" \
      -d '[{"dial":"app-v1-node1:3000","weight":'$w1'},{"dial":"app-v2-canary:3000","weight":'$w2'}]' \
      -o /dev/null
      
    # Wait 5 minutes for stability observation
    sleep 300
    check_health
done

echo "App v2 Canary Release Completed Successfully!"
)SCRIPT";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

TEST(AdminProxy, CanaryScriptMovesTrafficStageByStage) {
  Stack stack;
  ASSERT_TRUE(stack.admin);
  std::string script = kCanaryScript;
  std::string stage_fifo = stack.dir + "/stage", ack_fifo = stack.dir + "/ack";
  ASSERT_EQ(mkfifo(stage_fifo.c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(ack_fifo.c_str(), 0600), 0);
  replace_all(script, "app-v1-node1:3000", stack.dial(0));
  replace_all(script, "app-v2-canary:3000", stack.dial(1));
  replace_all(script, "localhost:2019", fmt::format("localhost:{}", stack.admin_port));
  replace_all(script, "/var/log/caddy/access.log", stack.dir + "/access.log 2>/dev/null");
  replace_all(script, "sleep 300", fmt::format("echo \"$w1:$w2\" > {}; read -r ack < {}", stage_fifo, ack_fifo));
  test::write_file(stack.dir + "/canary.sh", script);
  test::Process bash({"/bin/bash", stack.dir + "/canary.sh"}, stack.dir + "/canary.log");

  for (int stage = 0; stage < 4; ++stage) {
    std::string weights;
    {
      std::ifstream in(stage_fifo);  // blocks until the script reaches its "sleep"
      std::getline(in, weights);
    }
    int w1 = std::stoi(weights), w2 = std::stoi(weights.substr(weights.find(':') + 1));
    // Exact from the first request but for the current weights carried
    // over from the stage before (under 2 picks either way).
    auto counts = stack.measure(1000);
    EXPECT_NEAR(counts["v1"], w1 * 10, 2) << "stage " << weights;
    EXPECT_NEAR(counts["v2"], w2 * 10, 2) << "stage " << weights;
    std::ofstream(ack_fifo) << "go\n";
  }
  ASSERT_EQ(bash.wait(std::chrono::seconds(20)), 0) << bash.log();
  EXPECT_NE(bash.log().find("Completed Successfully"), std::string::npos) << bash.log();
}

TEST(AdminProxy, BadInputsChangeNothing) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  Response before = stack.admin_call("GET", "/config/");
  ASSERT_EQ(before.status, 200);
  std::string tag = before.header("etag");
  ASSERT_FALSE(tag.empty());
  std::string w = std::string(kUpstreams) + "/0/weight";
  struct Case {
    std::string method, path, body, extra;
  };
  std::vector<Case> cases = {
      {"PUT", kUpstreams, R"([{"dial":"127.0.0.1:1","weight":)", ""},
      {"PATCH", w, R"("heavy")", ""},
      {"PATCH", w, "-1", ""},
      {"POST", std::string(kUpstreams) + "/0/colour", R"("red")", ""},
      {"PATCH", "/config/apps/http/servers/srv3", "{}", ""},
      {"POST", "/load", std::string(10 << 20, ' '), ""},
      {"PATCH", w, "7", "If-Match: \"0000000000000000\"\r\n"},
      {"GET", "/config/", "", "Authorization: Bearer x\r\nOrigin: http://evil.example\r\n"},
      // 40,000 nested blocks in 80 KB: the parser's recursion overflowed the stack of the running heft.
      {"POST", "/load", ":80 {\n\treverse_proxy 127.0.0.1:1\n" + [] {
         std::string braces;
         for (int i = 0; i < 40'000; ++i) braces += "{ ";
         return braces;
       }() + "\n}\n", "Content-Type: text/heftfile\r\n"},
  };
  for (const Case& c : cases) {
    Response r = stack.admin_call(c.method, c.path, c.body, c.extra);
    EXPECT_GE(r.status, 400) << c.method << " " << c.path;
    EXPECT_LT(r.status, 500) << c.method << " " << c.path << " " << r.body;
    EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << r.body;
    Response after = stack.admin_call("GET", "/config/");
    EXPECT_EQ(after.body, before.body);
    EXPECT_EQ(after.header("etag"), tag);
  }
  // And traffic still follows 3:1.
  auto counts = stack.measure(400);
  EXPECT_EQ(counts["v1"], 300);
  EXPECT_EQ(counts["v2"], 100);
  // The four writes refused as configurations (the deep Heftfile among them)
  // are counted as failed changes (not the ones refused before: bad JSON, no
  // such path, too big, stale).
  std::string metrics = stack.admin_call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("heft_config_reloads_total{result=\"failure\"} 4\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("heft_config_reloads_total{result=\"success\"} 0\n"), std::string::npos) << metrics;
}

// Repeated If-Match lines are one list: the current tag on either line
// matches (only the last line counted: stale-last was 412, current-last 200).
TEST(AdminProxy, RepeatedIfMatchLinesAreOneList) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  const std::string w = std::string(kUpstreams) + "/0/weight";
  for (int weight : {4, 5}) {
    const std::string tag = stack.admin_call("GET", "/config/").header("etag");
    const std::string lines = weight == 4 ? "If-Match: " + tag + "\r\nIf-Match: \"0000000000000000\"\r\n"
                                          : "If-Match: \"0000000000000000\"\r\nIf-Match: " + tag + "\r\n";
    Response r = stack.admin_call("PATCH", w, std::to_string(weight), lines);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  const std::string stale = "If-Match: \"0000000000000000\"\r\nIf-Match: \"1111111111111111\"\r\n";
  Response refused = stack.admin_call("PATCH", w, "6", stale);
  EXPECT_EQ(refused.status, 412);
  EXPECT_NE(refused.body.find("is stale"), std::string::npos) << refused.body;
  // The current tag made weak never matches, and is not called stale (it was).
  const std::string tag = stack.admin_call("GET", "/config/").header("etag");
  Response weak = stack.admin_call("PATCH", w, "6", "If-Match: W/" + tag + "\r\n");
  EXPECT_EQ(weak.status, 412);
  EXPECT_NE(weak.body.find("is the current tag in its weak form, which never matches"), std::string::npos)
      << weak.body;
  EXPECT_EQ(stack.admin_call("GET", w).body, "5\n");
}

// A backup says so: the view showed it as any other backend "up" with share 0,
// which reads as a fault (nginx's API and HAProxy's stats mark backups).
TEST(AdminProxy, UpstreamsMarkBackups) {
  Stack stack("weight 3|backup");
  ASSERT_TRUE(stack.admin);
  json list = json::parse(stack.admin_call("GET", "/reverse_proxy/upstreams").body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["backup"], false);
  EXPECT_EQ(list[1]["backup"], true);
  EXPECT_EQ(list[1]["state"], "up");
}

TEST(AdminProxy, UpstreamsAndMetricsReportThePools) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  stack.measure(400);
  Response r = stack.admin_call("GET", "/reverse_proxy/upstreams");
  ASSERT_EQ(r.status, 200);
  json list = json::parse(r.body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["address"], stack.dial(0));
  EXPECT_EQ(list[0]["weight"], 3);
  EXPECT_EQ(list[0]["requests_total"], 300);
  EXPECT_EQ(list[1]["requests_total"], 100);
  EXPECT_NEAR(list[0]["share"].get<double>(), 0.75, 1e-9);
  EXPECT_EQ(list[0]["healthy"], true);
  for (const char* field : {"num_requests", "fails", "effective_weight", "active"})
    EXPECT_TRUE(list[0].contains(field)) << field;
  EXPECT_EQ(list[0]["backup"], false);

  ASSERT_EQ(stack.admin_call("PATCH", std::string(kUpstreams) + "/1/weight", "5").status, 200);
  Response m = stack.admin_call("GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.body.find(fmt::format("heft_upstream_weight{{server=\":{}\",site=\":{}\",upstream=\"{}\"}} 5", stack.port, stack.port,
                                    stack.dial(1))),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("heft_config_reloads_total{result=\"success\"}"), std::string::npos);
  // Drained is not unhealthy: health is what the checks say, the state says why no traffic.
  ASSERT_EQ(stack.admin_call("PATCH", std::string(kUpstreams) + "/1/weight", "0").status, 200);
  json drained = json::parse(stack.admin_call("GET", "/reverse_proxy/upstreams").body);
  EXPECT_EQ(drained[0]["state"], "up");
  EXPECT_EQ(drained[1]["state"], "drained");
  EXPECT_EQ(drained[1]["healthy"], true);
  EXPECT_NE(stack.admin_call("GET", "/metrics").body.find(
                fmt::format("heft_upstream_healthy{{server=\":{}\",site=\":{}\",upstream=\"{}\"}} 1", stack.port, stack.port,
                            stack.dial(1))),
            std::string::npos);
  ASSERT_EQ(stack.admin_call("PATCH", std::string(kUpstreams) + "/1/weight", "5").status, 200);
  // The change was saved before the 200.
  auto saved = json::parse(test::read_file(stack.dir + "/autosave.json"));
  EXPECT_EQ(saved["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0]["upstreams"][1]
                 ["weight"],
            5);
}

// `share` compares samples of one backend's own counters: a backend removed
// and added again starts with new ones, which the old ones' samples must not
// be taken from (its share read 0 for a minute while it served a quarter,
// and the other backend's 100 %).
TEST(AdminProxy, ShareOfABackendAddedAgainCountsItsNewRequests) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  ShareTracker shares;
  stack.measure(400);
  for (int i = 0; i < 61; ++i) shares.sample(*stack.proxy);  // a minute of samples after those requests
  ASSERT_EQ(stack.admin_call("DELETE", std::string(kUpstreams) + "/1").status, 200);
  ASSERT_EQ(stack.admin_call("POST", kUpstreams, fmt::format(R"({{"dial":"{}","weight":1}})", stack.dial(1))).status,
            200);
  auto counts = stack.measure(400);
  EXPECT_EQ(counts["v1"], 300);
  EXPECT_EQ(counts["v2"], 100);
  shares.sample(*stack.proxy);
  json list = upstreams_json(*stack.proxy, shares);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["requests_total"], 100);  // its new counters
  EXPECT_NEAR(list[0]["share"].get<double>(), 0.75, 1e-9);
  EXPECT_NEAR(list[1]["share"].get<double>(), 0.25, 1e-9);
}

// Each worker counts responses in its own slot; the API adds the slots up.
TEST(AdminProxy, UpstreamCountersAddUpBothWorkers) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  // 16 connections: SO_REUSEPORT spreads them over both workers' listeners
  // (all on one: probability 2^-15).
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&] {
      HttpClient client(stack.port);
      for (int i = 0; i < 25; ++i) answered += client.get("/").status == 200;
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_EQ(answered.load(), 400);
  auto snapshot = stack.proxy->pool(0)->snapshot();
  const upstream::BackendState& v1 = snapshot->state(0);
  ASSERT_EQ(v1.slots, 2u);
  EXPECT_GT(v1.slot(0).requests.load(), 0u);
  EXPECT_GT(v1.slot(1).requests.load(), 0u);
  // A worker counts a response once the client has it, so the last few can
  // land just after the clients are done: wait (bounded) for all 400.
  json list;
  for (int tries = 0; tries < 200; ++tries) {
    list = json::parse(stack.admin_call("GET", "/reverse_proxy/upstreams").body);
    ASSERT_EQ(list.size(), 2u);
    if (list[0]["responses_total"].get<uint64_t>() + list[1]["responses_total"].get<uint64_t>() >= 400) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // One ticket for both workers: 100 whole periods of 3:1.
  EXPECT_EQ(list[0]["requests_total"], 300);
  EXPECT_EQ(list[1]["requests_total"], 100);
  EXPECT_EQ(list[0]["responses_total"], 300);
  EXPECT_EQ(list[1]["responses_total"], 100);
  uint64_t in_buckets = 0;
  for (const json& bucket : list[0]["latency_ms_buckets"]) in_buckets += bucket[1].get<uint64_t>();
  EXPECT_EQ(in_buckets, 300u);
}

TEST(AdminProxy, WritesUnderLoadFailNoRequestAndEveryReadValidates) {
  Stack stack("weight 1|weight 1");
  ASSERT_TRUE(stack.admin);
  std::atomic<bool> writing{true};
  std::atomic<int> failed{0}, served{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 64; ++c)  // the issue's 64-connection load run
    clients.emplace_back([&] {
      HttpClient client(stack.port);
      while (writing) {
        Response r = client.get("/");
        if (r.status == 200) ++served;
        else ++failed;
      }
    });
  int torn = 0;
  for (int i = 0; i < 1000; ++i) {  // 1,000 admin writes
    Response r;
    if (i % 4 == 1) {  // add a third upstream ...
      r = stack.admin_call("POST", kUpstreams, fmt::format(R"({{"dial":"{}","weight":2}})", stack.dial(2)));
      EXPECT_EQ(r.status, 200) << r.body;
    } else if (i % 4 == 2) {  // ... and remove it again
      r = stack.admin_call("DELETE", std::string(kUpstreams) + "/2");
      EXPECT_EQ(r.status, 200) << r.body;
    } else if (i % 4 == 3) {
      r = stack.admin_call("POST", kUpstreams, fmt::format(R"({{"dial":"{}","weight":1}})", stack.dial(i % 2)));
      EXPECT_EQ(r.status, 400) << "a duplicate dial is refused: " << r.body;
    } else {
      r = stack.admin_call("PATCH", std::string(kUpstreams) + fmt::format("/{}/weight", i / 4 % 2), std::to_string(1 + i % 7));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    Response get = stack.admin_call("GET", "/config/");
    if (!config::from_json(json::parse(get.body, nullptr, false)).ok()) ++torn;
  }
  writing = false;
  for (auto& t : clients) t.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_GT(served, 200);
}

// Runs `heft ARGS... --address ADMIN` to its end; exit code, output in `out`.
// 405 names what the path takes in `Allow` (RFC 9110 15.5.6 MUST).
TEST(AdminProxy, MethodNotAllowedSaysWhichAreAllowed) {
  Stack stack;
  ASSERT_TRUE(stack.admin);
  const std::pair<const char*, const char*> cases[] = {
      {"DELETE /load", "POST"},
      {"GET /stop", "POST"},
      {"PUT /metrics", "GET, HEAD"},
      {"POST /reverse_proxy/upstreams", "GET, HEAD"},
      {"OPTIONS /config/", "GET, HEAD, POST, PUT, PATCH, DELETE"},
      {"TRACE /config/", "GET, HEAD, POST, PUT, PATCH, DELETE"},
  };
  for (const auto& [call, allow] : cases) {
    const std::string line = call;
    const auto space = line.find(' ');
    Response r = stack.admin_call(line.substr(0, space), line.substr(space + 1));
    EXPECT_EQ(r.status, 405) << call << ": " << r.body;
    EXPECT_EQ(r.header("allow"), allow) << call;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << call << ": " << r.body;
  }
}

// HEAD answers as GET does (status, fields, Content-Length) with no body, so
// the next response on the same connection is read where it begins.
TEST(AdminProxy, HeadIsGetWithoutTheBodyOnAKeepAliveConnection) {
  Stack stack;
  ASSERT_TRUE(stack.admin);
  const Response full = stack.admin_call("GET", "/config/");
  ASSERT_EQ(full.status, 200);
  HttpClient client(stack.admin_port, 5s);
  const std::string host = fmt::format("Host: localhost:{}\r\n", stack.admin_port);
  auto head = [&](const std::string& path) { return client.request("HEAD " + path + " HTTP/1.1\r\n" + host + "\r\n", true); };

  Response r = head("/config/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-length"), std::to_string(full.body.size()));
  EXPECT_EQ(r.header("etag"), full.header("etag"));
  r = head("/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.header("content-length"), "");
  EXPECT_EQ(r.header("content-type").rfind("text/plain", 0), 0u) << r.header("content-type");
  EXPECT_EQ(head("/reverse_proxy/upstreams").status, 200);
  EXPECT_EQ(head(std::string(kUpstreams) + "/0/weight").header("content-length"), "4");  // "100\n"
  r = head("/load");  // errors are heads alone too
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST");
  EXPECT_EQ(head("/nosuch").status, 404);
  // Had any of these carried a body, this would read it instead of the answer.
  r = client.request("GET /config/ HTTP/1.1\r\n" + host + "\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, full.body);
}

// A request head over 16 KiB is 431 Request Header Fields Too Large, not 400.
TEST(AdminProxy, OversizedRequestHeadIs431) {
  Stack stack;
  ASSERT_TRUE(stack.admin);
  Response r = stack.admin_call("GET", "/config/", "", "X-Filler: " + std::string(20000, 'x') + "\r\n");
  EXPECT_EQ(r.status, 431) << r.body;
  EXPECT_NE(r.body.find("request head larger than 16384 bytes"), std::string::npos) << r.body;
  EXPECT_EQ(stack.admin_call("GET", "/config/").status, 200);
}

// `Expect: 100-continue` gets its 100 before the body is sent (curl would
// otherwise wait a second); the request then completes as usual.
TEST(AdminProxy, ExpectContinueIsAnsweredBeforeTheBody) {
  Stack stack;
  ASSERT_TRUE(stack.admin);
  HttpClient client(stack.admin_port, 5s);
  ASSERT_TRUE(client.send_raw(fmt::format("PATCH {}/1/weight HTTP/1.1\r\nHost: localhost:{}\r\nContent-Type: "
                                          "application/json\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
                                          kUpstreams, stack.admin_port)));
  Response r = client.read_response();  // waits at most 5 s: without a 100 nothing comes
  ASSERT_EQ(r.status, 100);
  ASSERT_TRUE(client.send_raw("7"));
  r = client.read_response();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(stack.admin_call("GET", std::string(kUpstreams) + "/1/weight").body, "7\n");
  // No body coming: no 100 either, just the answer.
  r = client.request(fmt::format("GET /config/ HTTP/1.1\r\nHost: localhost:{}\r\nExpect: 100-continue\r\n\r\n",
                                 stack.admin_port));
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.interim.empty());
  // A head refused for its Host is answered at once, with no 100 first: the
  // client is not invited to send a body that will be thrown away.
  HttpClient foreign(stack.admin_port, 5s);
  Response refused = foreign.request(fmt::format("PATCH {}/1/weight HTTP/1.1\r\nHost: evil.example\r\nContent-Type: "
                                                 "application/json\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
                                                 kUpstreams));
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_TRUE(refused.interim.empty());
  EXPECT_EQ(refused.header("connection"), "close");
  EXPECT_EQ(stack.admin_call("GET", std::string(kUpstreams) + "/1/weight").body, "7\n");
  // Any other expectation cannot be met: 417, body or not (the proxy answers the same).
  HttpClient other(stack.admin_port, 5s);
  Response failed = other.request(fmt::format("GET /config/ HTTP/1.1\r\nHost: localhost:{}\r\nExpect: 200-ok\r\n\r\n",
                                              stack.admin_port));
  EXPECT_EQ(failed.status, 417) << failed.body;
  EXPECT_NE(failed.body.find("100-continue"), std::string::npos) << failed.body;
}

// Path segments are percent-decoded, one by one after the split (Caddy
// decodes them too); a bad escape is a 400 with a reason.
TEST(AdminProxy, PathSegmentsArePercentDecoded) {
  Stack stack("weight 3|weight 1");
  ASSERT_TRUE(stack.admin);
  const std::string upstreams = kUpstreams;
  Response r = stack.admin_call("GET", upstreams + "/0/%77eight");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "3\n");
  r = stack.admin_call("PATCH", upstreams + "/%31/w%65ight", "4");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(stack.admin_call("GET", upstreams + "/1/weight").body, "4\n");
  // %2F is a '/' inside a key, not a separator.
  r = stack.admin_call("GET", "/config/apps%2Fhttp");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"], "path /apps/http: \"apps/http\" not found") << r.body;
  for (const char* bad : {"/config/apps/%zzhttp", "/config/apps/http%4", "/config/apps/%"}) {
    r = stack.admin_call("GET", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
    EXPECT_NE(r.body.find("bad percent-escape"), std::string::npos) << bad << ": " << r.body;
    EXPECT_EQ(stack.admin_call("PATCH", bad, "1").status, 400) << bad;
  }
  EXPECT_EQ(stack.admin_call("GET", upstreams + "/0/weight").body, "3\n");
}

int heft_command(Stack& stack, std::vector<std::string> args, std::string& out) {
  std::vector<std::string> argv{HEFT_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--address");
  argv.push_back(fmt::format("127.0.0.1:{}", stack.admin_port));
  test::Process p(argv, stack.dir + "/cmd.log");
  auto code = p.wait(std::chrono::seconds(30));
  out = test::read_file(stack.dir + "/cmd.log");
  return code.value_or(-1);
}

TEST(AdminProxy, ControlCommands) {
  ASSERT_EQ(::access(HEFT_BINARY, X_OK), 0) << "no heft binary at " << HEFT_BINARY;
  Stack stack("weight 1|weight 1");
  ASSERT_TRUE(stack.admin);
  std::string out;
  ASSERT_EQ(heft_command(stack, {"weight", "0", stack.dial(1), "3"}, out), 0) << out;
  auto counts = stack.measure(400);
  EXPECT_NEAR(counts["v2"], 300, 2);  // smooth WRR carries its current weights across the change
  EXPECT_EQ(heft_command(stack, {"weight", "0", "127.0.0.1:1", "3"}, out), 1);
  EXPECT_NE(out.find("no upstream"), std::string::npos) << out;

  ASSERT_EQ(heft_command(stack, {"upstreams"}, out), 0) << out;
  EXPECT_NE(out.find(stack.dial(1)), std::string::npos) << out;
  EXPECT_NE(out.find("SHARE"), std::string::npos) << out;
  EXPECT_TRUE(out.find("74.") != std::string::npos || out.find("75.") != std::string::npos) << out;

  // A configuration valid on its own that the API refuses: the reason is printed, exit 1.
  std::string heftfile = fmt::format("{{\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n",
                                     test::free_port(), stack.port, stack.backends[0]->port());
  test::write_file(stack.dir + "/Heftfile", heftfile);
  EXPECT_EQ(heft_command(stack, {"reload", "--config", stack.dir + "/Heftfile"}, out), 1);
  EXPECT_NE(out.find("/admin/listen"), std::string::npos) << out;
  heftfile = fmt::format("{{\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n",
                         stack.admin_port, stack.port, stack.backends[0]->port());
  test::write_file(stack.dir + "/Heftfile", heftfile);
  ASSERT_EQ(heft_command(stack, {"reload", "--config", stack.dir + "/Heftfile"}, out), 0) << out;
  EXPECT_EQ(stack.measure(50)["v1"], 50);
  // Another file is not this heft's: refused before anything is sent.
  test::write_file(stack.dir + "/Other", heftfile);
  EXPECT_EQ(heft_command(stack, {"reload", "--config", stack.dir + "/Other"}, out), 1);
  EXPECT_NE(out.find(fmt::format("serves {}/Heftfile (state file {}/autosave.json), not {}/Other: not reloading",
                                 stack.dir, stack.dir, stack.dir)),
            std::string::npos)
      << out;

  ASSERT_EQ(heft_command(stack, {"stop"}, out), 0) << out;
  test::WaitingFor waiting("the proxy to stop after `heft stop`");
  stack.proxy->wait();  // POST /stop shut the proxy down
}

}  // namespace
}  // namespace heft::admin
