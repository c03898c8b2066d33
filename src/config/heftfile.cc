// The Heftfile parser: gives meaning to the generic syntax tree (syntax.h).
// See heftfile.h for the contract and docs/heftfile.md for the language.
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
#include <regex>
#include <span>
#include <sstream>

#include <fmt/format.h>

#include "config/json.h"
#include "config/syntax.h"
#include "config/values.h"

namespace heft::config {
namespace {

using syntax::Directive;
using syntax::Token;

constexpr std::string_view kGlobalOptions[] = {
    "admin", "admin_token", "workers", "grace_period", "idle_timeout", "header_timeout",
    "max_connections", "default_bind", "log_format"};
constexpr std::string_view kSiteOptions[] = {"reverse_proxy", "log", "default", "bind"};
constexpr std::string_view kProxyOptions[] = {
    "to", "lb_policy", "hash_strategy", "keepalive", "keepalive_timeout", "next_upstream", "next_upstream_tries",
    "next_upstream_timeout", "connect_timeout", "read_timeout", "send_timeout",
    "retry_body_limit", "header_up", "header_down", "slow_start", "max_fails", "fail_timeout",
    "health_uri", "health_port", "health_interval", "health_timeout", "health_status",
    "health_body", "health_headers", "health_passes", "health_fails", "adaptive", "ignore_client_abort",
    "queue", "queue_timeout"};
constexpr std::string_view kUpstreamOptions[] = {"weight", "max_fails", "fail_timeout",
                                                 "backup", "down", "slow_start", "max_conns"};
constexpr std::string_view kAdaptiveOptions[] = {"interval", "latency_threshold",
                                                 "median_factor", "error_threshold",
                                                 "cut", "min_weight_ratio"};
constexpr std::string_view kLogOptions[] = {"output"};
constexpr std::string_view kNextUpstreamConditions[] = {
    "error", "timeout", "http_500", "http_502", "http_503", "http_504", "non_idempotent", "off"};
constexpr std::string_view kPolicyNames[] = {
    "round_robin", "weighted_round_robin", "least_conn", "random", "p2c", "first", "ip_hash",
    "hash", "header", "cookie", "uri_hash", "client_ip_hash"};
constexpr std::string_view kHashKeys[] = {"client_ip", "uri", "header", "cookie"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view word) {
  return std::find(std::begin(list), std::end(list), word) != std::end(list);
}

// A backend address plus the options written for it, before pool defaults apply.
struct PendingUpstream {
  UpstreamConfig upstream;
  Token at;
  bool explicit_max_fails = false;
  bool explicit_fail_timeout = false;
  std::map<std::string, Token> options;  // where each option was set for this backend
};

// Where a site's address, `default` and `bind` were written, for cross-site errors.
struct SitePlaces {
  std::vector<Token> addresses;  // one per host (or one for "any host")
  std::optional<Token> default_marker;
  std::optional<Token> bind_at;  // its `bind` directive, when it has one
  std::vector<std::pair<std::string, Token>> ip_addresses;  // IP-literal site addresses (canonical), where written
};

// The global options block `{ ... }`: a directive without a name (a quoted
// "" names a site).
bool is_global_block(const Directive& d) { return d.name.text.empty() && !d.name.quoted; }

class Parser {
 public:
  // `syntax_ok`: the tree had no syntax errors (they are reported elsewhere).
  Parser(std::string_view file, std::vector<Diagnostic>& errors, bool syntax_ok)
      : file_(file), errors_(errors), syntax_ok_(syntax_ok) {}

  // What the global options block `block` sets, alone.
  Config global_options(const Directive& block) {
    Config config;
    global(block, config);
    return config;
  }

  Config parse(const syntax::Tree& tree) {
    Config config;
    std::vector<const Directive*> top;
    for (const Directive& d : tree.top)
      if (!d.is_comment) top.push_back(&d);
    size_t i = 0;
    if (!top.empty() && is_global_block(*top[0])) {
      global(*top[0], config);
      i = 1;
    }
    std::vector<SitePlaces> places;
    for (; i < top.size(); ++i) {
      const Directive& d = *top[i];
      if (is_global_block(d)) {
        error(d.name, "the global options block must come first in the file");
        continue;
      }
      SiteConfig site;
      SitePlaces place;
      if (!d.has_block) {
        if (!config.sites.empty()) {
          error(d.name, fmt::format("expected '{{' after site address \"{}\"", d.name.text));
          continue;
        }
        // A single site may omit its braces: everything after its address line is its body.
        std::vector<const Directive*> body(top.begin() + i + 1, top.end());
        site_block(d, body, site, place);
        config.sites.push_back(std::move(site));
        places.push_back(std::move(place));
        break;
      }
      std::vector<const Directive*> body;
      for (const Directive& child : d.block)
        if (!child.is_comment) body.push_back(&child);
      site_block(d, body, site, place);
      config.sites.push_back(std::move(site));
      places.push_back(std::move(place));
    }
    if (config.sites.empty() && errors_.empty() && syntax_ok_)
      errors_.push_back({file_, 0, 0, "", "no site blocks: nothing to serve"});
    check_sites(config, places);
    listen_addresses(config, places);
    if (admin_at_) check_admin_port(config, places);
    group_by_port(config);
    return config;
  }

 private:
  // ---- diagnostics -------------------------------------------------------

  void error(const Token& at, std::string message) {
    errors_.push_back({file_, at.line, at.column, "", std::move(message)});
  }

  void error_at(int line, int column, std::string message) {
    errors_.push_back({file_, line, column, "", std::move(message)});
  }

  template <size_t N>
  void unknown(const Token& at, const std::string_view (&known)[N], std::string_view what) {
    // nginx writes `weight=5`; here the value follows a space.
    if (const std::size_t eq = at.text.find('='); eq != std::string::npos && eq + 1 < at.text.size()) {
      const std::string_view name = std::string_view(at.text).substr(0, eq);
      if (std::find(std::begin(known), std::end(known), name) != std::end(known)) {
        error(at, fmt::format("unknown {} \"{}\": write \"{} {}\" (a value follows its name after a space, not "
                              "\"=\")", what, printable(at.text), name, printable(at.text.substr(eq + 1))));
        return;
      }
    }
    std::string suggestion = closest_match(at.text, std::span<const std::string_view>(known, N));
    if (suggestion.empty())
      error(at, fmt::format("unknown {} \"{}\"", what, printable(at.text)));
    else
      error(at, fmt::format("unknown {} \"{}\" (did you mean \"{}\"?)", what, printable(at.text), suggestion));
  }

