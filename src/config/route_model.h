// Routes inside a site: matchers and handlers in Caddy's JSON shape
// (apps.http.servers.NAME.routes[].handle[]: subroute, reverse_proxy,
// static_response, rewrite, headers), as plain values. A site's handlers run
// in order until one answers (static_response, reverse_proxy); a subroute's
// routes run in order, a route whose matcher sets match runs its handlers,
// routes of one `group` exclude each other (the first that matches), and a
// `terminal` route ends its list. docs/routes.md says it in the user's words.
//
// Value types, compared with ==; included by model.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heft::config {

// A header edit applied to requests (header_up) or responses (header_down).
struct HeaderOp {
  enum Op { set, add, remove };
  Op op = set;
  std::string name;
  std::string value;  // empty for remove

  bool operator==(const HeaderOp&) const = default;
};

// A name and the values it may have (any one of them matches; none listed:
// the name present with any value).
using NamedValues = std::vector<std::pair<std::string, std::vector<std::string>>>;

// One matcher set: every matcher in it must match (and), each matcher
// matching when any of its values does (or). Caddy's names and meanings:
// `path` globs (case-insensitive, `*` only), `host`, `method`, `header`,
// `query`, `remote_ip` ranges; heft adds `cookie` (Caddy has none in core).
struct MatcherSet {
  std::vector<std::string> paths;    // as written; lower-cased when compiled
  std::vector<std::string> hosts;    // as written (case-insensitive, "*" one label)
  std::vector<std::string> methods;  // upper-case
  NamedValues headers;               // value "" in the list: the field present and empty
  NamedValues query;
  NamedValues cookies;
  std::vector<std::string> remote_ranges;  // "10.0.0.0/8", "::1/128" (an IP alone: /32 or /128)
  // Caddy's `not`: matches when none of these sets matches.
  std::vector<MatcherSet> nots;

  bool operator==(const MatcherSet&) const = default;
};

struct RouteHandler;

struct Route {
  std::string group;               // routes sharing a group: only the first that matches runs
  std::vector<MatcherSet> match;   // any set matching (or); none: every request
  std::vector<RouteHandler> handle;
  bool terminal = false;           // no later route of its list runs once this one has

  bool operator==(const Route&) const;
};

struct RouteHandler {
  enum Kind { subroute, reverse_proxy, static_response, rewrite, headers, split };
  Kind kind = subroute;
  std::vector<Route> routes;  // subroute; split: each side's handlers (its route's handle)
  // reverse_proxy: the site's pool it sends to (0: SiteConfig::proxy; n:
  // SiteConfig::pools[n - 1]), each its own upstream::Pool.
  std::size_t pool = 0;
  // static_response: status, body and fields (values may hold placeholders);
  // `close` ends the client connection after it.
  unsigned status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> fields;
  bool close = false;
  // rewrite: a prefix taken off the path (Caddy's handle_path), or the whole
  // URI replaced (`uri`, placeholders allowed; "" = unchanged).
  std::string strip_path_prefix;
  std::string uri;
  // headers: request edits (before the backend gets them) and response edits.
  std::vector<HeaderOp> request_ops;
  std::vector<HeaderOp> response_ops;
  // split (heft's own, docs/routes.md): a weighted split where a client stays
  // on the side it first got. Side i is side_names[i] with side_weights[i]
  // and routes[i].handle; `cookie` is the cookie heft sets to keep it there,
  // `header` (if not empty) a request field whose value names a side to force.
  std::vector<std::string> side_names;
  std::vector<uint32_t> side_weights;
  std::string cookie;
  std::string header;

  bool operator==(const RouteHandler&) const = default;
};

inline bool Route::operator==(const Route& other) const {
  return group == other.group && match == other.match && handle == other.handle && terminal == other.terminal;
}

}  // namespace heft::config
