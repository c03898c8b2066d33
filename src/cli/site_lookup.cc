#include "cli/site_lookup.h"

#include <fmt/format.h>

#include "config/values.h"

namespace heft::cli {

using json = nlohmann::json;

namespace {

bool listens_on(const json& server, const std::string& port_suffix) {
  for (const json& l : server.value("listen", json::array()))
    if (l.is_string() && l.get<std::string>().ends_with(port_suffix)) return true;
  return false;
}

}  // namespace

std::optional<SiteLocation> find_site(const json& config, const std::string& site, std::string& why) {
  const json* servers = nullptr;
  try {
    servers = &config.at("apps").at("http").at("servers");
  } catch (const json::exception&) {
    why = "the configuration has no servers";
    return std::nullopt;
  }
  const bool numeric = !site.empty() && site.find_first_not_of("0123456789") == std::string::npos;
  // HOST, HOST:PORT or :PORT. Stored hosts are lower-case.
  std::string host = config::lowercase(site), port_suffix;
  // An IPv6 literal without brackets ("::1", as the JSON form writes a site
  // host) is a host with no port.
  if (!numeric && !config::is_unbracketed_ipv6(site)) {
    const size_t colon = site.rfind(':');
    if (colon != std::string::npos && site.find(']', colon) == std::string::npos) {
      host = config::lowercase(site.substr(0, colon));
      port_suffix = site.substr(colon);
    }
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  }
  size_t index = 0;
  for (size_t s = 0; servers->contains(fmt::format("srv{}", s)); ++s) {
    const json& server = (*servers)[fmt::format("srv{}", s)];
    const bool port_matches = port_suffix.empty() || listens_on(server, port_suffix);
    // A reference into `config` (value() would copy, and `upstreams` must point into config).
    static const json no_routes = json::array();
    auto found = server.find("routes");
    const json& routes = found != server.end() && found->is_array() ? *found : no_routes;
    for (size_t r = 0; r < routes.size(); ++r, ++index) {
      const json& route = routes[r];
      bool match = numeric && std::stoul(site) == index;
      if (!numeric && port_matches) {
        json hosts = json::array();
        for (const json& m : route.value("match", json::array()))
          for (const json& h : m.value("host", json::array())) hosts.push_back(h);
        if (host.empty()) match = hosts.empty() || routes.size() == 1;  // ":PORT"
        for (const json& h : hosts)
          if (h.is_string() && h.get<std::string>() == host) match = true;
      }
      if (!match) continue;
      SiteLocation at;
      at.index = index;
      at.upstreams_path = fmt::format("/config/apps/http/servers/srv{}/routes/{}/handle/0/routes/0/handle/0/upstreams", s, r);
      try {
        at.reverse_proxy = &route.at("handle").at(0).at("routes").at(0).at("handle").at(0);
        at.upstreams = &at.reverse_proxy->at("upstreams");
      } catch (const json::exception&) {
        why = "site " + site + " has no reverse_proxy upstreams";
        return std::nullopt;
      }
      return at;
    }
  }
  why = fmt::format("no site {} (give a host, HOST:PORT, :PORT or the site's index)", site);
  return std::nullopt;
}

}  // namespace heft::cli
