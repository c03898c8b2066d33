// A scenario's JSON form (docs/sim.md, "Scenario file"): the text parsed with
// every member's path at hand, then each member checked for its type, sign
// and range, so an error names the member ("scenario: servers[0].weight: ...").
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/scenario.h"

namespace heft::sim {
namespace {

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

}  // namespace

namespace {

// JSON members are checked one by one (type, sign, integer-ness, range) so an
// error names the member's path, e.g. "scenario: servers[0].weight: ...".
using nlohmann::json;

[[noreturn]] void json_fail(std::string_view path, std::string_view problem, const json& v) {
  fail(fmt::format("scenario: {}: {}, got {}", path, problem, v.dump()));
}

std::string json_string(const json& v, std::string_view path) {
  if (!v.is_string()) json_fail(path, "must be a string", v);
  return v.get<std::string>();
}

// Integers only (1.5 and 2.0 are not counts), as heft's JSON config does.
uint64_t json_integer(const json& v, std::string_view path, uint64_t min, uint64_t max) {
  const bool whole = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
  const uint64_t n = whole ? v.get<uint64_t>() : 0;
  if (!whole || n < min || n > max) {
    if (max == std::numeric_limits<uint64_t>::max()) json_fail(path, fmt::format("must be an integer >= {}", min), v);
    json_fail(path, fmt::format("must be an integer {}..{}", min, max), v);
  }
  return n;
}

double json_positive(const json& v, std::string_view path) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
    json_fail(path, "must be a positive number", v);
  return v.get<double>();
}

double json_non_negative(const json& v, std::string_view path) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    json_fail(path, "must be a number >= 0", v);
  return v.get<double>();
}

// "20ms", "1m30s" or a number of seconds, >= 0.
double json_duration(const json& v, std::string_view path) {
  if (v.is_string()) {
    try {
      return parse_duration(v.get<std::string>());
    } catch (const std::invalid_argument&) {
      json_fail(path, "must be a duration (\"20ms\", \"1m30s\" or seconds)", v);
    }
  }
  if (!v.is_number()) json_fail(path, "must be a duration (\"20ms\", \"1m30s\" or seconds)", v);
  return json_non_negative(v, path);
}

// fail_timeout and slow_start: a duration the pool takes (whole ms, up to 365 days).
double json_pool_duration(const json& v, std::string_view path) {
  const double seconds = json_duration(v, path);
  try {
    pool_duration(seconds, path);
  } catch (const std::invalid_argument& e) {
    fail(fmt::format("scenario: {}", e.what()));
  }
  return seconds;
}

const json& json_array(const json& v, std::string_view path) {
  if (!v.is_array()) json_fail(path, "must be an array", v);
  return v;
}

ServerSpec server_from_json(const json& sv, const std::string& path) {
  if (!sv.is_object()) json_fail(path, "must be an object", sv);
  ServerSpec server;
  bool units_given = false;
  for (const auto& [k, x] : sv.items()) {
    const std::string at = path + "." + k;
    if (k == "name") {
      server.name = json_string(x, at);
    } else if (k == "size") {
      server.size = static_cast<uint32_t>(json_integer(x, at, 1, kMaxWorkers));
    } else if (k == "units") {
      server.units = json_positive(x, at);
      units_given = true;
    } else if (k == "service") {
      server.service_s = json_duration(x, at);
      if (!(server.service_s > 0)) json_fail(at, "must be a positive duration", x);
    } else if (k == "dist") {
      auto d = parse_service_dist(json_string(x, at));
      if (!d) json_fail(at, "must be fixed, exp or lognormal", x);
      server.dist = *d;
    } else if (k == "sigma") {
      server.sigma = json_non_negative(x, at);
      if (server.sigma > kMaxSigma)
        json_fail(at, fmt::format("must be 0..{} (beyond, the lognormal cannot keep its mean)", kMaxSigma), x);
    } else if (k == "weight") {
      server.weight = static_cast<uint32_t>(json_integer(x, at, 0, kMaxWeight));
    } else if (k == "queue") {
      server.queue_limit = json_integer(x, at, 0, std::numeric_limits<uint64_t>::max());
    } else if (k == "timeout") {
      server.timeout_s = json_duration(x, at);
    } else if (k == "max_conns") {
      server.max_conns = static_cast<uint32_t>(json_integer(x, at, 0, kMaxConns));
    } else if (k == "backup") {
      if (!x.is_boolean()) json_fail(at, "must be true or false", x);
      server.backup = x.get<bool>();
    } else if (k == "max_fails") {
      server.max_fails = static_cast<uint32_t>(json_integer(x, at, 0, kMaxFails));
    } else if (k == "fail_timeout") {
      server.fail_timeout_s = json_pool_duration(x, at);
    } else if (k == "slow_start") {
      server.slow_start_s = json_pool_duration(x, at);
    } else {
      fail(fmt::format("scenario: {}: unknown key", at));
    }
  }
  if (!units_given) server.units = server.size;
  // Only the lognormal has a sigma: given with another, it did nothing.
  if (sv.contains("sigma") && server.dist != ServiceDist::lognormal)
    fail(fmt::format("scenario: {}.sigma: applies only to \"dist\": \"lognormal\"; {}.dist is {}{}", path, path,
                     service_dist_name(server.dist), sv.contains("dist") ? "" : " (the default)"));
  return server;
}

}  // namespace