  // ---- argument shapes ---------------------------------------------------

  bool no_block(const Directive& d) {
    if (!d.has_block) return true;
    error(d.open_brace, fmt::format("\"{}\" takes no block", d.name.text));
    return false;
  }

  // Exactly one argument and no block; nullptr after reporting otherwise.
  const Token* single(const Directive& d) {
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

  bool no_args(const Directive& d) {
    if (d.args.empty()) return true;
    error(d.args[0], fmt::format("\"{}\" takes no arguments", d.name.text));
    return false;
  }

  // Options that may be given once per block.
  bool first_time(std::map<std::string, Token>& seen, const Directive& d) { return first_time(seen, d.name); }

  bool first_time(std::map<std::string, Token>& seen, const Token& option) {
    auto [it, inserted] = seen.emplace(option.text, option);
    if (inserted) return true;
    error(option, fmt::format("duplicate option \"{}\" (first set at {}:{})", option.text, it->second.line,
                              it->second.column));
    return false;
  }

  // ---- values --------------------------------------------------------------

  std::optional<milliseconds> duration(const Token& t, bool positive) {
    auto value = parse_duration(t.text);
    if (!value) {
      error(t, fmt::format("invalid duration \"{}\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)",
                           t.text));
      return std::nullopt;
    }
    if (positive && value->count() == 0) {
      error(t, fmt::format("duration must be greater than 0, got \"{}\"", t.text));
      return std::nullopt;
    }
    return value;
  }

  std::optional<uint64_t> integer(const Token& t, uint64_t min, uint64_t max, std::string_view what) {
    auto value = parse_uint(t.text, max);
    if (!value || *value < min) {
      error(t, fmt::format("{} must be an integer {}..{}, got \"{}\"", what, min, max, t.text));
      return std::nullopt;
    }
    return value;
  }

  std::optional<double> fraction(const Token& t, double min, double max, std::string_view what) {
    auto value = parse_fraction(t.text);
    if (!value || *value < min || *value > max) {
      error(t, fmt::format("{} must be a fraction {}..{} (e.g. \"{}\"), got \"{}\"", what,
                           format_fraction(min), format_fraction(max), format_fraction(max / 2),
                           t.text));
      return std::nullopt;
    }
    return value;
  }

  // ---- global options ------------------------------------------------------

  void global(const Directive& block, Config& config) {
    if (!block.args.empty()) error(block.args[0], "the global options block takes no arguments");
    std::map<std::string, Token> seen;
    std::optional<Token> admin_at;  // the admin address, when one is set
    bool token_given = false;       // a bad one is reported by itself, not as missing
    for (const Directive& d : block.block) {
      if (d.is_comment) continue;
      const std::string& name = d.name.text;
      if (!contains(kGlobalOptions, name)) {
        unknown(d.name, kGlobalOptions, "global option");
        continue;
      }
      if (!first_time(seen, d)) continue;
      if (name == "default_bind") {
        bind_addresses(d, default_bind_);
        continue;
      }
      const Token* arg = single(d);
      if (!arg) continue;
      if (name == "admin") {
        if (arg->text == "off") {
          config.admin.enabled = false;
        } else {
          auto split = split_host_port(arg->text, 0);
          if (!split.value || split.value->port == 0) {
            error(*arg, fmt::format("invalid admin address \"{}\": {}", arg->text,
                                    split.value ? "missing port" : split.error));
          } else if (!admin_listen_ip(split.value->host)) {
            error(*arg, fmt::format("invalid admin address \"{}\": {}", arg->text, kAdminHostProblem));
          } else {
            config.admin.address = arg->text;
            admin_at = *arg;
            admin_at_ = *arg;
          }
        }
      } else if (name == "admin_token") {
        token_given = true;
        if (std::string problem = admin_token_problem(arg->text); !problem.empty())
          error(*arg, "admin_token " + problem);
        else
          config.admin.token = arg->text;
      } else if (name == "workers") {
        if (auto n = integer(*arg, 0, 1024, "workers")) config.workers = unsigned(*n);
      } else if (name == "grace_period") {
        if (auto v = duration(*arg, false)) config.grace_period = *v;
      } else if (name == "idle_timeout") {
        if (auto v = duration(*arg, true)) config.idle_timeout = *v;
      } else if (name == "header_timeout") {
        if (auto v = duration(*arg, true)) config.header_timeout = *v;
      } else if (name == "max_connections") {
        if (auto n = integer(*arg, 1, 10'000'000, "max_connections")) config.max_connections = uint32_t(*n);
      } else if (name == "log_format") {
        if (arg->text == "text") config.log_format = LogFormat::text;
        else if (arg->text == "json") config.log_format = LogFormat::json;
        else error(*arg, fmt::format("log_format must be text or json, got \"{}\"", arg->text));
      }
    }
    // heft run would start without its admin API (and /load refuse the file).
    if (admin_at && !token_given && !admin_token_missing(config.admin).empty())
      error(*admin_at, fmt::format("admin address \"{}\" is not loopback: it needs an admin_token", admin_at->text));
  }

  // `default_bind ADDR...` (global) and `bind ADDR...` (a site): IP
  // literals to listen on, into `out`.
  void bind_addresses(const Directive& d, std::vector<std::string>& out) {
    if (!no_block(d)) return;
    const std::string& name = d.name.text;
    if (d.args.empty()) error(d.name, fmt::format("missing value for \"{0}\" (e.g. \"{0} 127.0.0.1 ::1\")", name));
    for (const Token& arg : d.args) {
      auto address = listen_address(arg.text);
      if (!address) {
        error(arg, fmt::format("{} needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"{}\"", name,
                               arg.text));
      } else if (auto v4 = ipv4_of_mapped(*address)) {
        error(arg, fmt::format("\"{}\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 only) "
                               "cannot listen on: write it as {}",
                               arg.text, *v4));
      } else if (std::find(out.begin(), out.end(), *address) != out.end()) {
        error(arg, fmt::format("duplicate address \"{}\" in {}", arg.text, name));
      } else {
        out.push_back(*address);
      }
    }
  }

  // ---- sites ---------------------------------------------------------------

  void site_addresses(const Directive& d, SiteConfig& site, SitePlaces& place) {
    std::vector<Token> addresses;
    std::vector<Token> words{d.name};
    words.insert(words.end(), d.args.begin(), d.args.end());
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
    for (const Token& address : addresses) {
      std::string_view text = address.text;
      std::string scheme = scheme_of(text);
      if (scheme == "https") {
        error(address, fmt::format("\"{}\": https is not supported; heft serves plain HTTP", text));
        continue;
      }
      if (!scheme.empty() && scheme != "http") {
        error(address, fmt::format("\"{}\": unsupported scheme \"{}\" (heft serves plain http://)", text, scheme));
        continue;
      }
      text.remove_prefix(scheme.empty() ? 0 : scheme.size() + 3);
      if (text.find('/') != std::string_view::npos) {
        error(address, fmt::format("\"{}\": paths are not supported in site addresses", address.text));
        continue;
      }
      auto split = split_host_port(text, 80);
      if (!split.value) {
        error(address, fmt::format("invalid site address \"{}\": {}", address.text, split.error));
        continue;
      }
      if (first_port_at && split.value->port != site.port) {
        error(address, fmt::format("all addresses of a site must share one port (\"{}\" uses {})",
                                   first_port_at->text, site.port));
        continue;
      }
      if (!first_port_at) {
        first_port_at = address;
        site.port = split.value->port;
      }
      if (split.value->host.empty()) {
        if (!site.hosts.empty() || any_host)
          error(address, fmt::format("\"{}\" answers every host: write it alone", address.text));
        any_host = true;
        place.addresses.push_back(address);
        continue;
      }
      if (any_host) {
        error(address, fmt::format("\"{}\" answers every host: write it alone", first_port_at->text));
        continue;
      }
      std::optional<std::string> matched = site_host(split.value->host);
      if (!matched) {
        error(address, fmt::format("invalid site address \"{}\": a host name has no empty label", address.text));
        continue;
      }
      std::string host = std::move(*matched);
      if (std::find(site.hosts.begin(), site.hosts.end(), host) != site.hosts.end()) {
        error(address, fmt::format("duplicate address \"{}\" in this site", address.text));
        continue;
      }
      // An IP literal is listened on, not only matched (a host name only matches).
      if (std::optional<std::string> ip = listen_address(split.value->host)) {
        if (auto v4 = ipv4_of_mapped(*ip)) {
          error(address, fmt::format("\"{}\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 "
                                     "only) cannot listen on: write it as {}",
                                     address.text, join_host_port(*v4, site.port)));
          continue;
        }
        place.ip_addresses.emplace_back(*ip, address);
      }
      site.hosts.push_back(host);
      Token placed = address;
      placed.text = host;
      place.addresses.push_back(placed);
    }
  }

  void site_block(const Directive& head, const std::vector<const Directive*>& body, SiteConfig& site,
                  SitePlaces& place) {
    site.file = file_;
    site.line = head.name.line;
    site.column = head.name.column;
    site_addresses(head, site, place);
    const Directive* proxy = nullptr;
    std::map<std::string, Token> seen;
    size_t errors_before = errors_.size();
    for (const Directive* d : body) {
      const std::string& name = d->name.text;
      if (!contains(kSiteOptions, name)) {
        unknown(d->name, kSiteOptions, "directive");
        continue;
      }
      if (name == "reverse_proxy") {
        if (proxy) {
          error(d->name, fmt::format("only one reverse_proxy per site (first at {}:{})",
                                     proxy->name.line, proxy->name.column));
          continue;
        }
        proxy = d;
        pool(*d, site.proxy);
      } else if (name == "log") {
        if (first_time(seen, *d)) log(*d, site.log);
      } else if (name == "default") {
        if (first_time(seen, *d) && no_args(*d) && no_block(*d)) {
          site.is_default = true;
          place.default_marker = d->name;
        }
      } else if (name == "bind") {
        if (first_time(seen, *d)) {
          bind_addresses(*d, site.bind);
          place.bind_at = d->name;
        }
      }
    }
    // A misspelled reverse_proxy was reported already; don't add a second error for it.
    if (!proxy && errors_.size() == errors_before) error(head.name, "site has no reverse_proxy");
  }

  void log(const Directive& d, LogConfig& log) {
    log.enabled = true;
    log.output = "stderr";
    if (!no_args(d)) return;
    std::map<std::string, Token> seen;
    for (const Directive& option : d.block) {
      if (option.is_comment) continue;
      if (!contains(kLogOptions, option.name.text)) {
        unknown(option.name, kLogOptions, "log option");
        continue;
      }
      if (!first_time(seen, option) || !no_block(option)) continue;
      // output stderr | output file PATH
      if (option.args.empty()) {
        error(option.name, "missing value for \"output\" (stderr or file PATH)");
      } else if (option.args[0].text == "stderr") {
        if (option.args.size() > 1) error(option.args[1], "unexpected argument after \"stderr\"");
        log.output = "stderr";
      } else if (option.args[0].text == "file") {
        if (option.args.size() < 2)
          error(option.args[0], "missing path after \"file\"");
        else if (option.args.size() > 2)
          error(option.args[2], "unexpected argument after the log file path");
        else if (option.args[1].text.empty() || option.args[1].text == "stderr")
          error(option.args[1], "invalid log file path");
        else if (std::string problem = utf8_problem(option.args[1].text); !problem.empty())
          error(option.args[1], "invalid log file path: " + problem);
        else
          log.output = option.args[1].text;
      } else {
        error(option.args[0],
              fmt::format("unknown log output \"{}\" (stderr or file PATH)", option.args[0].text));
      }
    }
  }

  // ---- reverse_proxy -------------------------------------------------------

  void pool(const Directive& d, PoolConfig& pool) {
    std::vector<PendingUpstream> pending;
    bool bad_address = false;
    std::string last_address = "ADDR";
    for (size_t i = 0; i < d.args.size(); ++i) {
      if (contains(kUpstreamOptions, d.args[i].text)) {
        i += option_on_inline_line(d, i, last_address);
        bad_address = true;
        continue;
      }
      bad_address |= !upstream_address(d.args[i], pending);
      last_address = d.args[i].text;
    }
    std::optional<uint32_t> pool_max_fails;
    std::optional<milliseconds> pool_fail_timeout;
    std::optional<Token> policy_at;
    std::map<std::string, Token> seen;
    for (const Directive& option : d.block) {
      if (option.is_comment) continue;
      const std::string& name = option.name.text;
      if (!contains(kProxyOptions, name)) {
        unknown(option.name, kProxyOptions, "option");
        continue;
      }
      if (name == "to") {
        bad_address |= !to_line(option, pending);
        continue;
      }
      if (name == "header_up" || name == "header_down") {
        if (no_block(option)) header_op(option, name == "header_up" ? pool.header_up : pool.header_down);
        continue;
      }
      if (!first_time(seen, option)) continue;
      if (name == "health_headers") {
        health_headers(option, pool);
        continue;
      }
      if (name == "adaptive") {
        adaptive(option, pool.adaptive);
        continue;
      }
      if (name == "lb_policy") {
        if (no_block(option)) lb_policy(option, pool);
        policy_at = option.name;
        continue;
      }
      if (name == "next_upstream") {
        if (no_block(option)) next_upstream(option, pool.next_upstream);
        continue;
      }
      const Token* arg = single(option);
      if (!arg) continue;
      if (name == "hash_strategy") {
        if (auto strategy = balance::parse_hash_strategy(arg->text))
          pool.hash_strategy = *strategy;
        else
          error(*arg, fmt::format("unknown hash_strategy \"{}\" (ring or maglev)", arg->text));
      } else if (name == "keepalive") {
        if (auto n = integer(*arg, 0, 100'000, "keepalive")) pool.keepalive = uint32_t(*n);
      } else if (name == "keepalive_timeout") {
        if (auto v = duration(*arg, false)) pool.keepalive_timeout = *v;  // 0: until the backend closes it
      } else if (name == "next_upstream_tries") {
        if (auto n = integer(*arg, 0, 1000, "next_upstream_tries")) pool.next_upstream_tries = uint32_t(*n);
      } else if (name == "next_upstream_timeout") {
        if (auto v = duration(*arg, false)) pool.next_upstream_timeout = *v;
      } else if (name == "connect_timeout") {
        if (auto v = duration(*arg, true)) pool.connect_timeout = *v;
      } else if (name == "read_timeout") {
        if (auto v = duration(*arg, true)) pool.read_timeout = *v;
      } else if (name == "send_timeout") {
        if (auto v = duration(*arg, true)) pool.send_timeout = *v;
      } else if (name == "retry_body_limit") {
        if (auto size = parse_size(arg->text); size && *size <= (uint64_t(1) << 40))
          pool.retry_body_limit = size_t(*size);
        else if (size)
          error(*arg, fmt::format("retry_body_limit must be at most 1TiB, got \"{}\"", arg->text));
        else
          error(*arg, fmt::format("invalid size \"{}\" (use e.g. 65536, 64KiB, 1MiB)", arg->text));
      } else if (name == "slow_start") {
        if (auto v = duration(*arg, false)) pool.slow_start = *v;  // 0: off (nginx's default)
      } else if (name == "ignore_client_abort") {
        if (arg->text == "on" || arg->text == "off")
          pool.ignore_client_abort = arg->text == "on";
        else
          error(*arg, fmt::format("ignore_client_abort takes on or off, got \"{}\"", printable(arg->text)));
      } else if (name == "queue") {
        if (auto n = integer(*arg, 0, 1'000'000, "queue")) pool.queue = uint32_t(*n);
      } else if (name == "queue_timeout") {
        if (auto v = duration(*arg, true)) pool.queue_timeout = *v;
      } else if (name == "max_fails") {
        if (auto n = integer(*arg, 0, 1'000'000, "max_fails")) pool_max_fails = uint32_t(*n);
      } else if (name == "fail_timeout") {
        if (auto v = duration(*arg, false)) pool_fail_timeout = *v;
      } else if (name == "health_uri") {
        if (arg->text.empty() || arg->text.front() != '/')
          error(*arg, fmt::format("health_uri must start with '/', got \"{}\"", printable(arg->text)));
        else if (!is_request_target_text(arg->text))
          error(*arg, fmt::format("health_uri may hold no space, control character or non-ASCII byte "
                                  "(percent-encode them), got \"{}\"",
                                  printable(arg->text)));
        else
          pool.health_uri = arg->text;
      } else if (name == "health_port") {
        if (auto n = integer(*arg, 1, 65535, "health_port")) pool.health_port = uint16_t(*n);
      } else if (name == "health_interval") {
        if (auto v = duration(*arg, true)) pool.health_interval = *v;
      } else if (name == "health_timeout") {
        if (auto v = duration(*arg, true)) pool.health_timeout = *v;
      } else if (name == "health_status") {
        static const std::regex kStatus("[1-5]([0-9][0-9]|xx)");
        if (std::regex_match(arg->text, kStatus))
          pool.health_status = arg->text;
        else
          error(*arg, fmt::format("invalid health_status \"{}\" (e.g. 200 or 2xx)", arg->text));
      } else if (name == "health_body") {
        if (const std::string problem = health_body_problem(arg->text); problem.empty())
          pool.health_body = arg->text;
        else
          error(*arg, fmt::format("invalid health_body regular expression \"{}\": {}", arg->text, problem));
      } else if (name == "health_passes") {
        if (auto n = integer(*arg, 1, 1000, "health_passes")) pool.health_passes = uint32_t(*n);
      } else if (name == "health_fails") {
        if (auto n = integer(*arg, 1, 1000, "health_fails")) pool.health_fails = uint32_t(*n);
      }
    }

    // Pool-level max_fails / fail_timeout are defaults for backends that set
    // none, also for those the admin API adds later.
    if (pool_max_fails) pool.max_fails = *pool_max_fails;
    if (pool_fail_timeout) pool.fail_timeout = *pool_fail_timeout;
    std::map<std::string, Token> dials;
    for (PendingUpstream& p : pending) {
      if (pool_max_fails && !p.explicit_max_fails) p.upstream.max_fails = *pool_max_fails;
      if (pool_fail_timeout && !p.explicit_fail_timeout) p.upstream.fail_timeout = *pool_fail_timeout;
      auto [it, inserted] = dials.emplace(lowercase(p.upstream.dial), p.at);  // host names ignore case
      if (!inserted) {
        error(p.at, fmt::format("duplicate backend \"{}\" in this pool (first at {}:{})", p.upstream.dial,
                                it->second.line, it->second.column));
        continue;
      }
      pool.upstreams.push_back(std::move(p.upstream));
    }
    if (pending.empty() && !bad_address) error(d.name, "reverse_proxy has no upstreams (add addresses or \"to\" lines)");
    if (pool.policy == balance::PolicyKind::hash && pool.hash_key.kind == HashKey::none && policy_at)
      error(*policy_at, "lb_policy hash needs a key: client_ip, uri, header NAME or cookie NAME");
  }

  // `reverse_proxy A weight 5`: options are not written after inline addresses
  // (each word there is an address). Reports the two places they can go;
  // returns how many following words were the option's value (0 or 1).
  size_t option_on_inline_line(const Directive& d, size_t i, const std::string& last_address) {
    const Token& name = d.args[i];
    bool is_flag = name.text == "backup" || name.text == "down";
    const Token* value = !is_flag && i + 1 < d.args.size() ? &d.args[i + 1] : nullptr;
    std::string value_text = value ? value->text : "N";
    std::string on_to_line = is_flag ? name.text : fmt::format("{} {}", name.text, value_text);
    std::string in_query = is_flag ? name.text : fmt::format("{}={}", name.text, value_text);
    error(name, fmt::format("\"{}\" is a backend option, not an address: write \"to {} {}\" in the reverse_proxy "
                            "block, or \"{}?{}\"",
                            name.text, last_address, on_to_line, last_address, in_query));
    return value ? 1 : 0;
  }

  // Parses "host:port[?weight=N&...]" into a pending upstream; false on error.
  bool upstream_address(const Token& t, std::vector<PendingUpstream>& out) {
    std::string_view text = t.text;
    std::string_view query;
    if (size_t q = text.find('?'); q != std::string_view::npos) {
      query = text.substr(q + 1);
      text = text.substr(0, q);
    }
    std::string scheme = scheme_of(text);
    if (scheme == "https") {
      error(t, fmt::format("\"{}\": TLS to backends is not supported", t.text));
      return false;
    }
    if (!scheme.empty() && scheme != "http") {
      error(t, fmt::format("\"{}\": unsupported scheme \"{}\" (backends are plain http://)", t.text, scheme));
      return false;
    }
    text.remove_prefix(scheme.empty() ? 0 : scheme.size() + 3);
    auto split = split_host_port(text, 80);
    if (!split.value || split.value->host.empty()) {
      error(t, fmt::format("invalid backend address \"{}\": {}", t.text,
                           split.value ? "missing host" : split.error));
      return false;
    }
    PendingUpstream p;
    p.at = t;
    p.upstream.host = split.value->host;
    p.upstream.port = split.value->port;
    p.upstream.dial = join_host_port(p.upstream.host, p.upstream.port);
    // Inline options: ?weight=5&max_fails=3 (Caddy's shortcut form).
    int query_column = t.column + (t.quoted ? 1 : 0) + int(t.text.size() - query.size());
    size_t start = 0;
    while (!query.empty() && start <= query.size()) {
      size_t amp = query.find('&', start);
      if (amp == std::string_view::npos) amp = query.size();
      std::string_view pair = query.substr(start, amp - start);
      if (pair.empty()) {  // "a:1?weight=5&&down" or a trailing "&": nothing there (Caddy ignores it too)
        start = amp + 1;
        continue;
      }
      Token key{std::string(pair.substr(0, pair.find('='))), t.line, query_column + int(start), false};
      Token value{"", t.line, key.column + int(key.text.size()) + 1, false};
      bool has_value = pair.find('=') != std::string_view::npos;
      if (has_value) value.text = std::string(pair.substr(pair.find('=') + 1));
      if (!contains(kUpstreamOptions, key.text)) {
        unknown(key, kUpstreamOptions, "backend option");
      } else if (!first_time(p.options, key)) {
        // ?weight=5&weight=6: reported, the first stays
      } else if (key.text == "backup" || key.text == "down") {
        if (has_value && value.text != "true" && value.text != "false")
          error(value, fmt::format("{} must be true or false, got \"{}\"", key.text, value.text));
        else
          upstream_flag(p, key.text, !has_value || value.text == "true");
      } else if (!has_value || value.text.empty()) {
        error(key, fmt::format("missing value for \"{}\"", key.text));
      } else {
        upstream_option(p, key, value);
      }
      start = amp + 1;
    }
    out.push_back(std::move(p));
    return true;
  }

  void upstream_flag(PendingUpstream& p, std::string_view name, bool value) {
    if (name == "backup") p.upstream.backup = value;
    if (name == "down") p.upstream.down = value;
  }

  void upstream_option(PendingUpstream& p, const Token& name, const Token& value) {
    if (name.text == "weight") {
      if (auto n = integer(value, 0, kMaxWeight, "weight")) p.upstream.weight = uint32_t(*n);
    } else if (name.text == "max_fails") {
      if (auto n = integer(value, 0, 1'000'000, "max_fails")) {
        p.upstream.max_fails = uint32_t(*n);
        p.explicit_max_fails = true;
      }
    } else if (name.text == "fail_timeout") {
      if (auto v = duration(value, false)) {
        p.upstream.fail_timeout = *v;
        p.explicit_fail_timeout = true;
      }
    } else if (name.text == "slow_start") {
      if (auto v = duration(value, false)) p.upstream.slow_start = *v;  // 0: off for this backend
    } else if (name.text == "max_conns") {
      if (auto n = integer(value, 0, 1'000'000, "max_conns")) p.upstream.max_conns = uint32_t(*n);
    }
  }

  static bool looks_like_address(std::string_view word) {
    return word.find_first_of(":.?[/") != std::string_view::npos || word == "localhost";
  }

  // to ADDR [ADDR...] [weight N] [max_fails N] [fail_timeout DUR] [backup] [down] [slow_start DUR]
  //    [max_conns N]
  // False when an address on the line was invalid.
  bool to_line(const Directive& d, std::vector<PendingUpstream>& pending) {
    if (!no_block(d)) return true;
    bool addresses_ok = true;
    size_t first_new = pending.size();
    size_t i = 0;
    for (; i < d.args.size(); ++i) {
      const Token& arg = d.args[i];
      if (contains(kUpstreamOptions, arg.text)) break;
      if (!looks_like_address(arg.text) &&
          !closest_match(arg.text, std::span<const std::string_view>(kUpstreamOptions)).empty())
        break;  // a misspelled option, reported below
      addresses_ok &= upstream_address(arg, pending);
    }
    if (i == 0) {
      error(d.args.empty() ? d.name : d.args[0], "\"to\" needs at least one backend address");
      return true;
    }
    PendingUpstream applied;  // validates each option once before it is applied to every address
    std::map<std::string, Token> seen;
    for (; i < d.args.size(); ++i) {
      const Token& name = d.args[i];
      if (!contains(kUpstreamOptions, name.text)) {
        unknown(name, kUpstreamOptions, "option");
        // Its value, if the next word is not an option: the rest of the line is still checked.
        if (i + 1 < d.args.size() && !contains(kUpstreamOptions, d.args[i + 1].text)) ++i;
        continue;
      }
      bool first_on_line = first_time(seen, name);
      bool is_flag = name.text == "backup" || name.text == "down";
      const Token* value = nullptr;
      if (!is_flag) {
        if (i + 1 >= d.args.size()) {
          error(name, fmt::format("missing value for \"{}\"", name.text));
          return addresses_ok;
        }
        value = &d.args[++i];
      }
      if (!first_on_line) continue;
      if (value) {
        size_t errors_before = errors_.size();
        upstream_option(applied, name, *value);
        if (errors_.size() != errors_before) continue;
      }
      // An address may have set it already in its query: to A?weight=2 weight 3.
      for (size_t k = first_new; k < pending.size(); ++k) {
        if (!first_time(pending[k].options, name)) continue;
        if (is_flag)
          upstream_flag(pending[k], name.text, true);
        else
          upstream_option(pending[k], name, *value);
      }
    }
    return addresses_ok;
  }

  void lb_policy(const Directive& d, PoolConfig& pool) {
    if (d.args.empty()) {
      error(d.name, "missing value for \"lb_policy\"");
      return;
    }
    const Token& name = d.args[0];
    size_t used = 1;
    auto set_hash = [&](HashKey::Kind kind, std::string key_name) {
      pool.policy = balance::PolicyKind::hash;
      pool.hash_key = HashKey{kind, std::move(key_name)};
    };
    auto named_key = [&](const Token& after, HashKey::Kind kind) {
      if (d.args.size() <= used) {
        error(after, fmt::format("\"{}\" needs a name, e.g. {} {}", after.text, after.text,
                                 kind == HashKey::header ? "X-User-ID" : "session"));
        pool.policy = balance::PolicyKind::hash;
        pool.hash_key = HashKey{kind, ""};
        return;
      }
      const Token& key_name = d.args[used++];
      // A header or cookie name is an RFC 9110 token (cookie-name is one too):
      // "" or "X\r\nY" could never match, and the JSON form refuses them.
      if (!is_header_name(key_name.text))
        error(key_name, fmt::format("invalid {} name \"{}\" (use letters, digits and {})",
                                    kind == HashKey::header ? "header" : "cookie", printable(key_name.text),
                                    kHeaderNameCharacters));
      set_hash(kind, key_name.text);
    };
    if (name.text == "ip_hash" || name.text == "client_ip_hash") {
      set_hash(HashKey::client_ip, "");
    } else if (name.text == "uri_hash") {
      set_hash(HashKey::uri, "");
    } else if (name.text == "header") {
      named_key(name, HashKey::header);
    } else if (name.text == "cookie") {
      named_key(name, HashKey::cookie);
    } else if (name.text == "hash") {
      if (d.args.size() < 2) {
        error(name, "lb_policy hash needs a key: client_ip, uri, header NAME or cookie NAME");
        pool.policy = balance::PolicyKind::hash;
        pool.hash_key = HashKey{HashKey::client_ip, ""};  // reported; avoid a second error
        return;
      }
      const Token& key = d.args[1];
      used = 2;
      if (key.text == "client_ip") set_hash(HashKey::client_ip, "");
      else if (key.text == "uri") set_hash(HashKey::uri, "");
      else if (key.text == "header") named_key(key, HashKey::header);
      else if (key.text == "cookie") named_key(key, HashKey::cookie);
      else {
        unknown(key, kHashKeys, "hash key");
        pool.policy = balance::PolicyKind::hash;
        pool.hash_key = HashKey{HashKey::client_ip, ""};
        return;
      }
    } else if (auto kind = balance::parse_policy(name.text)) {
      pool.policy = *kind;
    } else {
      unknown(name, kPolicyNames, "lb_policy");
      return;
    }
    if (d.args.size() > used)
      error(d.args[used], fmt::format("unexpected argument \"{}\" for lb_policy {}", d.args[used].text, name.text));
  }

  void next_upstream(const Directive& d, NextUpstream& out) {
    if (d.args.empty()) {
      error(d.name, "missing value for \"next_upstream\"");
      return;
    }
    NextUpstream flags{false, false, false, false, false, false, false, false};
    for (const Token& arg : d.args) {
      const std::string& c = arg.text;
      if (!contains(kNextUpstreamConditions, c)) {
        unknown(arg, kNextUpstreamConditions, "next_upstream condition");
        return;
      }
      if (c == "off" && d.args.size() > 1) {
        error(arg, "next_upstream off cannot be combined with other conditions");
        return;
      }
      if (c == "error") flags.error = true;
      if (c == "timeout") flags.timeout = true;
      if (c == "http_500") flags.http_500 = true;
      if (c == "http_502") flags.http_502 = true;
      if (c == "http_503") flags.http_503 = true;
      if (c == "http_504") flags.http_504 = true;
      if (c == "non_idempotent") flags.non_idempotent = true;
      if (c == "off") flags.off = true;
    }
    out = flags;
  }

  // header_up Name value | +Name value | -Name
  void header_op(const Directive& d, std::vector<HeaderOp>& ops) {
    if (d.args.empty()) {
      error(d.name, fmt::format("missing header name for \"{}\"", d.name.text));
      return;
    }
    const Token& name = d.args[0];
    HeaderOp op;
    op.name = name.text;
    if (name.text.starts_with('+')) {
      op.op = HeaderOp::add;
      op.name.erase(0, 1);
    } else if (name.text.starts_with('-')) {
      op.op = HeaderOp::remove;
      op.name.erase(0, 1);
    }
    if (!header_name(name, op.name)) return;
    if (std::string problem = header_op_problem(op.name, op.op, d.name.text == "header_up"); !problem.empty()) {
      error(name, problem);
      return;
    }
    if (op.op == HeaderOp::remove) {
      if (d.args.size() > 1) {
        error(d.args[1], fmt::format("\"{}\" removes a header and takes no value", name.text));
        return;
      }
    } else {
      if (d.args.size() < 2) {
        error(name, fmt::format("missing value for header \"{}\"", op.name));
        return;
      }
      if (d.args.size() > 2) {
        error(d.args[2], "unexpected argument (quote values that contain spaces)");
        return;
      }
      if (!header_value(d.args[1], op.name)) return;
      op.value = d.args[1].text;
    }
    ops.push_back(std::move(op));
  }

  // False after reporting a name that is not an RFC 9110 token. `at` is the
  // token as written ("+X-A"), `name` the header name in it.
  bool header_name(const Token& at, std::string_view name) {
    if (is_header_name(name)) return true;
    error(at, fmt::format("invalid header name \"{}\" (use letters, digits and {})", printable(at.text),
                          kHeaderNameCharacters));
    return false;
  }

  // False after reporting a value that would break the header block it is sent in.
  bool header_value(const Token& value, std::string_view name) {
    std::string problem = header_value_problem(value.text);
    if (problem.empty()) return true;
    error(value, fmt::format("invalid value for header \"{}\": {}", printable(name), problem));
    return false;
  }

  void health_headers(const Directive& d, PoolConfig& pool) {
    if (!no_args(d)) return;
    if (!d.has_block) {
      error(d.name, "health_headers needs a block: health_headers { Name value }");
      return;
    }
    for (const Directive& header : d.block) {
      if (header.is_comment || !no_block(header)) continue;
      if (header.args.size() != 1) {
        error(header.args.empty() ? header.name : header.args[1],
              header.args.empty() ? fmt::format("missing value for header \"{}\"", header.name.text)
                                  : std::string("unexpected argument (quote values that contain spaces)"));
        continue;
      }
      if (!header_name(header.name, header.name.text) || !header_value(header.args[0], header.name.text)) continue;
      // header_up's + and - mean add and remove; a probe's headers are only set.
      if (header.name.text.starts_with('+') || header.name.text.starts_with('-')) {
        error(header.name, fmt::format("health_headers only sets headers: write \"{}\" without the {}",
                                       header.name.text.substr(1), header.name.text.front()));
        continue;
      }
      if (std::string problem = header_op_problem(header.name.text, HeaderOp::set, true); !problem.empty()) {
        error(header.name, problem);
        continue;
      }
      pool.health_headers.emplace_back(header.name.text, header.args[0].text);
    }
  }

  void adaptive(const Directive& d, AdaptiveConfig& adaptive) {
    adaptive.enabled = true;
    if (!d.args.empty()) {
      if (d.args[0].text == "off" && d.args.size() == 1 && !d.has_block) {
        adaptive.enabled = false;
        return;
      }
      error(d.args[0], "adaptive takes no arguments other than \"off\"");
      return;
    }
    std::map<std::string, Token> seen;
    for (const Directive& option : d.block) {
      if (option.is_comment) continue;
      const std::string& name = option.name.text;
      if (!contains(kAdaptiveOptions, name)) {
        unknown(option.name, kAdaptiveOptions, "adaptive option");
        continue;
      }
      if (!first_time(seen, option)) continue;
      const Token* arg = single(option);
      if (!arg) continue;
      if (name == "interval") {
        if (auto v = duration(*arg, true)) adaptive.interval = *v;
      } else if (name == "latency_threshold") {
        if (auto v = duration(*arg, false)) adaptive.latency_threshold = *v;
      } else if (name == "median_factor") {
        auto v = parse_number(arg->text);
        if (!v || *v < 1.0 || *v > 100.0)
          error(*arg, fmt::format("median_factor must be a number 1..100, got \"{}\"", arg->text));
        else
          adaptive.median_factor = *v;
      } else if (name == "error_threshold") {
        if (auto v = fraction(*arg, 0.0, 1.0, "error_threshold")) {
          // "1" is 100 %: never cut for errors, almost surely meant as 1 %.
          if (*v == 1 && arg->text.back() != '%')
            error(*arg, fmt::format("error_threshold {} would be 100% (never cut for errors): write 1% for one "
                                    "percent, or 100% if that is meant",
                                    arg->text));
          else
            adaptive.error_threshold = *v;
        }
      } else if (name == "cut") {
        if (auto v = fraction(*arg, 0.0, 1.0, "cut")) {
          if (*v == 0.0)
            error(*arg, "cut must be greater than 0%");
          else
            adaptive.cut = *v;
        }
      } else if (name == "min_weight_ratio") {
        if (auto v = fraction(*arg, 0.0, 1.0, "min_weight_ratio")) adaptive.min_weight_ratio = *v;
      }
    }
  }

  // ---- across sites --------------------------------------------------------

  // The admin address written in the file must not be one the sites listen
  // on: heft would run without its admin API ("Address already in use").
  void check_admin_port(const Config& config, const std::vector<SitePlaces>& places) {
    uint16_t port = 0;
    std::string conflict = admin_listen_conflict(config, port);
    if (conflict.empty()) return;
    for (size_t s = 0; s < config.sites.size(); ++s) {
      if (config.sites[s].port != port || places[s].addresses.empty()) continue;
      const Token& site = places[s].addresses.front();
      conflict += fmt::format(" (site at {}:{})", site.line, site.column);
      break;
    }
    error(*admin_at_, conflict);
  }

  void check_sites(const Config& config, const std::vector<SitePlaces>& places) {
    std::map<std::pair<uint16_t, std::string>, Token> addresses;
    std::map<uint16_t, Token> defaults;
    for (size_t s = 0; s < config.sites.size(); ++s) {
      const SiteConfig& site = config.sites[s];
      for (const Token& at : places[s].addresses) {
        std::string host = site.hosts.empty() ? "" : at.text;
        auto [it, inserted] = addresses.emplace(std::pair{site.port, host}, at);
        if (inserted) continue;
        if (host.empty())
          error(at, fmt::format("two sites answer every host on port {} (first at {}:{})", site.port,
                                it->second.line, it->second.column));
        else
          error(at, fmt::format("duplicate site \"{}\" (first at {}:{})",
                                join_host_port(host, site.port), it->second.line, it->second.column));
      }
      if (places[s].default_marker) {
        const Token& at = *places[s].default_marker;
        auto [it, inserted] = defaults.emplace(site.port, at);
        if (!inserted)
          error(at, fmt::format("second default site for port {} (first at {}:{})", site.port,
                                it->second.line, it->second.column));
      }
    }
    // A site without hosts gets every request the named sites do not match, so
    // a `default` among those named sites would never be used.
    for (size_t s = 0; s < config.sites.size(); ++s) {
      const SiteConfig& site = config.sites[s];
      if (!places[s].default_marker || site.hosts.empty()) continue;
      auto catch_all = addresses.find(std::pair{site.port, std::string()});
      if (catch_all == addresses.end()) continue;
      error(*places[s].default_marker,
            fmt::format("\"default\" has no effect: the site at {}:{} answers every host on port {} "
                        "(remove one of the two)",
                        catch_all->second.line, catch_all->second.column, site.port));
    }
  }

  // Where each site listens: its `bind`, else its IP-literal addresses (a
  // host name only matches requests, as in Caddy), else default_bind, else
  // every address. The sites of a port are one listener set (one JSON server,
  // one route table per port), so they must agree: a site that listens on
  // 127.0.0.1 alone beside one on every address would be reached everywhere
  // (by its Host), which is what it asked not to be.
  void listen_addresses(Config& config, const std::vector<SitePlaces>& places) {
    for (size_t s = 0; s < config.sites.size(); ++s) {
      SiteConfig& site = config.sites[s];
      if (places[s].bind_at) continue;
      if (!places[s].ip_addresses.empty()) {
        site.bind.clear();
        for (const auto& [ip, at] : places[s].ip_addresses)
          if (std::find(site.bind.begin(), site.bind.end(), ip) == site.bind.end()) site.bind.push_back(ip);
      } else {
        site.bind = default_bind_;
      }
    }
    std::map<uint16_t, size_t> first_of_port;
    for (size_t s = 0; s < config.sites.size(); ++s) {
      SiteConfig& site = config.sites[s];
      auto [first, inserted] = first_of_port.emplace(site.port, s);
      if (inserted) continue;
      const SiteConfig& other = config.sites[first->second];
      std::vector<std::string> mine = site.bind, theirs = other.bind;
      std::sort(mine.begin(), mine.end());
      std::sort(theirs.begin(), theirs.end());
      if (mine == theirs) {
        site.bind = other.bind;  // the first site's order: the JSON server's `listen` order
        continue;
      }
      const Token& at = places[s].bind_at ? *places[s].bind_at
                        : places[s].addresses.empty() ? Token{} : places[s].addresses.front();
      const Token& other_at = places[first->second].addresses.empty() ? Token{} : places[first->second].addresses.front();
      error(at, fmt::format("this site listens on {}, but the site at {}:{} on port {} listens on {}: the sites of "
                            "a port listen on the same addresses (give them the same bind, or another port)",
                            describe_bind(site.bind), other_at.line, other_at.column, site.port,
                            describe_bind(other.bind)));
    }
  }

  static std::string describe_bind(const std::vector<std::string>& bind) {
    if (bind.empty()) return "every address";
    std::string out;
    for (const std::string& address : bind) out += (out.empty() ? "" : " ") + address;
    return out;
  }

  // Sites sharing a port become one JSON server; keep that order here so that
  // the JSON form round-trips exactly.
  static void group_by_port(Config& config) {
    // Each port's rank in a table: a search of the port list per comparison
    // took 24 s for a file of 20,000 sites on as many ports.
    std::vector<uint32_t> rank(65536, 0);
    uint32_t next = 0;
    for (const SiteConfig& site : config.sites)
      if (rank[site.port] == 0) rank[site.port] = ++next;
    std::stable_sort(config.sites.begin(), config.sites.end(),
                     [&](const SiteConfig& a, const SiteConfig& b) { return rank[a.port] < rank[b.port]; });
  }

  std::string file_;
  std::vector<Diagnostic>& errors_;
  std::optional<Token> admin_at_;  // where the admin address was written, when it was
  std::vector<std::string> default_bind_;  // the global default_bind: for sites without addresses of their own
  bool syntax_ok_;
};

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
  Result<Config> result;
  Result<syntax::Tree> tree = syntax::parse(text, file);
  result.errors = std::move(tree.errors);
  syntax::expand_environment(*tree.value, file, environment_variable, result.errors);
  std::vector<Diagnostic> meaning_errors;
  Parser parser(file, meaning_errors, result.errors.empty());
  Config config = parser.parse(*tree.value);
  // A token the lexer reported (an unterminated quote, which swallowed the
  // rest of the file) gets no second error for what it then holds.
  std::erase_if(meaning_errors, [&](const Diagnostic& meaning) {
    return std::any_of(result.errors.begin(), result.errors.end(), [&](const Diagnostic& syntax) {
      return syntax.line == meaning.line && syntax.column == meaning.column;
    });
  });
  result.errors.insert(result.errors.end(), meaning_errors.begin(), meaning_errors.end());
  // Errors appear in file order whichever pass found them.
  std::stable_sort(result.errors.begin(), result.errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::pair(a.line, a.column) < std::pair(b.line, b.column);
  });
  if (result.errors.empty()) result.value = std::move(config);
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
  Result<syntax::Tree> tree = syntax::parse(*text, path);
  result.errors = std::move(tree.errors);
  if (!result.errors.empty()) return result;
  auto first = std::find_if(tree.value->top.begin(), tree.value->top.end(),
                            [](const Directive& d) { return !d.is_comment; });
  if (first == tree.value->top.end() || !is_global_block(*first)) {
    result.value = AdminConfig{};  // no global options: the defaults
    return result;
  }
  // Only the global options' placeholders: the sites' may name variables
  // only heft's own environment has.
  syntax::Tree globals{{*first}};
  syntax::expand_environment(globals, path, environment_variable, result.errors);
  Parser parser(path, result.errors, true);
  Config config = parser.global_options(globals.top[0]);
  if (result.errors.empty()) result.value = config.admin;
  return result;
}

Result<Config> load_config_file(const std::string& path) {
  if (!path.ends_with(".json")) return load_heftfile(path);
  Result<Config> result;
  auto text = read_file(path, result.errors);
  if (!text) return result;
  std::string syntax;
  nlohmann::json document = parse_json_text(*text, syntax, kJsonFileLimits);
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
      if (auto hit = cache.find(upstream.dial); hit != cache.end()) {
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
        std::string error = fmt::format("cannot resolve backend \"{}\": {}", upstream.dial, gai_strerror(rc));
        errors.push_back({site.file, site.line, 0, "", error});
        cache[upstream.dial] = {{}, std::move(error)};
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
      cache[upstream.dial] = {upstream.resolved, ""};
    }
  }
  return errors;
}

std::vector<std::string_view> known_options(std::string_view block) {
  auto list = [](const auto& array) { return std::vector<std::string_view>(std::begin(array), std::end(array)); };
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
  const std::string message = taken + ": set admin.listen to another address, or admin.disabled to true";
  return Diagnostic{site->file, 0, 0, "admin.listen", site->file.empty() ? message : "admin.listen: " + message};
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> out;
  for (const SiteConfig& site : config.sites) {
    std::string hosts;
    for (const std::string& h : site.hosts) hosts += (hosts.empty() ? "" : ",") + h;
    const std::string where = site.file.empty() ? "" : site.line ? fmt::format("{}:{}: ", site.file, site.line)
                                                                     : site.file + ": ";
    // maglev where nothing hashes: the writer expected a consistent table (ring, the
    // default, said explicitly changes nothing either way).
    if (site.proxy.policy != balance::PolicyKind::hash && site.proxy.hash_strategy != balance::HashStrategy::ring)
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
    if (site.proxy.policy != balance::PolicyKind::round_robin) continue;
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
    out.push_back(fmt::format("{}site {}:{}: lb_policy round_robin ignores the weights {} (every backend gets an "
                              "equal share); weighted_round_robin, the default, splits by them",
                              where, hosts, site.port, weights));
  }
  return out;
}

}  // namespace heft::config
