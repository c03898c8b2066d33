// Internal to the config layer: the Heftfile adapter's parts (adapt.h). The
// file, its global options and sites are adapt_heftfile.cc's; a site's
// reverse_proxy is adapt_proxy.cc's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/adapt.h"
#include "config/syntax.h"

namespace heft::config::adapting {

using nlohmann::json;
using syntax::Directive;
using syntax::Token;

// How a Heftfile token becomes a JSON value.
enum class Kind {
  string,    // as written
  duration,  // as written: the JSON form reads "30s" too
  integer,   // "5" -> 5
  size,      // "64KiB" -> 65536
  number,    // "2.5" -> 2.5
  fraction,  // "5%" -> 0.05
  on_off,    // on -> true, off -> false
};

// An option that sets one value: its Heftfile name, where it goes in the JSON
// form (a pointer relative to its block's object) and how it converts.
struct Mapping {
  std::string_view name;
  std::string_view pointer;
  Kind kind;
};

// What an adapted site adds to the document: its route, and the places of
// its values relative to the route (the route's own pointer is known once
// the sites are grouped into servers).
struct Site {
  Token head;  // the site's first address: where it was written
  uint16_t port = 80;
  json route = json::object();
  std::vector<std::pair<std::string, Source>> sources;  // pointer below the route -> place
  std::vector<std::string> incomplete;                   // pointers below the route
  // Where it listens, each address with its token: its `bind`, else its
  // IP-literal addresses, else default_bind, else every address (empty).
  std::vector<std::pair<std::string, Token>> bind;
  std::optional<Token> bind_at;  // the `bind` directive
  std::vector<std::pair<std::string, Token>> ip_addresses;
  // `protocols h1 h2c`: the names, each with its token (its server's `protocols`).
  std::vector<Token> protocols;
  std::optional<Token> protocols_at;
  // Served over TLS: an https:// address, port 443, or a `tls` directive.
  bool tls = false;
  std::optional<Token> tls_at;       // the `tls` directive
  std::vector<Token> tls_files;      // its CERT_FILE and KEY_FILE
  bool tls_refused = false;          // the `tls` directive had an error (told already)
};

class Adapter {
 public:
  Adapter(std::string_view file, Adapted& out) : file_(file), out_(out) {}

  void file(const syntax::Tree& tree, bool syntax_ok);
  void global(const Directive& block);

 private:
  // ---- diagnostics (adapt_heftfile.cc) ----
  void error(const Token& at, std::string message);
  void unknown(const Token& at, std::span<const std::string_view> known, std::string_view what);
  bool no_block(const Directive& d);
  bool no_args(const Directive& d);
  // Exactly one argument and no block; nullptr after reporting otherwise.
  const Token* single(const Directive& d);
  // An option given once per block: false (after reporting) for a second time.
  bool first_time(std::map<std::string, Token>& seen, const Token& option);
  // The directives of `block` that are options of `known`, each once, after
  // reporting the others (unknown ones, with "did you mean", and repeats).
  std::vector<const Directive*> options(const std::vector<Directive>& block, std::span<const std::string_view> known,
                                        std::string_view what);

  // ---- values ----
  static json converted(const Token& token, Kind kind);
  static Source place(const Token& at, std::string_view name, std::string_view spelling = {});
  // Sets `object`[pointer] (relative) and records where it was written, at
  // `base` + pointer in `sources`.
  static void set(json& object, std::string_view pointer, json value, const std::string& base, Source source,
                  std::vector<std::pair<std::string, Source>>& sources);
  // An option of `mappings` with its one value; false when `name` is not one.
  bool mapped(const Directive& d, std::span<const Mapping> mappings, json& object, const std::string& base,
              std::vector<std::pair<std::string, Source>>& sources);

  // ---- sites (adapt_heftfile.cc) ----
  void site(const Directive& head, const std::vector<const Directive*>& body);
  void site_addresses(const Directive& head, Site& site);
  void bind_addresses(const Directive& d, std::vector<std::pair<std::string, Token>>& out);
  void demo_backends(const Directive& d, std::vector<std::pair<std::string, Source>>& sources);
  void log(const Directive& d, Site& site);
  void tls(const Directive& d, Site& site);
  // The TLS sites of one server: their certificates (apps.tls) and the
  // server's tls_connection_policies; null when none of them is TLS.
  json tls_policies(const std::vector<size_t>& sites, const std::string& server_pointer);
  void servers(bool syntax_ok);

