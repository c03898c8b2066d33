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

}  // namespace

json route_to_json(const SiteConfig& site) {
  json route;
  if (!site.hosts.empty()) route["match"] = json::array({{{"host", site.hosts}}});
  if (site.is_default) route["default"] = true;
  if (site.log.enabled) route["log"] = {{"output", site.log.output}};
  json subroute = {{"handle", json::array({reverse_proxy_to_json(site.proxy)})}};
  route["handle"] = json::array({{{"handler", "subroute"}, {"routes", json::array({std::move(subroute)})}}});
  route["terminal"] = true;
  return route;
}

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
    servers[fmt::format("srv{}", i)] = {{"listen", std::move(listen)},
                                        {"routes", std::move(routes)}};
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
