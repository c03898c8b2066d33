// The JSON form of the configuration, shaped like Caddy's (`heft adapt` prints
// it; the admin API serves and loads it). docs/heftfile.md lists the mapping.
//
// to_json() is total. from_json() is the one validator of a configuration,
// whatever form it was written in: a Heftfile is adapted into this form
// (adapt.h) and read here, with the SourceMap that says where each value was
// written. It is strict: unknown fields, wrong types and out-of-range values
// are errors, each placed at its Heftfile token (`Heftfile:12:5: ...`) when
// the value came from one, else at its RFC 6901 JSON pointer, e.g.
// "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/1/weight".
// UpstreamConfig::resolved, SiteConfig::file and SiteConfig::line are not part
// of the JSON form. For any Config c read from a Heftfile (not resolved):
// from_json(to_json(c)) == c.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model.h"
#include "config/source_map.h"

namespace heft::config {

nlohmann::json to_json(const Config& config);

// Every problem is reported (its first 100, then a count of the rest). With
// `sources`, a problem is placed at the Heftfile token its value came from
// (Diagnostic::file, line, column; `path` keeps the pointer) and worded with
// the Heftfile's names, and each site keeps where it was written; without,
// at its JSON pointer (Diagnostic::path; file and line empty).
Result<Config> from_json(const nlohmann::json& document, const SourceMap* sources = nullptr);

// The servers of `servers` (apps.http.servers) in the order from_json reads
// them, and so the order of their sites in Config::sites: srv0, srv1, ... in
// numeric order (JSON objects are unordered), then other names.
std::vector<std::string> server_order(const nlohmann::json& servers);

// One site's route, as to_json writes it in its server's "routes".
nlohmann::json route_to_json(const SiteConfig& site);

// One site read alone, by from_json's own code: route `index` of the server
// at `server_pointer` (its "listen" gives the site's port and addresses).
// For a change confined to one site's handler, the rest of the document
// being as it was: each option is still checked once, in one place, and
// errors name the full JSON pointer. What from_json checks across sites
// (hosts unique on a port, the admin address) is not checked here.
Result<SiteConfig> site_from_json(const nlohmann::json& listen, const nlohmann::json& route,
                                  const std::string& server_pointer, size_t index);

// The admin section alone, checked as from_json checks it: what the commands
// that drive a running heft need of a configuration file.
Result<AdminConfig> admin_from_json(const nlohmann::json& document, const SourceMap* sources = nullptr);

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
