// parse_json_text within JsonLimits: nesting, counts and duplicate keys are
// refused while parsing, each located by line, column and JSON pointer.
#include <gtest/gtest.h>

#include <string>

#include "config/json.h"

namespace heft::config {
namespace {

using nlohmann::json;

// The error for `text`, or "parsed" if it was accepted.
std::string error_of(const std::string& text, const JsonLimits& limits = {}) {
  std::string error;
  const json document = parse_json_text(text, error, limits);
  return document.is_discarded() ? error : "parsed";
}

std::string repeated(const std::string& piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out += piece;
  return out;
}

TEST(JsonText, AcceptsWhatFitsTheLimits) {
  std::string error;
  const json document = parse_json_text(R"({"a": [1, -2, 3.5, "x", true, null, {"b": {}}], "c": "\u00e9"})", error);
  ASSERT_FALSE(document.is_discarded()) << error;
  EXPECT_EQ(document["a"][6]["b"], json::object());
  EXPECT_EQ(document["c"], "\xc3\xa9");
  EXPECT_EQ(document["a"][1], -2);
  // 64 levels is the limit, not past it.
  EXPECT_EQ(error_of(repeated("[", 64) + repeated("]", 64)), "parsed");
  EXPECT_EQ(error_of("[1,2,3,4]", JsonLimits{64, 5}), "parsed");  // the array and four numbers
}

TEST(JsonText, NestingPastTheLimitIsRefusedWhereItStarts) {
  EXPECT_EQ(error_of(repeated("[", 65) + repeated("]", 65)),
            "nested deeper than 64 levels at line 1, column 65 (JSON pointer " + repeated("/0", 64) + ")");
  EXPECT_EQ(error_of("{\"a\": [{\"b\": [[1]]}]}", JsonLimits{4, 100}),
            "nested deeper than 4 levels at line 1, column 15 (JSON pointer /a/0/b/0)");
  // A million levels, never closed or closed, of arrays and of objects:
  // refused at level 65, without the stack of a recursion per level.
  for (const std::string& text : {repeated("[", 1'000'000), repeated("[", 1'000'000) + repeated("]", 1'000'000),
                                  repeated("{\"k\":", 1'000'000) + "1" + repeated("}", 1'000'000)}) {
    const std::string error = error_of(text);
    EXPECT_EQ(error.rfind("nested deeper than 64 levels at line 1, column ", 0), 0u) << error.substr(0, 100);
  }
}

TEST(JsonText, DuplicateKeysAreRefusedWithTheirPointer) {
  EXPECT_EQ(error_of("{\n  \"a\": 1,\n  \"a\": 2\n}"),
            "ambiguous: duplicate key \"a\" at line 3, column 5 (JSON pointer /a)");
  EXPECT_EQ(error_of(R"({"apps": {"h~t/p": [0, {"x": 1, "y": {}, "x": 2}]}})"),
            "ambiguous: duplicate key \"x\" at line 1, column 44 (JSON pointer /apps/h~0t~1p/1/x)");
  // The same key in two objects is no duplicate.
  EXPECT_EQ(error_of(R"([{"x": 1}, {"x": 2}])"), "parsed");
  // A key that is long is cut in the message, which stays short.
  const std::string key(100'000, 'k');
  const std::string error = error_of("{\"" + key + "\": 1, \"" + key + "\": 2}");
  EXPECT_LT(error.size(), 300u) << error.substr(0, 300);
  EXPECT_NE(error.find("duplicate key \"" + std::string(60, 'k') + "...\""), std::string::npos) << error;
}

TEST(JsonText, ValuesAndKeysPastTheLimitAreRefused) {
  EXPECT_EQ(error_of("[1,2,3,4,5,6]", JsonLimits{64, 5}),
            "too large: more than 5 JSON values and keys at line 1, column 11 (JSON pointer /4)");
  // Keys count too: the object, "a", 1, "b" is 4.
  EXPECT_EQ(error_of(R"({"a": 1, "b": 2})", JsonLimits{64, 3}),
            "too large: more than 3 JSON values and keys at line 1, column 12 (JSON pointer /b)");
  // The default: a million of them.
  std::string million = "[";  // the array and a million zeros
  million += repeated("0,", 999'999);
  million += "0]";
  const std::string error = error_of(million);
  EXPECT_EQ(error.rfind("too large: more than 1000000 JSON values and keys at line 1, column ", 0), 0u) << error;
  EXPECT_NE(error.find("(JSON pointer /999999)"), std::string::npos) << error;
  EXPECT_EQ(error_of(million, kJsonFileLimits), "parsed");
}

TEST(JsonText, SyntaxErrorsKeepTheirWords) {
  EXPECT_EQ(error_of("{\n  \"apps\": {,}\n}").rfind("not valid JSON at line 2, column 12: syntax error", 0), 0u);
  EXPECT_NE(error_of("[1e400]").find("number overflow"), std::string::npos);
  EXPECT_EQ(error_of("[1] x").rfind("not valid JSON at line 1, column 5: ", 0), 0u) << error_of("[1] x");
  EXPECT_NE(error_of("\"\xff\"").find("ill-formed UTF-8"), std::string::npos);
  EXPECT_EQ(error_of("").rfind("not valid JSON at line 1, column 1: ", 0), 0u) << error_of("");
}

}  // namespace
}  // namespace heft::config
