// The admin API's transactions, access checks and ETags, without a network
// (admin/admin_api.h): every refusal is a 4xx with {"error":...} and leaves
// the configuration byte-for-byte as it was.
#include "admin/admin_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "admin/state_file.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "integration/process_util.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;
const char* kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

config::Config sample_config(const std::string& global = "") {
  auto parsed = config::parse_heftfile(global +
                                       ":8080 {\n"
                                       "\treverse_proxy {\n"
                                       "\t\tto 127.0.0.1:9001 weight 95\n"
                                       "\t\tto 127.0.0.1:9002 weight 5\n"
                                       "\t}\n"
                                       "}\n");
  EXPECT_TRUE(parsed.ok()) << (parsed.errors.empty() ? "" : parsed.errors[0].to_string());
  return *parsed;
}

AdminRequest request(std::string method, std::string target, std::string body = "",
                     std::string type = "application/json") {
  AdminRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers["host"] = "localhost:2019";
  if (!type.empty()) r.headers["content-type"] = type;
  return r;
}

struct Fixture : ::testing::Test {
  std::vector<config::Config> applied;
  bool refuse = false;
  AdminHooks hooks() {
    AdminHooks h;
    h.apply = [this](const config::Config& c, std::string& error) {
      if (refuse) {
        error = "port 8081 is in use";
        return false;
      }
      applied.push_back(c);
      return true;
    };
    return h;
  }
};

using AdminApiTest = Fixture;

TEST_F(AdminApiTest, GetReturnsTheTreeWithAnETag) {
  AdminApi api(sample_config(), hooks(), "");
  AdminResponse r = api.handle(request("GET", "/config/"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), config::to_json(sample_config()));
  ASSERT_FALSE(r.headers.empty());
  EXPECT_EQ(r.headers[0].first, "ETag");
  EXPECT_EQ(r.headers[0].second, api.etag());
  r = api.handle(request("GET", std::string(kUpstreams) + "/1/weight"));
  EXPECT_EQ(r.body, "5\n");
}

TEST_F(AdminApiTest, CanaryScriptPutOfUpstreamsIsAppliedAndPersisted) {
  std::string state = test::make_temp_dir() + "/autosave.json";
  AdminApi api(sample_config(), hooks(), state);
  std::string before_tag = api.etag();
  AdminResponse r = api.handle(request(
      "PUT", kUpstreams, R"([{"dial":"127.0.0.1:9001","weight":80},{"dial":"127.0.0.1:9002","weight":20}])"));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0].sites[0].proxy.upstreams[0].weight, 80u);
  EXPECT_EQ(applied[0].sites[0].proxy.upstreams[1].weight, 20u);
  EXPECT_NE(api.etag(), before_tag);
  auto saved = load_state_file(state);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->sites[0].proxy.upstreams[1].weight, 20u);
  EXPECT_EQ(config::to_json(*saved), api.config_json());
}

TEST_F(AdminApiTest, PatchPostDeleteChangeOneThingEach) {
  AdminApi api(sample_config(), hooks(), "");
  ASSERT_EQ(api.handle(request("PATCH", std::string(kUpstreams) + "/0/weight", "50")).status, 200);
  ASSERT_EQ(api.handle(request("POST", kUpstreams, R"({"dial":"127.0.0.1:9003","weight":7})")).status, 200);
  ASSERT_EQ(api.handle(request("DELETE", std::string(kUpstreams) + "/1", "", "")).status, 200);
  const auto& ups = applied.back().sites[0].proxy.upstreams;
  ASSERT_EQ(ups.size(), 2u);
  EXPECT_EQ(ups[0].weight, 50u);
  EXPECT_EQ(ups[1].name, "127.0.0.1:9003");
}

// A pool's transport options go through the JSON reader: keepalive_timeout
// (its value is the pool's for connections parked from then on).
TEST_F(AdminApiTest, PatchOfKeepaliveTimeoutIsAppliedAndABadOneNamesItsPath) {
  AdminApi api(sample_config(), hooks(), "");
  const std::string transport = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/transport";
  ASSERT_EQ(api.handle(request("PATCH", transport + "/keepalive_timeout", R"("5s")")).status, 200);
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied.back().sites[0].proxy.keepalive_timeout, std::chrono::seconds(5));
  const std::string before = api.config_json().dump();
  for (const auto& [method, target, body] :
       {std::tuple{"PATCH", transport + "/keepalive_timeout", std::string(R"("soon")")},
        std::tuple{"PATCH", transport + "/keepalive_timeout", std::string("-1")},
        std::tuple{"PUT", transport, std::string(R"({"protocol":"http","keepalive_timeout":"1.5ms"})")}}) {
    AdminResponse r = api.handle(request(method, target, body));
    EXPECT_EQ(r.status, 400) << method << " " << target << " " << body << " → " << r.body;
    const json error = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << r.body;
    EXPECT_NE(error.value("error", "").find("/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/transport/"
                                            "keepalive_timeout: must be a duration"),
              std::string::npos)
        << r.body;
    EXPECT_EQ(api.config_json().dump(), before);
  }
  EXPECT_EQ(applied.size(), 1u);
}

