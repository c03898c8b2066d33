// demo_backends (Heftfile) and apps.demo.backends (JSON): heft's own demo
// origin servers in a configuration, read once by the validator; each mistake
// reported at its Heftfile token or at its JSON pointer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/heftfile.h"
#include "config/json.h"

namespace heft::config {
namespace {

using nlohmann::json;

constexpr std::string_view kSite = "127.0.0.1:8080 {\n\treverse_proxy 127.0.0.1:9081\n}\n";

std::string with_global(std::string_view global) { return "{\n\t" + std::string(global) + "\n}\n" + std::string(kSite); }

std::vector<std::string> heftfile_errors(std::string_view text) {
  Result<Config> result = parse_heftfile(text, "Heftfile");
  std::vector<std::string> out;
  for (const Diagnostic& d : result.errors) out.push_back(d.to_string());
  return out;
}

json document_with(json demo) {
  json document = to_json(*parse_heftfile(std::string(kSite)));
  document["apps"]["demo"] = std::move(demo);
  return document;
}

std::vector<std::string> json_errors(const json& document) {
  Result<Config> result = from_json(document);
  std::vector<std::string> out;
  for (const Diagnostic& d : result.errors) out.push_back(d.to_string());
  return out;
}

TEST(DemoBackends, HeftfileAdaptsToAppsDemoAndBack) {
  Result<Config> parsed =
      parse_heftfile(with_global("demo_backends a=127.0.0.1:9081 b=127.0.0.1:9082 v6=[::1]:9083"), "Heftfile");
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].to_string();
  const std::vector<DemoBackendConfig> expected{{"a", "127.0.0.1:9081"}, {"b", "127.0.0.1:9082"}, {"v6", "[::1]:9083"}};
  EXPECT_EQ(parsed->demo_backends, expected);
  const json document = to_json(*parsed);
  EXPECT_EQ(document["apps"]["demo"],
            json::parse(R"({"backends": [{"name": "a", "listen": "127.0.0.1:9081"},
                                         {"name": "b", "listen": "127.0.0.1:9082"},
                                         {"name": "v6", "listen": "[::1]:9083"}]})"));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *parsed);
}

TEST(DemoBackends, NoneUnlessAskedFor) {
  Result<Config> parsed = parse_heftfile(std::string(kSite));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->demo_backends.empty());
  EXPECT_FALSE(to_json(*parsed)["apps"].contains("demo"));
}

TEST(DemoBackends, HeftfileMistakesAtTheirTokens) {
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a127.0.0.1:9081")),
            std::vector<std::string>{
                "Heftfile:2:16: demo backend \"a127.0.0.1:9081\" must be NAME=IP:PORT (e.g. a=127.0.0.1:9081)"});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends")),
            std::vector<std::string>{"Heftfile:2:2: missing value for \"demo_backends\" (e.g. \"demo_backends "
                                     "a=127.0.0.1:9081 b=127.0.0.1:9082\")"});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a=127.0.0.1:9081 b=localhost:9082")),
            std::vector<std::string>{"Heftfile:2:33: demo backend b must listen on an IP address (e.g. "
                                     "127.0.0.1:9081), got \"localhost:9082\""});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a=127.0.0.1:9081 a=127.0.0.1:9082")),
            std::vector<std::string>{"Heftfile:2:33: duplicate demo backend name \"a\""});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a=127.0.0.1:9081 b=127.0.0.1:9081")),
            std::vector<std::string>{"Heftfile:2:33: demo backends a and b both listen on 127.0.0.1:9081"});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a=127.0.0.1:0")),
            std::vector<std::string>{
                "Heftfile:2:16: demo backend a needs an address IP:PORT (e.g. 127.0.0.1:9081), got \"127.0.0.1:0\""});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a/b=127.0.0.1:9081")),
            std::vector<std::string>{
                "Heftfile:2:16: demo backend name \"a/b\" must be 1 to 64 letters, digits, '.', '_' or '-'"});
  EXPECT_EQ(heftfile_errors(with_global("demo_backends a=127.0.0.1:9081\n\tdemo_backends b=127.0.0.1:9082")).size(), 1u);
}

TEST(DemoBackends, JsonMistakesAtTheirPointers) {
  EXPECT_EQ(json_errors(document_with(json::parse(R"({"backends": [{"name": "a"}]})"))),
            std::vector<std::string>{"/apps/demo/backends/0/listen: required"});
  EXPECT_EQ(json_errors(document_with(json::parse(R"({"backends": [{"name": "a", "listen": 9081}]})"))),
            std::vector<std::string>{"/apps/demo/backends/0/listen: must be a string"});
  EXPECT_EQ(json_errors(document_with(json::parse(R"({"backends": [{"name": "a", "listen": "127.0.0.1:9081"},
                                                                      {"name": "a", "listen": "127.0.0.1:9082"}]})"))),
            std::vector<std::string>{"/apps/demo/backends/1: duplicate demo backend name \"a\""});
  EXPECT_EQ(json_errors(document_with(json::parse(R"({"backends": [{"name": "a", "listen": "127.0.0.1:9081", "x": 1}]})"))),
            std::vector<std::string>{"/apps/demo/backends/0/x: unknown field"});
  EXPECT_EQ(json_errors(document_with(json::parse(R"({"servers": []})"))).size(), 2u);  // unknown, and backends required
}

}  // namespace
}  // namespace heft::config
