// The audit trail (observe/audit.h) and GET /config/history: every change is
// one numbered entry with before → after and the revision, written as one log
// line and kept, the last 1,000, for the admin API.
#include "observe/audit.h"

#include "observe/captured_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "admin/admin_api.h"
#include "config/heftfile.h"
#include "config/json.h"

namespace heft::observe {
namespace {

using json = nlohmann::json;
const char* kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

config::Config sample(const std::string& global = "", uint32_t weight = 5) {
  auto parsed = config::parse_heftfile(
      fmt::format("{}:8080 {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:9001 weight 95\n\t\tto 127.0.0.1:9002 weight {}\n\t}}\n}}\n",
                  global, weight));
  EXPECT_TRUE(parsed.ok());
  return *parsed;
}

admin::AdminRequest request(std::string method, std::string target, std::string body = "") {
  admin::AdminRequest r;
  r.remote = "127.0.0.1:40000";
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.headers["host"] = "localhost:2019";
  r.headers["content-type"] = "application/json";
  r.headers["user-agent"] = "audit-test";
  return r;
}

json last_entry() {
  const auto history = audit_history(1);
  return json::parse(history.dump()).at(0);
}

TEST(Audit, AConfigChangeIsOneNumberedEntryWithBeforeAndAfter) {
  CapturedLog captured;
  ConfigChange change;
  change.source = "admin API";
  change.remote = "[::1]:5000";
  change.method = "PATCH";
  change.path = "/config/x";
  change.etag = "\"0123\"";
  change.before = config::to_json(sample("", 5));
  change.after = config::to_json(sample("", 7));
  const uint64_t revision = audit_config_change(change);
  EXPECT_EQ(revision, config_revision());
  const json entry = last_entry();
  EXPECT_EQ(entry["kind"], "config");
  EXPECT_EQ(entry["revision"], revision);
  EXPECT_EQ(entry["remote"], "[::1]:5000");
  EXPECT_EQ(entry["method"], "PATCH");
  EXPECT_EQ(entry["etag"], "\"0123\"");
  ASSERT_EQ(entry["changes"].size(), 1u);
  EXPECT_EQ(entry["changes"][0], std::string(kUpstreams).substr(7) + "/1/weight: 5 \u2192 7");
  EXPECT_EQ(entry["changes_total"], 1);
  // One line, with the same number, the revision and the change.
  const std::string text = captured.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find(fmt::format("Z info audit #{} config revision {} (\"0123\"): admin API PATCH /config/x from "
                                  "[::1]:5000: /apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/1/"
                                  "weight: 5 \u2192 7\n",
                                  entry["seq"].get<uint64_t>(), revision)),
            std::string::npos)
      << text;
  // The next one is the next revision.
  change.before = change.after;
  change.after = config::to_json(sample("", 9));
  EXPECT_EQ(audit_config_change(change), revision + 1);
  EXPECT_EQ(last_entry()["seq"], entry["seq"].get<uint64_t>() + 1);
}

TEST(Audit, TheAdminTokenIsNeverWritten) {
  CapturedLog captured;
  ConfigChange change;
  change.source = "SIGHUP reload of Heftfile";
  change.before = config::to_json(sample("{\n\tadmin_token first-secret\n}\n"));
  change.after = config::to_json(sample("{\n\tadmin_token second-secret\n}\n"));
  audit_config_change(change);
  const std::string text = captured.text() + audit_history(1).dump();
  EXPECT_EQ(text.find("first-secret"), std::string::npos) << text;
  EXPECT_EQ(text.find("second-secret"), std::string::npos) << text;
  EXPECT_NE(text.find("/admin/token: \"(hidden; fingerprint "), std::string::npos) << text;
}

TEST(Audit, ManyChangesAreListedUpToTwentyAndCounted) {
  CapturedLog captured;
  ConfigChange change;
  change.source = "admin API";
  change.before = json::object();
  change.after = json::object();
  for (int i = 0; i < 50; ++i) change.after[fmt::format("k{:02}", i)] = i;
  audit_config_change(change);
  const json entry = last_entry();
  EXPECT_EQ(entry["changes"].size(), kAuditChangesListed);
  EXPECT_EQ(entry["changes_total"], 50);
  EXPECT_NE(captured.text().find("; and 30 more\n"), std::string::npos) << captured.text();
}

TEST(Audit, HealthAndWeightEntriesNameTheRevisionInService) {
  CapturedLog captured;
  const uint64_t revision = config_revision();
  const std::string health = audit_health("site0", ":8080", "10.0.0.5:80", "healthy", "unhealthy",
                                          "status 500 (expected 2xx); 1 consecutive failure", LogLevel::warn);
  EXPECT_EQ(health, "pool site0 backend 10.0.0.5:80: healthy \u2192 unhealthy (status 500 (expected 2xx); 1 consecutive "
                    "failure)");
  json entry = last_entry();
  EXPECT_EQ(entry["kind"], "health");
  EXPECT_EQ(entry["revision"], revision);
  EXPECT_EQ(entry["before"], "healthy");
  EXPECT_EQ(entry["after"], "unhealthy");
  EXPECT_EQ(entry["site"], ":8080");
  upstream::WeightEvent event{"site0", "10.0.0.5:80", upstream::WeightReason::latency, 1.0, 0.25,
                              "latency 212.4ms > limit 3.1ms"};
  EXPECT_EQ(audit_weight(event, ":8080"),
            "pool site0 backend 10.0.0.5:80: weight factor 1.00 \u2192 0.25 (latency: latency 212.4ms > limit 3.1ms)");
  entry = last_entry();
  EXPECT_EQ(entry["kind"], "weight");
  EXPECT_EQ(entry["before"], 1.0);
  EXPECT_EQ(entry["after"], 0.25);
  EXPECT_EQ(entry["reason"], "latency");
  EXPECT_EQ(config_revision(), revision);  // neither is a new configuration
  const std::string text = captured.text();
  EXPECT_NE(text.find(fmt::format("Z warn audit #{} health (revision {}): pool site0", entry["seq"].get<uint64_t>() - 1,
                                  revision)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("Z warn audit #{} weight (revision {}): pool site0", entry["seq"].get<uint64_t>(),
                                  revision)),
            std::string::npos)
      << text;
}

TEST(Audit, KeepsTheLastThousand) {
  CapturedLog captured;  // 1,010 lines, away from the test's output
  for (int i = 0; i < 1010; ++i) audit_health("site0", ":8080", "a:1", "up", "out", fmt::format("n{}", i), LogLevel::info);
  const json kept = json::parse(audit_history().dump());
  ASSERT_EQ(kept.size(), kAuditKept);
  EXPECT_EQ(kept.back()["reason"], "n1009");
  EXPECT_EQ(kept.front()["reason"], "n10");
  EXPECT_EQ(kept.back()["seq"].get<uint64_t>() - kept.front()["seq"].get<uint64_t>(), kAuditKept - 1);
  EXPECT_EQ(json::parse(audit_history(3).dump()).front()["reason"], "n1007");
}

// Through the admin API: a write is audited with who sent it; GET
// /config/history answers the entries, at most `limit`.
TEST(Audit, AdminWritesAreAuditedAndHistoryAnswersThem) {
  CapturedLog captured;
  admin::AdminHooks hooks;
  hooks.apply = [](const config::Config&, std::string&) { return true; };
  admin::AdminApi api(sample(), hooks, "");
  admin::AdminResponse r = api.handle(request("PATCH", std::string(kUpstreams) + "/1/weight", "8"));
  ASSERT_EQ(r.status, 200) << r.body;
  r = api.handle(request("GET", "/config/history?limit=1"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json history = json::parse(r.body);
  ASSERT_EQ(history.size(), 1u);
  const json& entry = history[0];
  EXPECT_EQ(entry["kind"], "config");
  EXPECT_EQ(entry["source"], "admin API");
  EXPECT_EQ(entry["remote"], "127.0.0.1:40000");
  EXPECT_EQ(entry["method"], "PATCH");
  EXPECT_EQ(entry["path"], std::string(kUpstreams) + "/1/weight");
  EXPECT_EQ(entry["user_agent"], "audit-test");
  EXPECT_EQ(entry["etag"], api.etag());
  EXPECT_EQ(entry["changes"][0], std::string(kUpstreams).substr(7) + "/1/weight: 5 \u2192 8");
  // Written in order: seq, ts, kind, revision first.
  EXPECT_EQ(r.body.rfind("[{\"seq\":", 0), 0u) << r.body;
  // A reload from elsewhere names its source.
  ASSERT_EQ(api.load(sample("", 9), "SIGHUP reload of /etc/heft/Heftfile").status, 200);
  EXPECT_EQ(last_entry()["source"], "SIGHUP reload of /etc/heft/Heftfile");
  // A write refused changes nothing and is no entry (its warning line, within
  // a limit other tests here may have used up, is HeftLogTest's to check).
  const uint64_t seq = last_entry()["seq"];
  r = api.handle(request("PATCH", std::string(kUpstreams) + "/1/weight", "\"heavy\""));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(last_entry()["seq"], seq);
  // The endpoint reads only, within its bound.
  EXPECT_EQ(json::parse(api.handle(request("GET", "/config/history")).body).size(),
            std::min<size_t>(kAuditKept, seq));
  EXPECT_EQ(api.handle(request("HEAD", "/config/history/")).status, 200);
  for (const char* bad : {"0", "1001", "x", "", "-1"}) {
    r = api.handle(request("GET", std::string("/config/history?limit=") + bad));
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("limit must be an integer 1..1000"), std::string::npos) << r.body;
  }
  r = api.handle(request("POST", "/config/history", "{}"));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers.at(0), std::make_pair(std::string("Allow"), std::string("GET, HEAD")));
}

}  // namespace
}  // namespace heft::observe