TEST_F(AdminApiTest, BadInputsAreRefusedWithAReasonAndChangeNothing) {
  AdminApi api(sample_config(), hooks(), "");
  const std::string before = api.config_json().dump();
  struct Case {
    AdminRequest req;
    int status;
    std::string reason;
  };
  std::vector<Case> cases = {
      {request("PUT", kUpstreams, R"([{"dial":"127.0.0.1:9001","weight":)"), 400, "not valid JSON"},
      {request("PATCH", std::string(kUpstreams) + "/0/weight", R"("heavy")"), 400, "weight"},
      {request("PATCH", std::string(kUpstreams) + "/0/weight", "-5"), 400, "weight"},
      {request("POST", std::string(kUpstreams) + "/0/colour", R"("red")"), 400, "colour"},
      {request("PATCH", "/config/apps/http/servers/srv7/routes", "[]"), 404, "srv7"},
      {request("DELETE", "/config/apps/http/nothing", "", ""), 404, "nothing"},
      {request("PUT", kUpstreams, "[]", "text/plain"), 400, "Content-Type"},
      {request("POST", "/load", "{}", "application/x-www-form-urlencoded"), 400, "Content-Type"},
      {request("POST", "/load", R"({"apps":{"http":{"servers":{"srv0":{"listen":[":8080"],"routes":"x"}}}}})"), 400,
       "routes"},
      {request("PATCH", "/config/admin/listen", R"("127.0.0.1:2020")"), 400, "admin"},
      {request("PATCH", "/config/apps/http/workers", "8"), 400, "workers takes effect only at start"},
      {request("GET", "/nope"), 404, "/nope"},
      {request("GET", "/load"), 405, "POST"},
  };
  for (const Case& c : cases) {
    AdminResponse r = api.handle(c.req);
    EXPECT_EQ(r.status, c.status) << c.req.method << " " << c.req.target << " " << c.req.body << " → " << r.body;
    json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    EXPECT_NE(body.value("error", "").find(c.reason), std::string::npos) << r.body;
    EXPECT_EQ(api.config_json().dump(), before);
  }
  EXPECT_TRUE(applied.empty());
}

// The admin listener and the worker count take effect only at start: a
// /load that does not set them keeps the running ones; another value is refused.
TEST_F(AdminApiTest, LoadKeepsStartOnlySettingsItDoesNotSet) {
  AdminApi api(sample_config("{\n\tadmin 127.0.0.1:2999\n\tworkers 3\n}\n"), hooks(), "");
  const auto at_admin = [](AdminRequest r) {
    r.headers["host"] = "127.0.0.1:2999";
    return r;
  };
  const std::string heftfile = ":8080 {\n\treverse_proxy 127.0.0.1:9001\n}\n";
  AdminResponse r = api.handle(at_admin(request("POST", "/load", heftfile, "text/heftfile")));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied.back().admin.address, "127.0.0.1:2999");
  EXPECT_EQ(applied.back().workers, 3u);
  EXPECT_EQ(api.config_json()["apps"]["http"]["workers"], 3);
  EXPECT_EQ(api.config_json()["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0]
                             ["upstreams"].size(),
            1u);
  const std::string before = api.config_json().dump();
  r = api.handle(at_admin(request("POST", "/load", "{\n\tworkers 4\n}\n" + heftfile, "text/heftfile")));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("workers takes effect only at start (running: 3)"), std::string::npos) << r.body;
  r = api.handle(at_admin(request("POST", "/load", "{\n\tadmin 127.0.0.1:2998\n}\n" + heftfile, "text/heftfile")));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("running: 127.0.0.1:2999"), std::string::npos) << r.body;
  EXPECT_EQ(api.config_json().dump(), before);
  EXPECT_EQ(applied.size(), 1u);
}

