// The Caddy-shaped JSON form: exact round trips and strict rejection with paths.
#include "config/json.h"

#include <gtest/gtest.h>

#include <functional>

#include <fmt/format.h>

#include "config/heftfile.h"

namespace heft::config {
namespace {

using nlohmann::json;

constexpr std::string_view kUpstreamsPath = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

Config parse_ok(std::string_view text) {
  Result<Config> result = parse_heftfile(text);
  EXPECT_TRUE(result.ok()) << (result.errors.empty() ? "" : result.errors[0].to_string());
  return result.ok() ? *result : Config{};
}

constexpr std::string_view kEverything = R"({
	admin off
	admin_token tok
	workers 2
	grace_period 1m30s
	idle_timeout 45s
	header_timeout 1.5s
	max_connections 77
}
app.example.com, www.example.com {
	default
	log {
		output file /tmp/access.log
	}
	reverse_proxy 127.0.0.1:9001?weight=5&max_fails=3&fail_timeout=30s 127.0.0.1:9002?weight=0 {
		to [::1]:9003 backup slow_start 20s max_conns 50
		to backend:9004 down
		lb_policy hash cookie session
		hash_strategy maglev
		keepalive 64
		keepalive_timeout 2m
		next_upstream error http_503 non_idempotent
		next_upstream_tries 2
		next_upstream_timeout 3s
		connect_timeout 250ms
		read_timeout 2m
		send_timeout 1h
		retry_body_limit 64KiB
		header_up +X-A 1
		header_up X-B "two words"
		header_down -Server
		slow_start 10s
		max_fails 2
		fail_timeout 20s
		health_uri /health
		health_port 9999
		health_status 200
		health_body ok
		health_headers {
			Host h
		}
		health_passes 2
		health_fails 4
		ignore_client_abort on
		queue 100
		queue_timeout 30s
		adaptive {
			latency_threshold 200ms
			error_threshold 2.5%
			cut 10%
		}
	}
}
:8080 {
	log
	reverse_proxy 10.0.0.1:80 10.0.0.2:80 {
		next_upstream off
		lb_policy ip_hash
	}
}
other.example.com {
	reverse_proxy 10.0.0.3:80
}
)";

TEST(Json, RoundTripIsExact) {
  Config config = parse_ok(kEverything);
  json document = to_json(config);
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  EXPECT_EQ(to_json(*back), document);
  // And through text, as `heft adapt` prints it.
  Result<Config> reparsed = from_json(json::parse(document.dump(2)));
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(*reparsed, config);
}

// The pool's max_fails / fail_timeout are health_checks.passive: an
// upstream written without its own (as an admin API client adds one) gets them.
TEST(Json, UpstreamsWithoutTheirOwnTakeThePoolsPassiveSettings) {
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tmax_fails 0\n\t\tfail_timeout 20s\n"
                           "\t\tto b:1 max_fails 3\n\t}\n}\n");
  json document = to_json(config);
  json& handler = document["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0];
  EXPECT_EQ(handler["health_checks"]["passive"], json({{"max_fails", 0}, {"fail_timeout", "20s"}}));
  handler["upstreams"].push_back({{"dial", "c:1"}});
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  const auto& upstreams = back->sites[0].proxy.upstreams;
  ASSERT_EQ(upstreams.size(), 3u);
  EXPECT_EQ(upstreams[0].max_fails, 0u);
  EXPECT_EQ(upstreams[1].max_fails, 3u);
  EXPECT_EQ(upstreams[1].fail_timeout, std::chrono::seconds(20));
  EXPECT_EQ(upstreams[2].max_fails, 0u);
  EXPECT_EQ(upstreams[2].fail_timeout, std::chrono::seconds(20));
  // Without passive, nginx's defaults.
  handler["health_checks"].erase("passive");
  back = from_json(document);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->sites[0].proxy.upstreams[2].max_fails, 1u);
  EXPECT_EQ(back->sites[0].proxy.upstreams[2].fail_timeout, std::chrono::seconds(10));
}

TEST(Json, RoundTripOfDefaults) {
  Config config = parse_ok(":80 {\n\treverse_proxy a:1\n}\n");
  EXPECT_EQ(*from_json(to_json(config)), config);
}