  // ---- reverse_proxy (adapt_proxy.cc) ----
  json pool(const Directive& d, Site& site, const std::string& base);
  void upstream_address(const Token& t, json& upstreams, std::vector<std::map<std::string, Token>>& options,
                        Site& site, const std::string& base);
  void upstream_option(const Token& name, const Token* value, json& upstream, const std::string& base, Site& site);
  size_t option_on_inline_line(const Directive& d, size_t i, const std::string& last_address);
  void to_line(const Directive& d, json& upstreams, std::vector<std::map<std::string, Token>>& options, Site& site,
               const std::string& base, bool& addresses_missing);
  void lb_policy(const Directive& d, json& handler, Site& site, const std::string& base);
  void next_upstream(const Directive& d, json& handler, Site& site, const std::string& base);
  void header_op(const Directive& d, json& handler, Site& site, const std::string& base);
  void health_headers(const Directive& d, json& handler, Site& site, const std::string& base);
  void adaptive(const Directive& d, json& handler, Site& site, const std::string& base);

  // ---- routes inside a site (adapt_routes.cc) ----
  // One route of a site or block, before Caddy's ordering places it.
  struct RoutePiece {
    std::string directive;
    json route = json::object();
    std::vector<std::pair<std::string, Source>> sources;  // pointer below the route -> place
    std::vector<std::string> incomplete;
  };
  struct NamedMatcher {
    json set = json::object();
    std::vector<std::pair<std::string, Source>> sources;  // pointer below the set -> place
  };
  // Whether the site's directives need routes (matchers, handle, respond,
  // several reverse_proxys, ...); a site of one reverse_proxy keeps its shape.
  bool has_routes(const std::vector<const Directive*>& body);
  void site_routes(const std::vector<const Directive*>& body, Site& site);
  std::vector<RoutePiece> route_pieces(const std::vector<const Directive*>& body, bool sorted);
  // The routes of `pieces` in order, their places moved to `site` under `base`.
  json assemble(std::vector<RoutePiece>& pieces, const std::string& base, Site& site);
  bool route_piece(const Directive& d, RoutePiece& piece);
  bool inline_matcher(const Token& t, RoutePiece& piece);
  bool respond(const Directive& d, const std::vector<Token>& args, RoutePiece& piece);
  bool split(const Directive& d, RoutePiece& piece);
  bool redirect(const Directive& d, const std::vector<Token>& args, RoutePiece& piece);
  bool header(const Directive& d, const std::vector<Token>& args, RoutePiece& piece);
  void matcher_definition(const Directive& d);
  void matcher_line(const Directive& line, json& set, const std::string& base,
                    std::vector<std::pair<std::string, Source>>& sources, int depth);

  std::map<std::string, NamedMatcher> matchers_;  // the current site's
  std::size_t groups_ = 0;                        // groups named so far ("group0", ...)

  std::string file_;
  Adapted& out_;
  std::vector<Site> sites_;
  std::vector<std::pair<std::string, Token>> default_bind_;
};

// The global options block `{ ... }`: a directive without a name (a quoted ""
// names a site).
inline bool is_global_block(const Directive& d) { return d.name.text.empty() && !d.name.quoted; }

// The Heftfile's names, per block (known_options()).
extern const std::span<const std::string_view> kGlobalOptions, kSiteOptions, kProxyOptions, kUpstreamOptions,
    kAdaptiveOptions, kLogOptions, kNextUpstreamConditions, kPolicyNames;

// The options that set one value: a reverse_proxy's (relative to its
// handler), a backend's (to its upstream) and adaptive's (to the handler).
extern const std::span<const Mapping> kProxyValues, kUpstreamValues, kAdaptiveValues;

bool contains(std::span<const std::string_view> list, std::string_view word);

}  // namespace heft::config::adapting
