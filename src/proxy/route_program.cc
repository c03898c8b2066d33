// A site's routes at request time (see route_program.h).
#include "proxy/route_program.h"

#include <algorithm>
#include <atomic>
#include <map>

#include "proxy/header_rules.h"

namespace heft::proxy {
namespace {

inline char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A `*` glob, as Caddy's path and header matchers classify them: a lone
// star, a prefix ("/api/*"), a suffix ("*.php"), a substring ("*x*"),
// exact text, or a glob with stars elsewhere.
struct Pattern {
  enum Kind { any, exact, prefix, suffix, contains, glob };
  Kind kind = exact;
  std::string text;  // without the classifying stars (glob: whole)

  explicit Pattern(std::string pattern) {
    const auto stars = std::count(pattern.begin(), pattern.end(), '*');
    if (pattern == "*") {
      kind = any;
    } else if (stars == 0) {
      kind = exact;
      text = std::move(pattern);
    } else if (stars == 1 && pattern.back() == '*') {
      kind = prefix;
      text = pattern.substr(0, pattern.size() - 1);
    } else if (stars == 1 && pattern.front() == '*') {
      kind = suffix;
      text = pattern.substr(1);
    } else if (stars == 2 && pattern.front() == '*' && pattern.back() == '*') {
      kind = contains;
      text = pattern.substr(1, pattern.size() - 2);
    } else {
      kind = glob;
      text = std::move(pattern);
    }
  }

  bool matches(std::string_view s) const {
    switch (kind) {
      case any: return true;
      case exact: return s == text;
      case prefix: return s.starts_with(text);
      case suffix: return s.ends_with(text);
      case contains: return s.find(text) != std::string_view::npos;
      case glob: return glob_match(text, s);
    }
    return false;
  }

  // `*` matches any run (including '/', as Caddy's path.Match does not
  // within a segment: heft's patterns are simpler and say so in docs).
  static bool glob_match(std::string_view p, std::string_view s) {
    std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
    while (si < s.size()) {
      if (pi < p.size() && p[pi] != '*' && p[pi] == s[si]) {
        ++pi, ++si;
      } else if (pi < p.size() && p[pi] == '*') {
        star = pi++;
        mark = si;
      } else if (star != std::string_view::npos) {
        pi = star + 1;
        si = ++mark;
      } else {
        return false;
      }
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
  }
};

struct NamedMatch {
  std::string name;
  std::vector<Pattern> values;  // none: present with any value
  bool matches(std::string_view value) const {
    return values.empty() || std::any_of(values.begin(), values.end(), [&](const Pattern& p) { return p.matches(value); });
  }
};

std::vector<NamedMatch> compile_named(const config::NamedValues& values) {
  std::vector<NamedMatch> out;
  for (const auto& [name, list] : values) {
    NamedMatch& m = out.emplace_back();
    m.name = name;
    for (const std::string& v : list) m.values.emplace_back(v);
  }
  return out;
}

// `encoded` (a query's key or value: '+' and %XX) equals `plain`.
bool query_equals(std::string_view encoded, std::string_view plain) {
  std::size_t j = 0;
  for (std::size_t i = 0; i < encoded.size(); ++i, ++j) {
    char c = encoded[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%' && i + 2 < encoded.size() + 0 && hex_value(encoded[i + 1]) >= 0 && hex_value(encoded[i + 2]) >= 0) {
      c = static_cast<char>(hex_value(encoded[i + 1]) * 16 + hex_value(encoded[i + 2]));
      i += 2;
    }
    if (j >= plain.size() || plain[j] != c) return false;
  }
  return j == plain.size();
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }
std::string_view query_of(std::string_view target) {
  const std::size_t q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}

std::string_view host_without_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const std::size_t close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(1, close - 1);
  }
  const std::size_t colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}

// The value of cookie `name` in the request's Cookie fields; found = false when none.
std::string_view cookie_in(const RequestHead& head, std::string_view name, bool& found) {
  found = false;
  for (auto [at, end] = head.equal_range(http::field::cookie); at != end; ++at) {
    std::string_view cookies = at->value();
    while (!cookies.empty()) {
      const std::size_t semi = cookies.find(';');
      std::string_view pair = cookies.substr(0, semi);
      while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
      const std::size_t eq = pair.find('=');
      if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
        found = true;
        return pair.substr(eq + 1);
      }
      if (semi == std::string_view::npos) break;
      cookies.remove_prefix(semi + 1);
    }
  }
  return {};
}