// transport.keepalive_timeout (nginx's name, beside transport.keepalive):
// written always, 0 included; read as a duration; absent, nginx's 60s.
TEST(Json, KeepaliveTimeoutIsATransportMember) {
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive_timeout 0\n\t}\n}\n");
  json document = to_json(config);
  json& transport = document["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0]
                            ["transport"];
  EXPECT_EQ(transport["keepalive_timeout"], "0s");
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  EXPECT_EQ(back->sites[0].proxy.keepalive_timeout, std::chrono::milliseconds{0});
  transport["keepalive_timeout"] = 5'000'000'000;  // Caddy's integer nanoseconds
  EXPECT_EQ(from_json(document)->sites[0].proxy.keepalive_timeout, std::chrono::seconds(5));
  transport.erase("keepalive_timeout");
  EXPECT_EQ(from_json(document)->sites[0].proxy.keepalive_timeout, std::chrono::seconds(60));
  EXPECT_EQ(to_json(parse_ok(":80 {\n\treverse_proxy a:1\n}\n"))["apps"]["http"]["servers"]["srv0"]["routes"][0]
                   ["handle"][0]["routes"][0]["handle"][0]["transport"]["keepalive_timeout"],
            "1m");
}

// An IPv6 literal as a site address: `heft adapt` writes it unbracketed, as
// a host matcher has no port, and reading that back gives the same config
// (it was "must be a host name", so every admin write on such a config failed).
TEST(Json, RoundTripOfAnIPv6SiteAddress) {
  Config config = parse_ok("[::1]:8080, a.test:8080 {\n\treverse_proxy a:1\n}\n");
  json document = to_json(config);
  const json& hosts = document["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"];
  EXPECT_EQ(hosts, json::array({"::1", "a.test"}));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  // Bracketed, it is the same host; with a port, no host name.
  document["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"] = json::array({"[::1]", "a.test"});
  Result<Config> bracketed = from_json(document);
  ASSERT_TRUE(bracketed.ok()) << bracketed.errors[0].to_string();
  EXPECT_EQ(*bracketed, config);
  for (const char* bad : {"[::1]:8080", "[::1", "::1]"}) {
    document["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"] = json::array({bad});
    EXPECT_FALSE(from_json(document).ok()) << bad;
  }
}

