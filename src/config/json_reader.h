// Internal to the config layer: the one validator of a configuration, which
// reads the JSON form (json.h's from_json) whether it came as JSON or was
// adapted from a Heftfile (adapt.h). Each option is checked here once.
//
// A problem is reported where the value came from: at its Heftfile token
// (`Heftfile:12:5: weight must be an integer 0..1000000, got "x"`) when the
// document has a SourceMap, else at its RFC 6901 JSON pointer
// (`/apps/http/servers/srv0/.../weight: must be an integer 0..1000000`).
// Messages about a Heftfile value quote the token and name the option as the
// Heftfile writes them; messages about JSON name the member by its pointer.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model.h"
#include "config/source_map.h"

namespace heft::config::reading {

using nlohmann::json;
using std::chrono::milliseconds;

class Reader {
 public:
  Reader(std::vector<Diagnostic>& errors, const SourceMap* sources) : errors_(errors), sources_(sources) {}

  // The whole document (json_reader.cc).
  Config config(const json& document);
  // The admin section alone (`heft reload`'s, `heft stop`'s target).
  AdminConfig admin_only(const json& document);

  // ---- where problems are told ---------------------------------------------

  // The document came from a Heftfile: messages quote its tokens.
  bool heftfile() const { return sources_ != nullptr; }
  // The Heftfile token of the value at `pointer`; nullptr when there is none.
  const Source* source(const std::string& pointer) const { return sources_ ? sources_->at(pointer) : nullptr; }
  // The option's Heftfile name and its token as written, for messages.
  std::string name_of(const std::string& pointer) const;
  std::string token_of(const std::string& pointer, const json& value) const;
  // A problem with the value at `pointer`.
  void error(const std::string& pointer, std::string message);
  // The same, worded for the form the value came from.
  void error(const std::string& pointer, std::string json_message, std::string heftfile_message) {
    error(pointer, heftfile() ? std::move(heftfile_message) : std::move(json_message));
  }
  // A member that is required (or a list that must not be empty): not
  // reported when the Heftfile adapter left it out for an error of its own.
  void missing(const std::string& pointer, std::string json_message, std::string heftfile_message);
  // Another place, for a message: "LINE:COL" in a Heftfile, else the pointer.
  std::string where(const std::string& pointer) const;
  // Problems found, listed or not (see kListedErrors).
  size_t error_count() const { return error_count_; }
  // JSON errors past this many are counted, not kept: a document of a million
  // unknown keys would otherwise take more memory in errors than in JSON.
  static constexpr size_t kListedErrors = 100;

  // ---- members of an object (json_reader.cc) -------------------------------

  // Checks that `value` is an object with only `allowed` keys.
  bool object(const json& value, const std::string& pointer, std::initializer_list<std::string_view> allowed);
  static const json* field(const json& object, std::string_view key);
  bool uint_value(const json& value, const std::string& pointer, uint64_t min, uint64_t max, uint64_t& out);
  template <typename T>
  void uint_field(const json& object, std::string_view key, const std::string& pointer, uint64_t min, uint64_t max,
                  T& target) {
    uint64_t n = 0;
    if (const json* v = field(object, key); v && uint_value(*v, pointer_append(pointer, key), min, max, n))
      target = static_cast<T>(n);
  }
  // A size in bytes, 0..max (a Heftfile writes "64KiB").
  void size_field(const json& object, std::string_view key, const std::string& pointer, uint64_t max, size_t& target);
  void bool_field(const json& object, std::string_view key, const std::string& pointer, bool& target);
  bool string_field(const json& object, std::string_view key, const std::string& pointer, std::string& target);
  // A duration string ("30s") or, as Caddy also accepts, integer nanoseconds.
  std::optional<milliseconds> duration_value(const json& value, const std::string& pointer, bool positive);
  void duration_field(const json& object, std::string_view key, const std::string& pointer, bool positive,
                      milliseconds& target);
  // slow_start: 0 is a value ("off", also over the pool's for one backend).
  void optional_duration_field(const json& object, std::string_view key, const std::string& pointer,
                               std::optional<milliseconds>& target);
  // A number min..max; a fraction is one the Heftfile writes "5%".
  enum class Number { plain, fraction };
  bool number_field(const json& object, std::string_view key, const std::string& pointer, double min, double max,
                    Number kind, double& target);
  // An array member; nullptr (after an error when `required`) otherwise.
  const json* array_field(const json& object, std::string_view key, const std::string& pointer, bool required);

  // ---- the parts of a document ---------------------------------------------

