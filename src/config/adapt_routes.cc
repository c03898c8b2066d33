// The Heftfile adapter (adapt.h), continued: routes inside a site, in
// Caddy's spelling — named matchers (`@name { ... }`), inline path matchers,
// `handle`, `handle_path`, `route`, `respond`, `redir`, `rewrite`, `header`
// and several `reverse_proxy`s — adapted into the JSON form's routes as
// Caddy's Caddyfile adapter writes them: site directives sorted in Caddy's
// directive order, directives of one kind by the specificity of their path
// matcher (the longest first), `handle` blocks mutually exclusive (one
// group), `route` blocks in the order written.
#include <algorithm>

#include <fmt/format.h>

#include "config/adapter.h"
#include "config/values.h"

namespace heft::config::adapting {

namespace {

// Caddy's directive order, as far as heft has the directives (Caddy 2.6's
// httpcaddyfile/directives.go): what runs first in a site.
// heft's `split` (a sticky weighted split) goes with the handlers that answer.
constexpr std::string_view kRouteOrder[] = {"header", "redir", "rewrite", "handle", "route", "respond",
                                            "split", "reverse_proxy"};
constexpr std::string_view kRouteDirectiveNames[] = {"header", "redir",   "rewrite", "handle",       "handle_path",
                                                     "route",  "respond", "split",   "reverse_proxy"};
constexpr std::string_view kMatcherNames[] = {"path", "host", "method", "header", "query", "cookie", "remote_ip",
                                              "not"};
const std::span<const std::string_view> kRouteDirectives(kRouteDirectiveNames), kMatchers(kMatcherNames);

std::size_t order_of(std::string_view directive) {
  if (directive == "handle_path") directive = "handle";  // one kind: mutually exclusive, sorted together
  return static_cast<std::size_t>(std::find(std::begin(kRouteOrder), std::end(kRouteOrder), directive) -
                                  std::begin(kRouteOrder));
}

// A first argument that is a matcher: `@name`, a path, or `*` (every request).
bool is_matcher_token(const Token& t) {
  return !t.quoted && (t.text.starts_with('@') || t.text.starts_with('/') || t.text == "*");
}

// The length of the route's one path (its only matcher set's first path),
// 0 without: how Caddy 2.6 sorts directives of one kind.
std::size_t path_length(const json& route) {
  const auto match = route.find("match");
  if (match == route.end() || match->size() != 1) return 0;
  const auto paths = (*match)[0].find("path");
  return paths == (*match)[0].end() || paths->empty() ? 0 : (*paths)[0].get<std::string>().size();
}

bool is_status_code(std::string_view text) {
  return text.size() == 3 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool Adapter::has_routes(const std::vector<const Directive*>& body) {
  std::size_t proxies = 0;
  for (const Directive* d : body) {
    const std::string& name = d->name.text;
    if (name.starts_with('@') || (contains(kRouteDirectives, name) && name != "reverse_proxy")) return true;
    if (name == "reverse_proxy" && (++proxies > 1 || (!d->args.empty() && is_matcher_token(d->args[0])))) return true;
  }
  return false;
}

void Adapter::site_routes(const std::vector<const Directive*>& body, Site& site) {
  matchers_.clear();
  for (const Directive* d : body)
    if (d->name.text.starts_with('@')) matcher_definition(*d);
  std::vector<const Directive*> directives;
  for (const Directive* d : body)
    if (!d->name.text.starts_with('@')) directives.push_back(d);
  std::vector<RoutePiece> pieces = route_pieces(directives, true);
  json routes = assemble(pieces, "/handle/0/routes", site);
  site.route["handle"] = json::array({{{"handler", "subroute"}, {"routes", std::move(routes)}}});
  site.sources.emplace_back("/handle/0", place(site.head, "site"));
}

json Adapter::assemble(std::vector<RoutePiece>& pieces, const std::string& base, Site& site) {
  json routes = json::array();
  for (RoutePiece& piece : pieces) {
    const std::string at = pointer_append(base, routes.size());
    for (auto& [below, source] : piece.sources) site.sources.emplace_back(at + below, std::move(source));
    for (const std::string& below : piece.incomplete) site.incomplete.push_back(at + below);
    routes.push_back(std::move(piece.route));
  }
  return routes;
}

std::vector<Adapter::RoutePiece> Adapter::route_pieces(const std::vector<const Directive*>& body, bool sorted) {
  std::vector<RoutePiece> pieces;
  for (const Directive* d : body) {
    if (d->is_comment) continue;
    if (!contains(kRouteDirectives, d->name.text)) {
      unknown(d->name, kRouteDirectives, "directive");
      continue;
    }
    RoutePiece piece;
    piece.directive = d->name.text;
    if (route_piece(*d, piece)) pieces.push_back(std::move(piece));
  }
  if (sorted) {
    std::stable_sort(pieces.begin(), pieces.end(), [](const RoutePiece& a, const RoutePiece& b) {
      const std::size_t ao = order_of(a.directive), bo = order_of(b.directive);
      if (ao != bo) return ao < bo;
      const std::size_t al = path_length(a.route), bl = path_length(b.route);
      if (al == 0 && bl == 0) return a.route.contains("match") && !b.route.contains("match");
      return al > bl;
    });
  }
  // handle / handle_path blocks of one list exclude each other, and so do rewrites (Caddy's groups).
  std::string handle_group, rewrite_group;
  for (RoutePiece& piece : pieces) {
    std::string* group = piece.directive == "handle" || piece.directive == "handle_path" ? &handle_group
                         : piece.directive == "rewrite"                                    ? &rewrite_group
                                                                                           : nullptr;
    if (!group) continue;
    if (group->empty()) *group = fmt::format("group{}", groups_++);
    piece.route["group"] = *group;
  }
  return pieces;
}

// The matcher of a directive's first argument into piece.route["match"];
// false after reporting an unknown name.
bool Adapter::inline_matcher(const Token& t, RoutePiece& piece) {
  if (t.text == "*") return true;
  if (t.text.starts_with('/')) {
    piece.route["match"] = json::array({{{"path", json::array({t.text})}}});
    piece.sources.emplace_back("/match/0/path/0", place(t, "path matcher"));
    return true;
  }
  const auto found = matchers_.find(t.text);
  if (found == matchers_.end()) {
    error(t, fmt::format("unknown matcher \"{}\" (define it in the site: {} {{ path /api/* }})", printable(t.text),
                         printable(t.text)));
    return false;
  }
  piece.route["match"] = json::array({found->second.set});
  for (const auto& [below, source] : found->second.sources) piece.sources.emplace_back("/match/0" + below, source);
  return true;
}

bool Adapter::route_piece(const Directive& d, RoutePiece& piece) {
  const std::string& name = d.name.text;
  std::size_t first = 0;  // the first argument after the matcher
  if (!d.args.empty() && is_matcher_token(d.args[0])) {
    if (name == "handle_path" && !d.args[0].text.starts_with('/')) {
      error(d.args[0], "handle_path takes a path prefix, e.g. handle_path /api/*");
      return false;
    }
    if (!inline_matcher(d.args[0], piece)) return false;
    first = 1;
  }
  const std::vector<Token> args(d.args.begin() + static_cast<std::ptrdiff_t>(first), d.args.end());
  json& route = piece.route;
  if (name == "reverse_proxy") {
    Directive proxy = d;
    proxy.args = args;
    Site scratch;
    route["handle"] = json::array({pool(proxy, scratch, "/handle/0")});
    for (auto& source : scratch.sources) piece.sources.push_back(std::move(source));
    piece.incomplete = std::move(scratch.incomplete);
    return true;
  }
  if (name == "handle" || name == "handle_path" || name == "route") {
    if (!args.empty()) {
      error(args[0], fmt::format("\"{}\" takes one matcher and a block", name));
      return false;
    }
    if (!d.has_block) {
      error(d.name, fmt::format("\"{}\" needs a block {{ ... }}", name));
      return false;
    }
    if (name == "handle_path" && first == 0) {
      error(d.name, "handle_path needs a path prefix, e.g. handle_path /api/*");
      return false;
    }
    std::vector<const Directive*> inner;
    for (const Directive& child : d.block)
      if (!child.is_comment) inner.push_back(&child);
    std::vector<RoutePiece> pieces = route_pieces(inner, name != "route");
    if (name == "handle_path") {
      // Caddy's strip_path_prefix: the path without its trailing "*" and "/".
      std::string prefix = d.args[0].text;
      while (!prefix.empty() && (prefix.back() == '*' || prefix.back() == '/')) prefix.pop_back();
      RoutePiece strip;
      strip.route["handle"] = json::array({{{"handler", "rewrite"}, {"strip_path_prefix", prefix.empty() ? "/" : prefix}}});
      strip.sources.emplace_back("/handle/0/strip_path_prefix", place(d.args[0], "handle_path"));
      pieces.insert(pieces.begin(), std::move(strip));
    }
    Site scratch;
    json routes = assemble(pieces, "/handle/0/routes", scratch);
    route["handle"] = json::array({{{"handler", "subroute"}, {"routes", std::move(routes)}}});
    piece.sources.emplace_back("/handle/0", place(d.name, name));
    for (auto& source : scratch.sources) piece.sources.push_back(std::move(source));
    piece.incomplete = std::move(scratch.incomplete);
    return true;
  }
  if (name == "split") {
    if (!args.empty()) {
      error(args[0], "split takes one matcher and a block");
      return false;
    }
    return split(d, piece);
  }
  if (name == "respond") return respond(d, args, piece);
  if (name == "redir") return redirect(d, args, piece);
  if (name == "rewrite") {
    if (!no_block(d)) return false;
    if (args.size() != 1) {
      error(args.empty() ? d.name : args[1], "rewrite takes one URI, e.g. rewrite /old /new");
      return false;
    }
    route["handle"] = json::array({{{"handler", "rewrite"}, {"uri", args[0].text}}});
    piece.sources.emplace_back("/handle/0/uri", place(args[0], "rewrite"));
    return true;
  }
  return header(d, args, piece);  // "header"
}

// split [matcher] { cookie NAME; header NAME; side NAME WEIGHT { ... } ... }
bool Adapter::split(const Directive& d, RoutePiece& piece) {
  if (!d.has_block) {
    error(d.name, "split needs a block: split { side stable 95 { ... } side canary 5 { ... } }");
    return false;
  }
  json handler = {{"handler", "split"}, {"sides", json::array()}};
  const std::string at = "/handle/0";
  piece.sources.emplace_back(at, place(d.name, "split"));
  piece.sources.emplace_back(at + "/sides", place(d.name, "split"));
  std::map<std::string, Token> seen;
  for (const Directive& option : d.block) {
    if (option.is_comment) continue;
    const std::string& name = option.name.text;
    if (name == "cookie" || name == "header") {
      if (!first_time(seen, option.name)) continue;
      if (const Token* value = single(option)) {
        handler[name] = value->text;
        piece.sources.emplace_back(at + "/" + name, place(*value, "split " + name));
      }
    } else if (name == "side") {
      if (option.args.size() != 2) {
        error(option.args.size() > 2 ? option.args[2] : option.name, "side takes a name and a weight: side canary 5 { ... }");
        continue;
      }
      if (!option.has_block) {
        error(option.name, "side needs a block of what serves it: side canary 5 { reverse_proxy ... }");
        continue;
      }
      const std::string side_at = fmt::format("{}/sides/{}", at, handler["sides"].size());
      std::vector<const Directive*> inner;
      for (const Directive& child : option.block)
        if (!child.is_comment) inner.push_back(&child);
      std::vector<RoutePiece> pieces = route_pieces(inner, true);
      Site scratch;
      json routes = assemble(pieces, side_at + "/handle/0/routes", scratch);
      for (auto& source : scratch.sources) piece.sources.push_back(std::move(source));
      for (auto& below : scratch.incomplete) piece.incomplete.push_back(std::move(below));
      piece.sources.emplace_back(side_at, place(option.name, "side"));
      piece.sources.emplace_back(side_at + "/name", place(option.args[0], "side name"));
      piece.sources.emplace_back(side_at + "/weight", place(option.args[1], "side weight"));
      handler["sides"].push_back({{"name", option.args[0].text},
                                  {"weight", converted(option.args[1], Kind::integer)},
                                  {"handle", json::array({{{"handler", "subroute"}, {"routes", std::move(routes)}}})}});
    } else {
      constexpr std::string_view kSplitNames[] = {"cookie", "header", "side"};
      unknown(option.name, kSplitNames, "split option");
    }
  }
  piece.route["handle"] = json::array({std::move(handler)});
  return true;
}

// respond [matcher] <status>|<body> [<status>] { body TEXT; close }
bool Adapter::respond(const Directive& d, const std::vector<Token>& args, RoutePiece& piece) {
  json handler = {{"handler", "static_response"}};
  const std::string at = "/handle/0";
  if (args.size() > 2) {
    error(args[2], "unexpected argument (quote a body that contains spaces)");
    return false;
  }
  if (args.size() == 1 && is_status_code(args[0].text) && !args[0].quoted) {
    handler["status_code"] = std::stoi(args[0].text);
    piece.sources.emplace_back(at + "/status_code", place(args[0], "respond status"));
  } else if (!args.empty()) {
    handler["body"] = args[0].text;
    piece.sources.emplace_back(at + "/body", place(args[0], "respond body"));
    if (args.size() == 2) {
      handler["status_code"] = converted(args[1], Kind::integer);
      piece.sources.emplace_back(at + "/status_code", place(args[1], "respond status"));
    }
  }
  for (const Directive& option : d.block) {
    if (option.is_comment) continue;
    if (option.name.text == "close") {
      if (no_args(option) && no_block(option)) handler["close"] = true;
    } else if (option.name.text == "body") {
      if (const Token* body = single(option)) {
        handler["body"] = body->text;
        piece.sources.emplace_back(at + "/body", place(*body, "respond body"));
      }
    } else {
      constexpr std::string_view kRespondNames[] = {"body", "close"};
      unknown(option.name, kRespondNames, "respond option");
    }
  }
  piece.sources.emplace_back(at, place(d.name, "respond"));
  piece.route["handle"] = json::array({std::move(handler)});
  return true;
}

// redir [matcher] <to> [<code>]: a static_response with Location, as Caddy adapts it.
bool Adapter::redirect(const Directive& d, const std::vector<Token>& args, RoutePiece& piece) {
  if (!no_block(d)) return false;
  if (args.empty() || args.size() > 2) {
    error(args.empty() ? d.name : args[2], "redir takes a target and an optional code, e.g. redir /new 301");
    return false;
  }
  json status = 302;
  if (args.size() == 2) {
    const std::string& code = args[1].text;
    if (code == "permanent") status = 301;
    else if (code == "temporary") status = 302;
    else if (code == "html") {
      error(args[1], "redir ... html is not supported by heft (use a 3xx code)");
      return false;
    } else if (is_status_code(code) && code[0] == '3') status = std::stoi(code);
    else {
      error(args[1], fmt::format("invalid redirect code \"{}\" (300..308, permanent or temporary)", printable(code)));
      return false;
    }
  }
  const std::string at = "/handle/0";
  piece.route["handle"] = json::array(
      {{{"handler", "static_response"}, {"headers", {{"Location", json::array({args[0].text})}}}, {"status_code", status}}});
  piece.sources.emplace_back(at, place(d.name, "redir"));
  piece.sources.emplace_back(at + "/headers/Location/0", place(args[0], "redir target"));
  return true;
}

// header [matcher] [+|-]Name [value], or a block of such lines: response edits.
bool Adapter::header(const Directive& d, const std::vector<Token>& args, RoutePiece& piece) {
  json response = json::object();
  const std::string at = "/handle/0/response";
  const auto line = [&](const Token& name, const std::vector<Token>& values) {
    std::string field = name.text;
    std::string op = "set";
    if (field.starts_with('+')) op = "add", field.erase(0, 1);
    else if (field.starts_with('-')) op = "delete", field.erase(0, 1);
    else if (field.starts_with('>')) field.erase(0, 1);  // Caddy's deferred: heft edits the final response anyway
    if (op == "delete") {
      if (!values.empty()) {
        error(values[0], fmt::format("\"{}\" removes a header and takes no value", name.text));
        return;
      }
      piece.sources.emplace_back(fmt::format("{}/delete/{}", at, response["delete"].size()), place(name, "header"));
      response["delete"].push_back(field);
      return;
    }
    if (values.size() != 1) {
      error(values.empty() ? name : values[1],
            values.empty() ? fmt::format("missing value for header \"{}\"", printable(field))
                           : std::string("unexpected argument (quote values that contain spaces)"));
      return;
    }
    const std::string pointer = pointer_append(pointer_append(pointer_append(at, op), field), response[op][field].size());
    piece.sources.emplace_back(pointer, place(values[0], "header"));
    response[op][field].push_back(values[0].text);
  };
  if (!args.empty()) {
    if (d.has_block) {
      error(d.open_brace, "header takes a field on its line or a block, not both");
      return false;
    }
    line(args[0], std::vector<Token>(args.begin() + 1, args.end()));
  } else if (d.has_block) {
    for (const Directive& entry : d.block)
      if (!entry.is_comment && no_block(entry)) line(entry.name, entry.args);
  } else {
    error(d.name, "missing header name for \"header\"");
    return false;
  }
  piece.sources.emplace_back("/handle/0", place(d.name, "header"));
  piece.route["handle"] = json::array({{{"handler", "headers"}, {"response", std::move(response)}}});
  return true;
}

// @name { path ...; header ...; ... } or @name MATCHER ARGS...: a matcher set.
void Adapter::matcher_definition(const Directive& d) {
  NamedMatcher named;
  if (d.name.text.size() < 2) {
    error(d.name, "a named matcher needs a name, e.g. @api");
    return;
  }
  if (matchers_.count(d.name.text)) {
    error(d.name, fmt::format("matcher \"{}\" is defined twice", d.name.text));
    return;
  }
  if (!d.args.empty()) {
    if (d.has_block) {
      error(d.open_brace, "a named matcher takes one matcher on its line or a block, not both");
      return;
    }
    Directive line = d;
    line.name = d.args[0];
    line.args.assign(d.args.begin() + 1, d.args.end());
    matcher_line(line, named.set, "", named.sources, 0);
  } else if (d.has_block) {
    for (const Directive& line : d.block)
      if (!line.is_comment) matcher_line(line, named.set, "", named.sources, 0);
  } else {
    error(d.name, fmt::format("matcher \"{}\" matches nothing: give it a block, e.g. {} {{ path /api/* }}",
                              d.name.text, d.name.text));
    return;
  }
  matchers_.emplace(d.name.text, std::move(named));
}

// One line of a matcher set into `set` (`base`: the set's pointer below the route's match entry).
void Adapter::matcher_line(const Directive& line, json& set, const std::string& base,
                           std::vector<std::pair<std::string, Source>>& sources, int depth) {
  const std::string& kind = line.name.text;
  if (!contains(kMatchers, kind)) {
    unknown(line.name, kMatchers, "matcher");
    return;
  }
  if (kind == "not") {
    if (depth > 8) {
      error(line.name, "\"not\" nested too deep");
      return;
    }
    json inner = json::object();
    const std::string at = pointer_append(pointer_append(base, "not"), set["not"].size());
    if (!line.args.empty()) {
      Directive single = line;
      single.name = line.args[0];
      single.args.assign(line.args.begin() + 1, line.args.end());
      matcher_line(single, inner, at, sources, depth + 1);
    } else if (line.has_block) {
      for (const Directive& child : line.block)
        if (!child.is_comment) matcher_line(child, inner, at, sources, depth + 1);
    } else {
      error(line.name, "\"not\" needs a matcher, e.g. not path /admin/*");
      return;
    }
    set["not"].push_back(std::move(inner));
    return;
  }
  if (!no_block(line)) return;
  if (line.args.empty()) {
    error(line.name, fmt::format("missing value for matcher \"{}\"", kind));
    return;
  }
  const std::string at = pointer_append(base, kind);
  if (kind == "path" || kind == "host" || kind == "method") {
    for (const Token& value : line.args) {
      sources.emplace_back(pointer_append(at, set[kind].size()), place(value, kind + " matcher"));
      set[kind].push_back(value.text);
    }
  } else if (kind == "remote_ip") {
    for (const Token& value : line.args) {
      if (value.text == "forwarded") {
        error(value, "remote_ip forwarded is not supported: heft matches the connection's address");
        continue;
      }
      sources.emplace_back(pointer_append(pointer_append(at, "ranges"), set[kind]["ranges"].size()),
                           place(value, "remote_ip matcher"));
      set[kind]["ranges"].push_back(value.text);
    }
  } else if (kind == "query") {
    for (const Token& value : line.args) {
      const std::size_t eq = value.text.find('=');
      const std::string key = value.text.substr(0, eq);
      if (eq == std::string::npos || key.empty()) {
        error(value, fmt::format("query matcher takes key=value, got \"{}\"", printable(value.text)));
        continue;
      }
      sources.emplace_back(pointer_append(at, key), place(value, "query matcher"));
      set[kind][key].push_back(value.text.substr(eq + 1));
    }
  } else {  // header NAME [VALUE...], cookie NAME [VALUE...]
    const Token& field = line.args[0];
    const std::string pointer = pointer_append(at, field.text);
    sources.emplace_back(pointer, place(field, kind + " matcher"));
    json& values = set[kind][field.text];
    if (values.is_null()) values = json::array();
    for (std::size_t i = 1; i < line.args.size(); ++i) values.push_back(line.args[i].text);
  }
}

}  // namespace heft::config::adapting