TEST(Json, DefaultBindIsEachServersListenAddresses) {
  Config config = parse_ok("{\n\tdefault_bind 127.0.0.1 ::1\n}\n:80 {\n\treverse_proxy a:1\n}\n"
                           ":8080 {\n\treverse_proxy b:1\n}\n");
  json document = to_json(config);
  EXPECT_EQ(document["apps"]["http"]["servers"]["srv0"]["listen"], json::array({"127.0.0.1:80", "[::1]:80"}));
  EXPECT_EQ(document["apps"]["http"]["servers"]["srv1"]["listen"], json::array({"127.0.0.1:8080", "[::1]:8080"}));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  for (const SiteConfig& site : back->sites) EXPECT_EQ(site.bind, (std::vector<std::string>{"127.0.0.1", "::1"}));
  // Each server listens where its own `listen` says, in the order written.
  document["apps"]["http"]["servers"]["srv1"]["listen"] = json::array({"[::1]:8080"});
  Result<Config> other = from_json(document);
  ASSERT_TRUE(other.ok()) << other.errors[0].to_string();
  EXPECT_EQ(other->sites[0].bind, (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_EQ(other->sites[1].bind, (std::vector<std::string>{"::1"}));
}

// Where sites listen (IP-literal addresses, bind, default_bind) is each
// server's `listen`, and reads back exactly.
TEST(Json, SiteListenAddressesRoundTrip) {
  Config config = parse_ok("{\n\tdefault_bind 10.0.0.1\n}\n127.0.0.1:8080, [::1]:8080, localhost:8080 {\n"
                           "\treverse_proxy a:1\n}\nexample.com:8081 {\n\tbind 127.0.0.2\n\treverse_proxy b:1\n}\n"
                           "other.test:8082 {\n\treverse_proxy c:1\n}\n:8083 {\n\tbind 0.0.0.0 ::\n"
                           "\treverse_proxy d:1\n}\n");
  json document = to_json(config);
  const json& servers = document["apps"]["http"]["servers"];
  EXPECT_EQ(servers["srv0"]["listen"], json::array({"127.0.0.1:8080", "[::1]:8080"}));
  EXPECT_EQ(servers["srv1"]["listen"], json::array({"127.0.0.2:8081"}));
  EXPECT_EQ(servers["srv2"]["listen"], json::array({"10.0.0.1:8082"}));
  EXPECT_EQ(servers["srv3"]["listen"], json::array({"0.0.0.0:8083", "[::]:8083"}));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  EXPECT_EQ(to_json(*back), document);
}

TEST(Json, CaddyShape) {
  Config config = parse_ok(kEverything);
  json document = to_json(config);
  EXPECT_EQ(document["admin"], (json{{"listen", "127.0.0.1:2019"}, {"disabled", true}, {"token", "tok"}}));
  const json& http = document["apps"]["http"];
  EXPECT_EQ(http["workers"], 2);
  EXPECT_EQ(http["grace_period"], "1m30s");
  EXPECT_EQ(http["header_timeout"], "1.5s");
  // Port 80 first appeared first: srv0 holds both port-80 sites, in order.
  EXPECT_EQ(http["servers"]["srv0"]["listen"], json::array({":80"}));
  EXPECT_EQ(http["servers"]["srv1"]["listen"], json::array({":8080"}));
  ASSERT_EQ(http["servers"]["srv0"]["routes"].size(), 2u);
  const json& route = http["servers"]["srv0"]["routes"][0];
  EXPECT_EQ(route["match"], json::parse(R"([{"host":["app.example.com","www.example.com"]}])"));
  EXPECT_EQ(route["default"], true);
  EXPECT_EQ(route["terminal"], true);
  EXPECT_EQ(route["log"]["output"], "/tmp/access.log");
  EXPECT_EQ(route["handle"][0]["handler"], "subroute");
  const json& upstreams = document.at(json::json_pointer(std::string(kUpstreamsPath)));
  ASSERT_EQ(upstreams.size(), 4u);
  EXPECT_EQ(upstreams[0], json::parse(R"({"dial":"127.0.0.1:9001","weight":5,"max_fails":3,
      "fail_timeout":"30s","backup":false,"down":false})"));
  EXPECT_EQ(upstreams[2]["dial"], "[::1]:9003");
  EXPECT_EQ(upstreams[2]["slow_start"], "20s");
  EXPECT_EQ(upstreams[2]["max_conns"], 50);  // written only when set, as slow_start
  const json& proxy = route["handle"][0]["routes"][0]["handle"][0];
  EXPECT_EQ(proxy["handler"], "reverse_proxy");
  EXPECT_EQ(proxy["load_balancing"]["selection_policy"],
            json::parse(R"({"policy":"hash","key":"cookie","name":"session"})"));
  EXPECT_EQ(proxy["load_balancing"]["next_upstream"], json::parse(R"(["error","http_503","non_idempotent"])"));
  EXPECT_EQ(proxy["load_balancing"]["queue"], 100);
  EXPECT_EQ(proxy["load_balancing"]["queue_timeout"], "30s");
  EXPECT_EQ(proxy["transport"]["dial_timeout"], "250ms");
  EXPECT_EQ(proxy["transport"]["keepalive"], 64);
  EXPECT_EQ(proxy["transport"]["keepalive_timeout"], "2m");
  EXPECT_EQ(proxy["headers"]["request"][0], json::parse(R"({"op":"add","name":"X-A","value":"1"})"));
  EXPECT_EQ(proxy["headers"]["response"][0], json::parse(R"({"op":"delete","name":"Server"})"));
  // A site without hosts has no match.
  EXPECT_FALSE(http["servers"]["srv1"]["routes"][0].contains("match"));
}

TEST(Json, ServersAreReadInNumericOrder) {
  std::string text;
  for (int port = 8000; port < 8012; ++port)
    text.append(":").append(std::to_string(port)).append(" {\n\treverse_proxy a:1\n}\n");
  Config config = parse_ok(text);
  Result<Config> back = from_json(to_json(config));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, config);  // srv10 and srv11 come after srv9, not after srv1
}

// Applies `edit` to the adapted seed example and returns from_json's errors.
std::vector<std::string> errors_after(const std::function<void(json&)>& edit) {
  json document = to_json(parse_ok(kEverything));
  edit(document);
  Result<Config> result = from_json(document);
  EXPECT_FALSE(result.ok());
  std::vector<std::string> out;
  for (const Diagnostic& d : result.errors) out.push_back(d.to_string());
  return out;
}

json& upstreams_of(json& document) { return document.at(json::json_pointer(std::string(kUpstreamsPath))); }
json& proxy_of(json& document) {
  return document["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0];
}

TEST(JsonErrors, NameThePath) {
  const std::string up = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[1]["weight"] = -1; }),
            std::vector<std::string>{up + "/1/weight: must be an integer 0..1000000"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[1]["weight"] = 1000001; }),
            std::vector<std::string>{up + "/1/weight: must be an integer 0..1000000"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["weight"] = "5"; }),
            std::vector<std::string>{up + "/0/weight: must be an integer 0..1000000"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[2]["max_conns"] = 1000001; }),
            std::vector<std::string>{up + "/2/max_conns: must be an integer 0..1000000"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["wieght"] = 5; }),
            std::vector<std::string>{up + "/0/wieght: unknown field (did you mean \"weight\"?)"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["fail_timeout"] = "soon"; }),
            std::vector<std::string>{up + "/0/fail_timeout: must be a duration in whole milliseconds, at most 365d, "
                                          "e.g. \"250ms\" or 250000000 (ns)"});
  // 1.5 ms, as nanoseconds or as a string: refused for its fraction of a millisecond, which the message names.
  const std::string idle = "/apps/http/idle_timeout: must be a duration in whole milliseconds, greater than 0 and at "
                           "most 365d, e.g. \"30s\" or 30000000000 (ns)";
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["idle_timeout"] = 1500000; }), std::vector<std::string>{idle});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["idle_timeout"] = "1.5ms"; }), std::vector<std::string>{idle});
  const std::string tp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/transport";
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["transport"]["keepalive_timeout"] = "-1s"; }),
            std::vector<std::string>{tp + "/keepalive_timeout: must be a duration in whole milliseconds, at most 365d, "
                                          "e.g. \"250ms\" or 250000000 (ns)"});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["transport"]["keepalive_timeout"] = true; }),
            std::vector<std::string>{tp + "/keepalive_timeout: must be a duration in whole milliseconds, at most 365d, "
                                          "e.g. \"250ms\" or 250000000 (ns)"});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["transport"]["keepalive_timout"] = "1s"; }),
            std::vector<std::string>{tp + "/keepalive_timout: unknown field (did you mean \"keepalive_timeout\"?)"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[3]["dial"] = "127.0.0.1:9001"; }),
            std::vector<std::string>{up + "/3/dial: duplicate backend \"127.0.0.1:9001\" (also at " + up + "/0/dial)"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["dial"] = "http://a:1"; }),
            std::vector<std::string>{up + "/0/dial: must be \"host:port\": no scheme allowed here (write host:port "
                                          "without \"http://\")"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0].erase("dial"); }),
            std::vector<std::string>{up + "/0/dial: required"});
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d) = json::array(); }),
            std::vector<std::string>{up + ": must hold at least one upstream"});
}