  // json_reader.cc
  void admin(const json& document, AdminConfig& admin);
  void logging(const json& document, LogFormat& format);
  void http(const json& http, Config& config);
  void demo_backends(const json& demo, std::vector<DemoBackendConfig>& out);
  void server(const json& value, const std::string& pointer, Config& config, std::map<uint16_t, std::string>& ports);
  std::optional<std::pair<uint16_t, std::vector<std::string>>> listen_addresses(const json& listen,
                                                                                const std::string& pointer);
  void listen_problem(const std::string& pointer, const std::string& json_message);
  // A route's hosts, each with the pointer of its matcher entry.
  using HostPlaces = std::vector<std::pair<std::string, std::string>>;
  void route(const json& value, const std::string& pointer, SiteConfig& site, HostPlaces& hosts);
  void match_hosts(const json& match, const std::string& pointer, SiteConfig& site, HostPlaces& hosts);
  void route_handler(const json& route, const std::string& pointer, SiteConfig& site);

  // json_read_routes.cc: routes inside a site (route_model.h). Handlers
  // append the pools of their reverse_proxy handlers to `pools`.
  void handlers(const json& list, const std::string& pointer, std::vector<RouteHandler>& out,
                std::vector<ProxyConfig>& pools, int depth);
  void handler(const json& value, const std::string& pointer, RouteHandler& out, std::vector<ProxyConfig>& pools,
               int depth);
  void routes(const json& list, const std::string& pointer, std::vector<Route>& out, std::vector<ProxyConfig>& pools,
              int depth);
  void matcher_set(const json& value, const std::string& pointer, MatcherSet& out, int depth);
  void named_values(const json& value, const std::string& pointer, std::string_view what, NamedValues& out);
  void static_response(const json& value, const std::string& pointer, RouteHandler& out);
  void split(const json& value, const std::string& pointer, RouteHandler& out, std::vector<ProxyConfig>& pools,
             int depth);
  void rewrite(const json& value, const std::string& pointer, RouteHandler& out);
  // Caddy's header ops: {"set": {NAME: [VALUE, ...]}, "add": {...}, "delete": [NAME, ...]}.
  void header_map(const json& value, const std::string& pointer, bool request, std::vector<HeaderOp>& out);
  // False after reporting an unknown placeholder in `text` (a body or a URI).
  bool placeholders(const std::string& pointer, const std::string& text);
  void routes_agree(const std::vector<SiteConfig>& sites, size_t first, const std::string& routes_pointer,
                    const std::vector<HostPlaces>& host_places);
  void admin_listen_conflict(const json& document, const Config& config, const std::map<uint16_t, std::string>& ports);

  // json_read_tls.cc
  void tls_app(const json& tls, Config& config);
  void certificate(const json& value, const std::string& pointer, bool from_files, TlsCertificate& out);
  void tls_policies(const json& policies, const std::string& pointer, const Config& config,
                    std::vector<TlsPolicy>& out);

  // json_read_proxy.cc
  void reverse_proxy(const json& value, const std::string& pointer, ProxyConfig& pool);
  // A server's "protocols": ["h1", "h2", "h2c"] (Caddy's names).
  void protocols(const json& value, const std::string& pointer, Protocols& out);
  bool upstream(const json& value, const std::string& pointer, UpstreamConfig& upstream);
  void dial(const json& object, const std::string& pointer, UpstreamConfig& upstream);
  void load_balancing(const json& value, const std::string& pointer, ProxyConfig& pool);
  void selection_policy(const json& value, const std::string& pointer, ProxyConfig& pool);
  void next_upstream(const json& conditions, const std::string& pointer, NextUpstream& out);
  void health_checks(const json& value, const std::string& pointer, ProxyConfig& pool);
  void health_headers(const json& headers, const std::string& pointer, ProxyConfig& pool);
  void header_ops(const json& headers, std::string_view key, const std::string& pointer, std::vector<HeaderOp>& out);
  // False after reporting a header name or value that cannot be sent.
  bool header_name(const std::string& pointer, const std::string& name, HeaderOp::Op op, bool request);
  bool header_value(const std::string& pointer, const std::string& name, const std::string& value,
                    bool expanded = false);
  void adaptive(const json& value, const std::string& pointer, upstream::AdaptiveOptions& adaptive);

 private:
  std::vector<Diagnostic>& errors_;
  const SourceMap* sources_;
  size_t error_count_ = 0;  // listed or not
  bool certificates_refused_ = false;  // apps.tls had an error: a server's "no certificate" would only repeat it
};

}  // namespace heft::config::reading
