// Reading a configuration: the Heftfile, heft's Caddyfile-style format
// (docs/heftfile.md), or its JSON form. Both go through one door: a Heftfile
// is adapted into the JSON form (adapt.h) and every configuration is checked
// by the one validator, from_json (json.h), which places each problem where
// its value was written.
//
// parse_heftfile() turns text into a Config, collecting every error as a
// Diagnostic "FILE:LINE:COL: message" rather than stopping at the first.
// Nothing here throws on bad input. resolve() is the only function that does
// network I/O (DNS); call it at load and at every reload.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model.h"

namespace heft::config {

// Reads a Heftfile: its syntax errors, then every problem the validator finds
// in what it says, in file order. `file` names it in diagnostics. On success the sites are
// grouped by port in order of each port's first appearance (stable otherwise),
// which is the order the JSON form keeps. Hostnames are not resolved.
Result<Config> parse_heftfile(std::string_view text, std::string_view file = "Heftfile");

// Reads `path` and parses it; a file that cannot be read is one diagnostic.
Result<Config> load_heftfile(const std::string& path);

// Reads a configuration file of either format: JSON (Caddy-shaped, see json.h)
// when the path ends in ".json", a Heftfile otherwise.
Result<Config> load_config_file(const std::string& path);

// The admin settings of a configuration file, for the commands that talk to
// a running heft: a JSON file whole; of a Heftfile only the global options
// block is read (environment placeholders included), so an error in a site,
// or a site's variable unset in this environment, does not hide them.
Result<AdminConfig> load_admin_config(const std::string& path);

// The file normalised (see syntax::format): tab indentation, one directive per
// line, canonical spacing. Only syntax errors are reported, not meaning.
Result<std::string> format_heftfile(std::string_view text, std::string_view file = "Heftfile");

// Fills UpstreamConfig::resolved for every upstream: IP literals directly,
// names through getaddrinfo (every address, deduplicated, in resolver order).
// Returns one diagnostic per name that did not resolve, placed at its site.
std::vector<Diagnostic> resolve(Config& config);

// Why heft could not start its admin API beside the sites of `config` (at
// its admin address, the default 127.0.0.1:2019 when the file sets none): a
// site on that port listens over it, and heft would run without its admin API
// ("Address already in use"). Placed at the first such site ("FILE:L:C", a
// JSON file's name with "/admin/listen"). `heft validate` and `heft run` ask;
// the parsers do not, since a file without an admin address is also what
// `heft reload` and SIGHUP load into a heft whose admin API listens elsewhere
// (the admin API checks those against its running address).
std::optional<Diagnostic> admin_start_conflict(const Config& config);

// What a valid configuration probably does not mean, one line each: a pool
// whose policy ignores the different weights it was given (lb_policy
// round_robin, as the weighted load balancing guide writes it, or first;
// weighted_round_robin, the default, splits by them), a hash_strategy or a
// queue that nothing uses. `heft validate` and `heft run` print these.
std::vector<std::string> config_warnings(const Config& config);

// Names of the options a Heftfile may write, per block ("global", "site",
// "reverse_proxy", "to", "adaptive", "log"; also "next_upstream" conditions
// and "lb_policy" spellings): for "did you mean", docs and tests.
std::vector<std::string_view> known_options(std::string_view block);

}  // namespace heft::config
