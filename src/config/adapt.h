// The Heftfile adapter: a Heftfile becomes the configuration's JSON form, as a
// Caddyfile adapts into Caddy's JSON. The adapter reads syntax only: tokens
// and blocks (syntax.h), environment placeholders, directive names and how
// many values each takes, and the Heftfile's own spellings (site addresses,
// `to` lines and `ADDR?weight=5`, `lb_policy hash header X`, `+Name`/`-Name`,
// `log { output file PATH }`, `adaptive off`). It converts a value only where
// the JSON form has another type (a size or `5%` to a number, on/off to
// true/false); a token it cannot convert is passed on as written, so that
// the one validator (from_json) names it, never a silent default. Every value
// it writes is placed in the SourceMap, so the validator reports it at
// `FILE:LINE:COL`. docs/heftfile.md, "The JSON form", states the mapping.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model.h"
#include "config/source_map.h"
#include "config/syntax.h"

namespace heft::config {

struct Adapted {
  nlohmann::json document = nlohmann::json::object();  // the JSON form, as far as the Heftfile says
  SourceMap sources;                                   // where each value of `document` was written
  // The Heftfile's own errors (syntax, placeholders, unknown or repeated
  // directives, missing or extra values), each at its token.
  std::vector<Diagnostic> errors;
};

// The whole file. Sites become servers by listen port (srv0, srv1, ... in
// order of each port's first appearance), as `heft adapt` prints them.
Adapted adapt_heftfile(std::string_view text, std::string_view file, const syntax::EnvironmentLookup& environment);

// The global options block alone (its placeholders only): the admin settings
// of a Heftfile, whose sites may use variables only heft's own environment has.
Adapted adapt_global_options(std::string_view text, std::string_view file,
                             const syntax::EnvironmentLookup& environment);

}  // namespace heft::config