// The JSON form's addresses get the Heftfile's check: what brackets hold (or
// a matcher host with colons) must be an IPv6 address.
TEST(JsonErrors, IPv6LiteralsMustBeValid) {
  const std::string up = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";
  const std::string host = "/apps/http/servers/srv0/routes/0/match/0/host";
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["dial"] = "[::1::2]:46622"; }),
            std::vector<std::string>{up + "/0/dial: must be \"host:port\": not a valid IPv6 address"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"][0] = "[zz:zz]"; }),
            std::vector<std::string>{host + "/0: must be a host name: not a valid IPv6 address"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"][0] = "fe80::zz"; }),
            std::vector<std::string>{host + "/0: must be a host name: not a valid IPv6 address"});
}

// A matcher host has no port: "a.com:80" was an error, but "a.com:1" (the
// port the reader used as "none") was read as "a.com", its port dropped.
TEST(JsonErrors, MatcherHostsHaveNoPort) {
  const std::string host = "/apps/http/servers/srv0/routes/0/match/0/host";
  for (const char* written : {"a.com:1", "a.com:80", "[::1]:1", "a.com:0"})
    EXPECT_EQ(errors_after([&](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"][0] = written; }),
              std::vector<std::string>{host + "/0: must be a host name"})
        << written;
}

// Zone IDs: dropped from a backend's address, never in a Host.
TEST(JsonErrors, IPv6ZoneIDsAreRefused) {
  const std::string up = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";
  const std::string host = "/apps/http/servers/srv0/routes/0/match/0/host";
  EXPECT_EQ(errors_after([](json& d) { upstreams_of(d)[0]["dial"] = "[fe80::1%lo]:46623"; }),
            std::vector<std::string>{up + "/0/dial: must be \"host:port\": IPv6 zone IDs are not supported (\"%lo\")"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][0]["match"][0]["host"][0] = "fe80::1%lo"; }),
            std::vector<std::string>{host + "/0: must be a host name: IPv6 zone IDs are not supported (\"%lo\")"});
}

