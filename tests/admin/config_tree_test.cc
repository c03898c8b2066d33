// Caddy's /config/<path> semantics on a JSON tree (admin/config_tree.h).
#include "admin/config_tree.h"

#include <gtest/gtest.h>

namespace heft::admin {
namespace {

using json = nlohmann::json;

json sample() {
  return json::parse(R"({"apps":{"http":{"servers":{"srv0":{"listen":[":80"],"routes":[
    {"handle":[{"handler":"reverse_proxy","upstreams":[{"dial":"a:1","weight":5},{"dial":"b:1","weight":3}]}]}]}}}}})");
}
const char* kUpstreams = "/apps/http/servers/srv0/routes/0/handle/0/upstreams";

TEST(ConfigTree, SplitsPathsIgnoringEmptySegments) {
  EXPECT_EQ(split_tree_path(""), std::vector<std::string>{});
  EXPECT_EQ(split_tree_path("/"), std::vector<std::string>{});
  EXPECT_EQ(split_tree_path("/a//b/0/"), (std::vector<std::string>{"a", "b", "0"}));
}

TEST(ConfigTree, GetsValuesByKeyAndIndex) {
  TreeError e;
  EXPECT_EQ(tree_get(sample(), std::string(kUpstreams) + "/1/weight", e), 3);
  EXPECT_FALSE(e);
  EXPECT_EQ(tree_get(sample(), "/", e), sample());
}

TEST(ConfigTree, GetReportsTheMissingSegment) {
  TreeError e;
  tree_get(sample(), "/apps/http/servers/srv9/routes", e);
  EXPECT_EQ(e.status, 404);
  EXPECT_NE(e.message.find("\"srv9\""), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("/apps/http/servers/srv9"), std::string::npos) << e.message;
  tree_get(sample(), std::string(kUpstreams) + "/7", e);
  EXPECT_EQ(e.status, 404);
  tree_get(sample(), std::string(kUpstreams) + "/x", e);
  EXPECT_EQ(e.status, 400);
  tree_get(sample(), std::string(kUpstreams) + "/-1", e);
  EXPECT_EQ(e.status, 400);
  tree_get(sample(), std::string(kUpstreams) + "/0/weight/deeper", e);
  EXPECT_EQ(e.status, 400);
}

TEST(ConfigTree, PostAppendsToArraysAndSetsOtherwise) {
  json t = sample();
  ASSERT_FALSE(tree_apply(t, TreeMethod::post, kUpstreams, json{{"dial", "c:1"}}));
  EXPECT_EQ(t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"].size(), 3u);
  ASSERT_FALSE(tree_apply(t, TreeMethod::post, "/apps/http/workers", 4));
  EXPECT_EQ(t["apps"]["http"]["workers"], 4);
  ASSERT_FALSE(tree_apply(t, TreeMethod::post, std::string(kUpstreams) + "/0/weight", 9));
  EXPECT_EQ(t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"][0]["weight"], 9);
}

TEST(ConfigTree, PutReplacesAKeyAsTheCanaryScriptNeedsAndInsertsIntoArrays) {
  json t = sample();
  json next = json::parse(R"([{"dial":"a:1","weight":95},{"dial":"b:1","weight":5}])");
  ASSERT_FALSE(tree_apply(t, TreeMethod::put, kUpstreams, next));
  EXPECT_EQ(t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"], next);
  ASSERT_FALSE(tree_apply(t, TreeMethod::put, std::string(kUpstreams) + "/0", json{{"dial", "z:1"}}));
  auto& ups = t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"];
  ASSERT_EQ(ups.size(), 3u);
  EXPECT_EQ(ups[0]["dial"], "z:1");
  ASSERT_FALSE(tree_apply(t, TreeMethod::put, std::string(kUpstreams) + "/3", json{{"dial", "end:1"}}));
  EXPECT_EQ(ups[3]["dial"], "end:1");
  json before = t;
  EXPECT_EQ(tree_apply(t, TreeMethod::put, std::string(kUpstreams) + "/9", 1).status, 404);
  EXPECT_EQ(t, before);
}

TEST(ConfigTree, PatchReplacesOnlyWhatExists) {
  json t = sample();
  ASSERT_FALSE(tree_apply(t, TreeMethod::patch, std::string(kUpstreams) + "/1/weight", 7));
  EXPECT_EQ(t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"][1]["weight"], 7);
  json before = t;
  TreeError e = tree_apply(t, TreeMethod::patch, "/apps/http/nope", 1);
  EXPECT_EQ(e.status, 404);
  EXPECT_NE(e.message.find("\"nope\""), std::string::npos);
  EXPECT_EQ(tree_apply(t, TreeMethod::patch, std::string(kUpstreams) + "/2", 1).status, 404);
  EXPECT_EQ(t, before);
}

TEST(ConfigTree, DeleteRemovesKeysAndElements) {
  json t = sample();
  ASSERT_FALSE(tree_apply(t, TreeMethod::remove, std::string(kUpstreams) + "/0", nullptr));
  auto& ups = t["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["upstreams"];
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0]["dial"], "b:1");
  ASSERT_FALSE(tree_apply(t, TreeMethod::remove, std::string(kUpstreams) + "/0/weight", nullptr));
  EXPECT_FALSE(ups[0].contains("weight"));
  json before = t;
  EXPECT_EQ(tree_apply(t, TreeMethod::remove, "/apps/none", nullptr).status, 404);
  EXPECT_EQ(tree_apply(t, TreeMethod::remove, "/", nullptr).status, 400);
  EXPECT_EQ(t, before);
}

TEST(ConfigTree, WritesIntoScalarsAreRefused) {
  json t = sample();
  json before = t;
  EXPECT_EQ(tree_apply(t, TreeMethod::post, std::string(kUpstreams) + "/0/dial/x", 1).status, 400);
  EXPECT_EQ(t, before);
}

}  // namespace
}  // namespace heft::admin
