// Caddy's `/config/<path>` operations on a JSON tree, without any I/O.
//
// A path is a '/'-separated list of segments, each an object key or an array
// index ("apps/http/servers/srv0/routes/0"); empty segments are ignored, so
// "" and "/" name the root. Each segment's %XX escapes are decoded after the
// split (so %2F is a '/' inside a key); a bad escape is a 400. Semantics (Caddy's, docs/admin.md):
//   GET     the value at the path (must exist)
//   POST    appends to the array at the path, else sets (creates) the value
//   PUT     object key: creates it, or replaces it if present (Caddy refuses an
//           existing key; heft accepts it because Caddy-era canary scripts
//           PUT whole `upstreams` arrays); array index: inserts before it
//           (index == size appends)
//   PATCH   replaces the value at the path (must exist)
//   DELETE  removes the value at the path (must exist)
// Errors are values: status 404 when a segment does not exist, 400 when the
// path or the operation does not fit the tree; `error` names the segment.
//
// Pure functions on values; safe from any thread on distinct trees.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace heft::admin {

enum class TreeMethod { get, post, put, patch, remove };

struct TreeError {
  int status = 0;      // 0 = no error; else 400 or 404
  std::string message;  // e.g. "path /apps/http/servers/srv9: \"srv9\" not found"
  explicit operator bool() const { return status != 0; }
};

// `text` with each %XX replaced by the byte it names; nullopt when a '%' is
// not followed by two hex digits.
std::optional<std::string> percent_decode(std::string_view text);

// The segments of `path` (empty segments dropped), not yet decoded.
std::vector<std::string> split_tree_path(std::string_view path);

// The value at `path` in `root` (GET). On error, `error` is set and null is returned.
nlohmann::json tree_get(const nlohmann::json& root, std::string_view path, TreeError& error);

// Applies a write (POST, PUT, PATCH, DELETE; `value` ignored for DELETE) to
// `root` in place. On error `root` is left unchanged.
TreeError tree_apply(nlohmann::json& root, TreeMethod method, std::string_view path, nlohmann::json value);

}  // namespace heft::admin
