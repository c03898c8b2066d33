// The one validator, continued: a route's reverse_proxy handler (its
// upstreams, load balancing, health checks, header edits and adaptive
// weights). See json_reader.h.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "config/heftfile.h"
#include "config/json_reader.h"
#include "config/values.h"

namespace heft::config::reading {

namespace {

std::string invalid_header_name(std::string_view name) {
  return fmt::format("invalid header name \"{}\" (use letters, digits and {})", printable(name), kHeaderNameCharacters);
}

// "200" or "2xx" (a status or a class), or empty: any 2xx.
bool is_expected_status(std::string_view s) {
  if (s.empty()) return true;
  if (s.size() != 3 || s[0] < '1' || s[0] > '5') return false;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return (digit(s[1]) && digit(s[2])) || (s[1] == 'x' && s[2] == 'x');
}

// " (did you mean \"X\"?)" when a known word is close to `word`, else "".
std::string suggestion(std::string_view word, std::span<const std::string_view> known) {
  const std::string closest = closest_match(word, known);
  return closest.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", closest);
}

constexpr std::string_view kHashKeys[] = {"client_ip", "uri", "header", "cookie"};

}  // namespace

void Reader::protocols(const json& value, const std::string& pointer, Protocols& out) {
  static constexpr std::string_view kProtocols[] = {"h1", "h2", "h2c"};
  if (!value.is_array() || value.empty()) {
    error(pointer, "must be a list of protocols, e.g. [\"h1\", \"h2c\"]",
          "needs at least one protocol, e.g. \"protocols h1 h2c\"");
    return;
  }
  Protocols read{false, false, false};
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = pointer_append(pointer, i);
    const std::string name = value[i].is_string() ? value[i].get<std::string>() : std::string();
    if (name == "h1") read.h1 = true;
    else if (name == "h2") read.h2 = true;
    else if (name == "h2c") read.h2c = true;
    else if (name == "h3") error(at, "h3 (HTTP/3 over QUIC) is not supported: use h1, h2 or h2c");
    else if (!value[i].is_string()) error(at, "must be a protocol name: h1, h2 or h2c");
    else error(at, fmt::format("unknown protocol \"{}\"{} (use h1, h2 or h2c)", printable(name), suggestion(name, kProtocols)));
  }
  out = read;
}