// Host `host` (no port, no trailing dot) matches `pattern` ("*" one label), ignoring case.
bool host_matches(std::string_view pattern, std::string_view host) {
  while (true) {
    const std::size_t pd = pattern.find('.'), hd = host.find('.');
    const std::string_view pl = pattern.substr(0, pd), hl = host.substr(0, hd);
    if (pl == "*") {
      if (hl.empty()) return false;
    } else if (!iequals(pl, hl)) {
      return false;
    }
    if (pd == std::string_view::npos || hd == std::string_view::npos) return pd == hd;
    pattern.remove_prefix(pd + 1);
    host.remove_prefix(hd + 1);
  }
}

// The path as Caddy's path matcher compares it: percent-decoded,
// lower-cased, trailing dots and spaces trimmed, doubled slashes merged and
// dot segments resolved (a trailing slash kept).
void clean_path(std::string_view raw, std::string& out) {
  out.clear();
  // A leading slash, so that each segment written below has one read
  // before it ("*" of OPTIONS * becomes "/*").
  if (raw.empty() || raw.front() != '/') out.push_back('/');
  for (std::size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '%' && i + 2 < raw.size() + 0 && hex_value(raw[i + 1]) >= 0 && hex_value(raw[i + 2]) >= 0) {
      c = static_cast<char>(hex_value(raw[i + 1]) * 16 + hex_value(raw[i + 2]));
      i += 2;
    }
    out.push_back(lower(c));
  }
  while (!out.empty() && (out.back() == '.' || out.back() == ' ')) out.pop_back();
  const bool trailing_slash = !out.empty() && out.back() == '/';
  // Segment by segment, in place: the written part never outruns the read part.
  std::size_t w = 0;
  std::size_t r = 0;
  while (r < out.size()) {
    if (out[r] == '/') {
      ++r;
      continue;
    }
    const std::size_t end = std::min(out.find('/', r), out.size());
    const std::size_t length = end - r;
    if (length == 1 && out[r] == '.') {
      // "." is nothing
    } else if (length == 2 && out[r] == '.' && out[r + 1] == '.') {
      while (w > 0 && out[w - 1] != '/') --w;  // back over the last segment
      if (w > 0) --w;                          // and its slash
    } else {
      out[w++] = '/';
      for (std::size_t k = r; k < end; ++k) out[w++] = out[k];
    }
    r = end;
  }
  out.resize(w);
  if (out.empty()) out.push_back('/');
  else if (trailing_slash) out.push_back('/');
}

std::string_view current_target(const RouteRequest& request, const RouteState& state) {
  return state.rewritten ? std::string_view(state.target) : request.target;
}

const std::string& cleaned(const RouteRequest& request, RouteState& state) {
  if (!state.clean_ready) {
    clean_path(path_of(current_target(request, state)), state.clean_path);
    state.clean_ready = true;
  }
  return state.clean_path;
}

}  // namespace

bool has_field_line(std::string_view lines, std::string_view name) {
  while (!lines.empty()) {
    const std::size_t colon = lines.find(':');
    if (colon != std::string_view::npos && iequals(lines.substr(0, colon), name)) return true;
    const std::size_t end = lines.find("\r\n");
    if (end == std::string_view::npos) break;
    lines.remove_prefix(end + 2);
  }
  return false;
}

// ---- templates ------------------------------------------------------------------

Template::Template(std::string_view text) {
  for (config::TextPiece& piece : config::split_placeholders(text, nullptr)) {
    Piece& p = pieces_.emplace_back();
    if (piece.placeholder) {
      p.literal = false;
      p.kind = piece.placeholder->kind;
      p.text = std::move(piece.placeholder->name);
    } else {
      p.text = std::move(piece.literal);
    }
  }
}

void Template::append_to(std::string& out, const RouteRequest& request) const {
  using K = config::Placeholder;
  for (const Piece& p : pieces_) {
    if (p.literal) {
      out.append(p.text);
      continue;
    }
    switch (p.kind) {
      case K::remote_host: out.append(request.client_ip); break;
      case K::host: out.append(host_without_port(request.host)); break;
      case K::hostport: out.append(request.host); break;
      case K::uri: out.append(request.target); break;
      case K::path: out.append(path_of(request.target)); break;
      case K::query: out.append(query_of(request.target)); break;
      case K::method: out.append(request.method); break;
      case K::scheme: out.append("http"); break;
      case K::header: {
        bool first = true;
        for (auto [at, end] = request.head->equal_range(p.text); at != end; ++at) {
          if (!std::exchange(first, false)) out.append(", ");
          out.append(at->value());
        }
        break;
      }
      case K::cookie: {
        bool found = false;
        out.append(cookie_in(*request.head, p.text, found));
        break;
      }
    }
  }
}

