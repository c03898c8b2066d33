// The Heftfile adapter (adapt.h): the file, its global options and its sites.
// A site's reverse_proxy is adapt_proxy.cc's.
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "config/adapter.h"
#include "config/heftfile.h"
#include "config/values.h"

namespace heft::config {
namespace adapting {

namespace {

constexpr std::string_view kGlobalNames[] = {
    "admin", "admin_token", "workers", "grace_period", "idle_timeout", "header_timeout",
    "max_connections", "default_bind", "log_format", "demo_backends"};
constexpr std::string_view kSiteNames[] = {"reverse_proxy", "log", "default", "bind", "protocols", "tls", "handle",
                                           "handle_path", "route", "respond", "redir", "rewrite", "header", "split"};
constexpr std::string_view kProxyNames[] = {
    "to", "lb_policy", "hash_strategy", "keepalive", "keepalive_timeout", "next_upstream", "next_upstream_tries",
    "next_upstream_timeout", "connect_timeout", "read_timeout", "send_timeout",
    "retry_body_limit", "header_up", "header_down", "slow_start", "max_fails", "fail_timeout",
    "health_uri", "health_port", "health_interval", "health_timeout", "health_status",
    "health_body", "health_headers", "health_passes", "health_fails", "adaptive", "ignore_client_abort",
    "queue", "queue_timeout"};
constexpr std::string_view kUpstreamNames[] = {"weight", "max_fails", "fail_timeout",
                                               "backup", "down", "slow_start", "max_conns"};
constexpr std::string_view kAdaptiveNames[] = {"interval", "latency_threshold",
                                               "median_factor", "error_threshold",
                                               "cut", "min_weight_ratio"};
constexpr std::string_view kLogNames[] = {"output"};
constexpr std::string_view kConditionNames[] = {
    "error", "timeout", "http_500", "http_502", "http_503", "http_504", "non_idempotent", "off"};
constexpr std::string_view kPolicySpellings[] = {
    "round_robin", "weighted_round_robin", "least_conn", "random", "p2c", "first", "ip_hash",
    "hash", "header", "cookie", "uri_hash", "client_ip_hash"};

// The options that set one value, and where it goes in the JSON form: the
// Heftfile's mapping (docs/heftfile.md, "The JSON form"). The global ones.
constexpr Mapping kGlobalValues[] = {
    {"admin_token", "/admin/token", Kind::string},
    {"workers", "/apps/http/workers", Kind::integer},
    {"grace_period", "/apps/http/grace_period", Kind::duration},
    {"idle_timeout", "/apps/http/idle_timeout", Kind::duration},
    {"header_timeout", "/apps/http/header_timeout", Kind::duration},
    {"max_connections", "/apps/http/max_connections", Kind::integer},
    {"log_format", "/logging/format", Kind::string},
};

// The reverse_proxy options that set one value, and where it goes in the handler.
constexpr Mapping kProxyMappings[] = {
    {"hash_strategy", "/load_balancing/hash_strategy", Kind::string},
    {"next_upstream_tries", "/load_balancing/retries", Kind::integer},
    {"next_upstream_timeout", "/load_balancing/try_duration", Kind::duration},
    {"retry_body_limit", "/load_balancing/retry_body_limit", Kind::size},
    {"queue", "/load_balancing/queue", Kind::integer},
    {"queue_timeout", "/load_balancing/queue_timeout", Kind::duration},
    {"keepalive", "/transport/keepalive", Kind::integer},
    {"keepalive_timeout", "/transport/keepalive_timeout", Kind::duration},
    {"connect_timeout", "/transport/dial_timeout", Kind::duration},
    {"read_timeout", "/transport/read_timeout", Kind::duration},
    {"send_timeout", "/transport/write_timeout", Kind::duration},
    {"max_fails", "/health_checks/passive/max_fails", Kind::integer},
    {"fail_timeout", "/health_checks/passive/fail_timeout", Kind::duration},
    {"health_uri", "/health_checks/active/uri", Kind::string},
    {"health_port", "/health_checks/active/port", Kind::integer},
    {"health_interval", "/health_checks/active/interval", Kind::duration},
    {"health_timeout", "/health_checks/active/timeout", Kind::duration},
    {"health_status", "/health_checks/active/expect_status", Kind::string},
    {"health_body", "/health_checks/active/expect_body", Kind::string},
    {"health_passes", "/health_checks/active/passes", Kind::integer},
    {"health_fails", "/health_checks/active/fails", Kind::integer},
    {"slow_start", "/slow_start", Kind::duration},
    {"ignore_client_abort", "/ignore_client_abort", Kind::on_off},
};

// A backend's options (on a `to` line or in its address's query), in its upstream.
constexpr Mapping kUpstreamMappings[] = {
    {"weight", "/weight", Kind::integer},          {"max_fails", "/max_fails", Kind::integer},
    {"fail_timeout", "/fail_timeout", Kind::duration}, {"slow_start", "/slow_start", Kind::duration},
    {"max_conns", "/max_conns", Kind::integer},
};

// adaptive { ... }, in the handler.
constexpr Mapping kAdaptiveMappings[] = {
    {"interval", "/adaptive/interval", Kind::duration},
    {"latency_threshold", "/adaptive/latency_threshold", Kind::duration},
    {"median_factor", "/adaptive/median_factor", Kind::number},
    {"error_threshold", "/adaptive/error_threshold", Kind::fraction},
    {"cut", "/adaptive/cut", Kind::fraction},
    {"min_weight_ratio", "/adaptive/min_weight_ratio", Kind::fraction},
};

std::optional<std::string> environment_variable(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value) return std::nullopt;
  return std::string(value);
}

}  // namespace

const std::span<const std::string_view> kGlobalOptions(kGlobalNames), kSiteOptions(kSiteNames),
    kProxyOptions(kProxyNames), kUpstreamOptions(kUpstreamNames), kAdaptiveOptions(kAdaptiveNames),
    kLogOptions(kLogNames), kNextUpstreamConditions(kConditionNames), kPolicyNames(kPolicySpellings);
const std::span<const Mapping> kProxyValues(kProxyMappings), kUpstreamValues(kUpstreamMappings),
    kAdaptiveValues(kAdaptiveMappings);

bool contains(std::span<const std::string_view> list, std::string_view word) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

// ---- diagnostics --------------------------------------------------------------

void Adapter::error(const Token& at, std::string message) {
  out_.errors.push_back({file_, at.line, at.column, "", std::move(message)});
}

void Adapter::unknown(const Token& at, std::span<const std::string_view> known, std::string_view what) {
  // nginx writes `weight=5`; here the value follows a space.
  if (const std::size_t eq = at.text.find('='); eq != std::string::npos && eq + 1 < at.text.size()) {
    const std::string_view name = std::string_view(at.text).substr(0, eq);
    if (contains(known, name)) {
      error(at, fmt::format("unknown {} \"{}\": write \"{} {}\" (a value follows its name after a space, not \"=\")",
                            what, printable(at.text), name, printable(at.text.substr(eq + 1))));
      return;
    }
  }
  const std::string suggestion = closest_match(at.text, known);
  if (suggestion.empty())
    error(at, fmt::format("unknown {} \"{}\"", what, printable(at.text)));
  else
    error(at, fmt::format("unknown {} \"{}\" (did you mean \"{}\"?)", what, printable(at.text), suggestion));
}

bool Adapter::no_block(const Directive& d) {
  if (!d.has_block) return true;
  error(d.open_brace, fmt::format("\"{}\" takes no block", d.name.text));
  return false;
}

bool Adapter::no_args(const Directive& d) {
  if (d.args.empty()) return true;
  error(d.args[0], fmt::format("\"{}\" takes no arguments", d.name.text));
  return false;
}

const Token* Adapter::single(const Directive& d) {
  if (!no_block(d)) return nullptr;
  if (d.args.empty()) {
    error(d.name, fmt::format("missing value for \"{}\"", d.name.text));
    return nullptr;
  }
  if (d.args.size() > 1) {
    error(d.args[1], fmt::format("unexpected argument \"{}\" for \"{}\"", d.args[1].text, d.name.text));
    return nullptr;
  }
  return &d.args[0];
}

bool Adapter::first_time(std::map<std::string, Token>& seen, const Token& option) {
  auto [it, inserted] = seen.emplace(option.text, option);
  if (inserted) return true;
  error(option, fmt::format("duplicate option \"{}\" (first set at {}:{})", option.text, it->second.line,
                            it->second.column));
  return false;
}

std::vector<const Directive*> Adapter::options(const std::vector<Directive>& block,
                                               std::span<const std::string_view> known, std::string_view what) {
  std::vector<const Directive*> out;
  std::map<std::string, Token> seen;
  for (const Directive& d : block) {
    if (d.is_comment) continue;
    if (!contains(known, d.name.text))
      unknown(d.name, known, what);
    else if (first_time(seen, d.name))
      out.push_back(&d);
  }
  return out;
}

// ---- values -------------------------------------------------------------------

json Adapter::converted(const Token& token, Kind kind) {
  switch (kind) {
    case Kind::integer:
      if (auto n = parse_uint(token.text, UINT64_MAX)) return *n;
      break;
    case Kind::size:
      if (auto n = parse_size(token.text)) return *n;
      break;
    case Kind::number:
      if (auto n = parse_number(token.text)) return *n;
      break;
    case Kind::fraction:
      if (auto n = parse_fraction(token.text)) return *n;
      break;
    case Kind::on_off:
      if (token.text == "on" || token.text == "off") return token.text == "on";
      break;
    case Kind::string:
    case Kind::duration:
      break;
  }
  return token.text;  // as written: the validator names it
}

Source Adapter::place(const Token& at, std::string_view name, std::string_view spelling) {
  return Source{at.line, at.column, std::string(name), at.text, spelling};
}

void Adapter::set(json& object, std::string_view pointer, json value, const std::string& base, Source source,
                  std::vector<std::pair<std::string, Source>>& sources) {
  object[json::json_pointer(std::string(pointer))] = std::move(value);
  sources.emplace_back(base + std::string(pointer), std::move(source));
}

bool Adapter::mapped(const Directive& d, std::span<const Mapping> mappings, json& object, const std::string& base,
                     std::vector<std::pair<std::string, Source>>& sources) {
  const auto mapping = std::find_if(mappings.begin(), mappings.end(),
                                    [&](const Mapping& m) { return m.name == d.name.text; });
  if (mapping == mappings.end()) return false;
  if (const Token* value = single(d))
    set(object, mapping->pointer, converted(*value, mapping->kind), base,
        place(*value, d.name.text, mapping->kind == Kind::on_off ? "on or off" : ""), sources);
  return true;
}

// ---- the file -----------------------------------------------------------------

void Adapter::file(const syntax::Tree& tree, bool syntax_ok) {
  std::vector<const Directive*> top;
  for (const Directive& d : tree.top)
    if (!d.is_comment) top.push_back(&d);
  size_t i = 0;
  if (!top.empty() && is_global_block(*top[0])) {
    global(*top[0]);
    i = 1;
  }
  for (; i < top.size(); ++i) {
    const Directive& d = *top[i];
    if (is_global_block(d)) {
      error(d.name, "the global options block must come first in the file");
      continue;
    }
    if (!d.has_block) {
      if (!sites_.empty()) {
        error(d.name, fmt::format("expected '{{' after site address \"{}\"", d.name.text));
        continue;
      }
      // A single site may omit its braces: everything after its address line is its body.
      site(d, std::vector<const Directive*>(top.begin() + i + 1, top.end()));
      break;
    }
    std::vector<const Directive*> body;
    for (const Directive& child : d.block)
      if (!child.is_comment) body.push_back(&child);
    site(d, body);
  }
  servers(syntax_ok);
}

void Adapter::global(const Directive& block) {
  if (!block.args.empty()) error(block.args[0], "the global options block takes no arguments");
  std::vector<std::pair<std::string, Source>> sources;
  for (const Directive* option : options(block.block, kGlobalOptions, "global option")) {
    const Directive& d = *option;
    if (d.name.text == "default_bind") {
      bind_addresses(d, default_bind_);
    } else if (d.name.text == "demo_backends") {
      demo_backends(d, sources);
    } else if (d.name.text == "admin") {
      if (const Token* value = single(d)) {
        if (value->text == "off")
          set(out_.document, "/admin/disabled", true, "", place(*value, "admin"), sources);
        else
          set(out_.document, "/admin/listen", value->text, "", place(*value, "admin"), sources);
      }
    } else {
      mapped(d, kGlobalValues, out_.document, "", sources);
    }
  }
  for (auto& [pointer, source] : sources) out_.sources.add(std::move(pointer), std::move(source));
}

// `demo_backends NAME=IP:PORT...`: /apps/demo/backends, one {"name",
// "listen"} per word, each at its token (the validator checks them).
void Adapter::demo_backends(const Directive& d, std::vector<std::pair<std::string, Source>>& sources) {
  if (!no_block(d)) return;
  if (d.args.empty())
    error(d.name, "missing value for \"demo_backends\" (e.g. \"demo_backends a=127.0.0.1:9081 b=127.0.0.1:9082\")");
  json backends = json::array();
  for (const Token& arg : d.args) {
    const size_t eq = arg.text.find('=');
    if (eq == std::string::npos) {
      error(arg, fmt::format("demo backend \"{}\" must be NAME=IP:PORT (e.g. a=127.0.0.1:9081)", printable(arg.text)));
      continue;
    }
    const std::string at = pointer_append("/apps/demo/backends", backends.size());
    for (const char* key : {"", "/name", "/listen"}) sources.emplace_back(at + key, place(arg, "demo_backends"));
    backends.push_back({{"name", arg.text.substr(0, eq)}, {"listen", arg.text.substr(eq + 1)}});
  }
  if (!backends.empty()) out_.document["apps"]["demo"]["backends"] = std::move(backends);
}

// `default_bind ADDR...` (global) and `bind ADDR...` (a site): the addresses
// to listen on, in canonical form where they read as IP literals (the
// validator names the others), each with its token.
void Adapter::bind_addresses(const Directive& d, std::vector<std::pair<std::string, Token>>& out) {
  if (!no_block(d)) return;
  if (d.args.empty())
    error(d.name, fmt::format("missing value for \"{0}\" (e.g. \"{0} 127.0.0.1 ::1\")", d.name.text));
  for (const Token& arg : d.args) out.emplace_back(listen_address(arg.text).value_or(arg.text), arg);
}

// ---- sites --------------------------------------------------------------------

void Adapter::site(const Directive& head, const std::vector<const Directive*>& body) {
  Site& site = sites_.emplace_back();
  site.head = head.name;
  site.sources.emplace_back("", place(head.name, "site"));
  site_addresses(head, site);
  const Directive* proxy = nullptr;
  std::map<std::string, Token> seen;
  const size_t errors_before = out_.errors.size();
  const bool routes = has_routes(body);
  std::vector<const Directive*> route_directives;
  for (const Directive* d : body) {
    const std::string& name = d->name.text;
    // The site's own settings stay here; everything else is a route's.
    if (routes && (name.starts_with('@') || (name != "log" && name != "default" && name != "bind" &&
                                             name != "protocols" && name != "tls"))) {
      route_directives.push_back(d);
      continue;
    }
    if (!contains(kSiteOptions, name)) {
      unknown(d->name, kSiteOptions, "directive");
      continue;
    }
    if (name == "reverse_proxy") {
      if (proxy) {
        error(d->name, fmt::format("only one reverse_proxy per site (first at {}:{})", proxy->name.line,
                                   proxy->name.column));
        continue;
      }
      proxy = d;
      const std::string base = "/handle/0/routes/0/handle/0";
      json handler = pool(*d, site, base);
      site.route["handle"] = json::array({{{"handler", "subroute"},
                                           {"routes", json::array({{{"handle", json::array({std::move(handler)})}}})}}});
    } else if (!first_time(seen, d->name)) {
      continue;
    } else if (name == "log") {
      log(*d, site);
    } else if (name == "default") {
      if (no_args(*d) && no_block(*d)) set(site.route, "/default", true, "", place(d->name, "default"), site.sources);
    } else if (name == "bind") {
      bind_addresses(*d, site.bind);
      site.bind_at = d->name;
    } else if (name == "protocols") {
      if (!no_block(*d)) continue;
      if (d->args.empty()) {
        error(d->name, "missing value for \"protocols\" (e.g. \"protocols h1 h2c\")");
        continue;
      }
      site.protocols = d->args;
      site.protocols_at = d->name;
    } else if (name == "tls") {
      tls(*d, site);
    }
  }
  if (routes) site_routes(route_directives, site);
  // A misspelled reverse_proxy was reported already; not also "site has no reverse_proxy".
  if (!proxy && !routes && out_.errors.size() != errors_before) site.incomplete.push_back("/handle");
  site.route["terminal"] = true;
}

void Adapter::site_addresses(const Directive& head, Site& site) {
  std::vector<Token> addresses;
  std::vector<Token> words{head.name};
  words.insert(words.end(), head.args.begin(), head.args.end());
  for (const Token& word : words) {
    const size_t before = addresses.size();
    size_t start = 0;
    while (start <= word.text.size()) {
      size_t comma = word.text.find(',', start);
      if (comma == std::string::npos) comma = word.text.size();
      if (comma > start) {
        Token part = word;
        part.text = word.text.substr(start, comma - start);
        part.column = word.column + int(start) + (word.quoted ? 1 : 0);
        addresses.push_back(part);
      }
      start = comma + 1;
    }
    // "" or ",": nothing there ("a.com," is fine: a list's trailing comma).
    if (addresses.size() == before) error(word, "empty site address (write e.g. :8080 or example.com)");
  }
  std::optional<Token> first_port_at;
  bool any_host = false;
  json hosts = json::array();
  for (const Token& address : addresses) {
    std::string_view text = address.text;
    const std::string scheme = scheme_of(text);
    if (!scheme.empty() && scheme != "http" && scheme != "https") {
      error(address, fmt::format("\"{}\": unsupported scheme \"{}\" (write http:// or https://)", text, scheme));
      continue;
    }
    text.remove_prefix(scheme.empty() ? 0 : scheme.size() + 3);
    if (text.find('/') != std::string_view::npos) {
      error(address, fmt::format("\"{}\": paths are not supported in site addresses", address.text));
      continue;
    }
    auto split = split_host_port(text, scheme == "https" ? 443 : 80);
    if (!split.value) {
      error(address, fmt::format("invalid site address \"{}\": {}", address.text, split.error));
      continue;
    }
    if (first_port_at && split.value->port != site.port) {
      error(address, fmt::format("all addresses of a site must share one port (\"{}\" uses {})", first_port_at->text,
                                 site.port));
      continue;
    }
    if (!first_port_at) {
      first_port_at = address;
      site.port = split.value->port;
    }
    // Caddy's rule: https:// and port 443 are served over TLS.
    if (scheme == "https" || (scheme.empty() && split.value->port == 443)) site.tls = true;
    if (split.value->host.empty()) {
      if (!hosts.empty() || any_host)
        error(address, fmt::format("\"{}\" answers every host: write it alone", address.text));
      any_host = true;
      continue;
    }
    if (any_host) {
      error(address, fmt::format("\"{}\" answers every host: write it alone", first_port_at->text));
      continue;
    }
    // The host as a matcher holds it: IPv6 without brackets, as `heft adapt` writes it.
    site.sources.emplace_back(fmt::format("/match/0/host/{}", hosts.size()), place(address, "site address"));
    hosts.push_back(split.value->host);
    // An IP literal is listened on, not only matched (a host name only matches).
    if (std::optional<std::string> ip = listen_address(split.value->host)) {
      const bool listed = std::any_of(site.ip_addresses.begin(), site.ip_addresses.end(),
                                      [&](const auto& known) { return known.first == *ip; });
      if (!listed) site.ip_addresses.emplace_back(*ip, address);
    }
  }
  if (!hosts.empty()) site.route["match"] = json::array({{{"host", std::move(hosts)}}});
}

// `tls CERT_FILE KEY_FILE`: the site is served over TLS with this
// certificate (apps.tls.certificates.load_files, tagged for the site's
// connection policy). Relative paths are the Heftfile's directory's.
void Adapter::tls(const Directive& d, Site& site) {
  site.tls = true;
  site.tls_at = d.name;
  site.tls_refused = true;  // until it proves right
  if (!no_block(d)) return;
  if (d.args.size() == 1 && d.args[0].text == "internal") {
    error(d.args[0], "\"tls internal\" (heft's own local CA) is not supported yet: give \"tls CERT_FILE KEY_FILE\"");
    return;
  }
  if (d.args.size() != 2) {
    error(d.args.empty() ? d.name : d.args[0],
          "\"tls\" takes a certificate file and its key file: \"tls CERT_FILE KEY_FILE\"");
    return;
  }
  // Absolute: the JSON form may be read by a heft running elsewhere (`heft
  // reload` sends it to one whose working directory is not the Heftfile's).
  const std::filesystem::path base = std::filesystem::path(file_).parent_path();
  for (Token path : d.args) {
    if (!path.text.empty() && path.text[0] != '/') {
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(base / path.text, ec);
      if (!ec) path.text = absolute.lexically_normal().string();
    }
    site.tls_files.push_back(std::move(path));
  }
  site.tls_refused = false;
}

json Adapter::tls_policies(const std::vector<size_t>& group, const std::string& server_pointer) {
  const bool any_tls = std::any_of(group.begin(), group.end(), [&](size_t s) { return sites_[s].tls; });
  if (!any_tls) return nullptr;
  json policies = json::array();
  const std::string at = server_pointer + "/tls_connection_policies";
  out_.sources.add(at, place(sites_[group.front()].head, "site address"));
  // A certificate left out for an error told already: not also "no certificate".
  if (std::any_of(group.begin(), group.end(), [&](size_t s) { return sites_[s].tls_refused; }))
    out_.sources.mark_incomplete(at);
  json& files = out_.document["apps"]["tls"]["certificates"]["load_files"];
  if (files.is_null()) files = json::array();
  for (size_t s : group) {
    const Site& site = sites_[s];
    if (site.tls_files.size() != 2) continue;
    const std::string tag = fmt::format("cert{}", files.size());
    const std::string file_at = fmt::format("/apps/tls/certificates/load_files/{}", files.size());
    out_.sources.add(file_at, place(*site.tls_at, "tls"));
    out_.sources.add(file_at + "/certificate", place(site.tls_files[0], "tls certificate file"));
    out_.sources.add(file_at + "/key", place(site.tls_files[1], "tls key file"));
    files.push_back({{"certificate", site.tls_files[0].text}, {"key", site.tls_files[1].text}, {"tags", {tag}}});
    json policy = {{"certificate_selection", {{"any_tag", {tag}}}}};
    if (site.route.contains("match")) policy["match"]["sni"] = site.route["match"][0]["host"];
    out_.sources.add(fmt::format("{}/{}", at, policies.size()), place(*site.tls_at, "tls"));
    policies.push_back(std::move(policy));
  }
  // Any other name (or none) gets a certificate still: the first that fits.
  policies.push_back(json::object());
  return policies;
}

void Adapter::log(const Directive& d, Site& site) {
  site.route["log"]["output"] = "stderr";
  site.sources.emplace_back("/log", place(d.name, "log"));
  if (!no_args(d)) return;
  for (const Directive* output : options(d.block, kLogOptions, "log option")) {
    const Directive& option = *output;
    if (!no_block(option)) continue;
    // output stderr | output file PATH
    if (option.args.empty()) {
      error(option.name, "missing value for \"output\" (stderr or file PATH)");
    } else if (option.args[0].text == "stderr") {
      if (option.args.size() > 1) error(option.args[1], "unexpected argument after \"stderr\"");
    } else if (option.args[0].text == "file") {
      if (option.args.size() < 2)
        error(option.args[0], "missing path after \"file\"");
      else if (option.args.size() > 2)
        error(option.args[2], "unexpected argument after the log file path");
      else if (option.args[1].text == "stderr")  // the JSON form's "stderr" is the stream
        error(option.args[1], "invalid log file path");
      else {
        site.route["log"]["output"] = option.args[1].text;
        site.sources.emplace_back("/log/output", place(option.args[1], "log file path"));
      }
    } else {
      error(option.args[0], fmt::format("unknown log output \"{}\" (stderr or file PATH)", option.args[0].text));
    }
  }
}

// The sites become servers, one per listen port in order of the port's first
// appearance, its sites its routes in file order. Sites of one port that
// would listen on different addresses become servers of their own, which
// the validator refuses ("the sites of a port listen on the same addresses").
void Adapter::servers(bool syntax_ok) {
  // Each port's slot in a table (a search of the port list per site took
  // seconds for 59,000 ports), then the servers of a port by their addresses
  // (sorted: the same set in any order is one server, in the first site's order).
  std::vector<uint32_t> slot_of_port(65536, 0);  // slot + 1; 0 = port not seen yet
  std::vector<uint16_t> ports;
  std::vector<std::vector<size_t>> groups_of_port;  // by slot
  std::vector<std::pair<std::vector<std::string>, std::vector<size_t>>> groups;  // addresses, sites
  for (size_t s = 0; s < sites_.size(); ++s) {
    Site& site = sites_[s];
    if (!site.bind_at) site.bind = !site.ip_addresses.empty() ? site.ip_addresses : default_bind_;
    std::vector<std::string> key;
    for (const auto& [address, _] : site.bind) key.push_back(address);
    std::sort(key.begin(), key.end());
    if (slot_of_port[site.port] == 0) {
      ports.push_back(site.port);
      groups_of_port.emplace_back();
      slot_of_port[site.port] = uint32_t(groups_of_port.size());
    }
    auto& candidates = groups_of_port[slot_of_port[site.port] - 1];
    auto group = std::find_if(candidates.begin(), candidates.end(), [&](size_t g) { return groups[g].first == key; });
    if (group != candidates.end()) {
      groups[*group].second.push_back(s);
    } else {
      candidates.push_back(groups.size());
      groups.push_back({std::move(key), {s}});
    }
  }
  json servers = json::object();
  size_t index = 0;
  for (uint16_t port : ports) {
    for (size_t g : groups_of_port[slot_of_port[port] - 1]) {
      const std::string name = fmt::format("srv{}", index++);
      const std::string pointer = "/apps/http/servers/" + name;
      const Site& first = sites_[groups[g].second.front()];
      json listen = json::array();
      const Token& listen_at = first.bind_at ? *first.bind_at : first.head;
      out_.sources.add(pointer + "/listen", place(listen_at, first.bind_at ? "bind" : "site address"));
      for (const auto& [address, at] : first.bind) {
        out_.sources.add(fmt::format("{}/listen/{}", pointer, listen.size()),
                         place(at, first.bind_at                ? "bind"
                                   : !first.ip_addresses.empty() ? "site address"
                                                                 : "default_bind"));
        const bool bracketed = address.size() > 1 && address.front() == '[' && address.back() == ']';
        listen.push_back(join_host_port(bracketed ? address.substr(1, address.size() - 2) : address, port));
      }
      if (listen.empty()) listen.push_back(fmt::format(":{}", port));
      // The sites of a server speak the same protocols: the first that names
      // them decides, and another naming others is told so.
      const Site* speaks = nullptr;
      for (size_t s : groups[g].second) {
        const Site& site = sites_[s];
        if (!site.protocols_at) continue;
        if (!speaks) {
          speaks = &site;
          continue;
        }
        const auto texts = [](const Site& of) {
          std::vector<std::string> out;
          for (const Token& t : of.protocols) out.push_back(t.text);
          std::sort(out.begin(), out.end());
          return out;
        };
        if (texts(site) != texts(*speaks))
          error(*site.protocols_at, fmt::format("the sites of port {} speak the same protocols: the site at {}:{} "
                                                "names others", port, speaks->protocols_at->line,
                                                speaks->protocols_at->column));
      }
      json protocols;
      if (speaks) {
        protocols = json::array();
        out_.sources.add(pointer + "/protocols", place(*speaks->protocols_at, "protocols"));
        for (const Token& t : speaks->protocols) {
          out_.sources.add(fmt::format("{}/protocols/{}", pointer, protocols.size()), place(t, "protocols"));
          protocols.push_back(t.text);
        }
      }
      json policies = tls_policies(groups[g].second, pointer);  // before the routes move out
      json routes = json::array();
      for (size_t s : groups[g].second) {
        Site& site = sites_[s];
        const std::string route = fmt::format("{}/routes/{}", pointer, routes.size());
        for (auto& [below, source] : site.sources) out_.sources.add(route + below, std::move(source));
        for (const std::string& below : site.incomplete) out_.sources.mark_incomplete(route + below);
        routes.push_back(std::move(site.route));
      }
      json server = {{"listen", std::move(listen)}, {"routes", std::move(routes)}};
      if (speaks) server["protocols"] = std::move(protocols);
      if (!policies.is_null()) server["tls_connection_policies"] = std::move(policies);
      servers[name] = std::move(server);
    }
  }
  // Nothing to serve is the validator's to say, unless it follows from an error already told.
  if (sites_.empty() && (!out_.errors.empty() || !syntax_ok)) out_.sources.mark_incomplete("/apps/http/servers");
  out_.document["apps"]["http"]["servers"] = std::move(servers);
}

}  // namespace adapting