// What `heft run` can listen on, as the Heftfile: an IP address or localhost in any case.
TEST(JsonErrors, AdminListenIsAnAddressOrLocalhost) {
  EXPECT_EQ(errors_after([](json& d) { d["admin"] = {{"listen", "admin.test:2019"}, {"token", "t"}}; }),
            std::vector<std::string>{"/admin/listen: the host must be an IP address or localhost (the admin API "
                                     "resolves no other name)"});
  json document = to_json(parse_ok(kEverything));
  document["admin"] = {{"listen", "LOCALHOST:2019"}};
  Result<Config> result = from_json(document);
  ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
  EXPECT_EQ(result->admin.address, "LOCALHOST:2019");
}

// heft's IPv6 listeners are IPv6 only: an IPv4-mapped address cannot be listened on.
TEST(JsonErrors, ListenAddressesAreNotIPv4Mapped) {
  auto listen = [](json& d, const std::string& server) -> json& { return d["apps"]["http"]["servers"][server]["listen"]; };
  EXPECT_EQ(errors_after([&](json& d) {
              listen(d, "srv0") = json::array({"[::FFFF:7f00:1]:80"});
              listen(d, "srv1") = json::array({"[::FFFF:7f00:1]:8080"});
            }),
            (std::vector<std::string>{"/apps/http/servers/srv0/listen/0: \"::FFFF:7f00:1\" is an IPv4-mapped IPv6 "
                                      "address, which heft's IPv6 listeners (IPv6 only) cannot listen on: write it as "
                                      "127.0.0.1:80",
                                      "/apps/http/servers/srv1/listen/0: \"::FFFF:7f00:1\" is an IPv4-mapped IPv6 "
                                      "address, which heft's IPv6 listeners (IPv6 only) cannot listen on: write it as "
                                      "127.0.0.1:8080"}));
}

// /admin/listen where a server listens: refused (heft ran without its admin API).
TEST(JsonErrors, AdminListenIsNotAServersAddress) {
  EXPECT_EQ(errors_after([](json& d) { d["admin"] = {{"listen", "127.0.0.1:8080"}}; }),
            std::vector<std::string>{"/admin/listen: admin address \"127.0.0.1:8080\" is taken by the sites on port "
                                     "8080, which listen on every address: give the admin API another port "
                                     "(/apps/http/servers/srv1/listen)"});
  EXPECT_EQ(errors_after([](json& d) {
              d["admin"] = {{"listen", "[::1]:80"}};
              d["apps"]["http"]["servers"]["srv0"]["listen"] = json::array({"[::1]:80"});
              d["apps"]["http"]["servers"]["srv1"]["listen"] = json::array({"[::1]:8080"});
            }),
            std::vector<std::string>{"/admin/listen: admin address \"[::1]:80\" is taken by the sites on port 80, "
                                     "which listen on ::1: give the admin API another port "
                                     "(/apps/http/servers/srv0/listen)"});
}

// The default admin section is what /load is sent to keep the running API's
// address (`heft reload` of a file without an admin line): the reader, which
// cannot know that address, leaves it to the admin API and to heft run.
TEST(JsonErrors, TheDefaultAdminSectionIsNotCheckedAgainstTheServers) {
  json document = to_json(parse_ok(":2019 {\n\treverse_proxy 127.0.0.1:9001\n}\n"));
  ASSERT_EQ(document["admin"]["listen"], "127.0.0.1:2019");
  Result<Config> result = from_json(document);
  ASSERT_TRUE(result.ok()) << (result.errors.empty() ? "" : result.errors[0].to_string());
  std::optional<Diagnostic> at_start = admin_start_conflict(*result);
  ASSERT_TRUE(at_start);
  EXPECT_EQ(at_start->to_string(), "/admin/listen: the sites on port 2019 listen on every address, the admin API's "
                                   "default 127.0.0.1:2019 among them: set /admin/listen to another address, or "
                                   "/admin/disabled to true");
}