CompiledOps compile_ops(const std::vector<config::HeaderOp>& ops) {
  CompiledOps out;
  for (const config::HeaderOp& op : ops) out.push_back({op.op, op.name, Template(op.value)});
  return out;
}

bool RouteState::overrides(std::string_view name) const {
  for (const CompiledOps* list : request_ops)
    for (const CompiledOp& op : *list)
      if (op.op != config::HeaderOp::add && iequals(op.name, name)) return true;
  return false;
}

void RouteState::append_request_fields(HeadBuilder& out, const RouteRequest& request) {
  for (std::size_t l = 0; l < request_ops.size(); ++l) {
    for (std::size_t k = 0; k < request_ops[l]->size(); ++k) {
      const CompiledOp& op = (*request_ops[l])[k];
      if (op.op == config::HeaderOp::remove) continue;
      bool undone = false;
      for (std::size_t ll = l; ll < request_ops.size() && !undone; ++ll)
        for (std::size_t kk = ll == l ? k + 1 : 0; kk < request_ops[ll]->size() && !undone; ++kk) {
          const CompiledOp& later = (*request_ops[ll])[kk];
          undone = later.op != config::HeaderOp::add && iequals(later.name, op.name);
        }
      if (undone) continue;
      scratch.clear();
      op.value.append_to(scratch, request);
      out.field(op.name, scratch);
    }
  }
}

// ---- the compiled routes ----------------------------------------------------------

struct CompiledSet {
  std::vector<Pattern> paths;
  std::vector<std::string> hosts;
  std::vector<std::string> methods;
  std::vector<NamedMatch> headers, query, cookies;
  std::vector<config::IpRange> ranges;
  std::vector<CompiledSet> nots;

  explicit CompiledSet(const config::MatcherSet& set) {
    for (const std::string& path : set.paths) {
      std::string folded = path;
      for (char& c : folded) c = lower(c);
      paths.emplace_back(std::move(folded));
    }
    hosts = set.hosts;
    methods = set.methods;
    headers = compile_named(set.headers);
    query = compile_named(set.query);
    cookies = compile_named(set.cookies);
    for (const std::string& range : set.remote_ranges)
      if (auto parsed = config::parse_ip_range(range)) ranges.push_back(*parsed);
    for (const config::MatcherSet& n : set.nots) nots.emplace_back(n);
  }

  bool matches(const RouteRequest& request, RouteState& state) const {
    if (!methods.empty() &&
        std::none_of(methods.begin(), methods.end(), [&](const std::string& m) { return m == request.method; }))
      return false;
    if (!hosts.empty()) {
      std::string_view host = host_without_port(request.host);
      if (!host.empty() && host.back() == '.') host.remove_suffix(1);
      if (std::none_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return host_matches(h, host); }))
        return false;
    }
    if (!paths.empty()) {
      const std::string_view path = cleaned(request, state);
      if (std::none_of(paths.begin(), paths.end(), [&](const Pattern& p) { return p.matches(path); })) return false;
    }
    for (const NamedMatch& h : headers) {
      bool any = false;
      for (auto [at, end] = request.head->equal_range(h.name); at != end && !any; ++at) any = h.matches(at->value());
      if (!any) return false;
    }
    for (const NamedMatch& c : cookies) {
      bool found = false;
      const std::string_view value = cookie_in(*request.head, c.name, found);
      if (!found || !c.matches(value)) return false;
    }
    if (!query.empty()) {
      const std::string_view all = query_of(request.target);
      for (const NamedMatch& q : query) {
        bool any = false;
        for (std::string_view rest = all; !rest.empty() && !any;) {
          const std::size_t amp = rest.find('&');
          const std::string_view pair = rest.substr(0, amp);
          rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
          const std::size_t eq = pair.find('=');
          if (!query_equals(pair.substr(0, eq), q.name)) continue;
          const std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
          any = q.values.empty() || std::any_of(q.values.begin(), q.values.end(), [&](const Pattern& p) {
                  return p.kind == Pattern::any || (p.kind == Pattern::exact && query_equals(value, p.text));
                });
        }
        if (!any) return false;
      }
    }
    if (!ranges.empty() && std::none_of(ranges.begin(), ranges.end(), [&](const config::IpRange& r) {
          return config::in_range(r, request.client_ip);
        }))
      return false;
    for (const CompiledSet& n : nots)
      if (n.matches(request, state)) return false;
    return true;
  }
};

