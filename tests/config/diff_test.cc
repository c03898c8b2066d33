// diff_json and describe: the leaf-by-leaf differences a reload or a live
// change is reported with.
#include "config/diff.h"

#include <gtest/gtest.h>

#include "config/heftfile.h"
#include "config/json.h"

namespace heft::config {
namespace {

using nlohmann::json;

std::vector<std::string> described(const json& before, const json& after) {
  std::vector<std::string> lines;
  for (const JsonChange& change : diff_json(before, after)) lines.push_back(describe(change));
  return lines;
}

TEST(DiffJson, EqualDocumentsHaveNoChanges) {
  const json doc = json::parse(R"({"a":[1,{"b":null}],"c":"x","d":{}})");
  EXPECT_TRUE(diff_json(doc, doc).empty());
  EXPECT_TRUE(diff_json(json::parse("1"), json::parse("1.0")).empty()) << "numbers compare by value";
  EXPECT_TRUE(diff_json(json(json::value_t::discarded), json(json::value_t::discarded)).empty());
}

TEST(DiffJson, AChangedLeafIsOneChangeWithItsPointerAndBothValues) {
  const json before = json::parse(R"({"servers":{"srv0":{"upstreams":[{"weight":1},{"weight":2}]}}})");
  json after = before;
  after["servers"]["srv0"]["upstreams"][1]["weight"] = 7;
  const std::vector<JsonChange> changes = diff_json(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].pointer, "/servers/srv0/upstreams/1/weight");
  EXPECT_EQ(changes[0].before, 2);
  EXPECT_EQ(changes[0].after, 7);
  EXPECT_EQ(describe(changes[0]), "/servers/srv0/upstreams/1/weight: 2 → 7");
}

TEST(DiffJson, EveryDifferingLeafInDocumentOrder) {
  const json before = json::parse(R"({"b":{"x":1,"y":2},"a":"same","c":[true,false],"d":3})");
  const json after = json::parse(R"({"b":{"x":10,"y":2},"a":"same","c":[false,false],"d":4})");
  EXPECT_EQ(described(before, after),
            (std::vector<std::string>{"/b/x: 1 → 10", "/c/0: true → false", "/d: 3 → 4"}));
}

TEST(DiffJson, MembersAddedOrRemovedWholeAreOneChangeEach) {
  const json before = json::parse(R"({"keep":1,"gone":{"deep":{"er":[1,2]}},"m":0})");
  const json after = json::parse(R"({"keep":1,"new":{"x":[3]},"m":0})");
  const std::vector<JsonChange> changes = diff_json(before, after);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].pointer, "/gone");
  EXPECT_EQ(changes[0].before, before["gone"]);
  EXPECT_TRUE(changes[0].after.is_discarded());
  EXPECT_EQ(changes[1].pointer, "/new");
  EXPECT_TRUE(changes[1].before.is_discarded());
  EXPECT_EQ(changes[1].after, after["new"]);
  EXPECT_EQ(describe(changes[0]), R"(/gone: removed {"deep":{"er":[1,2]}})");
  EXPECT_EQ(describe(changes[1]), R"(/new: added {"x":[3]})");
}

TEST(DiffJson, ArraysAreComparedIndexByIndexAndExtraElementsAreAddedOrRemoved) {
  EXPECT_EQ(described(json::parse("[1,2,3]"), json::parse("[1,5]")),
            (std::vector<std::string>{"/1: 2 → 5", "/2: removed 3"}));
  EXPECT_EQ(described(json::parse("[1]"), json::parse(R"([1,{"a":1},[2]])")),
            (std::vector<std::string>{R"(/1: added {"a":1})", "/2: added [2]"}));
  // An insertion at the front shows as every later index changing: index by index, as documented.
  EXPECT_EQ(described(json::parse("[1,2]"), json::parse("[0,1,2]")),
            (std::vector<std::string>{"/0: 1 → 0", "/1: 2 → 1", "/2: added 2"}));
}