void Reader::reverse_proxy(const json& value, const std::string& pointer, ProxyConfig& pool) {
  if (!object(value, pointer,
              {"handler", "upstreams", "load_balancing", "health_checks", "transport", "headers", "slow_start",
               "adaptive", "ignore_client_abort"}))
    return;
  if (value.value("handler", json()) != json("reverse_proxy"))
    error(pointer_append(pointer, "handler"), "must be \"reverse_proxy\"");
  // First: health_checks.passive holds the defaults of upstreams that set no max_fails / fail_timeout.
  if (const json* health = field(value, "health_checks")) health_checks(*health, pointer_append(pointer, "health_checks"), pool);
  if (const json* upstreams = array_field(value, "upstreams", pointer, true)) {
    const std::string list_pointer = pointer_append(pointer, "upstreams");
    if (upstreams->empty())
      missing(list_pointer, "must hold at least one upstream", "reverse_proxy has no upstreams (add addresses or \"to\" lines)");
    std::map<std::string, std::string> dials;  // lower-cased dial -> its upstream's pointer
    for (size_t i = 0; i < upstreams->size(); ++i) {
      const std::string upstream_pointer = pointer_append(list_pointer, i);
      UpstreamConfig upstream;
      upstream.max_fails = pool.max_fails;
      upstream.fail_timeout = pool.fail_timeout;
      if (!this->upstream((*upstreams)[i], upstream_pointer, upstream)) continue;
      const std::string dial_pointer = pointer_append(upstream_pointer, "dial");
      auto [it, inserted] = dials.emplace(lowercase(upstream.name), dial_pointer);  // host names ignore case
      if (!inserted) {
        error(dial_pointer, fmt::format("duplicate backend \"{}\" (also at {})", upstream.name, it->second),
              fmt::format("duplicate backend \"{}\" in this pool (first at {})", upstream.name, where(it->second)));
        continue;
      }
      pool.upstreams.push_back(std::move(upstream));
    }
  }
  if (const json* lb = field(value, "load_balancing")) load_balancing(*lb, pointer_append(pointer, "load_balancing"), pool);
  const std::string transport_pointer = pointer_append(pointer, "transport");
  if (const json* transport = field(value, "transport");
      transport && object(*transport, transport_pointer,
                          {"protocol", "keepalive", "keepalive_timeout", "dial_timeout", "read_timeout", "write_timeout"})) {
    if (const json* protocol = field(*transport, "protocol"); protocol && *protocol != json("http"))
      error(pointer_append(transport_pointer, "protocol"), "must be \"http\"");
    uint_field(*transport, "keepalive", transport_pointer, 0, 100'000, pool.keepalive);
    duration_field(*transport, "keepalive_timeout", transport_pointer, false, pool.keepalive_timeout);
    duration_field(*transport, "dial_timeout", transport_pointer, true, pool.connect_timeout);
    duration_field(*transport, "read_timeout", transport_pointer, true, pool.read_timeout);
    duration_field(*transport, "write_timeout", transport_pointer, true, pool.send_timeout);
  }
  const std::string headers_pointer = pointer_append(pointer, "headers");
  if (const json* headers = field(value, "headers"); headers && object(*headers, headers_pointer, {"request", "response"})) {
    header_ops(*headers, "request", headers_pointer, pool.header_up);
    header_ops(*headers, "response", headers_pointer, pool.header_down);
  }
  optional_duration_field(value, "slow_start", pointer, pool.slow_start);
  bool_field(value, "ignore_client_abort", pointer, pool.ignore_client_abort);
  if (const json* adaptive = field(value, "adaptive")) this->adaptive(*adaptive, pointer_append(pointer, "adaptive"), pool.adaptive);
}

bool Reader::upstream(const json& value, const std::string& pointer, UpstreamConfig& upstream) {
  if (!object(value, pointer, {"dial", "weight", "max_fails", "fail_timeout", "backup", "down", "slow_start", "max_conns"}))
    return false;
  const size_t errors_before = error_count();
  dial(value, pointer, upstream);
  uint_field(value, "weight", pointer, 0, balance::kMaxWeight, upstream.weight);
  uint_field(value, "max_fails", pointer, 0, 1'000'000, upstream.max_fails);
  duration_field(value, "fail_timeout", pointer, false, upstream.fail_timeout);
  bool_field(value, "backup", pointer, upstream.backup);
  bool_field(value, "down", pointer, upstream.down);
  optional_duration_field(value, "slow_start", pointer, upstream.slow_start);
  uint_field(value, "max_conns", pointer, 0, 1'000'000, upstream.max_conns);
  return error_count() == errors_before;
}

// "host:port" (port 80 when left out), the upstream's name.
void Reader::dial(const json& object, const std::string& pointer, UpstreamConfig& upstream) {
  const std::string at = pointer_append(pointer, "dial");
  std::string dial;
  if (!string_field(object, "dial", pointer, dial)) {
    if (!field(object, "dial")) missing(at, "required", "required");
    return;
  }
  const std::string token = token_of(at, dial);
  if (const std::string scheme = scheme_of(dial); scheme == "https") {
    error(at, fmt::format("\"{}\": TLS to backends is not supported", token));
    return;
  } else if (!scheme.empty() && heftfile()) {  // (JSON: split_host_port's "no scheme allowed here")
    error(at, fmt::format("\"{}\": unsupported scheme \"{}\" (backends are plain http://)", token, scheme));
    return;
  }
  auto split = split_host_port(dial, 80);
  if (!split.value || split.value->host.empty()) {
    const std::string why = split.value ? "missing host" : split.error;
    error(at, "must be \"host:port\": " + why, fmt::format("invalid backend address \"{}\": {}", token, why));
    return;
  }
  upstream.host = split.value->host;
  upstream.port = split.value->port;
  upstream.name = join_host_port(upstream.host, upstream.port);
}

void Reader::load_balancing(const json& value, const std::string& pointer, ProxyConfig& pool) {
  if (!object(value, pointer,
              {"selection_policy", "hash_strategy", "retries", "try_duration", "next_upstream", "retry_body_limit",
               "queue", "queue_timeout"}))
    return;
  if (const json* selection = field(value, "selection_policy"))
    selection_policy(*selection, pointer_append(pointer, "selection_policy"), pool);
  std::string strategy;
  if (string_field(value, "hash_strategy", pointer, strategy)) {
    const std::string at = pointer_append(pointer, "hash_strategy");
    if (auto parsed = balance::parse_hash_strategy(strategy))
      pool.hash_strategy = *parsed;
    else
      error(at, "must be \"ring\" or \"maglev\"",
            fmt::format("unknown hash_strategy \"{}\" (ring or maglev)", printable(token_of(at, strategy))));
  }
  uint_field(value, "retries", pointer, 0, 1000, pool.next_upstream_tries);
  duration_field(value, "try_duration", pointer, false, pool.next_upstream_timeout);
  size_field(value, "retry_body_limit", pointer, uint64_t(1) << 40, pool.retry_body_limit);
  uint_field(value, "queue", pointer, 0, 1'000'000, pool.queue);
  duration_field(value, "queue_timeout", pointer, true, pool.queue_timeout);
  if (const json* conditions = array_field(value, "next_upstream", pointer, false))
    next_upstream(*conditions, pointer_append(pointer, "next_upstream"), pool.next_upstream);
}

// {"policy": ..., "key": ..., "name": ...}: the policy, and the request key
// of a policy that needs one (policy_traits).
void Reader::selection_policy(const json& value, const std::string& pointer, ProxyConfig& pool) {
  if (!object(value, pointer, {"policy", "key", "name"})) return;
  std::string name;
  bool known = true;  // a policy this heft has: what it needs is known
  if (string_field(value, "policy", pointer, name)) {
    const std::string at = pointer_append(pointer, "policy");
    if (auto kind = balance::parse_policy(name); kind && name != "ip_hash") {
      pool.policy = *kind;
    } else {
      known = false;
      const std::string token = token_of(at, name);
      const std::vector<std::string_view> spellings = known_options("lb_policy");
      error(at, fmt::format("unknown policy \"{}\"", printable(name)),
            fmt::format("unknown lb_policy \"{}\"{}", printable(token), suggestion(token, spellings)));
    }
  }
  const std::string key_pointer = pointer_append(pointer, "key");
  std::string key;
  if (string_field(value, "key", pointer, key)) {
    if (key == "client_ip") pool.hash_key.kind = HashKey::client_ip;
    else if (key == "uri") pool.hash_key.kind = HashKey::uri;
    else if (key == "header") pool.hash_key.kind = HashKey::header;
    else if (key == "cookie") pool.hash_key.kind = HashKey::cookie;
    else
      error(key_pointer, "must be \"client_ip\", \"uri\", \"header\" or \"cookie\"",
            fmt::format("unknown hash key \"{}\"{}", printable(key), suggestion(key, kHashKeys)));
  }
  const std::string name_pointer = pointer_append(pointer, "name");
  string_field(value, "name", pointer, pool.hash_key.name);
  const bool named = pool.hash_key.kind == HashKey::header || pool.hash_key.kind == HashKey::cookie;
  const bool needs_key = balance::policy_traits(pool.policy).needs_key;
  if (!known) return;
  if (needs_key && pool.hash_key.kind == HashKey::none && !field(value, "key"))
    missing(key_pointer, fmt::format("required for policy \"{}\"", balance::policy_name(pool.policy)),
            fmt::format("lb_policy {} needs a key: client_ip, uri, header NAME or cookie NAME",
                        balance::policy_name(pool.policy)));
  else if (!needs_key && field(value, "key"))
    error(key_pointer, fmt::format("only a policy that hashes a key takes one (\"{}\" does not)",
                                   balance::policy_name(pool.policy)));
  if (named && pool.hash_key.name.empty() && !field(value, "name"))
    missing(name_pointer, "required for a header or cookie key", "required for a header or cookie key");
  else if (named && !is_header_name(pool.hash_key.name))
    error(name_pointer,
          fmt::format("must be a header or cookie name (letters, digits and {})", kHeaderNameCharacters),
          fmt::format("invalid {} name \"{}\" (use letters, digits and {})",
                      pool.hash_key.kind == HashKey::header ? "header" : "cookie",
                      printable(token_of(name_pointer, pool.hash_key.name)), kHeaderNameCharacters));
  else if (!named && field(value, "name"))
    error(name_pointer, "only header and cookie keys take a name");
}

void Reader::next_upstream(const json& conditions, const std::string& pointer, NextUpstream& out) {
  const std::vector<std::string_view> known = known_options("next_upstream");
  NextUpstream flags{false, false, false, false, false, false, false, false};
  bool ok = true;
  for (size_t i = 0; i < conditions.size(); ++i) {
    const json& c = conditions[i];
    const std::string at = pointer_append(pointer, i);
    const std::string name = c.is_string() ? c.get<std::string>() : "";
    if (name == "error") flags.error = true;
    else if (name == "timeout") flags.timeout = true;
    else if (name == "http_500") flags.http_500 = true;
    else if (name == "http_502") flags.http_502 = true;
    else if (name == "http_503") flags.http_503 = true;
    else if (name == "http_504") flags.http_504 = true;
    else if (name == "non_idempotent") flags.non_idempotent = true;
    else if (name == "off" && conditions.size() == 1) flags.off = true;
    else if (name == "off")
      ok = false, error(at, "\"off\" cannot be combined with other conditions",
                        "next_upstream off cannot be combined with other conditions");
    else {
      const std::string token = token_of(at, c);
      ok = false, error(at, "unknown condition",
                        fmt::format("unknown next_upstream condition \"{}\"{}", printable(token), suggestion(token, known)));
    }
  }
  if (ok) out = flags;
}

void Reader::health_checks(const json& value, const std::string& pointer, ProxyConfig& pool) {
  if (!object(value, pointer, {"active", "passive"})) return;
  const std::string passive_pointer = pointer_append(pointer, "passive");
  if (const json* passive = field(value, "passive");
      passive && object(*passive, passive_pointer, {"max_fails", "fail_timeout"})) {
    uint_field(*passive, "max_fails", passive_pointer, 0, 1'000'000, pool.max_fails);
    duration_field(*passive, "fail_timeout", passive_pointer, false, pool.fail_timeout);
  }
  const json* active = field(value, "active");
  const std::string at = pointer_append(pointer, "active");
  if (!active || !object(*active, at,
                         {"uri", "port", "interval", "timeout", "expect_status", "expect_body", "headers", "passes",
                          "fails"}))
    return;
  std::string uri;
  if (string_field(*active, "uri", at, uri)) {
    const std::string uri_pointer = pointer_append(at, "uri");
    const std::string token = printable(token_of(uri_pointer, uri));
    if (!uri.empty() && uri.front() != '/')
      error(uri_pointer, "must start with '/' (or be empty: no active checks)",
            fmt::format("health_uri must start with '/', got \"{}\"", token));
    else if (!is_request_target_text(uri))
      error(uri_pointer, "may hold no space, control character or non-ASCII byte (percent-encode them)",
            fmt::format("health_uri may hold no space, control character or non-ASCII byte (percent-encode them), "
                        "got \"{}\"",
                        token));
    else
      pool.health_uri = uri;
  }
  uint_field(*active, "port", at, 0, 65535, pool.health_port);
  duration_field(*active, "interval", at, true, pool.health_interval);
  duration_field(*active, "timeout", at, true, pool.health_timeout);
  std::string status;
  if (string_field(*active, "expect_status", at, status)) {
    const std::string status_pointer = pointer_append(at, "expect_status");
    if (is_expected_status(status))
      pool.health_status = status;
    else
      error(status_pointer, "must be a status like \"200\" or \"2xx\"",
            fmt::format("invalid health_status \"{}\" (e.g. 200 or 2xx)", printable(token_of(status_pointer, status))));
  }
  std::string body;
  if (string_field(*active, "expect_body", at, body)) {
    const std::string body_pointer = pointer_append(at, "expect_body");
    if (const std::string problem = health_body_problem(body); problem.empty())
      pool.health_body = body;
    else
      error(body_pointer, fmt::format("invalid regular expression: {}", problem),
            fmt::format("invalid health_body regular expression \"{}\": {}", token_of(body_pointer, body), problem));
  }
  if (const json* headers = array_field(*active, "headers", at, false))
    health_headers(*headers, pointer_append(at, "headers"), pool);
  uint_field(*active, "passes", at, 1, 1000, pool.health_passes);
  uint_field(*active, "fails", at, 1, 1000, pool.health_fails);
}

void Reader::health_headers(const json& headers, const std::string& pointer, ProxyConfig& pool) {
  for (size_t i = 0; i < headers.size(); ++i) {
    const std::string at = pointer_append(pointer, i);
    if (!object(headers[i], at, {"name", "value"})) continue;
    std::string name, value;
    if (!string_field(headers[i], "name", at, name)) {
      if (!field(headers[i], "name")) missing(pointer_append(at, "name"), "required", "required");
      continue;
    }
    if (!header_name(pointer_append(at, "name"), name, HeaderOp::set, true)) continue;
    if (!string_field(headers[i], "value", at, value)) {
      if (!field(headers[i], "value")) missing(pointer_append(at, "value"), "required", "required");
      continue;
    }
    if (!header_value(pointer_append(at, "value"), name, value)) continue;
    pool.health_headers.emplace_back(std::move(name), std::move(value));
  }
}

void Reader::header_ops(const json& headers, std::string_view key, const std::string& pointer,
                        std::vector<HeaderOp>& out) {
  const json* ops = array_field(headers, key, pointer, false);
  if (!ops) return;
  const std::string list_pointer = pointer_append(pointer, key);
  for (size_t i = 0; i < ops->size(); ++i) {
    const std::string at = pointer_append(list_pointer, i);
    const json& entry = (*ops)[i];
    if (!object(entry, at, {"op", "name", "value"})) continue;
    HeaderOp op;
    std::string kind;
    string_field(entry, "op", at, kind);
    if (kind == "set") op.op = HeaderOp::set;
    else if (kind == "add") op.op = HeaderOp::add;
    else if (kind == "delete") op.op = HeaderOp::remove;
    else {
      error(pointer_append(at, "op"), "must be \"set\", \"add\" or \"delete\"");
      continue;
    }
    if (!string_field(entry, "name", at, op.name)) {
      if (!field(entry, "name")) missing(pointer_append(at, "name"), "required", "required");
      continue;
    }
    if (!header_name(pointer_append(at, "name"), op.name, op.op, key == "request")) continue;
    const bool has_value = string_field(entry, "value", at, op.value);
    if (op.op == HeaderOp::remove && has_value) {
      error(pointer_append(at, "value"), "a delete takes no value");
      continue;
    }
    if (op.op != HeaderOp::remove && !has_value) {
      if (!field(entry, "value")) missing(pointer_append(at, "value"), "required", "required");
      continue;
    }
    // header_up values are templates (the plan expands them per request).
    if (!header_value(pointer_append(at, "value"), op.name, op.value, key == "request")) continue;
    out.push_back(std::move(op));
  }
}

bool Reader::header_name(const std::string& pointer, const std::string& name, HeaderOp::Op op, bool request) {
  if (!is_header_name(name)) {
    // A Heftfile's name as written: "+X A", "-X(1)".
    error(pointer, invalid_header_name(name), invalid_header_name(token_of(pointer, name)));
    return false;
  }
  if (std::string problem = header_op_problem(name, op, request); !problem.empty()) {
    error(pointer, problem);
    return false;
  }
  return true;
}

bool Reader::header_value(const std::string& pointer, const std::string& name, const std::string& value,
                          bool expanded) {
  const std::string problem = header_value_problem(value, expanded);
  if (problem.empty()) return true;
  error(pointer, problem, fmt::format("invalid value for header \"{}\": {}", printable(name), problem));
  return false;
}

void Reader::adaptive(const json& value, const std::string& pointer, upstream::AdaptiveOptions& adaptive) {
  if (!object(value, pointer,
              {"enabled", "interval", "latency_threshold", "median_factor", "error_threshold", "cut",
               "min_weight_ratio"}))
    return;
  bool_field(value, "enabled", pointer, adaptive.enabled);
  duration_field(value, "interval", pointer, true, adaptive.interval);
  duration_field(value, "latency_threshold", pointer, false, adaptive.latency_threshold);
  number_field(value, "median_factor", pointer, 1.0, 100.0, Number::plain, adaptive.median_factor);
  double threshold = 0;
  if (number_field(value, "error_threshold", pointer, 0.0, 1.0, Number::fraction, threshold)) {
    // A Heftfile's bare "1" is 100 %: never cut for errors, almost surely meant as 1 %.
    const std::string at = pointer_append(pointer, "error_threshold");
    if (const Source* written = source(at); written && threshold == 1.0 && !written->token.ends_with('%'))
      error(at, fmt::format("error_threshold {} would be 100% (never cut for errors): write 1% for one percent, or "
                            "100% if that is meant",
                            written->token));
    else
      adaptive.error_threshold = threshold;
  }
  double cut = 0;
  if (number_field(value, "cut", pointer, 0.0, 1.0, Number::fraction, cut)) {
    if (cut == 0.0)
      error(pointer_append(pointer, "cut"), "must be greater than 0", "cut must be greater than 0%");
    else
      adaptive.cut = cut;
  }
  number_field(value, "min_weight_ratio", pointer, 0.0, 1.0, Number::fraction, adaptive.min_weight_ratio);
}

}  // namespace heft::config::reading
