// The Heftfile's entry points: reading a file of either form through the one
// door (adapt.h, then from_json), formatting, resolving backend names, and
// what a valid configuration still gets said about it. See heftfile.h.
#include "config/heftfile.h"

#include <netdb.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "config/adapt.h"
#include "config/json.h"
#include "config/syntax.h"
#include "config/values.h"

namespace heft::config {
namespace {

bool is_ip_literal(const std::string& host) {
  in_addr v4;
  in6_addr v6;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::optional<std::string> read_file(const std::string& path, std::vector<Diagnostic>& errors) {
  // An ifstream opens a directory and reads nothing: "no site blocks" would mislead.
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    errors.push_back({path, 0, 0, "", "is a directory, not a configuration file"});
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors.push_back({path, 0, 0, "", fmt::format("cannot read: {}", std::strerror(errno))});
    return std::nullopt;
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::optional<std::string> environment_variable(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value) return std::nullopt;
  return std::string(value);
}

}  // namespace

Result<Config> parse_heftfile(std::string_view text, std::string_view file) {
  Adapted adapted = adapt_heftfile(text, file, environment_variable);
  Result<Config> result = from_json(adapted.document, &adapted.sources);
  // A token the adapter reported (an unterminated quote, which swallowed the
  // rest of the file; a placeholder left as written) gets no second error for
  // what it then holds; a value set for several backends at one token
  // (`to a b weight x`) is one error.
  std::erase_if(result.errors, [&](const Diagnostic& value) {
    return std::any_of(adapted.errors.begin(), adapted.errors.end(), [&](const Diagnostic& syntax) {
      return syntax.line == value.line && syntax.column == value.column && value.line > 0;
    });
  });
  std::vector<Diagnostic> errors = std::move(adapted.errors);
  for (Diagnostic& d : result.errors) {
    const bool told = std::any_of(errors.begin(), errors.end(), [&](const Diagnostic& e) {
      return e.line == d.line && e.column == d.column && e.message == d.message;
    });
    if (!told) errors.push_back(std::move(d));
  }
  // In file order whichever part found them; what has no line (the file as a whole) last.
  std::stable_sort(errors.begin(), errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
    const auto order = [](const Diagnostic& d) { return std::pair(d.line > 0 ? d.line : INT32_MAX, d.column); };
    return order(a) < order(b);
  });
  result.errors = std::move(errors);
  if (!result.errors.empty()) result.value.reset();
  return result;
}

Result<Config> load_heftfile(const std::string& path) {
  Result<Config> result;
  auto text = read_file(path, result.errors);
  if (!text) return result;
  return parse_heftfile(*text, path);
}

Result<AdminConfig> load_admin_config(const std::string& path) {
  Result<AdminConfig> result;
  if (path.ends_with(".json")) {
    Result<Config> config = load_config_file(path);
    result.errors = std::move(config.errors);
    if (result.errors.empty()) result.value = config.value->admin;
    return result;
  }
  auto text = read_file(path, result.errors);
  if (!text) return result;
  Adapted adapted = adapt_global_options(*text, path, environment_variable);
  if (!adapted.errors.empty()) {
    result.errors = std::move(adapted.errors);
    return result;
  }
  return admin_from_json(adapted.document, &adapted.sources);
}

Result<Config> load_config_file(const std::string& path) {
  if (!path.ends_with(".json")) return load_heftfile(path);
  Result<Config> result;
  auto text = read_file(path, result.errors);
  if (!text) return result;
  std::string syntax;
  nlohmann::json document = parse_json_text(*text, syntax);
  if (document.is_discarded()) {
    result.errors.push_back({path, 0, 0, "", syntax});
    return result;
  }
  result = from_json(document);
  for (Diagnostic& d : result.errors) d.message = fmt::format("{}: {}", d.path, d.message), d.file = path;
  // JSON keeps no lines: resolve errors and warnings name the file alone
  // ("FILE: cannot resolve ...", "FILE: site ..."), not an empty location.
  if (result.value)
    for (SiteConfig& site : result.value->sites) site.file = path;
  return result;
}

Result<std::string> format_heftfile(std::string_view text, std::string_view file) {
  Result<std::string> result;
  Result<syntax::Tree> tree = syntax::parse(text, file);
  result.errors = std::move(tree.errors);
  if (result.errors.empty()) result.value = syntax::format(*tree.value);
  return result;
}

std::vector<Diagnostic> resolve(Config& config) {
  std::vector<Diagnostic> errors;
  // dial -> what resolving it gave, per call. The error is kept with the
  // result, so a name repeated in another site gets the same message.
  struct Resolved {
    std::vector<std::string> addresses;
    std::string error;  // "cannot resolve backend ...: reason", or empty
  };
  std::map<std::string, Resolved> cache;
  for (SiteConfig& site : config.sites) {
    for (UpstreamConfig& upstream : site.proxy.upstreams) {
      upstream.resolved.clear();
      if (is_ip_literal(upstream.host)) {
        upstream.resolved.push_back(join_host_port(upstream.host, upstream.port));
        continue;
      }
      if (auto hit = cache.find(upstream.name); hit != cache.end()) {
        upstream.resolved = hit->second.addresses;
        if (!hit->second.error.empty()) errors.push_back({site.file, site.line, 0, "", hit->second.error});
        continue;
      }
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      std::string port = std::to_string(upstream.port);
      int rc = getaddrinfo(upstream.host.c_str(), port.c_str(), &hints, &found);
      if (rc != 0) {
        std::string error = fmt::format("cannot resolve backend \"{}\": {}", upstream.name, gai_strerror(rc));
        errors.push_back({site.file, site.line, 0, "", error});
        cache[upstream.name] = {{}, std::move(error)};
        continue;
      }
      for (addrinfo* a = found; a; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN] = {};
        if (a->ai_family == AF_INET)
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof ip);
        else if (a->ai_family == AF_INET6)
          inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof ip);
        else
          continue;
        std::string address = join_host_port(ip, upstream.port);
        if (std::find(upstream.resolved.begin(), upstream.resolved.end(), address) == upstream.resolved.end())
          upstream.resolved.push_back(address);
      }
      freeaddrinfo(found);
      cache[upstream.name] = {upstream.resolved, ""};
    }
  }
  return errors;
}

