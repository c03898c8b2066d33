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

// The admin section alone, checked as from_json checks it: what the commands
// that drive a running heft need of a configuration file.
Result<AdminConfig> admin_from_json(const nlohmann::json& document, const SourceMap* sources = nullptr);

// Parses JSON text; on a syntax error (or a number beyond a double) returns a
// discarded value and sets `error` to where and what, e.g. "not valid JSON at
// line 3, column 5: syntax error while parsing object - unexpected '}'".
nlohmann::json parse_json_text(std::string_view text, std::string& error);

}  // namespace heft::config