Adapted adapt_heftfile(std::string_view text, std::string_view file, const syntax::EnvironmentLookup& environment) {
  Adapted out{nlohmann::json::object(), SourceMap(std::string(file)), {}};
  Result<syntax::Tree> tree = syntax::parse(text, file);
  out.errors = std::move(tree.errors);
  syntax::expand_environment(*tree.value, file,
                             environment ? environment : syntax::EnvironmentLookup(adapting::environment_variable),
                             out.errors);
  adapting::Adapter(file, out).file(*tree.value, out.errors.empty());
  return out;
}

Adapted adapt_global_options(std::string_view text, std::string_view file,
                             const syntax::EnvironmentLookup& environment) {
  Adapted out{nlohmann::json::object(), SourceMap(std::string(file)), {}};
  Result<syntax::Tree> tree = syntax::parse(text, file);
  out.errors = std::move(tree.errors);
  if (!out.errors.empty()) return out;
  auto first = std::find_if(tree.value->top.begin(), tree.value->top.end(),
                            [](const syntax::Directive& d) { return !d.is_comment; });
  if (first == tree.value->top.end() || !adapting::is_global_block(*first)) return out;  // the defaults
  // Only the global options' placeholders: the sites' may name variables
  // only heft's own environment has.
  syntax::Tree globals{{*first}};
  syntax::expand_environment(globals, file,
                             environment ? environment : syntax::EnvironmentLookup(adapting::environment_variable),
                             out.errors);
  adapting::Adapter(file, out).global(globals.top[0]);
  return out;
}

std::vector<std::string_view> known_options(std::string_view block) {
  using namespace adapting;
  const auto list = [](std::span<const std::string_view> names) {
    return std::vector<std::string_view>(names.begin(), names.end());
  };
  if (block == "global") return list(kGlobalOptions);
  if (block == "site") return list(kSiteOptions);
  if (block == "reverse_proxy") return list(kProxyOptions);
  if (block == "to") return list(kUpstreamOptions);
  if (block == "adaptive") return list(kAdaptiveOptions);
  if (block == "log") return list(kLogOptions);
  if (block == "next_upstream") return list(kNextUpstreamConditions);
  if (block == "lb_policy") return list(kPolicyNames);
  return {};
}

}  // namespace heft::config
