// Leaf-by-leaf differences between two JSON documents: see diff.h.
#include "config/diff.h"

#include <algorithm>

#include <fmt/format.h>

namespace heft::config {
namespace {

using nlohmann::json;

json absent() { return json(json::value_t::discarded); }

// RFC 6901 §3: "~" is written "~0" and "/" is written "~1" in a reference token.
void append_token(std::string& pointer, std::string_view token) {
  pointer += '/';
  for (char c : token) {
    if (c == '~') {
      pointer += "~0";
    } else if (c == '/') {
      pointer += "~1";
    } else {
      pointer += c;
    }
  }
}

// Values equal as nlohmann compares them, except that two discarded values
// (which nlohmann never calls equal) are the same absence.
bool same(const json& a, const json& b) {
  if (a.is_discarded() || b.is_discarded()) return a.is_discarded() && b.is_discarded();
  return a == b;
}

void diff_into(std::string& pointer, const json& before, const json& after, std::vector<JsonChange>& out) {
  if (same(before, after)) return;
  if (before.is_object() && after.is_object()) {
    // Both are std::map-backed: walk the two sorted key sequences together.
    auto b = before.cbegin();
    auto a = after.cbegin();
    const auto b_end = before.cend();
    const auto a_end = after.cend();
    const std::size_t length = pointer.size();
    while (b != b_end || a != a_end) {
      if (a == a_end || (b != b_end && b.key() < a.key())) {
        append_token(pointer, b.key());
        out.push_back({pointer, b.value(), absent()});
        ++b;
      } else if (b == b_end || a.key() < b.key()) {
        append_token(pointer, a.key());
        out.push_back({pointer, absent(), a.value()});
        ++a;
      } else {
        append_token(pointer, b.key());
        diff_into(pointer, b.value(), a.value(), out);
        ++b;
        ++a;
      }
      pointer.resize(length);
    }
    return;
  }
  if (before.is_array() && after.is_array()) {
    const std::size_t length = pointer.size();
    const std::size_t common = std::min(before.size(), after.size());
    for (std::size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
      append_token(pointer, std::to_string(i));
      if (i < common) {
        diff_into(pointer, before[i], after[i], out);
      } else if (i < before.size()) {
        out.push_back({pointer, before[i], absent()});
      } else {
        out.push_back({pointer, absent(), after[i]});
      }
      pointer.resize(length);
    }
    return;
  }
  // A scalar that changed, or a change of type (an object became a number...):
  // one change carrying both values whole.
  out.push_back({pointer, before, after});
}

std::string compact(const json& value) {
  // Strings may hold invalid UTF-8 (from a file); describe them, never throw.
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::vector<JsonChange> diff_json(const json& before, const json& after) {
  std::vector<JsonChange> changes;
  std::string pointer;
  diff_into(pointer, before, after, changes);
  return changes;
}

std::string describe(const JsonChange& change) {
  const std::string_view where = change.pointer.empty() ? std::string_view("(document)") : change.pointer;
  if (change.before.is_discarded()) return fmt::format("{}: added {}", where, compact(change.after));
  if (change.after.is_discarded()) return fmt::format("{}: removed {}", where, compact(change.before));
  return fmt::format("{}: {} → {}", where, compact(change.before), compact(change.after));
}

}  // namespace heft::config
