// Routes inside a site (docs/routes.md), end to end: a real heft in front of
// echo backends that say what they saw, driven over loopback; the same
// Caddyfile served by the installed Caddy answers the same requests the same
// way; `heft validate` places mistakes in routes at their token.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_util.h"

namespace heft::test {
namespace {

// An echo backend (tests/integration/echo_backend.py): every answer is JSON
// with its name, the method, the target and the header fields it got.
Backend start_echo(const std::string& dir, const std::string& name) {
  const std::string port_file = dir + "/" + name + ".port";
  Backend b{Process({"/usr/bin/python3", std::string(HEFT_SOURCE_DIR) + "/tests/integration/echo_backend.py", name,
                     port_file},
                    dir + "/" + name + ".log"),
            0, name};
  b.port = read_port_file(port_file);
  return b;
}

// What an echo backend saw, from its answer; empty `backend` when the answer was not an echo.
struct Seen {
  std::string backend, method, target;
  nlohmann::json headers;
  std::string header(const std::string& name) const {
    for (const auto& pair : headers)
      if (strcasecmp(pair[0].get<std::string>().c_str(), name.c_str()) == 0) return pair[1].get<std::string>();
    return "";
  }
};

Seen seen(const Response& r) {
  Seen out;
  if (r.header("content-type") != "application/json") return out;
  const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
  if (!body.is_object()) return out;
  out.backend = body.value("backend", "");
  out.method = body.value("method", "");
  out.target = body.value("target", "");
  out.headers = body.value("headers", nlohmann::json::array());
  return out;
}

// The site both heft and Caddy serve: matchers, handle / handle_path /
// route / respond / redir and header edits (no cookie matcher: Caddy has none).
std::string common_site(uint16_t port, const Backend& a, const Backend& b, const Backend& c, const Backend& d) {
  return fmt::format(R"(:{} {{
	@canary {{
		header X-Canary 1
	}}
	@writes method POST PUT
	@v2 query v=2
	@not_docs {{
		not path /docs/*
		path /d*
	}}
	header X-Site routes
	redir /old /new 301
	respond /never "never" 200
	handle_path /api/* {{
		reverse_proxy @canary 127.0.0.1:{} {{
			header_up X-Client {{remote_host}}
		}}
		reverse_proxy 127.0.0.1:{} {{
			header_up X-Path {{path}}
			header_up X-Copied {{http.request.header.X-In}}
			header_down -X-Backend-Only
		}}
	}}
	handle /healthz {{
		respond "ok {{method}} {{uri}}" 200
	}}
	handle @writes {{
		respond "no writes" 405
	}}
	handle @v2 {{
		reverse_proxy 127.0.0.1:{}
	}}
	handle @not_docs {{
		respond "d but not docs"
	}}
	route /r/* {{
		header X-Route 1
		respond "route"
	}}
	reverse_proxy 127.0.0.1:{}
}}
)",
                     port, c.port, a.port, b.port, d.port);
}

struct Ask {
  std::string method, target, extra;
};

const std::vector<Ask> kAsks = {
    {"GET", "/old", ""},
    {"GET", "/never", ""},
    {"GET", "/elsewhere", ""},
    {"GET", "/api/users?x=1", "X-In: hello\r\n"},
    {"GET", "/api/", ""},
    {"GET", "/api/x", "X-Canary: 1\r\n"},
    {"GET", "/healthz?probe=1", ""},
    {"HEAD", "/healthz", ""},
    {"POST", "/page", "Content-Length: 0\r\n"},
    {"GET", "/page?v=2", ""},
    {"GET", "/page?v=3", ""},
    {"GET", "/download", ""},
    {"GET", "/docs/x", ""},
    {"GET", "/r/1", ""},
    {"GET", "/API/Users", ""},
    {"GET", "/a//b/../c", ""},
};

Response ask(HttpClient& client, const Ask& a) {
  return client.request(fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\n{}\r\n", a.method, a.target, a.extra),
                        a.method == "HEAD");
}

class Routes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = make_temp_dir();
    a = start_echo(dir, "a");
    b = start_echo(dir, "b");
    c = start_echo(dir, "c");
    d = start_echo(dir, "d");
  }
  std::string dir;
  Backend a, b, c, d;
};

TEST_F(Routes, MatchersHandlersAndHeaderEditsAsWritten) {
  const uint16_t port = free_port();
  Process heft = start_heft(dir, common_site(port, a, b, c, d), port);
  HttpClient client(port);

  Response r = client.get("/old");
  EXPECT_EQ(r.status, 301);
  EXPECT_EQ(r.header("location"), "/new");
  EXPECT_EQ(r.header("x-site"), "routes") << "a header edit before redir applies to its answer too";

  // respond comes before reverse_proxy in Caddy's order, whatever the order written.
  r = client.get("/never");
  EXPECT_EQ(r.body, "never");
  EXPECT_EQ(seen(client.get("/elsewhere")).backend, "d");

  r = client.get("/api/users?x=1", "X-In: hello\r\n");
  Seen s = seen(r);
  EXPECT_EQ(s.backend, "a") << r.body;
  EXPECT_EQ(s.target, "/users?x=1") << "handle_path strips its prefix";
  EXPECT_EQ(s.header("X-Path"), "/users") << "{path} is the rewritten path";
  EXPECT_EQ(s.header("X-Copied"), "hello");
  EXPECT_EQ(r.header("x-site"), "routes");
  EXPECT_EQ(r.header("x-backend-only"), "") << "header_down -X-Backend-Only";

  r = client.get("/api/x", "X-Canary: 1\r\n");
  s = seen(r);
  EXPECT_EQ(s.backend, "c") << r.body;
  EXPECT_EQ(s.target, "/x");
  EXPECT_EQ(s.header("X-Client"), "127.0.0.1");
  EXPECT_EQ(r.header("x-backend-only"), "1") << "pool c has no header_down";

  r = client.get("/healthz?probe=1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok GET /healthz?probe=1");
  EXPECT_EQ(r.header("content-type"), "text/plain; charset=utf-8");

  r = client.request("POST /page HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.body, "no writes");

  EXPECT_EQ(seen(client.get("/page?v=2")).backend, "b");
  EXPECT_EQ(seen(client.get("/page?v=3")).backend, "d");
  r = client.get("/download");
  EXPECT_EQ(r.body, "d but not docs");
  EXPECT_EQ(seen(client.get("/docs/x")).backend, "d") << "not path /docs/*";

  r = client.get("/r/1");
  EXPECT_EQ(r.body, "route");
  EXPECT_EQ(r.header("x-route"), "1");

  // Path matchers ignore case and compare the cleaned path; the backend gets the target as sent.
  r = client.get("/API/Users");
  EXPECT_EQ(seen(r).backend, "a") << r.body;
  EXPECT_EQ(seen(r).target, "/Users");
}

TEST_F(Routes, CookieMatcherAndSeveralPoolsEachCounted) {
  const uint16_t port = free_port();
  const uint16_t admin = free_port();
  Process heft = start_heft(dir,
                            fmt::format(R"({{
	admin 127.0.0.1:{}
}}
:{} {{
	@beta cookie beta yes
	reverse_proxy @beta 127.0.0.1:{}
	reverse_proxy 127.0.0.1:{} 127.0.0.1:{}
}}
)",
                                        admin, port, b.port, a.port, c.port),
                            port);
  HttpClient client(port);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(seen(client.get("/", "Cookie: a=1; beta=yes\r\n")).backend, "b");
    EXPECT_EQ(seen(client.get("/", "Cookie: beta=no\r\n")).backend, i % 2 == 0 ? "a" : "c") << i;
  }
  // Each pool is its own: its own counters, labelled apart in the metrics.
  const std::string metrics = admin_call(admin, "GET", "/metrics").body;
  EXPECT_EQ(sample_value(metrics, fmt::format("heft_upstream_requests_total{{server=\":{}\",site=\":{}#2\","
                                              "upstream=\"127.0.0.1:{}\",code=\"200\"}}",
                                              port, port, a.port)),
            10)
      << metrics;
  EXPECT_EQ(sample_value(metrics, fmt::format("heft_upstream_requests_total{{server=\":{}\",site=\":{}\","
                                              "upstream=\"127.0.0.1:{}\",code=\"200\"}}",
                                              port, port, b.port)),
            20)
      << metrics;
}

// The same Caddyfile and the same requests through heft and through the
// installed Caddy: the same status, Location, body of heft's own answers,
// backend and what it saw.
TEST_F(Routes, AnswerAsCaddyDoes) {
  if (!std::filesystem::exists("/usr/bin/caddy")) GTEST_SKIP() << "caddy is not installed (install-deps.sh --bench)";
  const uint16_t heft_port = free_port();
  Process heft = start_heft(dir, common_site(heft_port, a, b, c, d), heft_port);
  const uint16_t caddy_port = free_port();
  const std::string caddyfile = dir + "/Caddyfile";
  write_file(caddyfile, "{\n\tadmin off\n\tauto_https off\n}\n" +
                            common_site(caddy_port, a, b, c, d));
  Process caddy({"/usr/bin/env", "XDG_CONFIG_HOME=" + dir, "XDG_DATA_HOME=" + dir, "/usr/bin/caddy", "run", "--config",
                 caddyfile, "--adapter", "caddyfile"},
                dir + "/caddy.log");
  ASSERT_TRUE(wait_for_port(caddy_port, 20s)) << "caddy did not listen; log:\n" << read_file(dir + "/caddy.log");
  HttpClient to_heft(heft_port), to_caddy(caddy_port);
  for (const Ask& question : kAsks) {
    const std::string what = question.method + " " + question.target;
    const Response h = ask(to_heft, question);
    const Response c = ask(to_caddy, question);
    EXPECT_EQ(h.status, c.status) << what;
    EXPECT_EQ(h.header("location"), c.header("location")) << what;
    EXPECT_EQ(h.header("x-site"), c.header("x-site")) << what;
    EXPECT_EQ(h.header("x-route"), c.header("x-route")) << what;
    EXPECT_EQ(h.header("x-backend-only"), c.header("x-backend-only")) << what;
    const Seen hs = seen(h), cs = seen(c);
    EXPECT_EQ(hs.backend, cs.backend) << what;
    if (cs.backend.empty()) {
      EXPECT_EQ(h.body, c.body) << what;
      EXPECT_EQ(h.header("content-length"), c.header("content-length")) << what;
      continue;
    }
    EXPECT_EQ(hs.method, cs.method) << what;
    EXPECT_EQ(hs.target, cs.target) << what;
    for (const char* field : {"X-Path", "X-Copied", "X-Client"})
      EXPECT_EQ(hs.header(field), cs.header(field)) << what << ": " << field;
  }
  caddy.kill_now();
}

// Mistakes in routes are told at their token, and in JSON at their pointer.
TEST(RoutesValidate, LocatedErrors) {
  const std::string dir = make_temp_dir();
  write_file(dir + "/Heftfile", R"(:8080 {
	@m {
		pth /x
	}
	handle /a?b {
		respond "x" 99
	}
	reverse_proxy @nope 127.0.0.1:1
	respond "{nonsense.placeholder}"
}
)");
  Process validate({HEFT_BINARY, "validate", dir + "/Heftfile"}, dir + "/validate.log");
  ASSERT_EQ(validate.wait(30s), 1);
  const std::string out = read_file(dir + "/validate.log");
  EXPECT_NE(out.find("Heftfile:3:3: unknown matcher \"pth\" (did you mean \"path\"?)"), std::string::npos) << out;
  EXPECT_NE(out.find("Heftfile:5:9: path pattern \"/a?b\" may use only '*' as a wildcard"), std::string::npos) << out;
  EXPECT_NE(out.find("Heftfile:6:15: invalid status \"99\" (200..599)"), std::string::npos) << out;
  EXPECT_NE(out.find("Heftfile:8:16: unknown matcher \"@nope\""), std::string::npos) << out;
  EXPECT_NE(out.find("Heftfile:9:10: unknown placeholder {nonsense.placeholder}"), std::string::npos) << out;

  write_file(dir + "/config.json", R"({"apps": {"http": {"servers": {"srv0": {"listen": [":8080"], "routes": [
    {"handle": [{"handler": "subroute", "routes": [
      {"match": [{"method": ["GET"], "header_regexp": {"X": {"pattern": "a"}}}],
       "handle": [{"handler": "static_response", "body": "x"}]},
      {"match": [{"remote_ip": {"ranges": ["10.0.0.0/33"]}}],
       "handle": [{"handler": "file_server"}]}]}]}]}}}}})");
  Process json_validate({HEFT_BINARY, "validate", dir + "/config.json"}, dir + "/validate-json.log");
  ASSERT_EQ(json_validate.wait(30s), 1);
  const std::string json_out = read_file(dir + "/validate-json.log");
  const std::string route = "/apps/http/servers/srv0/routes/0/handle/0/routes/";
  EXPECT_NE(json_out.find(route + "0/match/0/header_regexp: Caddy's \"header_regexp\" matcher is not supported"),
            std::string::npos)
      << json_out;
  EXPECT_NE(json_out.find(route + "1/match/0/remote_ip/ranges/0: must be an IP address or a CIDR range"),
            std::string::npos)
      << json_out;
  EXPECT_NE(json_out.find(route + "1/handle/0/handler: Caddy's \"file_server\" handler is not supported"),
            std::string::npos)
      << json_out;
}

}  // namespace
}  // namespace heft::test

namespace heft::test {
namespace {

// The sticky canary: 1,000 clients, each keeping the cookie heft set on its
// first answer, stay on their side for every later request, the sides share
// the clients as weighted, and a header forces a side.
TEST(RoutesSplit, ClientsStayOnTheirSideAndTheWeightsHold) {
  const std::string dir = make_temp_dir();
  Backend stable = start_backend(dir, "stable");
  Backend canary = start_backend(dir, "canary");
  const uint16_t port = free_port();
  Process heft = start_heft(dir,
                            fmt::format(R"({{
	workers 2
}}
:{} {{
	split {{
		cookie side
		header X-Side
		side stable 90 {{
			reverse_proxy 127.0.0.1:{}
		}}
		side canary 10 {{
			reverse_proxy 127.0.0.1:{}
		}}
	}}
}}
)",
                                        port, stable.port, canary.port),
                            port);
  constexpr int kClients = 1000, kRequestsEach = 20, kThreads = 4;
  std::atomic<int> on_canary{0}, moved{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      HttpClient client(port);
      for (int c = 0; c < kClients / kThreads; ++c) {
        const Response first = client.get("/");
        const std::string cookie = first.header("set-cookie");
        const std::string side = first.header("x-backend");
        if (first.status != 200 || cookie.find("side=" + side + ";") != 0) {
          ++failed;
          continue;
        }
        on_canary += side == "canary";
        const std::string jar = "Cookie: " + cookie.substr(0, cookie.find(';')) + "\r\n";
        for (int i = 1; i < kRequestsEach; ++i) {
          const Response r = client.get("/", jar);
          if (r.status != 200 || !r.header("set-cookie").empty()) ++failed;
          if (r.header("x-backend") != side) ++moved;
        }
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(moved, 0) << "every client stays on the side it first got";
  EXPECT_NEAR(on_canary / double(kClients), 0.10, 0.02) << on_canary << " of " << kClients << " clients on canary";

  // A forced side wins over the cookie and sets none.
  HttpClient client(port);
  const Response forced = client.get("/", "Cookie: side=stable\r\nX-Side: canary\r\n");
  EXPECT_EQ(forced.header("x-backend"), "canary");
  EXPECT_EQ(forced.header("set-cookie"), "");
  EXPECT_EQ(client.get("/", "Cookie: side=canary\r\n").header("x-backend"), "canary");
}

}  // namespace
}  // namespace heft::test