nlohmann::json parse_scenario_text(std::string_view text) {
  // The path of the value being parsed, one frame per enclosing object or array.
  struct Frame {
    bool array = false;
    size_t index = 0;                     // array: the element being parsed
    std::string key;                      // object: the member being parsed
    std::unordered_set<std::string> keys;  // object: the members seen
  };
  std::vector<Frame> frames;
  const auto path = [&frames] {
    std::string out;
    for (const Frame& f : frames)
      out += f.array ? fmt::format("[{}]", f.index) : (out.empty() ? "" : ".") + f.key;
    return out;
  };
  const auto element_done = [&frames] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  using Event = json::parse_event_t;
  return json::parse(text, [&](int, Event event, json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start: frames.emplace_back().array = event == Event::array_start; break;
      case Event::object_end:
      case Event::array_end:
        frames.pop_back();
        element_done();
        break;
      case Event::key:
        frames.back().key = parsed.get<std::string>();
        if (!frames.back().keys.insert(frames.back().key).second)
          fail(fmt::format("scenario: {}: is given twice (a JSON parser would keep only the last)", path()));
        break;
      case Event::value: element_done(); break;
    }
    return true;
  });
}

Scenario scenario_from_json(const nlohmann::json& j, std::string* trace_path) {
  if (!j.is_object()) fail("scenario: expected a JSON object");
  Scenario s;
  for (const auto& [key, v] : j.items()) {
    if (key == "name") {
      s.name = json_string(v, key);
    } else if (key == "seed") {
      s.seed = json_integer(v, key, 0, std::numeric_limits<uint64_t>::max());
    } else if (key == "duration") {
      s.duration_s = json_duration(v, key);
      if (!(s.duration_s > 0)) json_fail(key, "must be a positive duration", v);
    } else if (key == "rate") {
      s.rate = json_positive(v, key);
    } else if (key == "trace") {
      const std::string path = json_string(v, key);
      if (path.empty()) json_fail(key, "must name a file", v);
      if (trace_path) *trace_path = path;
      s.has_trace = true;
    } else if (key == "bucket") {
      s.bucket_s = json_duration(v, key);
      // 0 would read as "not given" (duration / 60).
      if (!(s.bucket_s > 0)) json_fail(key, "must be a positive duration", v);
    } else if (key == "queue") {
      s.queue = json_integer(v, key, 0, kMaxPoolQueue);
    } else if (key == "queue_timeout") {
      s.queue_timeout_s = json_duration(v, key);
      if (!(*s.queue_timeout_s > 0)) json_fail(key, "must be a positive duration", v);
    } else if (key == "max_fails") {
      s.max_fails = static_cast<uint32_t>(json_integer(v, key, 0, kMaxFails));
    } else if (key == "fail_timeout") {
      s.fail_timeout_s = json_pool_duration(v, key);
    } else if (key == "slow_start") {
      s.slow_start_s = json_pool_duration(v, key);
    } else if (key == "adaptive") {
      s.adaptive = adaptive_from_json(v, key);
    } else if (key == "hash_strategy") {
      auto h = balance::parse_hash_strategy(json_string(v, key));
      if (!h) json_fail(key, "must be ring or maglev", v);
      s.hash_strategy = *h;
    } else if (key == "policies") {
      s.policies.clear();
      for (size_t i = 0; i < json_array(v, key).size(); ++i) {
        const std::string at = fmt::format("policies[{}]", i);
        auto kind = balance::parse_policy(json_string(v[i], at));
        if (!kind) json_fail(at, "is not a policy", v[i]);
        s.policies.push_back(*kind);
      }
      if (s.policies.empty()) json_fail(key, "must name at least one policy", v);
    } else if (key == "events") {
      for (size_t i = 0; i < json_array(v, key).size(); ++i) {
        const std::string at = fmt::format("events[{}]", i);
        const std::string text = json_string(v[i], at);
        try {
          s.events.push_back(parse_event(text));
        } catch (const std::invalid_argument& e) {
          fail(fmt::format("scenario: {}: {}", at, e.what()));
        }
      }
    } else if (key == "servers") {
      for (size_t i = 0; i < json_array(v, key).size(); ++i)
        s.servers.push_back(server_from_json(v[i], fmt::format("servers[{}]", i)));
    } else {
      fail(fmt::format("scenario: unknown key '{}'", key));
    }
  }
  if (j.contains("rate") && j.contains("trace"))
    fail("scenario: rate and trace are exclusive: a trace's arrivals are replayed as they are");
  // Events name servers by name, or by validate()'s default name s1, s2, ...
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < s.servers.size(); ++i)
    names.insert(s.servers[i].name.empty() ? fmt::format("s{}", i + 1) : s.servers[i].name);
  for (size_t i = 0; i < s.events.size(); ++i) {
    const Event& e = s.events[i];
    if (e.kind != Event::Kind::weights && !names.contains(e.server))
      fail(fmt::format("scenario: events[{}]: names unknown server '{}'", i, e.server));
    // Here, where the event's place is known (validate() checks the flags' too).
    if (e.kind == Event::Kind::weights && !s.servers.empty() && e.weights.size() != s.servers.size())
      fail(fmt::format("scenario: events[{}]: {}", i, weights_for_servers(e.weights.size(), s.servers.size())));
  }
  return s;
}

}  // namespace heft::sim
