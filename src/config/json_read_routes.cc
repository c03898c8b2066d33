// The one validator, continued: routes inside a site (route_model.h) —
// subroutes, matcher sets, static responses, rewrites and header edits, in
// Caddy's JSON shape. A reverse_proxy handler is json_read_proxy.cc's.
#include <algorithm>

#include <fmt/format.h>

#include "config/json_reader.h"
#include "config/placeholders.h"
#include "config/values.h"

namespace heft::config::reading {

namespace {

// Nesting (subroutes, `not`) deeper than this is refused: nobody writes it,
// and a document built to recurse must not exhaust the stack.
constexpr int kMaxDepth = 16;

constexpr std::string_view kHandlers[] = {"subroute", "reverse_proxy", "static_response", "rewrite", "headers",
                                          "split"};
// A split's weights add up to at most this: its sequence is precomputed.
constexpr uint64_t kMaxSplitTotal = 10'000;
constexpr std::string_view kMatchers[] = {"path", "host", "method", "header", "query", "cookie", "remote_ip", "not"};
// Caddy's, which heft does not have: named as such, not as misspellings.
constexpr std::string_view kCaddyMatchers[] = {"path_regexp", "header_regexp", "expression", "protocol", "file",
                                               "vars", "vars_regexp", "client_ip", "tls"};
constexpr std::string_view kCaddyHandlers[] = {"file_server", "encode", "templates", "authentication", "map", "vars",
                                               "error", "request_body", "copy_response", "copy_response_headers",
                                               "push", "acme_server", "metrics", "tracing", "invoke"};

bool token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Why a path pattern cannot be matched ("" if it can): heft's path matcher
// takes Caddy's `*` globs, not its escaped or bracketed forms.
std::string path_problem(const std::string& pattern) {
  if (pattern.empty()) return "must not be empty";
  if (pattern.front() != '/' && pattern.front() != '*') return "must start with '/' or '*'";
  if (pattern.find_first_of("?[%") != std::string::npos)
    return "may use only '*' as a wildcard (no '?', '[...]' or percent-escapes)";
  if (pattern.find_first_of(" \t\r\n") != std::string::npos) return "may hold no space";
  return "";
}

}  // namespace

bool Reader::placeholders(const std::string& pointer, const std::string& text) {
  std::string problem;
  split_placeholders(text, &problem);
  if (problem.empty()) return true;
  error(pointer, problem);
  return false;
}

void Reader::handlers(const json& list, const std::string& pointer, std::vector<RouteHandler>& out,
                      std::vector<ProxyConfig>& pools, int depth) {
  for (size_t i = 0; i < list.size(); ++i) {
    RouteHandler& h = out.emplace_back();
    handler(list[i], pointer_append(pointer, i), h, pools, depth);
  }
}

void Reader::handler(const json& value, const std::string& pointer, RouteHandler& out, std::vector<ProxyConfig>& pools,
                     int depth) {
  if (!value.is_object()) {
    error(pointer, "must be an object");
    return;
  }
  const json* kind = field(value, "handler");
  const std::string kind_pointer = pointer_append(pointer, "handler");
  if (!kind || !kind->is_string()) {
    if (!kind) missing(kind_pointer, "required", "required");
    else error(kind_pointer, "must be a string");
    return;
  }
  const std::string name = kind->get<std::string>();
  if (name == "reverse_proxy") {
    out.kind = RouteHandler::reverse_proxy;
    out.pool = pools.size();
    reverse_proxy(value, pointer, pools.emplace_back());
  } else if (name == "subroute") {
    out.kind = RouteHandler::subroute;
    if (!object(value, pointer, {"handler", "routes"})) return;
    if (depth >= kMaxDepth) {
      error(pointer, fmt::format("subroutes nested deeper than {}", kMaxDepth));
      return;
    }
    if (const json* list = array_field(value, "routes", pointer, false))
      routes(*list, pointer_append(pointer, "routes"), out.routes, pools, depth + 1);
  } else if (name == "static_response") {
    out.kind = RouteHandler::static_response;
    static_response(value, pointer, out);
  } else if (name == "rewrite") {
    out.kind = RouteHandler::rewrite;
    rewrite(value, pointer, out);
  } else if (name == "headers") {
    out.kind = RouteHandler::headers;
    if (!object(value, pointer, {"handler", "request", "response"})) return;
    if (const json* request = field(value, "request"))
      header_map(*request, pointer_append(pointer, "request"), true, out.request_ops);
    if (const json* response = field(value, "response"))
      header_map(*response, pointer_append(pointer, "response"), false, out.response_ops);
  } else if (name == "split") {
    out.kind = RouteHandler::split;
    if (depth >= kMaxDepth) {
      error(pointer, fmt::format("handlers nested deeper than {}", kMaxDepth));
      return;
    }
    split(value, pointer, out, pools, depth + 1);
  } else if (std::find(std::begin(kCaddyHandlers), std::end(kCaddyHandlers), name) != std::end(kCaddyHandlers)) {
    error(kind_pointer, fmt::format("Caddy's \"{}\" handler is not supported by heft (it has {})", name,
                                    "subroute, reverse_proxy, static_response, rewrite, headers and split"));
  } else {
    const std::string closest = closest_match(name, kHandlers);
    error(kind_pointer, closest.empty() ? fmt::format("unknown handler \"{}\"", printable(name))
                                        : fmt::format("unknown handler \"{}\" (did you mean \"{}\"?)", printable(name),
                                                      closest));
  }
}

// {"handler": "split", "cookie": NAME, "header": NAME, "sides": [{"name":
// N, "weight": W, "handle": [...]}, ...]}: at least two sides, distinct names.
void Reader::split(const json& value, const std::string& pointer, RouteHandler& out, std::vector<ProxyConfig>& pools,
                   int depth) {
  if (!object(value, pointer, {"handler", "cookie", "header", "sides"})) return;
  out.cookie = "heft_split";
  if (string_field(value, "cookie", pointer, out.cookie) && !is_header_name(out.cookie))
    error(pointer_append(pointer, "cookie"), "must be a cookie name (letters, digits and !#$%&'*+-.^_`|~)");
  if (string_field(value, "header", pointer, out.header) && !out.header.empty() && !is_header_name(out.header))
    error(pointer_append(pointer, "header"), "must be a header name (letters, digits and !#$%&'*+-.^_`|~)");
  const json* sides = array_field(value, "sides", pointer, true);
  if (!sides) return;
  const std::string sides_pointer = pointer_append(pointer, "sides");
  if (sides->size() < 2) {
    error(sides_pointer, "must hold at least two sides");
    return;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < sides->size(); ++i) {
    const std::string at = pointer_append(sides_pointer, i);
    Route& side = out.routes.emplace_back();
    std::string& name = out.side_names.emplace_back();
    uint32_t& weight = out.side_weights.emplace_back(1);
    if (!object((*sides)[i], at, {"name", "weight", "handle"})) continue;
    if (!string_field((*sides)[i], "name", at, name)) {
      if (!field((*sides)[i], "name")) missing(pointer_append(at, "name"), "required", "required");
    } else if (name.empty() || !std::all_of(name.begin(), name.end(), token_char) || name.find_first_of("%,;") != std::string::npos) {
      error(pointer_append(at, "name"), "must be a word of letters, digits and -._ (it is the cookie's value)");
    } else if (std::count(out.side_names.begin(), out.side_names.end() - 1, name) > 0) {
      error(pointer_append(at, "name"), fmt::format("another side is named \"{}\"", printable(name)));
    }
    uint_field((*sides)[i], "weight", at, 0, kMaxSplitTotal, weight);
    total += weight;
    if (const json* handle = array_field((*sides)[i], "handle", at, true))
      handlers(*handle, pointer_append(at, "handle"), side.handle, pools, depth);
  }
  if (total == 0 || total > kMaxSplitTotal)
    error(sides_pointer, fmt::format("the weights must add up to 1..{}", kMaxSplitTotal));
}

void Reader::routes(const json& list, const std::string& pointer, std::vector<Route>& out,
                    std::vector<ProxyConfig>& pools, int depth) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = pointer_append(pointer, i);
    Route& route = out.emplace_back();
    if (!object(list[i], at, {"group", "match", "handle", "terminal"})) continue;
    string_field(list[i], "group", at, route.group);
    bool_field(list[i], "terminal", at, route.terminal);
    if (const json* match = array_field(list[i], "match", at, false)) {
      const std::string match_pointer = pointer_append(at, "match");
      for (size_t m = 0; m < match->size(); ++m)
        matcher_set((*match)[m], pointer_append(match_pointer, m), route.match.emplace_back(), depth);
    }
    if (const json* handle = array_field(list[i], "handle", at, false))
      handlers(*handle, pointer_append(at, "handle"), route.handle, pools, depth);
  }
}