TEST(JsonErrors, ListenAddresses) {
  const std::string srv0 = "/apps/http/servers/srv0/listen";
  const std::string srv1 = "/apps/http/servers/srv1/listen";
  const std::string shape = "e.g. [\":8080\"] or [\"127.0.0.1:8080\", \"[::1]:8080\"]";
  auto listen = [](json& d, const std::string& server) -> json& { return d["apps"]["http"]["servers"][server]["listen"]; };
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array(); }),
            std::vector<std::string>{srv0 + ": must hold at least one address, " + shape});
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array({"127.0.0.1:80", "[::1]:81"}); }),
            std::vector<std::string>{srv0 + "/1: must use the port of the first address (80)"});
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array({"localhost:80"}); }),
            std::vector<std::string>{srv0 + "/0: the address must be an IP address, got \"localhost\""});
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array({":80", "127.0.0.1:80"}); }),
            std::vector<std::string>{srv0 + ": \":PORT\" (every address) must be the only address"});
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array({"::1:80"}); }),
            std::vector<std::string>{srv0 + "/0: must be \":PORT\" or \"ADDRESS:PORT\", " + shape});
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv0") = json::array({"[::1]:80", "[0::1]:80"}); }),
            (std::vector<std::string>{srv0 + "/1: duplicate address"}));
  EXPECT_EQ(errors_after([&](json& d) { listen(d, "srv1") = json::array({"[::ffff:127.0.0.1]:8080"}); }),
            std::vector<std::string>{srv1 + "/0: \"::ffff:127.0.0.1\" is an IPv4-mapped IPv6 address, which "
                                     "heft's IPv6 listeners (IPv6 only) cannot listen on: write it as "
                                     "127.0.0.1:8080"});
}

TEST(JsonErrors, StructureAndSemantics) {
  const std::string rp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["workers"] = "two"; }),
            std::vector<std::string>{"/apps/http/workers: must be an integer 0..1024"});
  EXPECT_EQ(errors_after([](json& d) { d["extra"] = 1; }), std::vector<std::string>{"/extra: unknown field"});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["load_balancing"]["selection_policy"].erase("key"); }),
            (std::vector<std::string>{rp + "/load_balancing/selection_policy/key: required for policy \"hash\"",
                                      rp + "/load_balancing/selection_policy/name: only header and cookie keys take a name"}));
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["load_balancing"]["selection_policy"]["policy"] = "fastest"; }),
            (std::vector<std::string>{rp + "/load_balancing/selection_policy/policy: unknown policy \"fastest\""}));
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["load_balancing"]["selection_policy"]["policy"] = "least_conn"; }),
            (std::vector<std::string>{rp + "/load_balancing/selection_policy/key: only a policy that hashes a key "
                                           "takes one (\"least_conn\" does not)"}));
  // A header name that could never match (it round-trips from the Heftfile, which refuses it too).
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["load_balancing"]["selection_policy"]["name"] = "X A\r\n"; }),
            std::vector<std::string>{rp + "/load_balancing/selection_policy/name: must be a header or cookie name "
                                          "(letters, digits and !#$%&'*+-.^_`|~)"});
  // An empty log path was refused only when opened, with an empty reason.
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][0]["log"] = {{"output", ""}}; }),
            std::vector<std::string>{"/apps/http/servers/srv0/routes/0/log/output: must be \"stderr\" or a file "
                                     "path"});
  // A token no client can send locks the admin API; a non-loopback one needs a token.
  EXPECT_EQ(errors_after([](json& d) { d["admin"]["token"] = "a\nb"; }),
            std::vector<std::string>{"/admin/token: must not contain control characters"});
  EXPECT_EQ(errors_after([](json& d) { d["admin"]["token"] = " x"; }),
            std::vector<std::string>{"/admin/token: must not start or end with a space (a header value's edge "
                                     "spaces are not part of it)"});
  EXPECT_EQ(errors_after([](json& d) { d["admin"] = {{"listen", "0.0.0.0:2019"}}; }),
            std::vector<std::string>{"/admin/token: required when the admin API listens on a non-loopback address "
                                     "(0.0.0.0:2019)"});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["handler"] = "file_server"; }),
            std::vector<std::string>{rp + "/handler: Caddy's \"file_server\" handler is not supported by heft (it "
                                          "has subroute, reverse_proxy, static_response, rewrite, headers and split)"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv1"]["listen"][0] = ":80"; }),
            std::vector<std::string>{"/apps/http/servers/srv1/listen/0: port 80 is also used by /apps/http/servers/srv0/listen"});
  EXPECT_EQ(errors_after([](json& d) {
              d["apps"]["http"]["servers"]["srv0"]["routes"][1]["match"][0]["host"][0] = "www.example.com";
            }),
            std::vector<std::string>{"/apps/http/servers/srv0/routes/1/match/0/host/0: host \"www.example.com\" is "
                                     "also matched at /apps/http/servers/srv0/routes/0/match/0/host/1"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][1]["default"] = true; }),
            std::vector<std::string>{"/apps/http/servers/srv0/routes/1/default: a second default route (first at "
                                     "/apps/http/servers/srv0/routes/0/default)"});
}

