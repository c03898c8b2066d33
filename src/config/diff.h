// Differences between two JSON documents (the configuration's JSON form), for
// saying what a reload or a live change undoes or does, one line per leaf.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace heft::config {

// One difference between two JSON documents (the configuration's JSON form).
struct JsonChange {
  std::string pointer;     // RFC 6901 pointer, e.g. "/apps/http/servers/srv0/routes/0/handle/0/upstreams/1/weight"
  nlohmann::json before;   // null (discarded) when added
  nlohmann::json after;    // null (discarded) when removed
};

// Every leaf that differs, in document order; arrays compared index by index
// (extra elements are additions/removals). Objects/arrays added or removed whole are one change.
//
// "Discarded" is nlohmann's value_t::discarded (is_discarded() is true,
// is_null() is false), so an addition is told apart from a change from a JSON
// null. Object members come in the order nlohmann::json keeps them (sorted by
// key), a member's changes before the next member's. Numbers compare by value
// (1 and 1.0 are equal). A discarded input stands for "no document": against a
// document it gives one whole addition or removal at "", two give nothing.
std::vector<JsonChange> diff_json(const nlohmann::json& before, const nlohmann::json& after);

// "POINTER: BEFORE → AFTER" with compact JSON values ("added"/"removed" wording for those).
// e.g. `/apps/http/servers/srv0/listen/0: ":8080" → "127.0.0.1:8080"`,
// `/a/b: added {"c":1}`, `/a/b: removed [1,2]`. The whole document (pointer "")
// is written as "(document)".
std::string describe(const JsonChange& change);

}  // namespace heft::config