void Reader::matcher_set(const json& value, const std::string& pointer, MatcherSet& out, int depth) {
  if (!value.is_object()) {
    error(pointer, "must be an object of matchers, e.g. {\"path\": [\"/api/*\"]}");
    return;
  }
  for (const auto& item : value.items()) {
    // Not a structured binding: the lambdas below use it (clang 15, the fuzz build, cannot capture one).
    const std::string& key = item.key();
    const json& matcher = item.value();
    const std::string at = pointer_append(pointer, key);
    const auto strings = [&](std::vector<std::string>& target) -> bool {
      if (!matcher.is_array() || matcher.empty() ||
          !std::all_of(matcher.begin(), matcher.end(), [](const json& v) { return v.is_string(); })) {
        error(at, "must be a non-empty array of strings");
        return false;
      }
      for (const json& v : matcher) target.push_back(v.get<std::string>());
      return true;
    };
    if (key == "path") {
      if (!strings(out.paths)) continue;
      for (size_t i = 0; i < out.paths.size(); ++i)
        if (std::string problem = path_problem(out.paths[i]); !problem.empty())
          error(pointer_append(at, i), fmt::format("path pattern \"{}\" {}", printable(out.paths[i]), problem));
    } else if (key == "host") {
      if (!strings(out.hosts)) continue;
      for (size_t i = 0; i < out.hosts.size(); ++i) {
        if (auto host = site_host(out.hosts[i])) out.hosts[i] = *host;
        else error(pointer_append(at, i), fmt::format("\"{}\" is not a host name", printable(out.hosts[i])));
      }
    } else if (key == "method") {
      if (!strings(out.methods)) continue;
      for (size_t i = 0; i < out.methods.size(); ++i) {
        std::string& method = out.methods[i];
        if (method.empty() || !std::all_of(method.begin(), method.end(), token_char))
          error(pointer_append(at, i), fmt::format("\"{}\" is not a method", printable(method)));
        std::transform(method.begin(), method.end(), method.begin(), [](char c) { return char(std::toupper(c)); });
      }
    } else if (key == "header" || key == "query" || key == "cookie") {
      named_values(matcher, at, key, key == "header" ? out.headers : key == "query" ? out.query : out.cookies);
    } else if (key == "remote_ip") {
      if (!object(matcher, at, {"ranges", "forwarded"})) continue;
      if (const json* forwarded = field(matcher, "forwarded"); forwarded && *forwarded != json(false))
        error(pointer_append(at, "forwarded"), "is not supported: heft matches the connection's address");
      const json* ranges = array_field(matcher, "ranges", at, true);
      if (!ranges) continue;
      const std::string ranges_pointer = pointer_append(at, "ranges");
      if (ranges->empty()) error(ranges_pointer, "must hold at least one range");
      for (size_t i = 0; i < ranges->size(); ++i) {
        const json& range = (*ranges)[i];
        if (!range.is_string() || !parse_ip_range(range.get<std::string>()))
          error(pointer_append(ranges_pointer, i), "must be an IP address or a CIDR range, e.g. \"10.0.0.0/8\"");
        else
          out.remote_ranges.push_back(range.get<std::string>());
      }
    } else if (key == "not") {
      if (depth >= kMaxDepth) {
        error(at, fmt::format("matchers nested deeper than {}", kMaxDepth));
        continue;
      }
      // Caddy writes one set as an object or several as an array.
      if (matcher.is_object()) {
        matcher_set(matcher, at, out.nots.emplace_back(), depth + 1);
      } else if (matcher.is_array() && !matcher.empty()) {
        for (size_t i = 0; i < matcher.size(); ++i)
          matcher_set(matcher[i], pointer_append(at, i), out.nots.emplace_back(), depth + 1);
      } else {
        error(at, "must be a matcher set or a non-empty array of them");
      }
    } else if (std::find(std::begin(kCaddyMatchers), std::end(kCaddyMatchers), key) != std::end(kCaddyMatchers)) {
      error(at, fmt::format("Caddy's \"{}\" matcher is not supported by heft (it has path, host, method, header, "
                            "query, cookie, remote_ip and not)",
                            key));
    } else {
      const std::string closest = closest_match(key, kMatchers);
      error(at, closest.empty() ? fmt::format("unknown matcher \"{}\"", printable(key))
                                : fmt::format("unknown matcher \"{}\" (did you mean \"{}\"?)", printable(key), closest));
    }
  }
}

