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

// Parses JSON text; on a syntax error (or a number beyond a double) returns a
// discarded value and sets `error` to where and what, e.g. "not valid JSON at
// line 3, column 5: syntax error while parsing object - unexpected '}'".
nlohmann::json parse_json_text(std::string_view text, std::string& error);

}  // namespace heft::config