// The sites of a /load are checked against the admin address in service: a
// default admin section (a file without an admin line) keeps it, so :2019 is
// free; a site on the running API's port is refused before the proxy sees it.
TEST_F(AdminApiTest, LoadChecksTheSitesAgainstTheRunningAdminAddress) {
  AdminApi api(sample_config("{\n\tadmin 127.0.0.1:2999\n}\n"), hooks(), "");
  const auto at_admin = [](AdminRequest r) {
    r.headers["host"] = "127.0.0.1:2999";
    return r;
  };
  auto on_2019 = config::parse_heftfile(":2019 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  ASSERT_TRUE(on_2019.ok());
  AdminResponse r = api.handle(at_admin(request("POST", "/load", config::to_json(*on_2019).dump())));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied.back().admin.address, "127.0.0.1:2999");
  const std::string before = api.config_json().dump();
  r = api.handle(at_admin(request("POST", "/load", ":2999 {\n\treverse_proxy 127.0.0.1:9001\n}\n", "text/heftfile")));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body, nullptr, false).value("error", ""),
            "the sites on port 2999 would listen on every address, the running admin API's 127.0.0.1:2999 among "
            "them: serve them on another port (the admin address changes only at restart)");
  EXPECT_EQ(api.config_json().dump(), before);
  EXPECT_EQ(applied.size(), 1u);
}

TEST_F(AdminApiTest, ApplyRefusalIsA4xxAndKeepsTheOldConfig) {
  AdminApi api(sample_config(), hooks(), "");
  const std::string before = api.config_json().dump();
  refuse = true;
  AdminResponse r = api.handle(request("PATCH", std::string(kUpstreams) + "/0/weight", "1"));
  EXPECT_EQ(r.status / 100, 4);
  EXPECT_NE(r.body.find("port 8081 is in use"), std::string::npos);
  EXPECT_EQ(api.config_json().dump(), before);
}

TEST_F(AdminApiTest, StaleIfMatchIs412) {
  AdminApi api(sample_config(), hooks(), "");
  std::string tag = api.etag();
  AdminRequest first = request("PATCH", std::string(kUpstreams) + "/0/weight", "10");
  first.headers["if-match"] = tag;
  ASSERT_EQ(api.handle(first).status, 200);
  AdminRequest second = request("PATCH", std::string(kUpstreams) + "/0/weight", "20");
  second.headers["if-match"] = tag;
  const std::string before = api.config_json().dump();
  EXPECT_EQ(api.handle(second).status, 412);
  EXPECT_EQ(api.config_json().dump(), before);
  second.headers["if-match"] = api.etag();
  EXPECT_EQ(api.handle(second).status, 200);
  // A list matches when any of its tags does (RFC 9110).
  AdminRequest third = request("PATCH", std::string(kUpstreams) + "/0/weight", "30");
  third.headers["if-match"] = tag + ", " + api.etag();
  EXPECT_EQ(api.handle(third).status, 200);
  third.headers["if-match"] = tag + ", \"nope\"";
  EXPECT_EQ(api.handle(third).status, 412);
  third.headers["if-match"] = "W/" + api.etag();  // If-Match compares strongly: a weak tag never matches
  EXPECT_EQ(api.handle(third).status, 412);
}