// {"NAME": ["value", ...], ...}: a header's, query's or cookie's values
// (`null` or an empty list: present with any value).
void Reader::named_values(const json& value, const std::string& pointer, std::string_view what, NamedValues& out) {
  if (!value.is_object() || value.empty()) {
    error(pointer, fmt::format("must be an object of {} names to arrays of values", what));
    return;
  }
  for (const auto& [name, values] : value.items()) {
    const std::string at = pointer_append(pointer, name);
    if (what != "query" && !is_header_name(name)) {
      error(at, fmt::format("invalid {} name \"{}\" (use letters, digits and {})", what, printable(name),
                            kHeaderNameCharacters));
      continue;
    }
    auto& entry = out.emplace_back(name, std::vector<std::string>{});
    if (values.is_null()) continue;
    if (!values.is_array() || !std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); })) {
      error(at, "must be an array of strings");
      continue;
    }
    for (const json& v : values) entry.second.push_back(v.get<std::string>());
  }
}

void Reader::static_response(const json& value, const std::string& pointer, RouteHandler& out) {
  if (!object(value, pointer, {"handler", "status_code", "body", "headers", "close"})) return;
  if (const json* status = field(value, "status_code")) {
    // Caddy takes the status as a number or as its text ("301").
    const std::string at = pointer_append(pointer, "status_code");
    std::optional<uint64_t> code;
    if (status->is_number_integer() && status->get<int64_t>() >= 0) code = status->get<uint64_t>();
    else if (status->is_string()) code = parse_uint(status->get<std::string>(), 999);
    if (!code || *code < 200 || *code > 599)
      error(at, "must be a status 200..599", fmt::format("invalid status \"{}\" (200..599)", token_of(at, *status)));
    else
      out.status = unsigned(*code);
  }
  if (string_field(value, "body", pointer, out.body)) placeholders(pointer_append(pointer, "body"), out.body);
  bool_field(value, "close", pointer, out.close);
  const std::string headers_pointer = pointer_append(pointer, "headers");
  const json* headers = field(value, "headers");
  if (!headers) return;
  if (!headers->is_object()) {
    error(headers_pointer, "must be an object of field names to arrays of values");
    return;
  }
  for (const auto& [name, values] : headers->items()) {
    const std::string at = pointer_append(headers_pointer, name);
    if (!is_header_name(name)) {
      error(at, fmt::format("invalid header name \"{}\" (use letters, digits and {})", printable(name),
                            kHeaderNameCharacters));
      continue;
    }
    if (std::string problem = header_op_problem(name, HeaderOp::set, false); !problem.empty()) {
      error(at, problem);
      continue;
    }
    if (!values.is_array() || !std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); })) {
      error(at, "must be an array of strings");
      continue;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string text = values[i].get<std::string>();
      if (header_value(pointer_append(at, i), name, text, true)) out.fields.emplace_back(name, text);
    }
  }
}