TEST(JsonErrors, HeaderNamesAreTokens) {
  const std::string rp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
  const std::string rule = " (use letters, digits and !#$%&'*+-.^_`|~)";
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["headers"]["request"][0]["name"] = "X A"; }),
            std::vector<std::string>{rp + "/headers/request/0/name: invalid header name \"X A\"" + rule});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["headers"]["response"][0]["name"] = "X-\xc3\x89"; }),
            std::vector<std::string>{rp + "/headers/response/0/name: invalid header name \"X-\\xC3\\x89\"" + rule});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["health_checks"]["active"]["headers"][0]["name"] = "Bad Name"; }),
            std::vector<std::string>{rp + "/health_checks/active/headers/0/name: invalid header name \"Bad Name\"" +
                                     rule});
}

TEST(JsonErrors, HeaderOpsLeaveFramingAndHostAlone) {
  const std::string rp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["headers"]["response"][0]["name"] = "Content-Length"; }),
            std::vector<std::string>{rp + "/headers/response/0/name: \"Content-Length\" cannot be changed: heft writes "
                                          "the message framing and hop-by-hop fields itself"});
  EXPECT_EQ(errors_after([](json& d) {
              proxy_of(d)["headers"]["request"].push_back({{"op", "delete"}, {"name", "Host"}});
            }),
            std::vector<std::string>{rp + "/headers/request/2/name: \"-Host\" would leave the request without the "
                                          "Host HTTP/1.1 requires; set it instead"});
}

TEST(JsonErrors, HeaderValuesWithControlCharacters) {
  const std::string rp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
  const std::string rule = "header values may hold no control character but tab";
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["headers"]["request"][1]["value"] = "a\nX-Injected: 1"; }),
            std::vector<std::string>{rp + "/headers/request/1/value: contains a line feed (0x0A); " + rule});
  EXPECT_EQ(errors_after([](json& d) {
              proxy_of(d)["headers"]["response"].push_back({{"op", "add"}, {"name", "X-A"}, {"value", "a\r"}});
            }),
            std::vector<std::string>{rp + "/headers/response/1/value: contains a carriage return (0x0D); " + rule});
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["health_checks"]["active"]["headers"][0]["value"] = std::string("h\0", 2); }),
            std::vector<std::string>{rp + "/health_checks/active/headers/0/value: contains a NUL byte (0x00); " + rule});
}

// A member name is part of the path: its line feed started a line of the
// message that named nothing.
TEST(JsonErrors, PathsStayOnOneLine) {
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["idle\ntimeout"] = "1s"; }),
            std::vector<std::string>{"/apps/http/idle\\ntimeout: unknown field (did you mean \"idle_timeout\"?)"});
}

TEST(JsonErrors, DefaultRouteBesideARouteForEveryHost) {
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["routes"][1].erase("match"); }),
            std::vector<std::string>{"/apps/http/servers/srv0/routes/0/default: has no effect: the route at "
                                     "/apps/http/servers/srv0/routes/1 has no host match and answers every host "
                                     "(remove one of the two)"});
}

TEST(JsonErrors, HealthUriIsOneRequestTarget) {
  const std::string rp = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
  EXPECT_EQ(errors_after([](json& d) { proxy_of(d)["health_checks"]["active"]["uri"] = "/h HTTP/1.1\r\nX: y"; }),
            std::vector<std::string>{rp + "/health_checks/active/uri: may hold no space, control character or non-ASCII "
                                          "byte (percent-encode them)"});
}

TEST(JsonErrors, EveryErrorIsReported) {
  auto errors = errors_after([](json& d) {
    upstreams_of(d)[0]["weight"] = 2000000;
    upstreams_of(d)[1]["backup"] = "yes";
    proxy_of(d)["transport"]["keepalive"] = -3;
  });
  EXPECT_EQ(errors.size(), 3u);
}

TEST(JsonErrors, NotAnObject) {
  Result<Config> result = from_json(json::array());
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].message, "must be an object");
  EXPECT_EQ(result.errors[0].to_string(), "the document: must be an object");  // not ": must be an object"
  std::string syntax;
  EXPECT_TRUE(parse_json_text("{\n  \"apps\": {,}\n}", syntax).is_discarded());
  EXPECT_EQ(syntax.rfind("not valid JSON at line 2, column 12: syntax error", 0), 0u) << syntax;
  EXPECT_TRUE(parse_json_text("[1e400]", syntax).is_discarded());
  EXPECT_NE(syntax.find("number overflow"), std::string::npos) << syntax;
}

