// A write inside one site's handler, through the admin API of a real
// in-process Proxy with three sites (one port, three hosts) over demo
// backends: it changes that site's pool alone (the other pools keep their
// snapshot objects), a bad one is refused with its JSON pointer and changes
// nothing, and If-Match guards it as any write.
#include <gtest/gtest.h>

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "admin/proxy_stack.h"
#include "admin/state_file.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;
using test::HttpClient;
using test::Response;

// The upstreams of site `site` (route `site` of srv0: one port, one route a host).
std::string upstreams_of(int site) {
  return fmt::format("/config/apps/http/servers/srv0/routes/{}/handle/0/routes/0/handle/0/upstreams", site);
}

// Three sites a.test, b.test and c.test on one port, each over backends x and y
// (weights 3 and 1), with a state file.
struct ThreeSites : test_stack::ProxyStack {
  ThreeSites() {
    start_backends({"x", "y"});
    start(
        [&](uint16_t port, uint16_t admin_port) {
          std::string heftfile = fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n", admin_port);
          for (const char* host : {"a.test", "b.test", "c.test"})
            heftfile += fmt::format("http://{}:{} {{\n\treverse_proxy 127.0.0.1:{}?weight=3 127.0.0.1:{}?weight=1\n}}\n",
                                    host, port, backends[0]->port(), backends[1]->port());
          return heftfile;
        },
        json::object());
  }

  // Who answers `n` requests to `host`.
  std::map<std::string, int> split(const std::string& host, int n) {
    HttpClient client(port);
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i)
      counts[client.request("GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n").header("x-backend")]++;
    return counts;
  }
  std::vector<const upstream::PoolSnapshot*> snapshots() const {
    std::vector<const upstream::PoolSnapshot*> out;
    for (size_t i = 0; i < 3; ++i) out.push_back(proxy->pool(i)->snapshot().get());
    return out;
  }
};

TEST(SiteWrite, AWeightChangesItsPoolAloneAndTheOthersKeepTheirSnapshots) {
  ThreeSites stack;
  ASSERT_TRUE(stack.admin);
  // The first change after a start saves the whole state file; the ones after it are journaled.
  ASSERT_EQ(stack.admin_call("PATCH", upstreams_of(0) + "/1/weight", "2").status, 200);
  const std::vector<std::shared_ptr<upstream::Pool>> pools = {stack.proxy->pool(0), stack.proxy->pool(1),
                                                              stack.proxy->pool(2)};
  const auto before = stack.snapshots();
  Response r = stack.admin_call("PATCH", upstreams_of(1) + "/1/weight", "3");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto after = stack.snapshots();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(stack.proxy->pool(i), pools[i]) << "site " << i << " got a new pool";
  EXPECT_EQ(after[0], before[0]) << "site 0's pool was rebuilt by a change to site 1";
  EXPECT_EQ(after[2], before[2]) << "site 2's pool was rebuilt by a change to site 1";
  EXPECT_NE(after[1], before[1]) << "site 1's pool did not take its new weight";
  EXPECT_EQ(stack.admin_call("GET", upstreams_of(1) + "/1/weight").body, "3\n");
  // Served as changed: b.test now splits 3:3, the others as they were.
  auto b = stack.split("b.test", 600);
  EXPECT_NEAR(b["x"], 300, 3);
  EXPECT_NEAR(b["y"], 300, 3);
  auto c = stack.split("c.test", 400);
  EXPECT_NEAR(c["x"], 300, 2);
  EXPECT_NEAR(c["y"], 100, 2);
  // Saved: the state file and its journal give the change back.
  auto saved = load_state_file(stack.dir + "/autosave.json");
  ASSERT_TRUE(saved.ok()) << saved.errors[0].to_string();
  EXPECT_EQ(saved->sites[1].proxy.upstreams[1].weight, 3u);
  EXPECT_EQ(saved->sites[0].proxy.upstreams[1].weight, 2u);
  EXPECT_GT(test::read_file(stack.dir + "/autosave.json.journal").size(), 0u);
}

TEST(SiteWrite, AnInvalidChangeIsRefusedWithItsPointerAndChangesNothing) {
  ThreeSites stack;
  ASSERT_TRUE(stack.admin);
  ASSERT_EQ(stack.admin_call("PATCH", upstreams_of(2) + "/0/weight", "3").status, 200);  // the whole state saved once
  const Response tree = stack.admin_call("GET", "/config/");
  const auto snapshots = stack.snapshots();
  const std::string journal = test::read_file(stack.dir + "/autosave.json.journal");
  const auto split = stack.split("b.test", 400);
  ASSERT_EQ(split.at("x") + split.at("y"), 400);
  struct Case {
    std::string method, path, body, error;
  };
  const std::string pointer = upstreams_of(1).substr(7);
  const std::vector<Case> cases = {
      {"PATCH", upstreams_of(1) + "/1/weight", "-3", pointer + "/1/weight: must be an integer 0..1000000"},
      {"PATCH", upstreams_of(1) + "/0/max_fails", "\"x\"", pointer + "/0/max_fails: must be an integer"},
      {"POST", upstreams_of(1), R"({"dial": "127.0.0.1:1", "wieght": 2})", pointer + "/2/wieght: unknown field"},
      {"DELETE", upstreams_of(1) + "/0/dial", "", pointer + "/0/dial: required"},
  };
  for (const Case& c : cases) {
    Response r = stack.admin_call(c.method, c.path, c.body);
    EXPECT_EQ(r.status, 400) << c.path << ": " << r.body;
    EXPECT_NE(r.body.find(c.error), std::string::npos) << c.path << ": " << r.body;
  }
  const Response now = stack.admin_call("GET", "/config/");
  EXPECT_EQ(now.body, tree.body);
  EXPECT_EQ(now.header("etag"), tree.header("etag"));
  EXPECT_EQ(stack.snapshots(), snapshots);
  EXPECT_EQ(test::read_file(stack.dir + "/autosave.json.journal"), journal);
  EXPECT_EQ(stack.split("b.test", 400), split);
}

TEST(SiteWrite, IfMatchGuardsEveryWrite) {
  ThreeSites stack;
  ASSERT_TRUE(stack.admin);
  ASSERT_EQ(stack.admin_call("PATCH", upstreams_of(0) + "/0/weight", "5").status, 200);
  const std::string tag = stack.admin_call("GET", "/config/").header("etag");
  Response first = stack.admin_call("PATCH", upstreams_of(1) + "/0/weight", "6", "If-Match: " + tag + "\r\n");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_NE(first.header("etag"), tag);
  EXPECT_EQ(stack.admin_call("GET", "/config/").header("etag"), first.header("etag"));
  // A tag read before that change is stale for a write anywhere, in the same site or another.
  for (int site : {1, 2}) {
    Response stale = stack.admin_call("PATCH", upstreams_of(site) + "/0/weight", "7", "If-Match: " + tag + "\r\n");
    EXPECT_EQ(stale.status, 412) << stale.body;
  }
  EXPECT_EQ(stack.admin_call("GET", upstreams_of(2) + "/0/weight").body, "3\n");
  Response current =
      stack.admin_call("PATCH", upstreams_of(2) + "/0/weight", "7", "If-Match: " + first.header("etag") + "\r\n");
  EXPECT_EQ(current.status, 200) << current.body;
  // A write that changes nothing keeps the tag.
  Response same = stack.admin_call("PATCH", upstreams_of(2) + "/0/weight", "7");
  EXPECT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(same.header("etag"), current.header("etag"));
}

}  // namespace
}  // namespace heft::admin
