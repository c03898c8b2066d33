// The Caddy-shaped JSON form of the configuration: see json.h.
#include "config/json.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "config/json_reader.h"
#include "config/values.h"

namespace heft::config {
namespace {

using nlohmann::json;

// ---- writing ------------------------------------------------------------------

json header_ops_to_json(const std::vector<HeaderOp>& ops) {
  json out = json::array();
  for (const HeaderOp& op : ops) {
    std::string_view name = op.op == HeaderOp::set ? "set" : op.op == HeaderOp::add ? "add" : "delete";
    json entry = {{"op", name}, {"name", op.name}};
    if (op.op != HeaderOp::remove) entry["value"] = op.value;
    out.push_back(std::move(entry));
  }
  return out;
}

std::string_view hash_key_name(HashKey::Kind kind) {
  switch (kind) {
    case HashKey::client_ip: return "client_ip";
    case HashKey::header: return "header";
    case HashKey::cookie: return "cookie";
    case HashKey::uri: return "uri";
    case HashKey::none: break;
  }
  return "none";
}

json next_upstream_to_json(const NextUpstream& n) {
  if (n.off) return json::array({"off"});
  json out = json::array();
  if (n.error) out.push_back("error");
  if (n.timeout) out.push_back("timeout");
  if (n.http_500) out.push_back("http_500");
  if (n.http_502) out.push_back("http_502");
  if (n.http_503) out.push_back("http_503");
  if (n.http_504) out.push_back("http_504");
  if (n.non_idempotent) out.push_back("non_idempotent");
  return out;
}

json reverse_proxy_to_json(const ProxyConfig& pool) {
  json upstreams = json::array();
  for (const UpstreamConfig& u : pool.upstreams) {
    json entry = {{"dial", u.name},
                  {"weight", u.weight},
                  {"max_fails", u.max_fails},
                  {"fail_timeout", format_duration(u.fail_timeout)},
                  {"backup", u.backup},
                  {"down", u.down}};
    if (u.slow_start) entry["slow_start"] = format_duration(*u.slow_start);
    if (u.max_conns) entry["max_conns"] = u.max_conns;
    upstreams.push_back(std::move(entry));
  }
  json selection = {{"policy", balance::policy_name(pool.policy)}};
  if (pool.hash_key.kind != HashKey::none) {
    selection["key"] = hash_key_name(pool.hash_key.kind);
    if (!pool.hash_key.name.empty()) selection["name"] = pool.hash_key.name;
  }
  json health_headers = json::array();
  for (const auto& [name, value] : pool.health_headers)
    health_headers.push_back({{"name", name}, {"value", value}});
  json handler = {
      {"handler", "reverse_proxy"},
      {"upstreams", std::move(upstreams)},
      {"load_balancing",
       {{"selection_policy", std::move(selection)},
        {"hash_strategy", balance::hash_strategy_name(pool.hash_strategy)},
        {"retries", pool.next_upstream_tries},
        {"try_duration", format_duration(pool.next_upstream_timeout)},
        {"next_upstream", next_upstream_to_json(pool.next_upstream)},
        {"retry_body_limit", pool.retry_body_limit}}},
      {"health_checks",
       {{"active",
         {{"uri", pool.health_uri},
          {"port", pool.health_port},
          {"interval", format_duration(pool.health_interval)},
          {"timeout", format_duration(pool.health_timeout)},
          {"expect_status", pool.health_status},
          {"expect_body", pool.health_body},
          {"headers", std::move(health_headers)},
          {"passes", pool.health_passes},
          {"fails", pool.health_fails}}},
        {"passive", {{"max_fails", pool.max_fails}, {"fail_timeout", format_duration(pool.fail_timeout)}}}}},
      {"transport",
       {{"protocol", "http"},
        {"keepalive", pool.keepalive},
        {"keepalive_timeout", format_duration(pool.keepalive_timeout)},
        {"dial_timeout", format_duration(pool.connect_timeout)},
        {"read_timeout", format_duration(pool.read_timeout)},
        {"write_timeout", format_duration(pool.send_timeout)}}},
      {"headers",
       {{"request", header_ops_to_json(pool.header_up)},
        {"response", header_ops_to_json(pool.header_down)}}},
      {"adaptive",
       {{"enabled", pool.adaptive.enabled},
        {"interval", format_duration(pool.adaptive.interval)},
        {"latency_threshold", format_duration(pool.adaptive.latency_threshold)},
        {"median_factor", pool.adaptive.median_factor},
        {"error_threshold", pool.adaptive.error_threshold},
        {"cut", pool.adaptive.cut},
        {"min_weight_ratio", pool.adaptive.min_weight_ratio}}},
  };
  if (pool.slow_start) handler["slow_start"] = format_duration(*pool.slow_start);
  if (pool.ignore_client_abort) handler["ignore_client_abort"] = true;
  // Only when set, as slow_start: documents without a queue read as before.
  if (pool.queue) handler["load_balancing"]["queue"] = pool.queue;
  if (pool.queue_timeout != ProxyConfig{}.queue_timeout)
    handler["load_balancing"]["queue_timeout"] = format_duration(pool.queue_timeout);
  return handler;
}

json named_values_to_json(const NamedValues& values) {
  json out = json::object();
  for (const auto& [name, list] : values) out[name] = list;
  return out;
}

json matcher_set_to_json(const MatcherSet& set) {
  json out = json::object();
  if (!set.paths.empty()) out["path"] = set.paths;
  if (!set.hosts.empty()) out["host"] = set.hosts;
  if (!set.methods.empty()) out["method"] = set.methods;
  if (!set.headers.empty()) out["header"] = named_values_to_json(set.headers);
  if (!set.query.empty()) out["query"] = named_values_to_json(set.query);
  if (!set.cookies.empty()) out["cookie"] = named_values_to_json(set.cookies);
  if (!set.remote_ranges.empty()) out["remote_ip"] = {{"ranges", set.remote_ranges}};
  if (!set.nots.empty()) {
    json nots = json::array();
    for (const MatcherSet& n : set.nots) nots.push_back(matcher_set_to_json(n));
    out["not"] = std::move(nots);
  }
  return out;
}

// Caddy's header ops map ({"add": {...}, "set": {...}, "delete": [...]}),
// which reads back into the same ops when they come in its order (add, set,
// delete), as the validator stores them.
json header_map_to_json(const std::vector<HeaderOp>& ops) {
  json out = json::object();
  std::string_view last_key;
  for (const HeaderOp& op : ops) {
    if (op.op == HeaderOp::remove) {
      out["delete"].push_back(op.name);
      continue;
    }
    // An add after a set of the same name is the set's second value.
    const bool more = op.op == HeaderOp::add && last_key == "set" && out["set"].contains(op.name);
    const std::string_view key = more || op.op == HeaderOp::set ? "set" : "add";
    out[std::string(key)][op.name].push_back(op.value);
    last_key = key;
  }
  return out;
}

json handlers_to_json(const SiteConfig& site, const std::vector<RouteHandler>& list);

json routes_to_json(const SiteConfig& site, const std::vector<Route>& routes) {
  json out = json::array();
  for (const Route& route : routes) {
    json entry = json::object();
    if (!route.group.empty()) entry["group"] = route.group;
    if (!route.match.empty()) {
      entry["match"] = json::array();
      for (const MatcherSet& set : route.match) entry["match"].push_back(matcher_set_to_json(set));
    }
    entry["handle"] = handlers_to_json(site, route.handle);
    if (route.terminal) entry["terminal"] = true;
    out.push_back(std::move(entry));
  }
  return out;
}

json handlers_to_json(const SiteConfig& site, const std::vector<RouteHandler>& list) {
  json out = json::array();
  for (const RouteHandler& h : list) {
    switch (h.kind) {
      case RouteHandler::subroute:
        out.push_back({{"handler", "subroute"}, {"routes", routes_to_json(site, h.routes)}});
        break;
      case RouteHandler::reverse_proxy: out.push_back(reverse_proxy_to_json(site.pool(h.pool))); break;
      case RouteHandler::static_response: {
        json entry = {{"handler", "static_response"}, {"status_code", h.status}};
        if (!h.body.empty()) entry["body"] = h.body;
        if (!h.fields.empty()) {
          json fields = json::object();
          for (const auto& [name, value] : h.fields) fields[name].push_back(value);
          entry["headers"] = std::move(fields);
        }
        if (h.close) entry["close"] = true;
        out.push_back(std::move(entry));
        break;
      }
      case RouteHandler::rewrite: {
        json entry = {{"handler", "rewrite"}};
        if (!h.strip_path_prefix.empty()) entry["strip_path_prefix"] = h.strip_path_prefix;
        if (!h.uri.empty()) entry["uri"] = h.uri;
        out.push_back(std::move(entry));
        break;
      }
      case RouteHandler::split: {
        json sides = json::array();
        for (size_t i = 0; i < h.routes.size(); ++i)
          sides.push_back({{"name", h.side_names[i]},
                           {"weight", h.side_weights[i]},
                           {"handle", handlers_to_json(site, h.routes[i].handle)}});
        json entry = {{"handler", "split"}, {"cookie", h.cookie}, {"sides", std::move(sides)}};
        if (!h.header.empty()) entry["header"] = h.header;
        out.push_back(std::move(entry));
        break;
      }
      case RouteHandler::headers: {
        json entry = {{"handler", "headers"}};
        if (!h.request_ops.empty()) entry["request"] = header_map_to_json(h.request_ops);
        if (!h.response_ops.empty()) entry["response"] = header_map_to_json(h.response_ops);
        out.push_back(std::move(entry));
        break;
      }
    }
  }
  return out;
}
}  // namespace

json route_to_json(const SiteConfig& site) {
  json route;
  if (!site.hosts.empty()) route["match"] = json::array({{{"host", site.hosts}}});
  if (site.is_default) route["default"] = true;
  if (site.log.enabled) route["log"] = {{"output", site.log.output}};
  if (!site.handle.empty()) {
    route["handle"] = handlers_to_json(site, site.handle);
  } else {
    json subroute = {{"handle", json::array({reverse_proxy_to_json(site.proxy)})}};
    route["handle"] = json::array({{{"handler", "subroute"}, {"routes", json::array({std::move(subroute)})}}});
  }
  route["terminal"] = true;
  return route;
}

namespace {

// Files are named, not copied: a reload reads them again (and the state file
// holds no key that was not written in JSON already).
json certificates_to_json(const std::vector<TlsCertificate>& certificates) {
  json files = json::array(), pems = json::array();
  for (const TlsCertificate& c : certificates) {
    json entry = c.certificate_file.empty() ? json{{"certificate", c.certificate_pem}, {"key", c.key_pem}}
                                            : json{{"certificate", c.certificate_file}, {"key", c.key_file}};
    if (!c.tags.empty()) entry["tags"] = c.tags;
    (c.certificate_file.empty() ? pems : files).push_back(std::move(entry));
  }
  json out = json::object();
  if (!files.empty()) out["load_files"] = std::move(files);
  if (!pems.empty()) out["load_pem"] = std::move(pems);
  return out;
}

json tls_policies_to_json(const std::vector<TlsPolicy>& policies) {
  json out = json::array();
  for (const TlsPolicy& p : policies) {
    json policy = json::object();
    if (!p.sni.empty()) policy["match"]["sni"] = p.sni;
    if (!p.any_tag.empty()) policy["certificate_selection"]["any_tag"] = p.any_tag;
    if (!p.default_sni.empty()) policy["default_sni"] = p.default_sni;
    out.push_back(std::move(policy));
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const Config& config) {
  json admin = {{"listen", config.admin.address}, {"disabled", !config.admin.enabled}};
  if (!config.admin.token.empty()) admin["token"] = config.admin.token;
  // One server per port, numbered in order of the port's first appearance
  // (sites grouped in one pass: a search of every site per port was
  // quadratic in the number of ports).
  std::vector<uint16_t> ports;
  std::map<uint16_t, std::vector<const SiteConfig*>> sites_of;
  for (const SiteConfig& site : config.sites) {
    auto& sites = sites_of[site.port];
    if (sites.empty()) ports.push_back(site.port);
    sites.push_back(&site);
  }
  json servers = json::object();
  for (size_t i = 0; i < ports.size(); ++i) {
    json routes = json::array();
    for (const SiteConfig* site : sites_of[ports[i]]) routes.push_back(route_to_json(*site));
    // The sites of a port share their addresses (SiteConfig::bind): the first one's.
    const std::vector<std::string>& bind = sites_of[ports[i]].front()->bind;
    json listen = json::array();
    for (const std::string& address : bind) listen.push_back(join_host_port(address, ports[i]));
    if (bind.empty()) listen.push_back(fmt::format(":{}", ports[i]));
    json server = {{"listen", std::move(listen)}, {"routes", std::move(routes)}};
    const Protocols& spoken = sites_of[ports[i]].front()->protocols;
    if (spoken != Protocols{}) {
      json names = json::array();
      for (auto [on, name] : {std::pair{spoken.h1, "h1"}, std::pair{spoken.h2, "h2"}, std::pair{spoken.h2c, "h2c"}})
        if (on) names.push_back(name);
      server["protocols"] = std::move(names);
    }
    if (const SiteConfig& first = *sites_of[ports[i]].front(); first.tls)
      server["tls_connection_policies"] = tls_policies_to_json(first.tls_policies);
    servers[fmt::format("srv{}", i)] = std::move(server);
  }
  json http = {{"workers", config.workers},
               {"grace_period", format_duration(config.grace_period)},
               {"idle_timeout", format_duration(config.idle_timeout)},
               {"header_timeout", format_duration(config.header_timeout)},
               {"max_connections", config.max_connections},
               {"servers", std::move(servers)}};
  json apps = {{"http", std::move(http)}};
  if (!config.demo_backends.empty()) {
    json backends = json::array();
    for (const DemoBackendConfig& b : config.demo_backends) backends.push_back({{"name", b.name}, {"listen", b.listen}});
    apps["demo"] = {{"backends", std::move(backends)}};
  }
  if (!config.certificates.empty()) apps["tls"] = {{"certificates", certificates_to_json(config.certificates)}};
  json logging = {{"format", config.log_format == LogFormat::json ? "json" : "text"}};
  return {{"admin", std::move(admin)}, {"logging", std::move(logging)}, {"apps", std::move(apps)}};
}

Result<Config> from_json(const nlohmann::json& document, const SourceMap* sources) {
  Result<Config> result;
  reading::Reader reader(result.errors, sources);
  Config config = reader.config(document);
  if (const size_t unlisted = reader.error_count() - result.errors.size()) {
    const std::string message = fmt::format("{} more errors not listed", unlisted);
    if (sources) result.errors.push_back({sources->file(), 0, 0, "", message});
    else result.errors.push_back({"", 0, 0, "the document", message});
  }
  if (result.errors.empty()) result.value = std::move(config);
  return result;
}

Result<AdminConfig> admin_from_json(const nlohmann::json& document, const SourceMap* sources) {
  Result<AdminConfig> result;
  reading::Reader reader(result.errors, sources);
  AdminConfig admin = reader.admin_only(document);
  if (result.errors.empty()) result.value = std::move(admin);
  return result;
}

}  // namespace heft::config
