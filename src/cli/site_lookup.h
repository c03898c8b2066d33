// Finding a site in a running heft's JSON configuration by what a user types:
// shared by the commands that change one site's upstreams (weight, rollout).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace heft::cli {

struct SiteLocation {
  size_t index = 0;          // sites numbered across servers in order (srv0's routes first)
  // HOSTS:PORT ("a.test,b.test:8080", ":8080" for any host), as
  // /reverse_proxy/upstreams' `site_address` and the metrics' `site` label say
  // it: unique, and unchanged when sites are added or removed before this one
  // (which shifts `index` and `upstreams_path`).
  std::string address;
  std::string upstreams_path;  // /config/.../upstreams of its reverse_proxy
  const nlohmann::json* upstreams = nullptr;  // that array, in the given config
  const nlohmann::json* reverse_proxy = nullptr;  // the handler holding it (load_balancing...), idem
};

// SITE is one of the site's host names (any case, as routing matches them),
// HOST:PORT, :PORT (the site answering any host on that port, or the only
// site there), or the site's index. nullopt with `why` set when there is no
// such site or it has no reverse_proxy upstreams.
std::optional<SiteLocation> find_site(const nlohmann::json& config, const std::string& site, std::string& why);

// The site whose `address` is `address`, wherever it is now. nullopt with
// `why` set when no site has it (removed, or its hosts or port changed) or,
// against a configuration heft would refuse, several do.
std::optional<SiteLocation> find_site_by_address(const nlohmann::json& config, const std::string& address,
                                                 std::string& why);

}  // namespace heft::cli
