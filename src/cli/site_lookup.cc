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

// The port a server listens on (":8080" -> "8080"), from its first address.
std::string port_of(const json& server) {
  for (const json& l : server.value("listen", json::array()))
    if (l.is_string()) return l.get<std::string>().substr(l.get<std::string>().rfind(':') + 1);
  return "?";
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
  // An index past any site (even past SIZE_MAX: std::stoul threw) matches none.
  const std::optional<uint64_t> wanted_index = numeric ? config::parse_uint(site, UINT64_MAX) : std::nullopt;
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
  // A host name alone may be served on several ports (one site each): every
  // site it names, to refuse it as ambiguous rather than take the first.
  std::optional<SiteLocation> found_site;
  std::vector<std::string> named;
  for (size_t s = 0; servers->contains(fmt::format("srv{}", s)); ++s) {
    const json& server = (*servers)[fmt::format("srv{}", s)];
    const bool port_matches = port_suffix.empty() || listens_on(server, port_suffix);
    // A reference into `config` (value() would copy, and `upstreams` must point into config).
    static const json no_routes = json::array();
    auto found = server.find("routes");
    const json& routes = found != server.end() && found->is_array() ? *found : no_routes;
    for (size_t r = 0; r < routes.size(); ++r, ++index) {
      const json& route = routes[r];
      bool match = numeric && wanted_index && *wanted_index == index;
      if (!numeric && port_matches) {
        json hosts = json::array();
        for (const json& m : route.value("match", json::array()))
          for (const json& h : m.value("host", json::array())) hosts.push_back(h);
        if (host.empty()) match = hosts.empty() || routes.size() == 1;  // ":PORT"
        for (const json& h : hosts)
          if (h.is_string() && h.get<std::string>() == host) match = true;
      }
      if (!match) continue;
      named.push_back(fmt::format("{}:{} (site {})", host.find(':') != std::string::npos ? "[" + host + "]" : host,
                                  port_of(server), index));
      if (found_site) continue;
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
      found_site = std::move(at);
    }
  }
  if (named.size() > 1) {
    std::string list;
    for (const std::string& n : named) list += (list.empty() ? "" : ", ") + n;
    why = fmt::format("site {} is ambiguous: {} serve it; give HOST:PORT or the site's index", site, list);
    return std::nullopt;
  }
  if (found_site) return found_site;
  why = fmt::format("no site {} (give a host, HOST:PORT, :PORT or the site's index)", site);
  return std::nullopt;
}

}  // namespace heft::cli