struct CompiledRoute {
  int group = -1;  // index among its list's groups
  std::vector<CompiledSet> match;
  std::vector<CompiledHandler> handle;
  bool terminal = false;
};

struct CompiledHandler {
  config::RouteHandler::Kind kind = config::RouteHandler::subroute;
  std::vector<CompiledRoute> routes;
  // A subroute of many routes whose path matchers fix the path's first
  // segment ("/api/*", "/p42/x"): for each such segment, the routes that may
  // match a path in it (its own and those no segment fixes), in order;
  // `unfixed` alone for any other segment. So a request compares the routes
  // of its segment, not all of them (nginx finds a location in a tree for
  // the same reason). Off (`indexed` false) for short lists and lists whose
  // routes may rewrite the path, which a later route would then see.
  bool indexed = false;
  // Sorted by segment, searched by halves: one contiguous array (a hash
  // table's nodes cost a cache miss each at 10,000 routes).
  std::vector<std::pair<std::string, std::vector<uint32_t>>> by_segment;
  const std::vector<uint32_t>& candidates(std::string_view segment) const {
    const auto at = std::lower_bound(by_segment.begin(), by_segment.end(), segment,
                                     [](const auto& entry, std::string_view s) { return entry.first < s; });
    return at != by_segment.end() && at->first == segment ? at->second : unfixed;
  }
  std::vector<uint32_t> unfixed;
  std::size_t pool = 0;
  unsigned status = 200;
  Template body;
  std::vector<std::pair<std::string, Template>> fields;
  bool close = false;
  std::string strip_prefix;
  bool has_uri = false;
  Template uri;
  CompiledOps request_ops;
  std::vector<config::HeaderOp> response_ops;
  // split: side names, the smooth weighted round robin order of the sides
  // over one round of the weights (nginx's, so any run of new clients is
  // split as exactly as whole clients allow), the next place in it (shared by
  // the workers), and each side's Set-Cookie.
  std::vector<std::string> side_names;
  std::vector<uint16_t> sequence;
  std::unique_ptr<std::atomic<uint64_t>> next;
  std::vector<std::vector<config::HeaderOp>> set_cookie;
  std::string cookie, header;

  std::size_t side_named(std::string_view name) const {
    for (std::size_t i = 0; i < side_names.size(); ++i)
      if (side_names[i] == name) return i;
    return side_names.size();
  }
};

// At most this many groups in one list of routes (the validator says so).
constexpr std::size_t kMaxGroups = 256;