std::optional<Diagnostic> admin_start_conflict(const Config& config) {
  uint16_t port = 0;
  const std::string where = admin_listen_overlap(config, port);
  if (where.empty()) return std::nullopt;
  const auto site = std::find_if(config.sites.begin(), config.sites.end(),
                                 [&](const SiteConfig& s) { return s.port == port; });
  const std::string taken =
      fmt::format("the sites on port {} listen on {}, the admin API's {}{} among them", port, where,
                  config.admin.address == AdminConfig{}.address ? "default " : "", config.admin.address);
  if (site->line > 0)  // a Heftfile's site: its place, and the Heftfile's words
    return Diagnostic{site->file, site->line, site->column, "",
                      taken + ": set admin to another address in the global options, or admin off"};
  const std::string message = taken + ": set /admin/listen to another address, or /admin/disabled to true";
  return Diagnostic{site->file, 0, 0, "/admin/listen", site->file.empty() ? message : "/admin/listen: " + message};
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> out;
  for (const SiteConfig& site : config.sites) {
    std::string hosts;
    for (const std::string& h : site.hosts) hosts += (hosts.empty() ? "" : ",") + h;
    const std::string where = site.file.empty() ? "" : site.line ? fmt::format("{}:{}: ", site.file, site.line)
                                                                     : site.file + ": ";
    const balance::PolicyTraits traits = balance::policy_traits(site.proxy.policy);
    // maglev where nothing hashes: the writer expected a consistent table (ring, the
    // default, said explicitly changes nothing either way).
    if (!traits.uses_hash_strategy && site.proxy.hash_strategy != balance::HashStrategy::ring)
      out.push_back(fmt::format("{}site {}:{}: hash_strategy {} applies only to lb_policy hash; lb_policy is {}",
                                where, hosts, site.port, balance::hash_strategy_name(site.proxy.hash_strategy),
                                balance::policy_name(site.proxy.policy)));
    // A queue holds requests only while every backend is at its max_conns:
    // with no limit anywhere it never holds one.
    if (site.proxy.queue > 0 &&
        std::none_of(site.proxy.upstreams.begin(), site.proxy.upstreams.end(),
                     [](const UpstreamConfig& u) { return u.max_conns > 0; }))
      out.push_back(fmt::format("{}site {}:{}: queue {} has no effect: no backend has max_conns (requests wait "
                                "only while every backend is at its max_conns)",
                                where, hosts, site.port, site.proxy.queue));
    if (traits.uses_weights) continue;
    std::string weights;
    std::optional<uint32_t> first_weight;  // of the first backend that takes traffic (not a backup listed first)
    bool differ = false;
    for (const UpstreamConfig& u : site.proxy.upstreams) {
      if (u.backup || u.down || u.weight == 0) continue;
      if (!first_weight) first_weight = u.weight;
      differ = differ || u.weight != *first_weight;
      weights += (weights.empty() ? "" : ":") + std::to_string(u.weight);
    }
    if (!differ) continue;
    out.push_back(fmt::format("{}site {}:{}: lb_policy {} ignores the weights {} ({}); weighted_round_robin, the "
                              "default, splits by them",
                              where, hosts, site.port, balance::policy_name(site.proxy.policy), weights,
                              site.proxy.policy == balance::PolicyKind::first
                                  ? "the first available backend gets every request"
                                  : "every backend gets an equal share"));
  }
  return out;
}

}  // namespace heft::config
