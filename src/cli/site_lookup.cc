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

// A route's host names as stored (lower-case, IPv6 literals unbracketed).
json hosts_of(const json& route) {
  json hosts = json::array();
  for (const json& m : route.value("match", json::array()))
    for (const json& h : m.value("host", json::array())) hosts.push_back(h);
  return hosts;
}

// As observe::site_label() writes it from the running configuration, which
// GET /config/ is the JSON of.
std::string address_of(const json& hosts, const json& server) {
  std::string list;
  for (const json& h : hosts) {
    if (!h.is_string()) continue;
    const std::string host = h.get<std::string>();
    list += (list.empty() ? "" : ",") + (host.find(':') != std::string::npos ? "[" + host + "]" : host);
  }
  return list + ":" + port_of(server);
}

// Calls visit(server, s, routes, r, index) for every site, in index order.
// False with `why` set when the configuration has no servers.
template <class Visit>
bool for_each_site(const json& config, std::string& why, Visit&& visit) {
  const json* servers = nullptr;
  try {
    servers = &config.at("apps").at("http").at("servers");
  } catch (const json::exception&) {
    why = "the configuration has no servers";
    return false;
  }
  size_t index = 0;
  for (size_t s = 0; servers->contains(fmt::format("srv{}", s)); ++s) {
    const json& server = (*servers)[fmt::format("srv{}", s)];
    // A reference into `config` (value() would copy, and `upstreams` must point into config).
    static const json no_routes = json::array();
    auto found = server.find("routes");
    const json& routes = found != server.end() && found->is_array() ? *found : no_routes;
    for (size_t r = 0; r < routes.size(); ++r, ++index) visit(server, s, routes, r, index);
  }
  return true;
}

// Site `index`, route `r` of server `s`, as found by the name `site`.
std::optional<SiteLocation> locate(const json& server, size_t s, const json& route, size_t r, size_t index,
                                   const std::string& site, std::string& why) {
  SiteLocation at;
  at.index = index;
  at.address = address_of(hosts_of(route), server);
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

}  // namespace

std::optional<SiteLocation> find_site(const json& config, const std::string& site, std::string& why) {
  if (site.empty()) {  // would match as ":PORT" with no port: any port's only site
    why = "no site given (give a host, HOST:PORT, :PORT or the site's index)";
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
  // A host name alone may be served on several ports (one site each): every
  // site it names, to refuse it as ambiguous rather than take the first.
  std::optional<SiteLocation> found_site;
  std::vector<std::string> named;
  bool broken = false;  // the site named has no reverse_proxy upstreams (`why` says so)
  const bool has_servers = for_each_site(config, why, [&](const json& server, size_t s, const json& routes, size_t r,
                                                          size_t index) {
    if (broken) return;
    const json& route = routes[r];
    bool match = numeric && wanted_index && *wanted_index == index;
    if (!numeric && (port_suffix.empty() || listens_on(server, port_suffix))) {
      const json hosts = hosts_of(route);
      if (host.empty()) match = hosts.empty() || routes.size() == 1;  // ":PORT"
      for (const json& h : hosts)
        if (h.is_string() && h.get<std::string>() == host) match = true;
    }
    if (!match) return;
    named.push_back(fmt::format("{}:{} (site {})", host.find(':') != std::string::npos ? "[" + host + "]" : host,
                                port_of(server), index));
    if (found_site) return;
    found_site = locate(server, s, route, r, index, site, why);
    broken = !found_site;
  });
  if (!has_servers || broken) return std::nullopt;
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

std::optional<SiteLocation> find_site_by_address(const json& config, const std::string& address, std::string& why) {
  std::optional<SiteLocation> found_site;
  std::vector<size_t> indices;
  bool broken = false;
  const bool has_servers = for_each_site(config, why, [&](const json& server, size_t s, const json& routes, size_t r,
                                                          size_t index) {
    if (broken || address_of(hosts_of(routes[r]), server) != address) return;
    indices.push_back(index);
    if (found_site) return;
    found_site = locate(server, s, routes[r], r, index, address, why);
    broken = !found_site;
  });
  if (!has_servers || broken) return std::nullopt;
  if (indices.size() > 1) {
    why = fmt::format("site {} is ambiguous: sites {} all have that address", address, fmt::join(indices, ", "));
    return std::nullopt;
  }
  if (!found_site)
    why = fmt::format("site {} is no longer in the configuration (removed, or its hosts or port changed)", address);
  return found_site;
}

}  // namespace heft::cli