namespace {

std::vector<CompiledHandler> compile_handlers(const std::vector<config::RouteHandler>& list);

// Lists shorter than this are run route by route.
constexpr std::size_t kIndexFrom = 8;

bool may_rewrite(const std::vector<config::RouteHandler>& list) {
  for (const config::RouteHandler& h : list) {
    if (h.kind == config::RouteHandler::rewrite) return true;
    for (const config::Route& r : h.routes)
      if (may_rewrite(r.handle)) return true;
  }
  return false;
}

// The first segments a route's path matchers fix ("p42" for "/p42/*" or
// "/p42"), or false when some request outside them could match.
bool fixed_segments(const CompiledRoute& route, std::vector<std::string>& out) {
  if (route.match.empty()) return false;
  for (const CompiledSet& set : route.match) {
    if (set.paths.empty()) return false;
    for (const Pattern& p : set.paths) {
      if ((p.kind != Pattern::exact && p.kind != Pattern::prefix) || !p.text.starts_with('/')) return false;
      const std::size_t slash = p.text.find('/', 1);
      if (p.kind == Pattern::prefix && slash == std::string::npos) return false;
      out.push_back(p.text.substr(1, slash == std::string::npos ? std::string::npos : slash - 1));
    }
  }
  return true;
}

void index_routes(const std::vector<config::Route>& written, CompiledHandler& c) {
  if (c.routes.size() < kIndexFrom) return;
  for (const config::Route& r : written)
    if (may_rewrite(r.handle)) return;
  std::vector<std::vector<std::string>> segments(c.routes.size());
  std::vector<bool> fixed(c.routes.size());
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    fixed[i] = fixed_segments(c.routes[i], segments[i]);
    if (!fixed[i]) c.unfixed.push_back(static_cast<uint32_t>(i));
  }
  std::vector<std::string> all;
  for (std::size_t i = 0; i < c.routes.size(); ++i)
    if (fixed[i]) all.insert(all.end(), segments[i].begin(), segments[i].end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (std::string& segment : all) c.by_segment.emplace_back(std::move(segment), std::vector<uint32_t>{});
  // Each segment's list: its routes and the unfixed ones, in written order.
  std::size_t entries = 0;
  for (auto& [segment, list] : c.by_segment) {
    for (std::size_t i = 0; i < c.routes.size(); ++i)
      if (!fixed[i] || std::find(segments[i].begin(), segments[i].end(), segment) != segments[i].end())
        list.push_back(static_cast<uint32_t>(i));
    entries += list.size();
  }
  c.indexed = entries <= (std::size_t{1} << 20);  // else the table costs more than it saves
  if (!c.indexed) c.by_segment.clear();
}

void compile_split(const config::RouteHandler& h, CompiledHandler& c) {
  c.side_names = h.side_names;
  c.cookie = h.cookie;
  c.header = h.header;
  c.next = std::make_unique<std::atomic<uint64_t>>(0);
  // Smooth weighted round robin over one round (the validator bounds the total).
  std::vector<int64_t> current(h.side_weights.size(), 0);
  int64_t total = 0;
  for (uint32_t w : h.side_weights) total += w;
  for (int64_t step = 0; step < total; ++step) {
    std::size_t best = 0;
    for (std::size_t i = 0; i < current.size(); ++i) {
      current[i] += h.side_weights[i];
      if (current[i] > current[best]) best = i;
    }
    current[best] -= total;
    c.sequence.push_back(static_cast<uint16_t>(best));
  }
  for (const std::string& name : h.side_names)
    c.set_cookie.push_back({{config::HeaderOp::add, "Set-Cookie", h.cookie + "=" + name + "; Path=/; HttpOnly"}});
}

std::vector<CompiledRoute> compile_routes(const std::vector<config::Route>& routes) {
  std::vector<CompiledRoute> out;
  std::map<std::string, int> groups;
  for (const config::Route& route : routes) {
    CompiledRoute& r = out.emplace_back();
    if (!route.group.empty()) {
      const auto [it, added] = groups.emplace(route.group, static_cast<int>(groups.size()));
      r.group = it->second < static_cast<int>(kMaxGroups) ? it->second : -1;
    }
    for (const config::MatcherSet& set : route.match) r.match.emplace_back(set);
    r.handle = compile_handlers(route.handle);
    r.terminal = route.terminal;
  }
  return out;
}

std::vector<CompiledHandler> compile_handlers(const std::vector<config::RouteHandler>& list) {
  std::vector<CompiledHandler> out;
  for (const config::RouteHandler& h : list) {
    CompiledHandler& c = out.emplace_back();
    c.kind = h.kind;
    c.routes = compile_routes(h.routes);
    c.pool = h.pool;
    c.status = h.status;
    c.body = Template(h.body);
    for (const auto& [name, value] : h.fields) c.fields.emplace_back(name, Template(value));
    c.close = h.close;
    c.strip_prefix = h.strip_path_prefix;
    c.has_uri = !h.uri.empty();
    c.uri = Template(h.uri);
    c.request_ops = compile_ops(h.request_ops);
    c.response_ops = h.response_ops;
    if (h.kind == config::RouteHandler::split) compile_split(h, c);
    if (h.kind == config::RouteHandler::subroute) index_routes(h.routes, c);
  }
  return out;
}

bool run_handlers(const std::vector<CompiledHandler>& list, const RouteRequest& request, RouteState& state,
                  RouteResult& result);

// One route of a list: skipped (false, `ended` false), run, or the list's end.
bool run_route(const CompiledRoute& route, std::bitset<kMaxGroups>& done, const RouteRequest& request,
               RouteState& state, RouteResult& result, bool& ended) {
  if (route.group >= 0 && done.test(static_cast<std::size_t>(route.group))) return false;
  if (!route.match.empty() &&
      std::none_of(route.match.begin(), route.match.end(),
                   [&](const CompiledSet& set) { return set.matches(request, state); }))
    return false;
  if (route.group >= 0) done.set(static_cast<std::size_t>(route.group));
  if (run_handlers(route.handle, request, state, result)) return ended = true;
  ended = route.terminal;
  return false;
}

// A subroute's routes; true once a handler answered.
bool run_routes(const CompiledHandler& list, const RouteRequest& request, RouteState& state, RouteResult& result) {
  std::bitset<kMaxGroups> done;
  bool ended = false;
  if (list.indexed) {
    const std::string_view path = cleaned(request, state);
    const std::size_t slash = path.find('/', 1);
    for (uint32_t i : list.candidates(path.substr(1, slash == std::string_view::npos ? path.npos : slash - 1))) {
      const bool answered = run_route(list.routes[i], done, request, state, result, ended);
      if (answered || ended) return answered;
    }
    return false;
  }
  for (const CompiledRoute& route : list.routes) {
    const bool answered = run_route(route, done, request, state, result, ended);
    if (answered || ended) return answered;
  }
  return false;
}

void strip_prefix(std::string_view prefix, const RouteRequest& request, RouteState& state) {
  const std::string_view current = state.rewritten ? std::string_view(state.target) : request.target;
  const std::string_view path = path_of(current);
  if (path.size() < prefix.size() || !iequals(path.substr(0, prefix.size()), prefix)) return;
  const std::string_view rest = current.substr(prefix.size());
  state.scratch.clear();
  if (rest.empty() || rest.front() != '/') state.scratch.push_back('/');
  state.scratch.append(rest);
  state.target.swap(state.scratch);
  state.rewritten = true;
  state.clean_ready = false;
}

void rewrite_uri(const Template& uri, const RouteRequest& request, RouteState& state) {
  state.scratch.clear();
  uri.append_to(state.scratch, request);
  // Only the parts given change: a URI without a query keeps the request's.
  if (state.scratch.find('?') == std::string::npos) {
    const std::string_view query = query_of(state.rewritten ? std::string_view(state.target) : request.target);
    if (!query.empty()) state.scratch.append("?").append(query);
  }
  state.target.swap(state.scratch);
  state.rewritten = true;
  state.clean_ready = false;
}

bool run_handlers(const std::vector<CompiledHandler>& list, const RouteRequest& request, RouteState& state,
                  RouteResult& result) {
  for (const CompiledHandler& h : list) {
    switch (h.kind) {
      case config::RouteHandler::subroute:
        if (run_routes(h, request, state, result)) return true;
        break;
      case config::RouteHandler::reverse_proxy:
        result = {RouteResult::proxy, h.pool, nullptr};
        return true;
      case config::RouteHandler::static_response:
        result = {RouteResult::respond, 0, &h};
        return true;
      case config::RouteHandler::rewrite:
        if (!h.strip_prefix.empty()) strip_prefix(h.strip_prefix, request, state);
        if (h.has_uri) rewrite_uri(h.uri, request, state);
        break;
      case config::RouteHandler::headers:
        if (!h.request_ops.empty()) state.request_ops.push_back(&h.request_ops);
        if (!h.response_ops.empty()) state.response_ops.push_back(&h.response_ops);
        break;
      case config::RouteHandler::split: {
        // A side forced by the header, else the one the client's cookie
        // names, else the next in the weighted order (and the cookie set).
        std::size_t side = h.side_names.size();
        if (!h.header.empty()) {
          const auto forced = request.head->find(h.header);
          if (forced != request.head->end()) side = h.side_named(forced->value());
        }
        if (side == h.side_names.size()) {
          bool found = false;
          const std::string_view kept = cookie_in(*request.head, h.cookie, found);
          if (found) side = h.side_named(kept);
        }
        if (side == h.side_names.size()) {
          side = h.sequence[h.next->fetch_add(1, std::memory_order_relaxed) % h.sequence.size()];
          state.response_ops.push_back(&h.set_cookie[side]);
        }
        if (run_handlers(h.routes[side].handle, request, state, result)) return true;
        break;
      }
    }
  }
  return false;
}

}  // namespace

RouteProgram::RouteProgram(const std::vector<config::RouteHandler>& handle)
    : handlers_(std::make_unique<std::vector<CompiledHandler>>(compile_handlers(handle))) {}

RouteProgram::~RouteProgram() = default;

RouteResult RouteProgram::run(const RouteRequest& request, RouteState& state) const {
  RouteResult result;
  run_handlers(*handlers_, request, state, result);
  return result;
}

unsigned RouteProgram::respond(const CompiledHandler& answer, const RouteRequest& request, std::string& fields,
                               std::string& body, bool& close) {
  fields.clear();
  body.clear();
  for (const auto& [name, value] : answer.fields) {
    fields.append(name).append(": ");
    value.append_to(fields, request);
    fields.append("\r\n");
  }
  answer.body.append_to(body, request);
  close = answer.close;
  return answer.status;
}

}  // namespace heft::proxy
