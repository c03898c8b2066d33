// The JSON form of the configuration, shaped like Caddy's (`heft adapt` prints
// it; the admin API will load it). docs/heftfile.md lists the mapping.
//
// to_json() is total. from_json() is strict: unknown fields, wrong types and
// out-of-range values are errors naming the JSON path, e.g.
// "apps.http.servers.srv0.routes[0].handle[0].routes[0].handle[0].upstreams[1].weight".
// UpstreamConfig::resolved, SiteConfig::file and SiteConfig::line are not part
// of the JSON form. For any Config c built by parse_heftfile (not resolved):
// from_json(to_json(c)) == c.
#pragma once

#include <nlohmann/json.hpp>

#include "config/model.h"

namespace heft::config {

nlohmann::json to_json(const Config& config);

// Every problem is reported (Diagnostic::path and message; file/line empty).
Result<Config> from_json(const nlohmann::json& document);

// Bounds on a JSON text, checked while it is parsed, before a deep or large
// document exists: nlohmann's parser is iterative, but copying, comparing,
// dumping and reading a document as a configuration recurse once per level,
// and a document takes several times its text's size in memory (~27x for
// `[{},{},...]`).
struct JsonLimits {
  // Levels of objects and arrays, the document's own being level 1. A
  // configuration has 17.
  size_t max_depth = 64;
  // Values of any kind (objects, arrays, strings, numbers, ...) and object
  // keys, each counted once. A site takes ~120 in the JSON form, so this is
  // ~8,000 sites; the document then takes at most ~80 MB (~80 bytes for an
  // empty object or a member, the most memory a value or key can take beyond
  // its text).
  size_t max_values = 1'000'000;
};
// For JSON that heft wrote or its operator keeps in a file (the state file, a
// .json --config): the same depth, and room for what a body of 1,000,000
// values and keys becomes with every default written out (~5 times as many).
inline constexpr JsonLimits kJsonFileLimits{64, 16'000'000};

// Parses JSON text; on an error returns a discarded value and sets `error` to
// what and where, written to follow "... is " (a body) or "FILE: ":
//   "not valid JSON at line 3, column 5: syntax error while parsing object - unexpected '}'"
//   "nested deeper than 64 levels at line 1, column 65 (JSON pointer /a/0/0/...)"
//   "too large: more than 1000000 JSON values and keys at line 9, column 2 (JSON pointer /x/77)"
//   "ambiguous: duplicate key \"weight\" at line 4, column 17 (JSON pointer /upstreams/0/weight)"
// A number beyond a double is a syntax error; so is invalid UTF-8 in a string.
// A duplicate key is refused, where nlohmann would let the last one win
// silently (RFC 8259 4: "names within an object SHOULD be unique").
nlohmann::json parse_json_text(std::string_view text, std::string& error, const JsonLimits& limits = {});

}  // namespace heft::config
