// The Caddy-shaped JSON form of the configuration: see json.h.
#include "config/json.h"

#include <algorithm>
#include <map>
#include <regex>

#include <fmt/format.h>

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

json reverse_proxy_to_json(const PoolConfig& pool) {
  json upstreams = json::array();
  for (const UpstreamConfig& u : pool.upstreams) {
    json entry = {{"dial", u.dial},
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
  if (pool.queue_timeout != PoolConfig{}.queue_timeout)
    handler["load_balancing"]["queue_timeout"] = format_duration(pool.queue_timeout);
  return handler;
}

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

// ---- reading ------------------------------------------------------------------

std::string member(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}
std::string invalid_header_name(std::string_view name) {
  return fmt::format("invalid header name \"{}\" (use letters, digits and {})", printable(name), kHeaderNameCharacters);
}

std::string element(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

class Reader {
 public:
  explicit Reader(std::vector<Diagnostic>& errors) : errors_(errors) {}

  // Errors past the first kListedErrors are counted, not kept: a document of a
  // million unknown keys would otherwise take more memory in errors than in JSON.
  static constexpr size_t kListedErrors = 100;

  void error(const std::string& path, std::string message) {
    if (++error_count_ > kListedErrors) return;
    // The document itself has the empty path: name it, or the message reads ": must be an object".
    errors_.push_back({"", 0, 0, path.empty() ? "the document" : path, std::move(message)});
  }
  size_t error_count() const { return error_count_; }

  // Checks that `value` is an object with only `allowed` keys.
  bool object(const json& value, const std::string& path, std::initializer_list<std::string_view> allowed) {
    if (!value.is_object()) {
      error(path, "must be an object");
      return false;
    }
    for (const auto& [key, _] : value.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::vector<std::string_view> known(allowed);
      std::string suggestion = closest_match(key, known);
      error(member(path, key), suggestion.empty() ? std::string("unknown field")
                                                  : fmt::format("unknown field (did you mean \"{}\"?)", suggestion));
    }
    return true;
  }

  const json* field(const json& obj, std::string_view key) {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }

  template <typename T>
  void uint_field(const json& obj, std::string_view key, const std::string& path, uint64_t min, uint64_t max,
                  T& target) {
    const json* v = field(obj, key);
    if (!v) return;
    bool ok = v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0);
    uint64_t n = ok ? v->get<uint64_t>() : 0;
    if (!ok || n < min || n > max) {
      error(member(path, key), fmt::format("must be an integer {}..{}", min, max));
      return;
    }
    target = static_cast<T>(n);
  }

  void bool_field(const json& obj, std::string_view key, const std::string& path, bool& target) {
    const json* v = field(obj, key);
    if (!v) return;
    if (!v->is_boolean()) {
      error(member(path, key), "must be true or false");
      return;
    }
    target = v->get<bool>();
  }

  bool string_field(const json& obj, std::string_view key, const std::string& path, std::string& target) {
    const json* v = field(obj, key);
    if (!v) return false;
    if (!v->is_string()) {
      error(member(path, key), "must be a string");
      return false;
    }
    target = v->get<std::string>();
    return true;
  }

  // A duration string ("30s") or, as Caddy also accepts, integer nanoseconds.
  std::optional<milliseconds> duration_value(const json& v, const std::string& path, bool positive) {
    std::optional<milliseconds> parsed;
    if (v.is_string()) {
      parsed = parse_duration(v.get<std::string>());
    } else if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() % 1'000'000 == 0 &&
               v.get<int64_t>() / 1'000'000 <= kMaxDuration.count()) {
      parsed = milliseconds{v.get<int64_t>() / 1'000'000};
    }
    if (!parsed || (positive && parsed->count() == 0)) {
      // Sub-millisecond values ("1.5ms", 1500000 ns) fail here too: say so.
      error(path, positive ? "must be a duration in whole milliseconds, greater than 0 and at most 365d, e.g. "
                             "\"30s\" or 30000000000 (ns)"
                           : "must be a duration in whole milliseconds, at most 365d, e.g. \"250ms\" or "
                             "250000000 (ns)");
      return std::nullopt;
    }
    return parsed;
  }

  void duration_field(const json& obj, std::string_view key, const std::string& path, bool positive,
                      milliseconds& target) {
    if (const json* v = field(obj, key))
      if (auto d = duration_value(*v, member(path, key), positive)) target = *d;
  }

  // slow_start: 0 is a value ("off", also over the pool's for one backend).
  void optional_duration_field(const json& obj, std::string_view key, const std::string& path,
                               std::optional<milliseconds>& target) {
    if (const json* v = field(obj, key))
      if (auto d = duration_value(*v, member(path, key), false)) target = *d;
  }

  void number_field(const json& obj, std::string_view key, const std::string& path, double min, double max,
                    double& target) {
    const json* v = field(obj, key);
    if (!v) return;
    if (!v->is_number() || v->get<double>() < min || v->get<double>() > max) {
      error(member(path, key), fmt::format("must be a number {}..{}", min, max));
      return;
    }
    target = v->get<double>();
  }

  // A required array; nullptr (after an error) otherwise.
  const json* array_field(const json& obj, std::string_view key, const std::string& path, bool required) {
    const json* v = field(obj, key);
    if (!v) {
      if (required) error(member(path, key), "required");
      return nullptr;
    }
    if (!v->is_array()) {
      error(member(path, key), "must be an array");
      return nullptr;
    }
    return v;
  }

  // ---- the document ----

  Config config(const json& doc) {
    Config config;
    if (!object(doc, "", {"admin", "logging", "apps"})) return config;
    if (const json* logging = field(doc, "logging"); logging && object(*logging, "logging", {"format"})) {
      std::string format = "text";
      if (string_field(*logging, "format", "logging", format)) {
        if (format == "json") config.log_format = LogFormat::json;
        else if (format != "text") error("logging.format", "must be \"text\" or \"json\"");
      }
    }
    if (const json* admin = field(doc, "admin"); admin && object(*admin, "admin", {"listen", "disabled", "token"})) {
      bool disabled = !config.admin.enabled;
      bool_field(*admin, "disabled", "admin", disabled);
      config.admin.enabled = !disabled;
      std::string listen = config.admin.address;
      if (string_field(*admin, "listen", "admin", listen)) {
        auto split = split_host_port(listen, 0);
        if (!split.value || split.value->port == 0)
          error("admin.listen", "must be an address with a port, e.g. \"127.0.0.1:2019\"");
        else if (!admin_listen_ip(split.value->host))
          error("admin.listen", std::string(kAdminHostProblem));
        else
          config.admin.address = listen;
      }
      if (std::string token; string_field(*admin, "token", "admin", token)) {
        if (std::string problem = admin_token_problem(token); !problem.empty())
          error("admin.token", problem);
        else
          config.admin.token = token;
      }
      if (std::string missing = admin_token_missing(config.admin); !missing.empty() && field(*admin, "listen"))
        error("admin.token", missing);
    }
    const json* apps = field(doc, "apps");
    if (!apps) {
      error("apps", "required");
      return config;
    }
    if (!object(*apps, "apps", {"http"})) return config;
    const json* http = field(*apps, "http");
    if (!http) {
      error("apps.http", "required");
      return config;
    }
    const std::string path = "apps.http";
    if (!object(*http, path,
                {"workers", "grace_period", "idle_timeout", "header_timeout", "max_connections", "servers"}))
      return config;
    uint_field(*http, "workers", path, 0, 1024, config.workers);
    duration_field(*http, "grace_period", path, false, config.grace_period);
    duration_field(*http, "idle_timeout", path, true, config.idle_timeout);
    duration_field(*http, "header_timeout", path, true, config.header_timeout);
    uint_field(*http, "max_connections", path, 1, 10'000'000, config.max_connections);
    const json* servers = field(*http, "servers");
    if (!servers) {
      error(member(path, "servers"), "required");
      return config;
    }
    if (!servers->is_object() || servers->empty()) {
      error(member(path, "servers"), "must be an object with at least one server");
      return config;
    }
    // srv0, srv1, ... in numeric order (JSON objects are unordered), then other names.
    std::vector<std::string> names;
    for (const auto& [name, _] : servers->items()) names.push_back(name);
    static const std::regex kNumbered("srv([0-9]{1,9})");
    auto rank = [](const std::string& name) -> std::pair<int64_t, std::string> {
      std::smatch m;
      if (std::regex_match(name, m, kNumbered)) return {std::stoll(m[1].str()), ""};
      return {INT64_MAX, name};
    };
    std::stable_sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
    std::map<uint16_t, std::string> ports;
    for (const std::string& name : names) server((*servers)[name], member(member(path, "servers"), name), config, ports);
    // An admin address the servers listen on left heft without its admin API
    // ("Address already in use"). Only one written here, and not the default
    // section: a /load of that (what `heft reload` of a file without an admin
    // line sends) keeps the running API's address, which the admin API checks;
    // heft run and validate check the default (config::admin_start_conflict).
    const json* admin = field(doc, "admin");
    const json* listen = admin && admin->is_object() ? field(*admin, "listen") : nullptr;
    if (listen && listen->is_string() && listen->get<std::string>() == config.admin.address &&
        !(config.admin == AdminConfig{})) {
      uint16_t port = 0;
      if (std::string conflict = admin_listen_conflict(config, port); !conflict.empty()) {
        if (auto server = ports.find(port); server != ports.end()) conflict += fmt::format(" ({})", server->second);
        error("admin.listen", conflict);
      }
    }
    return config;
  }

  // A server's "listen": [":PORT"] (every address) or ["ADDR:PORT", ...] with IP
  // literals and one port; the port and the addresses (empty for ":PORT").
  std::optional<std::pair<uint16_t, std::vector<std::string>>> listen_addresses(const json& listen,
                                                                                const std::string& path) {
    static constexpr std::string_view kShape = "e.g. [\":8080\"] or [\"127.0.0.1:8080\", \"[::1]:8080\"]";
    if (listen.empty()) {
      error(path, fmt::format("must hold at least one address, {}", kShape));
      return std::nullopt;
    }
    uint16_t port = 0;
    std::vector<std::string> addresses;
    bool any_address = false;
    bool ok = true;
    for (size_t i = 0; i < listen.size(); ++i) {
      auto split = listen[i].is_string() ? split_host_port(listen[i].get<std::string>(), 0) : HostPortResult{};
      if (!split.value || split.value->port == 0) {
        error(element(path, i), fmt::format("must be \":PORT\" or \"ADDRESS:PORT\", {}", kShape));
        ok = false;
        continue;
      }
      if (port != 0 && split.value->port != port) {
        error(element(path, i), fmt::format("must use the port of the first address ({})", port));
        ok = false;
      }
      port = split.value->port;
      if (split.value->host.empty()) {
        any_address = true;
        continue;
      }
      auto address = listen_address(split.value->host);
      if (!address) {
        error(element(path, i), fmt::format("the address must be an IP address, got \"{}\"", split.value->host));
        ok = false;
      } else if (auto v4 = ipv4_of_mapped(*address)) {
        error(element(path, i), fmt::format("\"{}\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners "
                                            "(IPv6 only) cannot listen on: write it as {}:{}",
                                            split.value->host, *v4, split.value->port));
        ok = false;
      } else if (std::find(addresses.begin(), addresses.end(), *address) != addresses.end()) {
        error(element(path, i), "duplicate address");
        ok = false;
      } else {
        addresses.push_back(*address);
      }
    }
    if (ok && any_address && listen.size() > 1) {
      error(path, "\":PORT\" (every address) must be the only address");
      ok = false;
    }
    if (!ok) return std::nullopt;
    return std::make_pair(port, std::move(addresses));
  }

  void server(const json& value, const std::string& path, Config& config, std::map<uint16_t, std::string>& ports) {
    if (!object(value, path, {"listen", "routes"})) return;
    uint16_t port = 0;
    std::vector<std::string> bind;  // the server's addresses: each of its sites listens on them (`bind`)
    if (const json* listen = array_field(value, "listen", path, true)) {
      std::string listen_path = member(path, "listen");
      auto parsed = listen_addresses(*listen, listen_path);
      if (parsed) {
        port = parsed->first;
        bind = std::move(parsed->second);
        auto [it, inserted] = ports.emplace(port, listen_path);
        if (!inserted) error(element(listen_path, 0), fmt::format("port {} is also used by {}", port, it->second));
      }
    }
    const json* routes = array_field(value, "routes", path, true);
    if (!routes) return;
    std::string routes_path = member(path, "routes");
    if (routes->empty()) error(routes_path, "must hold at least one route");
    std::map<std::string, std::string> hosts;  // host -> where; "" for the route without a host match
    std::optional<std::string> default_at;
    std::optional<std::string> named_default_at;  // a default route that has a host match
    for (size_t i = 0; i < routes->size(); ++i) {
      SiteConfig site;
      site.port = port;
      site.bind = bind;
      std::string route_path = element(routes_path, i);
      route((*routes)[i], route_path, site);
      if (site.hosts.empty()) {
        auto [it, inserted] = hosts.emplace("", route_path);
        if (!inserted) error(route_path, fmt::format("a route without a host match is also at {}", it->second));
      }
      for (size_t h = 0; h < site.hosts.size(); ++h) {
        std::string host_path = element(member(element(member(route_path, "match"), 0), "host"), h);
        auto [it, inserted] = hosts.emplace(site.hosts[h], host_path);
        if (!inserted) error(host_path, fmt::format("host \"{}\" is also matched at {}", site.hosts[h], it->second));
      }
      if (site.is_default) {
        if (default_at)
          error(member(route_path, "default"), fmt::format("a second default route (first at {})", *default_at));
        else
          default_at = route_path;
        if (!site.hosts.empty()) named_default_at = route_path;
      }
      config.sites.push_back(std::move(site));
    }
    // The route without a host match gets every request the others do not
    // match, so a default among those would never be used.
    if (auto catch_all = hosts.find(""); catch_all != hosts.end() && named_default_at)
      error(member(*named_default_at, "default"),
            fmt::format("has no effect: the route at {} has no host match and answers every host "
                        "(remove one of the two)",
                        catch_all->second));
  }

  void route(const json& value, const std::string& path, SiteConfig& site) {
    if (!object(value, path, {"match", "default", "log", "handle", "terminal"})) return;
    if (const json* match = array_field(value, "match", path, false)) {
      std::string match_path = member(path, "match");
      if (match->size() != 1) {
        error(match_path, "must hold exactly one matcher set: [{\"host\": [...]}]");
      } else if (object((*match)[0], element(match_path, 0), {"host"})) {
        std::string host_path = member(element(match_path, 0), "host");
        if (const json* hosts = array_field((*match)[0], "host", element(match_path, 0), true)) {
          if (hosts->empty()) error(host_path, "must hold at least one host");
          for (size_t h = 0; h < hosts->size(); ++h) {
            const json& host = (*hosts)[h];
            // A matcher host has no port, so an IPv6 literal may come without
            // brackets, as `heft adapt` writes it ("::1"); "[::1]" is the same host.
            std::string text = host.is_string() ? host.get<std::string>() : "";
            if (is_unbracketed_ipv6(text)) text = "[" + text + "]";
            // Default port 0, which no written port can be: "a.com:1" was read as "a.com".
            auto split = host.is_string() ? split_host_port(text, 0) : HostPortResult{};
            if (!host.is_string() || !split.value || split.value->host.empty() || split.value->port != 0 ||
                (text.starts_with('[') && !text.ends_with(']'))) {
              // An IPv6 literal's problem is worth naming ("not a valid IPv6
              // address"); a name's "invalid port" is not: a matcher host has no port.
              const bool literal = text.starts_with('[') && !split.error.empty();
              error(element(host_path, h), literal ? "must be a host name: " + split.error : "must be a host name");
              continue;
            }
            std::optional<std::string> name = site_host(split.value->host);
            if (!name) {
              error(element(host_path, h), "must be a host name (no empty label)");
              continue;
            }
            site.hosts.push_back(std::move(*name));
          }
        }
      }
    }
    bool_field(value, "default", path, site.is_default);
    if (const json* log = field(value, "log"); log && object(*log, member(path, "log"), {"output"})) {
      site.log.enabled = true;
      site.log.output = "stderr";
      if (string_field(*log, "output", member(path, "log"), site.log.output) && site.log.output.empty())
        error(member(member(path, "log"), "output"), "must be \"stderr\" or a file path");
    }
    if (const json* terminal = field(value, "terminal"); terminal && *terminal != json(true))
      error(member(path, "terminal"), "must be true (heft routes are always terminal)");
    const json* handle = array_field(value, "handle", path, true);
    if (!handle) return;
    std::string handle_path = member(path, "handle");
    if (handle->size() != 1) {
      error(handle_path, "must hold exactly one subroute handler");
      return;
    }
    std::string subroute_path = element(handle_path, 0);
    const json& subroute = (*handle)[0];
    if (!object(subroute, subroute_path, {"handler", "routes"})) return;
    if (subroute.value("handler", json()) != json("subroute")) {
      error(member(subroute_path, "handler"), "must be \"subroute\"");
      return;
    }
    const json* inner = array_field(subroute, "routes", subroute_path, true);
    if (!inner) return;
    std::string inner_path = member(subroute_path, "routes");
    if (inner->size() != 1) {
      error(inner_path, "must hold exactly one route");
      return;
    }
    std::string inner_route_path = element(inner_path, 0);
    if (!object((*inner)[0], inner_route_path, {"handle"})) return;
    const json* proxies = array_field((*inner)[0], "handle", inner_route_path, true);
    if (!proxies) return;
    std::string proxies_path = member(inner_route_path, "handle");
    if (proxies->size() != 1) {
      error(proxies_path, "must hold exactly one reverse_proxy handler");
      return;
    }
    reverse_proxy((*proxies)[0], element(proxies_path, 0), site.proxy);
  }

  void reverse_proxy(const json& value, const std::string& path, PoolConfig& pool) {
    if (!object(value, path,
                {"handler", "upstreams", "load_balancing", "health_checks", "transport", "headers", "slow_start",
                 "adaptive", "ignore_client_abort"}))
      return;
    if (value.value("handler", json()) != json("reverse_proxy")) error(member(path, "handler"), "must be \"reverse_proxy\"");
    // First: health_checks.passive holds the defaults of upstreams that set no max_fails / fail_timeout.
    if (const json* health = field(value, "health_checks")) health_checks(*health, member(path, "health_checks"), pool);
    if (const json* upstreams = array_field(value, "upstreams", path, true)) {
      std::string list_path = member(path, "upstreams");
      if (upstreams->empty()) error(list_path, "must hold at least one upstream");
      std::map<std::string, std::string> dials;
      for (size_t i = 0; i < upstreams->size(); ++i) {
        std::string upstream_path = element(list_path, i);
        UpstreamConfig upstream;
        upstream.max_fails = pool.max_fails;
        upstream.fail_timeout = pool.fail_timeout;
        if (!this->upstream((*upstreams)[i], upstream_path, upstream)) continue;
        auto [it, inserted] = dials.emplace(lowercase(upstream.dial), upstream_path);  // host names ignore case
        if (!inserted) {
          error(member(upstream_path, "dial"), fmt::format("duplicate backend \"{}\" (also at {})", upstream.dial, it->second));
          continue;
        }
        pool.upstreams.push_back(std::move(upstream));
      }
    }
    if (const json* lb = field(value, "load_balancing")) load_balancing(*lb, member(path, "load_balancing"), pool);
    if (const json* transport = field(value, "transport"); transport) {
      std::string tp = member(path, "transport");
      if (object(*transport, tp, {"protocol", "keepalive", "keepalive_timeout", "dial_timeout", "read_timeout",
                                    "write_timeout"})) {
        if (const json* protocol = field(*transport, "protocol"); protocol && *protocol != json("http"))
          error(member(tp, "protocol"), "must be \"http\"");
        uint_field(*transport, "keepalive", tp, 0, 100'000, pool.keepalive);
        duration_field(*transport, "keepalive_timeout", tp, false, pool.keepalive_timeout);
        duration_field(*transport, "dial_timeout", tp, true, pool.connect_timeout);
        duration_field(*transport, "read_timeout", tp, true, pool.read_timeout);
        duration_field(*transport, "write_timeout", tp, true, pool.send_timeout);
      }
    }
    if (const json* headers = field(value, "headers"); headers) {
      std::string hp = member(path, "headers");
      if (object(*headers, hp, {"request", "response"})) {
        header_ops(*headers, "request", hp, pool.header_up);
        header_ops(*headers, "response", hp, pool.header_down);
      }
    }
    optional_duration_field(value, "slow_start", path, pool.slow_start);
    bool_field(value, "ignore_client_abort", path, pool.ignore_client_abort);
    if (const json* adaptive = field(value, "adaptive")) this->adaptive(*adaptive, member(path, "adaptive"), pool.adaptive);
  }

  bool upstream(const json& value, const std::string& path, UpstreamConfig& upstream) {
    if (!object(value, path, {"dial", "weight", "max_fails", "fail_timeout", "backup", "down", "slow_start", "max_conns"}))
      return false;
    size_t errors_before = error_count_;
    std::string dial;
    if (!string_field(value, "dial", path, dial)) {
      if (!field(value, "dial")) error(member(path, "dial"), "required");
    } else {
      auto split = split_host_port(dial, 80);
      if (!split.value || split.value->host.empty()) {
        error(member(path, "dial"), fmt::format("must be \"host:port\": {}", split.value ? "missing host" : split.error));
      } else {
        upstream.host = split.value->host;
        upstream.port = split.value->port;
        upstream.dial = join_host_port(upstream.host, upstream.port);
      }
    }
    uint_field(value, "weight", path, 0, kMaxWeight, upstream.weight);
    uint_field(value, "max_fails", path, 0, 1'000'000, upstream.max_fails);
    duration_field(value, "fail_timeout", path, false, upstream.fail_timeout);
    bool_field(value, "backup", path, upstream.backup);
    bool_field(value, "down", path, upstream.down);
    optional_duration_field(value, "slow_start", path, upstream.slow_start);
    uint_field(value, "max_conns", path, 0, 1'000'000, upstream.max_conns);
    return error_count_ == errors_before;
  }

  void load_balancing(const json& value, const std::string& path, PoolConfig& pool) {
    if (!object(value, path,
                {"selection_policy", "hash_strategy", "retries", "try_duration", "next_upstream", "retry_body_limit",
                 "queue", "queue_timeout"}))
      return;
    if (const json* selection = field(value, "selection_policy")) {
      std::string sp = member(path, "selection_policy");
      if (object(*selection, sp, {"policy", "key", "name"})) {
        std::string name;
        if (string_field(*selection, "policy", sp, name)) {
          if (auto kind = balance::parse_policy(name); kind && name != "ip_hash")
            pool.policy = *kind;
          else
            error(member(sp, "policy"), fmt::format("unknown policy \"{}\"", name));
        }
        std::string key;
        if (string_field(*selection, "key", sp, key)) {
          if (key == "client_ip") pool.hash_key.kind = HashKey::client_ip;
          else if (key == "uri") pool.hash_key.kind = HashKey::uri;
          else if (key == "header") pool.hash_key.kind = HashKey::header;
          else if (key == "cookie") pool.hash_key.kind = HashKey::cookie;
          else error(member(sp, "key"), "must be \"client_ip\", \"uri\", \"header\" or \"cookie\"");
        }
        string_field(*selection, "name", sp, pool.hash_key.name);
        bool named = pool.hash_key.kind == HashKey::header || pool.hash_key.kind == HashKey::cookie;
        if (pool.policy == balance::PolicyKind::hash && pool.hash_key.kind == HashKey::none && !field(*selection, "key"))
          error(member(sp, "key"), "required for policy \"hash\"");
        else if (pool.policy != balance::PolicyKind::hash && field(*selection, "key"))
          error(member(sp, "key"), "only policy \"hash\" takes a key");
        if (named && pool.hash_key.name.empty())
          error(member(sp, "name"), "required for a header or cookie key");
        else if (named && !is_header_name(pool.hash_key.name))
          error(member(sp, "name"), fmt::format("must be a header or cookie name (letters, digits and {})",
                                                kHeaderNameCharacters));
        else if (!named && field(*selection, "name"))
          error(member(sp, "name"), "only header and cookie keys take a name");
      }
    }
    std::string strategy;
    if (string_field(value, "hash_strategy", path, strategy)) {
      if (auto parsed = balance::parse_hash_strategy(strategy))
        pool.hash_strategy = *parsed;
      else
        error(member(path, "hash_strategy"), "must be \"ring\" or \"maglev\"");
    }
    uint_field(value, "retries", path, 0, 1000, pool.next_upstream_tries);
    duration_field(value, "try_duration", path, false, pool.next_upstream_timeout);
    uint_field(value, "retry_body_limit", path, 0, uint64_t(1) << 40, pool.retry_body_limit);
    uint_field(value, "queue", path, 0, 1'000'000, pool.queue);
    duration_field(value, "queue_timeout", path, true, pool.queue_timeout);
    if (const json* conditions = array_field(value, "next_upstream", path, false)) {
      std::string np = member(path, "next_upstream");
      NextUpstream flags{false, false, false, false, false, false, false, false};
      for (size_t i = 0; i < conditions->size(); ++i) {
        const json& c = (*conditions)[i];
        std::string name = c.is_string() ? c.get<std::string>() : "";
        if (name == "error") flags.error = true;
        else if (name == "timeout") flags.timeout = true;
        else if (name == "http_500") flags.http_500 = true;
        else if (name == "http_502") flags.http_502 = true;
        else if (name == "http_503") flags.http_503 = true;
        else if (name == "http_504") flags.http_504 = true;
        else if (name == "non_idempotent") flags.non_idempotent = true;
        else if (name == "off" && conditions->size() == 1) flags.off = true;
        else if (name == "off") error(element(np, i), "\"off\" cannot be combined with other conditions");
        else error(element(np, i), "unknown condition");
      }
      pool.next_upstream = flags;
    }
  }

  void health_checks(const json& value, const std::string& path, PoolConfig& pool) {
    if (!object(value, path, {"active", "passive"})) return;
    if (const json* passive = field(value, "passive")) {
      const std::string pp = member(path, "passive");
      if (object(*passive, pp, {"max_fails", "fail_timeout"})) {
        uint_field(*passive, "max_fails", pp, 0, 1'000'000, pool.max_fails);
        duration_field(*passive, "fail_timeout", pp, false, pool.fail_timeout);
      }
    }
    const json* active = field(value, "active");
    if (!active) return;
    std::string ap = member(path, "active");
    if (!object(*active, ap,
                {"uri", "port", "interval", "timeout", "expect_status", "expect_body", "headers", "passes", "fails"}))
      return;
    std::string uri;
    if (string_field(*active, "uri", ap, uri)) {
      if (!uri.empty() && uri.front() != '/')
        error(member(ap, "uri"), "must start with '/' (or be empty: no active checks)");
      else if (!is_request_target_text(uri))
        error(member(ap, "uri"), "may hold no space, control character or non-ASCII byte (percent-encode them)");
      else
        pool.health_uri = uri;
    }
    uint_field(*active, "port", ap, 0, 65535, pool.health_port);
    duration_field(*active, "interval", ap, true, pool.health_interval);
    duration_field(*active, "timeout", ap, true, pool.health_timeout);
    std::string status;
    if (string_field(*active, "expect_status", ap, status)) {
      static const std::regex kStatus("([1-5]([0-9][0-9]|xx))?");
      if (std::regex_match(status, kStatus))
        pool.health_status = status;
      else
        error(member(ap, "expect_status"), "must be a status like \"200\" or \"2xx\"");
    }
    std::string body;
    if (string_field(*active, "expect_body", ap, body)) {
      if (const std::string problem = health_body_problem(body); problem.empty())
        pool.health_body = body;
      else
        error(member(ap, "expect_body"), fmt::format("invalid regular expression: {}", problem));
    }
    if (const json* headers = array_field(*active, "headers", ap, false)) {
      std::string hp = member(ap, "headers");
      for (size_t i = 0; i < headers->size(); ++i) {
        std::string entry_path = element(hp, i);
        if (!object((*headers)[i], entry_path, {"name", "value"})) continue;
        std::string name, header_value;
        if (!string_field((*headers)[i], "name", entry_path, name) || name.empty()) {
          error(member(entry_path, "name"), "required");
          continue;
        }
        if (!is_header_name(name)) {
          error(member(entry_path, "name"), invalid_header_name(name));
          continue;
        }
        if (std::string problem = header_op_problem(name, HeaderOp::set, true); !problem.empty()) {
          error(member(entry_path, "name"), problem);
          continue;
        }
        if (!string_field((*headers)[i], "value", entry_path, header_value)) {
          error(member(entry_path, "value"), "required");
          continue;
        }
        if (std::string problem = header_value_problem(header_value); !problem.empty()) {
          error(member(entry_path, "value"), problem);
          continue;
        }
        pool.health_headers.emplace_back(name, header_value);
      }
    }
    uint_field(*active, "passes", ap, 1, 1000, pool.health_passes);
    uint_field(*active, "fails", ap, 1, 1000, pool.health_fails);
  }

  void header_ops(const json& headers, std::string_view key, const std::string& path, std::vector<HeaderOp>& out) {
    const json* ops = array_field(headers, key, path, false);
    if (!ops) return;
    std::string list_path = member(path, key);
    for (size_t i = 0; i < ops->size(); ++i) {
      std::string op_path = element(list_path, i);
      const json& entry = (*ops)[i];
      if (!object(entry, op_path, {"op", "name", "value"})) continue;
      HeaderOp op;
      std::string kind;
      string_field(entry, "op", op_path, kind);
      if (kind == "set") op.op = HeaderOp::set;
      else if (kind == "add") op.op = HeaderOp::add;
      else if (kind == "delete") op.op = HeaderOp::remove;
      else {
        error(member(op_path, "op"), "must be \"set\", \"add\" or \"delete\"");
        continue;
      }
      if (!string_field(entry, "name", op_path, op.name) || op.name.empty()) {
        error(member(op_path, "name"), "required");
        continue;
      }
      if (!is_header_name(op.name)) {
        error(member(op_path, "name"), invalid_header_name(op.name));
        continue;
      }
      if (std::string problem = header_op_problem(op.name, op.op, key == "request"); !problem.empty()) {
        error(member(op_path, "name"), problem);
        continue;
      }
      bool has_value = string_field(entry, "value", op_path, op.value);
      if (op.op == HeaderOp::remove && has_value) {
        error(member(op_path, "value"), "a delete takes no value");
        continue;
      }
      if (op.op != HeaderOp::remove && !has_value) {
        error(member(op_path, "value"), "required");
        continue;
      }
      if (std::string problem = header_value_problem(op.value); !problem.empty()) {
        error(member(op_path, "value"), problem);
        continue;
      }
      out.push_back(std::move(op));
    }
  }

  void adaptive(const json& value, const std::string& path, AdaptiveConfig& adaptive) {
    if (!object(value, path,
                {"enabled", "interval", "latency_threshold", "median_factor", "error_threshold", "cut",
                 "min_weight_ratio"}))
      return;
    bool_field(value, "enabled", path, adaptive.enabled);
    duration_field(value, "interval", path, true, adaptive.interval);
    duration_field(value, "latency_threshold", path, false, adaptive.latency_threshold);
    number_field(value, "median_factor", path, 1.0, 100.0, adaptive.median_factor);
    number_field(value, "error_threshold", path, 0.0, 1.0, adaptive.error_threshold);
    number_field(value, "cut", path, 0.0, 1.0, adaptive.cut);
    if (const json* cut = field(value, "cut"); cut && cut->is_number() && cut->get<double>() == 0.0)
      error(member(path, "cut"), "must be greater than 0");
    number_field(value, "min_weight_ratio", path, 0.0, 1.0, adaptive.min_weight_ratio);
  }

 private:
  std::vector<Diagnostic>& errors_;
  size_t error_count_ = 0;  // listed or not
};

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
    servers[fmt::format("srv{}", i)] = {{"listen", std::move(listen)},
                                        {"routes", std::move(routes)}};
  }
  json http = {{"workers", config.workers},
               {"grace_period", format_duration(config.grace_period)},
               {"idle_timeout", format_duration(config.idle_timeout)},
               {"header_timeout", format_duration(config.header_timeout)},
               {"max_connections", config.max_connections},
               {"servers", std::move(servers)}};
  json logging = {{"format", config.log_format == LogFormat::json ? "json" : "text"}};
  return {{"admin", std::move(admin)}, {"logging", std::move(logging)}, {"apps", {{"http", std::move(http)}}}};
}

Result<Config> from_json(const nlohmann::json& document) {
  Result<Config> result;
  Reader reader(result.errors);
  Config config = reader.config(document);
  if (const size_t unlisted = reader.error_count() - result.errors.size())
    result.errors.push_back({"", 0, 0, "the document", fmt::format("{} more errors not listed", unlisted)});
  if (result.errors.empty()) result.value = std::move(config);
  return result;
}

}  // namespace heft::config