void Reader::rewrite(const json& value, const std::string& pointer, RouteHandler& out) {
  if (!object(value, pointer, {"handler", "strip_path_prefix", "uri"})) return;
  if (string_field(value, "strip_path_prefix", pointer, out.strip_path_prefix)) {
    const std::string at = pointer_append(pointer, "strip_path_prefix");
    if (!out.strip_path_prefix.starts_with('/') || out.strip_path_prefix.find_first_of("*?%{ ") != std::string::npos)
      error(at, "must be a path starting with '/', without wildcards, escapes or placeholders",
            fmt::format("invalid path prefix \"{}\"", printable(token_of(at, out.strip_path_prefix))));
  }
  if (string_field(value, "uri", pointer, out.uri)) {
    const std::string at = pointer_append(pointer, "uri");
    if (!out.uri.starts_with('/') && !out.uri.starts_with('{'))
      error(at, "must start with '/' (or a placeholder)");
    else if (!is_request_target_text(out.uri))
      error(at, "may hold no space, control character or non-ASCII byte (percent-encode them)");
    else
      placeholders(at, out.uri);
  }
}

void Reader::header_map(const json& value, const std::string& pointer, bool request, std::vector<HeaderOp>& out) {
  if (!object(value, pointer, {"add", "set", "delete", "deferred"})) return;
  if (const json* deferred = field(value, "deferred"); deferred && !deferred->is_boolean())
    error(pointer_append(pointer, "deferred"), "must be true or false");
  // Caddy applies add, then set, then delete.
  for (const auto& [key, op] : {std::pair{"add", HeaderOp::add}, std::pair{"set", HeaderOp::set}}) {
    const json* map = field(value, key);
    if (!map) continue;
    const std::string map_pointer = pointer_append(pointer, key);
    if (!map->is_object()) {
      error(map_pointer, "must be an object of field names to arrays of values");
      continue;
    }
    for (const auto& [name, values] : map->items()) {
      const std::string at = pointer_append(map_pointer, name);
      if (!header_name(at, name, op, request)) continue;
      if (!values.is_array() || values.empty() ||
          !std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_string(); })) {
        error(at, "must be a non-empty array of strings");
        continue;
      }
      for (size_t i = 0; i < values.size(); ++i) {
        const std::string text = values[i].get<std::string>();
        const std::string value_at = pointer_append(at, i);
        if (!header_value(value_at, name, text, request)) continue;
        // Several values of a set: the first sets, the others add.
        out.push_back({i == 0 ? op : HeaderOp::add, name, text});
      }
    }
  }
  if (const json* names = array_field(value, "delete", pointer, false)) {
    for (size_t i = 0; i < names->size(); ++i) {
      const std::string at = pointer_append(pointer_append(pointer, "delete"), i);
      if (!(*names)[i].is_string()) {
        error(at, "must be a string");
        continue;
      }
      const std::string name = (*names)[i].get<std::string>();
      if (header_name(at, name, HeaderOp::remove, request)) out.push_back({HeaderOp::remove, name, ""});
    }
  }
}

}  // namespace heft::config::reading