TEST(DiffJson, ANullValueIsAValueNotAnAbsence) {
  const std::vector<JsonChange> changes = diff_json(json::parse(R"({"a":null})"), json::parse(R"({"a":1,"b":null})"));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_TRUE(changes[0].before.is_null());
  EXPECT_FALSE(changes[0].before.is_discarded());
  EXPECT_EQ(describe(changes[0]), "/a: null → 1");
  EXPECT_TRUE(changes[1].before.is_discarded());
  EXPECT_TRUE(changes[1].after.is_null());
  EXPECT_EQ(describe(changes[1]), "/b: added null");
}

TEST(DiffJson, AChangeOfTypeIsOneChangeWithBothValuesWhole) {
  EXPECT_EQ(described(json::parse(R"({"a":{"b":1}})"), json::parse(R"({"a":[1]})")),
            (std::vector<std::string>{R"(/a: {"b":1} → [1])"}));
  EXPECT_EQ(described(json::parse(R"({"a":"1"})"), json::parse(R"({"a":1})")),
            (std::vector<std::string>{R"(/a: "1" → 1)"}));
}

TEST(DiffJson, PointerTokensAreEscapedAsRfc6901Says) {
  const std::vector<JsonChange> changes =
      diff_json(json::parse(R"({"a/b":{"m~n":1},"":2})"), json::parse(R"({"a/b":{"m~n":3},"":4})"));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].pointer, "/");
  EXPECT_EQ(changes[1].pointer, "/a~1b/m~0n");
  // The pointers resolve, in nlohmann's own reading of RFC 6901, to the values they name.
  const json after = json::parse(R"({"a/b":{"m~n":3},"":4})");
  for (const JsonChange& change : changes) EXPECT_EQ(after.at(json::json_pointer(change.pointer)), change.after);
}

TEST(DiffJson, TheWholeDocumentChangedOrAbsentIsNamedAsSuch) {
  EXPECT_EQ(described(json::parse("1"), json::parse("2")), (std::vector<std::string>{"(document): 1 → 2"}));
  EXPECT_EQ(described(json(json::value_t::discarded), json::parse(R"({"a":1})")),
            (std::vector<std::string>{R"((document): added {"a":1})"}));
  EXPECT_EQ(described(json::parse("[]"), json(json::value_t::discarded)),
            (std::vector<std::string>{"(document): removed []"}));
}

TEST(DiffJson, DescribeNeverThrowsOnInvalidUtf8) {
  JsonChange change{"/s", json("ok"), json(std::string("\xff\xfe"))};
  std::string line;
  EXPECT_NO_THROW(line = describe(change));
  EXPECT_EQ(line.rfind("/s: \"ok\" → \"", 0), 0u) << line;
}

// The use it is made for: the file's configuration against a running one with
// one weight set live and one upstream added.
TEST(DiffJson, NamesTheLiveChangesBetweenTwoConfigurations) {
  Result<Config> file = parse_heftfile(":8080 {\n\treverse_proxy 127.0.0.1:9001 127.0.0.1:9002\n}\n");
  ASSERT_TRUE(file.ok());
  Config live = *file;
  ASSERT_EQ(live.sites.size(), 1u);
  live.sites[0].proxy.upstreams[1].weight = 5;
  live.sites[0].proxy.upstreams.push_back(live.sites[0].proxy.upstreams[0]);
  live.sites[0].proxy.upstreams.back().name = "127.0.0.1:9003";
  const std::vector<JsonChange> changes = diff_json(to_json(live), to_json(*file));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].pointer.substr(changes[0].pointer.rfind("/upstreams/")), "/upstreams/1/weight");
  EXPECT_EQ(changes[0].before, 5);
  EXPECT_EQ(changes[0].after, 1);
  EXPECT_EQ(changes[1].pointer.substr(changes[1].pointer.rfind("/upstreams/")), "/upstreams/2");
  EXPECT_EQ(changes[1].before["dial"], "127.0.0.1:9003");
  EXPECT_TRUE(changes[1].after.is_discarded());
}

}  // namespace
}  // namespace heft::config