// `log_format` in the Heftfile and `/logging/format` in the JSON form agree.
TEST(JsonForm, LogFormatInBothForms) {
  const Config text = parse_ok(":80 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  EXPECT_EQ(text.log_format, LogFormat::text);
  EXPECT_EQ(to_json(text)["logging"], json({{"format", "text"}}));
  const Config lines = parse_ok("{\n\tlog_format json\n}\n:80 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  EXPECT_EQ(lines.log_format, LogFormat::json);
  json document = to_json(lines);
  EXPECT_EQ(document["logging"], json({{"format", "json"}}));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, lines);
  document.erase("logging");  // absent: text
  EXPECT_EQ(from_json(document)->log_format, LogFormat::text);
  document["logging"] = {{"format", "xml"}};
  ASSERT_EQ(from_json(document).errors.size(), 1u);
  EXPECT_EQ(from_json(document).errors[0].to_string(), "/logging/format: must be \"text\" or \"json\"");
  document["logging"] = {{"level", "debug"}};
  EXPECT_EQ(from_json(document).errors[0].to_string(), "/logging/level: unknown field");
  Result<Config> bad = parse_heftfile("{\n\tlog_format yaml\n}\n:80 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].to_string(), "Heftfile:2:13: log_format must be text or json, got \"yaml\"");
}

// A document of many unknown keys lists the first 100 and counts the rest:
// a million of them kept more memory in errors than the document took.
TEST(JsonErrors, ListsTheFirstHundredAndCountsTheRest) {
  json document = to_json(parse_ok(":80 {\n\treverse_proxy 127.0.0.1:9001\n}\n"));
  for (int i = 0; i < 1000; ++i) document["admin"][fmt::format("k{}", i)] = 0;
  Result<Config> result = from_json(document);
  ASSERT_EQ(result.errors.size(), 101u);
  EXPECT_EQ(result.errors[0].to_string(), "/admin/k0: unknown field");
  EXPECT_EQ(result.errors[100].to_string(), "the document: 900 more errors not listed");
  EXPECT_FALSE(result.value);
}

}  // namespace
}  // namespace heft::config

namespace heft::config {
namespace {

TEST(JsonTlsErrors, NameThePath) {
  const std::string srv = "/apps/http/servers/srv0/tls_connection_policies";
  // A TLS server with nothing to serve: said at its policies.
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["tls_connection_policies"] = json::array(); }),
            std::vector<std::string>{srv + ": this server terminates TLS but apps.tls.certificates loads no certificate"});
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["http"]["servers"]["srv0"]["tls_connection_policies"] = json::object(); }),
            std::vector<std::string>{srv + ": must be an array of connection policies (an empty one: TLS with every "
                                           "certificate)"});
  // PEM that is none, and a policy member heft does not know.
  const std::string pem = "/apps/tls/certificates/load_pem/0";
  EXPECT_EQ(errors_after([](json& d) {
              d["apps"]["tls"]["certificates"]["load_pem"] = {{{"certificate", "x"}, {"key", "y"}}};
              d["apps"]["http"]["servers"]["srv0"]["tls_connection_policies"] = {{{"protocol_min", "tls1.2"}}};
            }),
            (std::vector<std::string>{
                pem + "/certificate: the PEM text is not a PEM certificate (no \"-----BEGIN CERTIFICATE-----\" block "
                      "that parses)",
                pem + "/key: the PEM text is not a PEM private key (or is encrypted: heft reads unencrypted keys)",
                srv + "/0/protocol_min: unknown field"}));
  EXPECT_EQ(errors_after([](json& d) { d["apps"]["tls"]["certificates"]["load_files"] = {{{"key", "/nonexistent"}}}; }),
            std::vector<std::string>{"/apps/tls/certificates/load_files/0/certificate: required"});
  EXPECT_EQ(errors_after([](json& d) {
              d["apps"]["tls"]["certificates"]["load_files"] = {{{"certificate", "/nonexistent"}, {"key", "/nonexistent"}}};
            }),
            (std::vector<std::string>{
                "/apps/tls/certificates/load_files/0/certificate: cannot read \"/nonexistent\": No such file or directory",
                "/apps/tls/certificates/load_files/0/key: cannot read \"/nonexistent\": No such file or directory"}));
}

}  // namespace
}  // namespace heft::config
