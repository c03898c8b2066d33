// The one validator: how problems are placed and worded, the typed members,
// and the document down to its routes (reverse_proxy: json_read_proxy.cc).
#include "config/json_reader.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "config/json.h"
#include "config/values.h"

namespace heft::config::reading {

// ---- where problems are told ------------------------------------------------

std::string Reader::name_of(const std::string& pointer) const {
  const Source* at = source(pointer);
  return at ? at->name : std::string();
}

std::string Reader::token_of(const std::string& pointer, const json& value) const {
  if (const Source* at = source(pointer)) return at->token;
  return value.is_string() ? value.get<std::string>() : value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Reader::error(const std::string& pointer, std::string message) {
  // A Heftfile's errors are all listed, each at its place: its text bounds them.
  if (++error_count_ > kListedErrors && !sources_) return;
  if (sources_) {
    const Source& at = sources_->nearest(pointer);
    errors_.push_back({sources_->file(), at.line, at.column, pointer, std::move(message)});
    return;
  }
  // The document itself has the empty pointer: name it, or the message reads ": must be an object".
  errors_.push_back({"", 0, 0, pointer.empty() ? "the document" : pointer, std::move(message)});
}

void Reader::missing(const std::string& pointer, std::string json_message, std::string heftfile_message) {
  if (sources_ && sources_->incomplete(pointer)) return;
  error(pointer, std::move(json_message), std::move(heftfile_message));
}

std::string Reader::where(const std::string& pointer) const {
  if (!sources_) return pointer;
  const Source& at = sources_->nearest(pointer);
  return fmt::format("{}:{}", at.line, at.column);
}

// ---- members ------------------------------------------------------------------

bool Reader::object(const json& value, const std::string& pointer, std::initializer_list<std::string_view> allowed) {
  if (!value.is_object()) {
    error(pointer, "must be an object");
    return false;
  }
  for (const auto& [key, _] : value.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    const std::vector<std::string_view> known(allowed);
    const std::string suggestion = closest_match(key, known);
    error(pointer_append(pointer, key),
          suggestion.empty() ? std::string("unknown field") : fmt::format("unknown field (did you mean \"{}\"?)", suggestion));
  }
  return true;
}

const json* Reader::field(const json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool Reader::uint_value(const json& v, const std::string& pointer, uint64_t min, uint64_t max, uint64_t& out) {
  const bool integer = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  const uint64_t n = integer ? v.get<uint64_t>() : 0;
  if (integer && n >= min && n <= max) {
    out = n;
    return true;
  }
  error(pointer, fmt::format("must be an integer {}..{}", min, max),
        fmt::format("{} must be an integer {}..{}, got \"{}\"", name_of(pointer), min, max, token_of(pointer, v)));
  return false;
}

void Reader::size_field(const json& object, std::string_view key, const std::string& pointer, uint64_t max,
                        size_t& target) {
  const json* v = field(object, key);
  if (!v) return;
  const std::string at = pointer_append(pointer, key);
  // A Heftfile's size ("64KiB") arrives as the number it stands for, or as the
  // token when it does not read as one.
  if (heftfile() && v->is_string()) {
    error(at, fmt::format("invalid size \"{}\" (use e.g. 65536, 64KiB, 1MiB)", token_of(at, *v)));
    return;
  }
  if (heftfile() && v->is_number_unsigned() && v->get<uint64_t>() > max) {
    error(at, fmt::format("{} must be at most {}TiB, got \"{}\"", name_of(at), max >> 40, token_of(at, *v)));
    return;
  }
  uint64_t n = 0;
  if (uint_value(*v, at, 0, max, n)) target = size_t(n);
}

void Reader::bool_field(const json& object, std::string_view key, const std::string& pointer, bool& target) {
  const json* v = field(object, key);
  if (!v) return;
  if (v->is_boolean()) {
    target = v->get<bool>();
    return;
  }
  const std::string at = pointer_append(pointer, key);
  const Source* written = source(at);
  const std::string_view spelling = written && !written->spelling.empty() ? written->spelling : "true or false";
  error(at, "must be true or false", fmt::format("{} must be {}, got \"{}\"", name_of(at), spelling, token_of(at, *v)));
}

bool Reader::string_field(const json& object, std::string_view key, const std::string& pointer, std::string& target) {
  const json* v = field(object, key);
  if (!v) return false;
  if (!v->is_string()) {
    error(pointer_append(pointer, key), "must be a string");
    return false;
  }
  target = v->get<std::string>();
  return true;
}

std::optional<milliseconds> Reader::duration_value(const json& v, const std::string& pointer, bool positive) {
  std::optional<milliseconds> parsed;
  if (v.is_string()) {
    parsed = parse_duration(v.get<std::string>());
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() % 1'000'000 == 0 &&
             v.get<int64_t>() / 1'000'000 <= kMaxDuration.count()) {
    parsed = milliseconds{v.get<int64_t>() / 1'000'000};
  }
  if (parsed && !(positive && parsed->count() == 0)) return parsed;
  if (heftfile()) {
    const std::string token = token_of(pointer, v);
    error(pointer, parsed ? fmt::format("duration must be greater than 0, got \"{}\"", token)
                          : fmt::format("invalid duration \"{}\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at "
                                        "most 365d)",
                                        token));
    return std::nullopt;
  }
  // Sub-millisecond values ("1.5ms", 1500000 ns) fail here too: say so.
  error(pointer, positive ? "must be a duration in whole milliseconds, greater than 0 and at most 365d, e.g. \"30s\" "
                            "or 30000000000 (ns)"
                          : "must be a duration in whole milliseconds, at most 365d, e.g. \"250ms\" or 250000000 (ns)");
  return std::nullopt;
}

void Reader::duration_field(const json& object, std::string_view key, const std::string& pointer, bool positive,
                            milliseconds& target) {
  if (const json* v = field(object, key))
    if (auto d = duration_value(*v, pointer_append(pointer, key), positive)) target = *d;
}

void Reader::optional_duration_field(const json& object, std::string_view key, const std::string& pointer,
                                     std::optional<milliseconds>& target) {
  if (const json* v = field(object, key))
    if (auto d = duration_value(*v, pointer_append(pointer, key), false)) target = *d;
}

bool Reader::number_field(const json& object, std::string_view key, const std::string& pointer, double min,
                          double max, Number kind, double& target) {
  const json* v = field(object, key);
  if (!v) return false;
  if (v->is_number() && v->get<double>() >= min && v->get<double>() <= max) {
    target = v->get<double>();
    return true;
  }
  const std::string at = pointer_append(pointer, key);
  error(at, fmt::format("must be a number {}..{}", min, max),
        kind == Number::fraction
            ? fmt::format("{} must be a fraction {}..{} (e.g. \"{}\"), got \"{}\"", name_of(at), format_fraction(min),
                          format_fraction(max), format_fraction(max / 2), token_of(at, *v))
            : fmt::format("{} must be a number {}..{}, got \"{}\"", name_of(at), min, max, token_of(at, *v)));
  return false;
}

const json* Reader::array_field(const json& object, std::string_view key, const std::string& pointer, bool required) {
  const json* v = field(object, key);
  const std::string at = pointer_append(pointer, key);
  if (!v) {
    if (required) missing(at, "required", "required");
    return nullptr;
  }
  if (!v->is_array()) {
    error(at, "must be an array");
    return nullptr;
  }
  return v;
}

// ---- the document -------------------------------------------------------------

void Reader::admin(const json& document, AdminConfig& admin) {
  const json* section = field(document, "admin");
  if (!section || !object(*section, "/admin", {"listen", "disabled", "token"})) return;
  bool disabled = !admin.enabled;
  bool_field(*section, "disabled", "/admin", disabled);
  admin.enabled = !disabled;
  std::string listen;
  if (string_field(*section, "listen", "/admin", listen)) {
    auto split = split_host_port(listen, 0);
    const std::string token = token_of("/admin/listen", listen);
    if (!split.value || split.value->port == 0)
      error("/admin/listen", "must be an address with a port, e.g. \"127.0.0.1:2019\"",
            fmt::format("invalid admin address \"{}\": {}", token, split.value ? "missing port" : split.error));
    else if (!admin_listen_ip(split.value->host))
      error("/admin/listen", std::string(kAdminHostProblem),
            fmt::format("invalid admin address \"{}\": {}", token, kAdminHostProblem));
    else
      admin.address = listen;
  }
  std::string token;
  const bool token_given = string_field(*section, "token", "/admin", token);
  if (token_given) {
    if (std::string problem = admin_token_problem(token); !problem.empty())
      error("/admin/token", problem, "admin_token " + problem);
    else
      admin.token = token;
  }
  // heft run would start without its admin API (and /load refuse the file). A
  // bad token is reported by itself, not as missing.
  if (std::string why = admin_token_missing(admin); !why.empty() && !token_given && field(*section, "listen")) {
    if (heftfile())
      error("/admin/listen", fmt::format("admin address \"{}\" is not loopback: it needs an admin_token",
                                         token_of("/admin/listen", admin.address)));
    else
      error("/admin/token", why);
  }
}

// How heft writes its own log lines: /logging/format (the Heftfile's log_format).
void Reader::logging(const json& document, LogFormat& format) {
  const json* section = field(document, "logging");
  if (!section || !object(*section, "/logging", {"format"})) return;
  std::string written;
  if (!string_field(*section, "format", "/logging", written)) return;
  if (written == "text") {
    format = LogFormat::text;
  } else if (written == "json") {
    format = LogFormat::json;
  } else {
    error("/logging/format", "must be \"text\" or \"json\"",
          fmt::format("log_format must be text or json, got \"{}\"", token_of("/logging/format", written)));
  }
}

namespace {

std::string describe_bind(const std::vector<std::string>& bind) {
  if (bind.empty()) return "every address";
  std::string out;
  for (const std::string& address : bind) out += (out.empty() ? "" : " ") + address;
  return out;
}

}  // namespace

Config Reader::config(const json& document) {
  Config config;
  if (!object(document, "", {"admin", "logging", "apps"})) return config;
  admin(document, config.admin);
  logging(document, config.log_format);
  const json* apps = field(document, "apps");
  if (!apps) {
    missing("/apps", "required", "required");
    return config;
  }
  if (!object(*apps, "/apps", {"http", "demo", "tls"})) return config;
  if (const json* demo = field(*apps, "demo")) demo_backends(*demo, config.demo_backends);
  if (const json* tls = field(*apps, "tls")) tls_app(*tls, config);
  const json* http = field(*apps, "http");
  if (!http) {
    missing("/apps/http", "required", "required");
    return config;
  }
  const std::string at = "/apps/http";
  if (!object(*http, at, {"workers", "grace_period", "idle_timeout", "header_timeout", "max_connections", "servers"}))
    return config;
  uint_field(*http, "workers", at, 0, 1024, config.workers);
  duration_field(*http, "grace_period", at, false, config.grace_period);
  duration_field(*http, "idle_timeout", at, true, config.idle_timeout);
  duration_field(*http, "header_timeout", at, true, config.header_timeout);
  uint_field(*http, "max_connections", at, 1, 10'000'000, config.max_connections);
  const json* servers = field(*http, "servers");
  if (!servers || !servers->is_object() || servers->empty()) {
    missing("/apps/http/servers", servers ? "must be an object with at least one server" : "required",
            "no site blocks: nothing to serve");
    return config;
  }
  std::map<uint16_t, std::string> ports;  // each port's first server
  for (const std::string& name : server_order(*servers))
    server((*servers)[name], pointer_append("/apps/http/servers", name), config, ports);
  admin_listen_conflict(document, config, ports);
  return config;
}

// apps.demo: {"backends": [{"name": "a", "listen": "127.0.0.1:9081"}, ...]}
// (model.h, DemoBackendConfig); the Heftfile's `demo_backends a=IP:PORT ...`.
void Reader::demo_backends(const json& demo, std::vector<DemoBackendConfig>& out) {
  if (!object(demo, "/apps/demo", {"backends"})) return;
  const json* backends = array_field(demo, "backends", "/apps/demo", true);
  if (!backends) return;
  for (size_t i = 0; i < backends->size(); ++i) {
    const std::string at = pointer_append("/apps/demo/backends", i);
    if (!object((*backends)[i], at, {"name", "listen"})) continue;
    DemoBackendConfig backend;
    bool complete = true;
    for (auto [key, target] : {std::pair{"name", &backend.name}, std::pair{"listen", &backend.listen}}) {
      if (!field((*backends)[i], key)) {
        missing(pointer_append(at, key), "required", fmt::format("demo backend {} has no {}", i + 1, key));
        complete = false;
        continue;
      }
      complete = string_field((*backends)[i], key, at, *target) && complete;
    }
    if (!complete) continue;
    out.push_back(std::move(backend));
    if (std::string problem = demo_backend_problem(out, out.size() - 1); !problem.empty()) {
      error(at, problem);
      out.pop_back();
    }
  }
}

AdminConfig Reader::admin_only(const json& document) {
  AdminConfig out;
  if (object(document, "", {"admin", "logging", "apps"})) admin(document, out);
  return out;
}

// An admin address the servers listen on left heft without its admin API
// ("Address already in use"). Only one written here, and not the default
// section: a /load of that (what `heft reload` of a file without an admin
// line sends) keeps the running API's address, which the admin API checks;
// heft run and validate check the default (config::admin_start_conflict).
void Reader::admin_listen_conflict(const json& document, const Config& config,
                                   const std::map<uint16_t, std::string>& ports) {
  const json* section = field(document, "admin");
  const json* listen = section && section->is_object() ? field(*section, "listen") : nullptr;
  if (!listen || !listen->is_string() || listen->get<std::string>() != config.admin.address ||
      config.admin == AdminConfig{})
    return;
  uint16_t port = 0;
  std::string conflict = config::admin_listen_conflict(config, port);
  if (conflict.empty()) return;
  if (auto server = ports.find(port); server != ports.end())
    conflict += heftfile() ? fmt::format(" (site at {})", where(pointer_append(server->second, "routes") + "/0"))
                           : fmt::format(" ({})", pointer_append(server->second, "listen"));
  error("/admin/listen", conflict);
}

void Reader::server(const json& value, const std::string& pointer, Config& config,
                    std::map<uint16_t, std::string>& ports) {
  if (!object(value, pointer, {"listen", "routes", "protocols", "tls_connection_policies"})) return;
  Protocols protocols_spoken;
  if (const json* list = field(value, "protocols")) protocols(*list, pointer_append(pointer, "protocols"), protocols_spoken);
  uint16_t port = 0;
  std::optional<std::vector<TlsPolicy>> policies;  // set: the server terminates TLS
  if (const json* tls = field(value, "tls_connection_policies"))
    tls_policies(*tls, pointer_append(pointer, "tls_connection_policies"), config, policies.emplace());
  std::vector<std::string> bind;  // the server's addresses: each of its sites listens on them (`bind`)
  if (const json* listen = array_field(value, "listen", pointer, true)) {
    const std::string listen_pointer = pointer_append(pointer, "listen");
    if (auto parsed = listen_addresses(*listen, listen_pointer)) {
      port = parsed->first;
      bind = std::move(parsed->second);
      auto [first, inserted] = ports.emplace(port, pointer);
      // A Heftfile's sites of one port are one server unless they listen on
      // different addresses: this one's `bind` (or addresses) disagrees.
      if (!inserted) {
        std::vector<std::string> theirs;
        const auto site = std::find_if(config.sites.begin(), config.sites.end(),
                                       [&](const SiteConfig& s) { return s.port == port; });
        if (site != config.sites.end()) theirs = site->bind;
        error(heftfile() ? listen_pointer : pointer_append(listen_pointer, 0),
              fmt::format("port {} is also used by {}", port, pointer_append(first->second, "listen")),
              fmt::format("this site listens on {}, but the site at {} on port {} listens on {}: the sites of a port "
                          "listen on the same addresses (give them the same bind, or another port)",
                          describe_bind(bind), where(pointer_append(first->second, "routes") + "/0"), port,
                          describe_bind(theirs)));
      }
    }
  }
  const json* routes = array_field(value, "routes", pointer, true);
  if (!routes) return;
  const std::string routes_pointer = pointer_append(pointer, "routes");
  if (routes->empty()) missing(routes_pointer, "must hold at least one route", "must hold at least one route");
  const size_t first = config.sites.size();
  std::vector<HostPlaces> hosts(routes->size());  // each route's hosts and their pointers
  for (size_t i = 0; i < routes->size(); ++i) {
    SiteConfig& site = config.sites.emplace_back();
    site.port = port;
    site.bind = bind;
    site.protocols = protocols_spoken;
    site.tls = policies.has_value();
    if (policies) site.tls_policies = *policies;
    const std::string route_pointer = pointer_append(routes_pointer, i);
    if (sources_) {  // where the site was written: its warnings and resolve errors name it
      const Source& at = sources_->nearest(route_pointer);
      site.file = sources_->file();
      site.line = at.line;
      site.column = at.column;
    }
    route((*routes)[i], route_pointer, site, hosts[i]);
  }
  routes_agree(config.sites, first, routes_pointer, hosts);
}

// A server's "listen": [":PORT"] (every address) or ["ADDR:PORT", ...] with IP
// literals and one port; the port and the addresses (empty for ":PORT").
std::optional<std::pair<uint16_t, std::vector<std::string>>> Reader::listen_addresses(const json& listen,
                                                                                      const std::string& pointer) {
  static constexpr std::string_view kShape = "e.g. [\":8080\"] or [\"127.0.0.1:8080\", \"[::1]:8080\"]";
  if (listen.empty()) {
    error(pointer, fmt::format("must hold at least one address, {}", kShape));
    return std::nullopt;
  }
  uint16_t port = 0;
  std::vector<std::string> addresses;
  bool any_address = false;
  bool ok = true;
  for (size_t i = 0; i < listen.size(); ++i) {
    const std::string at = pointer_append(pointer, i);
    auto split = listen[i].is_string() ? split_host_port(listen[i].get<std::string>(), 0) : HostPortResult{};
    if (!split.value || split.value->port == 0) {
      listen_problem(at, fmt::format("must be \":PORT\" or \"ADDRESS:PORT\", {}", kShape));
      ok = false;
      continue;
    }
    if (port != 0 && split.value->port != port) {
      error(at, fmt::format("must use the port of the first address ({})", port));
      ok = false;
    }
    port = split.value->port;
    if (split.value->host.empty()) {
      any_address = true;
      continue;
    }
    auto address = listen_address(split.value->host);
    if (!address) {
      listen_problem(at, fmt::format("the address must be an IP address, got \"{}\"", split.value->host));
      ok = false;
    } else if (auto v4 = ipv4_of_mapped(*address)) {
      // A Heftfile's bind address has no port; its site address has.
      const Source* written = source(at);
      const bool with_port = !written || written->name == "site address";
      error(at, fmt::format("\"{}\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 only) cannot "
                            "listen on: write it as {}",
                            written ? written->token : split.value->host,
                            with_port ? join_host_port(*v4, split.value->port) : *v4));
      ok = false;
    } else if (std::find(addresses.begin(), addresses.end(), *address) != addresses.end()) {
      error(at, "duplicate address", fmt::format("duplicate address \"{}\" in {}", token_of(at, listen[i]), name_of(at)));
      ok = false;
    } else {
      addresses.push_back(*address);
    }
  }
  if (ok && any_address && listen.size() > 1) {
    error(pointer, "\":PORT\" (every address) must be the only address");
    ok = false;
  }
  if (!ok) return std::nullopt;
  return std::make_pair(port, std::move(addresses));
}

void Reader::listen_problem(const std::string& pointer, const std::string& json_message) {
  error(pointer, json_message,
        fmt::format("{} needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"{}\"", name_of(pointer),
                    token_of(pointer, json())));
}

// The routes of one server: each host once, one route without a host match
// at most, one default at most, and no default beside a route for every host.
void Reader::routes_agree(const std::vector<SiteConfig>& sites, size_t first, const std::string& routes_pointer,
                          const std::vector<HostPlaces>& host_places) {
  struct Seen {
    std::string pointer;
    size_t route = 0;
  };
  std::map<std::string, Seen> hosts;  // host -> where first; "" for the route without a host match
  std::optional<std::string> default_at;        // the first default route's "default"
  std::optional<std::string> named_default_at;  // a default route that has a host match
  for (size_t i = first; i < sites.size(); ++i) {
    const SiteConfig& site = sites[i];
    const size_t route = i - first;
    const std::string route_pointer = pointer_append(routes_pointer, route);
    if (site.hosts.empty()) {
      auto [it, inserted] = hosts.emplace("", Seen{route_pointer, route});
      if (!inserted)
        error(route_pointer, fmt::format("a route without a host match is also at {}", it->second.pointer),
              fmt::format("two sites answer every host on port {} (first at {})", site.port, where(it->second.pointer)));
    }
    for (const auto& [host, host_pointer] : host_places[route]) {
      auto [it, inserted] = hosts.emplace(host, Seen{host_pointer, route});
      if (inserted) continue;
      if (heftfile() && it->second.route == route)
        error(host_pointer, fmt::format("duplicate address \"{}\" in this site", token_of(host_pointer, host)));
      else
        error(host_pointer, fmt::format("host \"{}\" is also matched at {}", host, it->second.pointer),
              fmt::format("duplicate site \"{}\" (first at {})", join_host_port(host, site.port),
                          where(it->second.pointer)));
    }
    if (site.is_default) {
      const std::string default_pointer = pointer_append(route_pointer, "default");
      if (default_at)
        error(default_pointer, fmt::format("a second default route (first at {})", *default_at),
              fmt::format("second default site for port {} (first at {})", site.port, where(*default_at)));
      else
        default_at = default_pointer;
      if (!site.hosts.empty() && !named_default_at) named_default_at = default_pointer;
    }
  }
  // The route without a host match gets every request the others do not
  // match, so a default among those would never be used.
  if (auto catch_all = hosts.find(""); catch_all != hosts.end() && named_default_at)
    error(*named_default_at,
          fmt::format("has no effect: the route at {} has no host match and answers every host (remove one of the "
                      "two)",
                      catch_all->second.pointer),
          fmt::format("\"default\" has no effect: the site at {} answers every host on port {} (remove one of the two)",
                      where(catch_all->second.pointer), sites[first].port));
}

void Reader::route(const json& value, const std::string& pointer, SiteConfig& site, HostPlaces& hosts) {
  if (!object(value, pointer, {"match", "default", "log", "handle", "terminal"})) return;
  if (const json* match = array_field(value, "match", pointer, false))
    match_hosts(*match, pointer_append(pointer, "match"), site, hosts);
  bool_field(value, "default", pointer, site.is_default);
  const std::string log_pointer = pointer_append(pointer, "log");
  if (const json* log = field(value, "log"); log && object(*log, log_pointer, {"output"})) {
    site.log.enabled = true;
    site.log.output = "stderr";
    std::string output;
    if (string_field(*log, "output", log_pointer, output)) {
      const std::string at = pointer_append(log_pointer, "output");
      if (output.empty())
        error(at, "must be \"stderr\" or a file path", "invalid log file path");
      else if (std::string problem = utf8_problem(output); !problem.empty())
        error(at, "is " + problem, "invalid log file path: " + problem);
      else
        site.log.output = std::move(output);
    }
  }
  if (const json* terminal = field(value, "terminal"); terminal && *terminal != json(true))
    error(pointer_append(pointer, "terminal"), "must be true (heft routes are always terminal)");
  if (!field(value, "handle")) {
    missing(pointer_append(pointer, "handle"), "required", "site has no reverse_proxy");
    return;
  }
  route_handler(value, pointer, site);
}

void Reader::match_hosts(const json& match, const std::string& pointer, SiteConfig& site, HostPlaces& hosts) {
  if (match.size() != 1) {
    error(pointer, "must hold exactly one matcher set: [{\"host\": [...]}]");
    return;
  }
  const std::string set_pointer = pointer_append(pointer, 0);
  if (!object(match[0], set_pointer, {"host"})) return;
  const json* list = array_field(match[0], "host", set_pointer, true);
  if (!list) return;
  const std::string list_pointer = pointer_append(set_pointer, "host");
  if (list->empty()) error(list_pointer, "must hold at least one host");
  for (size_t h = 0; h < list->size(); ++h) {
    const json& host = (*list)[h];
    const std::string at = pointer_append(list_pointer, h);
    // A matcher host has no port, so an IPv6 literal may come without
    // brackets, as `heft adapt` writes it ("::1"); "[::1]" is the same host.
    std::string text = host.is_string() ? host.get<std::string>() : "";
    if (is_unbracketed_ipv6(text)) text = "[" + text + "]";
    // Default port 0, which no written port can be: "a.com:1" was read as "a.com".
    auto split = host.is_string() ? split_host_port(text, 0) : HostPortResult{};
    const bool shaped = split.value && !split.value->host.empty() && split.value->port == 0 &&
                        !(text.starts_with('[') && !text.ends_with(']'));
    if (shaped) {
      if (std::optional<std::string> name = site_host(split.value->host)) {
        site.hosts.push_back(*name);
        hosts.emplace_back(std::move(*name), at);
      } else {
        error(at, "must be a host name (no empty label)",
              fmt::format("invalid site address \"{}\": a host name has no empty label", token_of(at, host)));
      }
      continue;
    }
    // An IPv6 literal's problem is worth naming ("not a valid IPv6 address");
    // a name's "invalid port" is not: a matcher host has no port.
    const bool literal = text.starts_with('[') && !split.error.empty();
    error(at, literal ? "must be a host name: " + split.error : "must be a host name",
          fmt::format("invalid site address \"{}\": {}", token_of(at, host),
                      split.error.empty() ? "not a host name" : split.error));
  }
}

// The site's handlers (route_model.h). The shape of a site of one
// reverse_proxy, [{"handler": "subroute", "routes": [{"handle":
// [REVERSE_PROXY]}]}], is kept as that pool alone (SiteConfig::handle empty):
// its requests take no route step.
void Reader::route_handler(const json& route, const std::string& pointer, SiteConfig& site) {
  const json* handle = array_field(route, "handle", pointer, true);
  if (!handle) return;
  const std::string handle_pointer = pointer_append(pointer, "handle");
  std::vector<RouteHandler> list;
  std::vector<ProxyConfig> pools;
  handlers(*handle, handle_pointer, list, pools, 0);
  const bool one_pool = list.size() == 1 && list[0].kind == RouteHandler::subroute && list[0].routes.size() == 1 &&
                        list[0].routes[0].match.empty() && list[0].routes[0].group.empty() &&
                        list[0].routes[0].handle.size() == 1 &&
                        list[0].routes[0].handle[0].kind == RouteHandler::reverse_proxy;
  if (!pools.empty()) site.proxy = std::move(pools.front());
  if (one_pool) return;
  site.handle = std::move(list);
  if (pools.size() > 1) site.pools.assign(std::make_move_iterator(pools.begin() + 1), std::make_move_iterator(pools.end()));
}

}  // namespace heft::config::reading