TEST_F(AdminApiTest, LoadReplacesEverythingFromJsonOrHeftfile) {
  AdminApi api(sample_config(), hooks(), "");
  config::Config next = sample_config();
  next.sites[0].proxy.upstreams.pop_back();
  ASSERT_EQ(api.handle(request("POST", "/load", config::to_json(next).dump())).status, 200);
  EXPECT_EQ(applied.back().sites[0].proxy.upstreams.size(), 1u);
  AdminResponse r = api.handle(request("POST", "/load", ":8080 {\n\treverse_proxy 127.0.0.1:9005\n}\n", "text/heftfile"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(applied.back().sites[0].proxy.upstreams[0].name, "127.0.0.1:9005");
  r = api.handle(request("POST", "/load", ":8080 {\n\treverse_proxy {\n", "text/heftfile"));
  EXPECT_EQ(r.status, 400);
}

TEST_F(AdminApiTest, ForeignHostOrOriginIsForbidden) {
  AdminApi api(sample_config(), hooks(), "");
  for (const char* host : {"127.0.0.1:2019", "localhost:2019", "[::1]:2019"}) {
    AdminRequest r = request("GET", "/config/");
    r.headers["host"] = host;
    EXPECT_EQ(api.handle(r).status, 200) << host;
  }
  for (const char* host : {"evil.example:2019", "localhost:80", "localhost", ""}) {
    AdminRequest r = request("GET", "/config/");
    r.headers["host"] = host;
    EXPECT_EQ(api.handle(r).status, 403) << host;
  }
  AdminRequest r = request("GET", "/config/");
  r.headers["origin"] = "http://evil.example";
  EXPECT_EQ(api.handle(r).status, 403);
  r.headers["origin"] = "http://localhost:2019";
  EXPECT_EQ(api.handle(r).status, 200);
}

TEST_F(AdminApiTest, TokenIsRequiredWhenSetAndForNonLoopback) {
  config::Config c = sample_config("{\n\tadmin_token s3cret\n}\n");
  AdminApi api(c, hooks(), "");
  AdminRequest r = request("GET", "/config/");
  EXPECT_EQ(api.handle(r).status, 401);
  r.headers["authorization"] = "Bearer wrong!";
  EXPECT_EQ(api.handle(r).status, 401);
  r.headers["authorization"] = "Bearer s3cret";
  EXPECT_EQ(api.handle(r).status, 200);

  config::AdminConfig open;
  open.address = "0.0.0.0:2019";
  EXPECT_NE(admin_config_error(open).find("/admin/token"), std::string::npos);
  open.token = "t";
  EXPECT_EQ(admin_config_error(open), "");
  open.token.clear();
  open.address = "127.0.0.1:2019";
  EXPECT_EQ(admin_config_error(open), "");
}

// A whole configuration loaded answers what it changed in the running one
// (live changes it undoes among them); ?dry_run=1 answers the same and
// changes nothing: no apply, no save, the same tree and ETag.
TEST_F(AdminApiTest, LoadAnswersWhatItChangesAndADryRunChangesNothing) {
  const std::string state = test::make_temp_dir() + "/state.json";
  AdminApi api(sample_config(), hooks(), state);
  ASSERT_EQ(api.handle(request("PATCH", std::string(kUpstreams) + "/1/weight", "50")).status, 200);
  ASSERT_EQ(applied.size(), 1u);
  const std::string tag = api.etag();
  const std::string saved = test::read_file(state);
  const std::string file = config::to_json(sample_config()).dump();
  const std::string pointer = std::string(kUpstreams).substr(7) + "/1/weight";
  AdminResponse r = api.handle(request("POST", "/load?dry_run=1", file));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"dry_run": true, "changes": [{"pointer": ")" + pointer +
                                             R"(", "before": 50, "after": 5, "text": ")" + pointer + R"(: 50 → 5"}]})"));
  EXPECT_EQ(applied.size(), 1u);
  EXPECT_EQ(api.etag(), tag);
  EXPECT_EQ(test::read_file(state), saved);
  // A dry run of a configuration that would be refused is refused the same way.
  r = api.handle(request("POST", "/load?dry_run=true", R"({"apps":{"http":{"workers":"two"}}})"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(api.handle(request("POST", "/load?dry_run=maybe", file)).status, 400);
  // Loaded for real: the same list, now applied and saved.
  r = api.handle(request("POST", "/load", file));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["changes"][0]["text"], pointer + ": 50 → 5");
  EXPECT_FALSE(json::parse(r.body).contains("dry_run"));
  EXPECT_EQ(applied.size(), 2u);
  EXPECT_NE(api.etag(), tag);
  EXPECT_EQ(load_state_file(state)->sites[0].proxy.upstreams[1].weight, 5u);
  // Nothing left to change: an empty list.
  r = api.handle(request("POST", "/load?dry_run=0", file));
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"changes": []})"));
  // A SIGHUP reload is the same transaction.
  EXPECT_EQ(api.load(sample_config("{\n\tworkers 0\n}\n"), "SIGHUP reload of Heftfile").status, 200);
}

TEST_F(AdminApiTest, InstanceIsWhatTheHookSays) {
  AdminHooks h = hooks();
  h.instance = [] { return json{{"config", "/etc/heft/Heftfile"}, {"state", "/var/lib/heft/Heftfile-1.json"}}; };
  AdminApi api(sample_config(), std::move(h), "");
  AdminResponse r = api.handle(request("GET", "/heft/instance"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["config"], "/etc/heft/Heftfile");
  EXPECT_EQ(api.handle(request("POST", "/heft/instance", "{}")).status, 405);
  AdminRequest stranger = request("GET", "/heft/instance");
  stranger.headers["host"] = "evil.example:2019";
  EXPECT_EQ(api.handle(stranger).status, 403);  // checked as every endpoint is
}

TEST(StateFile, WritesAtomicallyAndLoads) {
  std::string dir = test::make_temp_dir();
  std::string path = dir + "/nested/autosave.json";
  std::string error;
  ASSERT_TRUE(write_state_file(path, config::to_json(sample_config()).dump(), error)) << error;
  ASSERT_TRUE(write_state_file(path, config::to_json(sample_config()).dump(), error)) << error;
  auto loaded = load_state_file(path);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded, sample_config());
  EXPECT_FALSE(load_state_file(dir + "/missing.json").ok());
  EXPECT_FALSE(write_state_file("/proc/nope/autosave.json", "{}", error));
}

}  // namespace
}  // namespace heft::admin
