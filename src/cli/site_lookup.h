// Finding a site in a running heft's JSON configuration by what a user types:
// shared by the commands that change one site's upstreams (weight, rollout).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace heft::cli {

struct SiteLocation {
  size_t index = 0;          // sites numbered across servers in order (srv0's routes first)
  std::string upstreams_path;  // /config/.../upstreams of its reverse_proxy
  const nlohmann::json* upstreams = nullptr;  // that array, in the given config
  const nlohmann::json* reverse_proxy = nullptr;  // the handler holding it (load_balancing...), idem
};

// SITE is one of the site's host names (any case, as routing matches them),
// HOST:PORT, :PORT (the site answering any host on that port, or the only
// site there), or the site's index. nullopt with `why` set when there is no
// such site or it has no reverse_proxy upstreams.
std::optional<SiteLocation> find_site(const nlohmann::json& config, const std::string& site, std::string& why);

}  // namespace heft::cli
