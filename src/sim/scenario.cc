#include "sim/scenario.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "heft/balance/hash.h"
#include "sim/planner.h"

namespace heft::sim {
namespace {

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

constexpr std::string_view kSlowFactorRange = "1e-6..1e6";  // kMinSlowFactor..kMaxSlowFactor, as people write them

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}


double parse_number(std::string_view text, std::string_view what) {
  text = trim(text);
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(value))
    fail(fmt::format("{}: '{}' is not a number", what, text));
  return value;
}

// A whole number in [min, max]. from_chars into uint64 rejects a sign, so "-1"
// cannot wrap; the range check happens before any narrowing.
uint64_t parse_count(std::string_view text, std::string_view what, uint64_t min = 0,
                     uint64_t max = std::numeric_limits<uint64_t>::max()) {
  text = trim(text);
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < min || value > max) {
    if (max == std::numeric_limits<uint64_t>::max()) fail(fmt::format("{}: '{}' is not a whole number", what, text));
    fail(fmt::format("{}: '{}' is not an integer {}..{}", what, text, min, max));
  }
  return value;
}

double positive(double value, std::string_view what) {
  if (!(value > 0)) fail(fmt::format("{} must be positive", what));
  return value;
}

}  // namespace

std::optional<ServiceDist> parse_service_dist(std::string_view name) {
  if (name == "fixed") return ServiceDist::fixed;
  if (name == "exp" || name == "exponential") return ServiceDist::exponential;
  if (name == "lognormal") return ServiceDist::lognormal;
  return std::nullopt;
}

std::string_view service_dist_name(ServiceDist dist) {
  switch (dist) {
    case ServiceDist::fixed: return "fixed";
    case ServiceDist::exponential: return "exp";
    case ServiceDist::lognormal: return "lognormal";
  }
  return "exp";
}

std::vector<std::string_view> split_trimmed(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t guard = 0; guard <= text.size(); ++guard) {
    size_t pos = text.find(separator, start);
    if (pos == std::string_view::npos) {
      parts.push_back(trim(text.substr(start)));
      break;
    }
    parts.push_back(trim(text.substr(start, pos - start)));
    start = pos + 1;
  }
  return parts;
}

uint64_t parse_seed(std::string_view text) {
  return parse_count(text, "--seed");
}

bool Scenario::limited() const {
  return std::any_of(servers.begin(), servers.end(), [](const ServerSpec& s) { return s.max_conns > 0; });
}

uint64_t parse_pool_queue(std::string_view text) {
  return parse_count(text, "--queue", 0, kMaxPoolQueue);
}

uint32_t parse_max_fails(std::string_view text) {
  return static_cast<uint32_t>(parse_count(text, "--max-fails", 0, kMaxFails));
}

double parse_duration(std::string_view text, std::string_view what) {
  text = trim(text);
  const auto not_a_duration = [&] {
    fail(fmt::format("{}: '{}' is not a duration (600s, 1m30s, 1.5s, 250ms, 20us, or a number of seconds)", what,
                     text));
  };
  if (text.empty()) not_a_duration();
  const char* const end = text.data() + text.size();
  double seconds = 0;
  bool negative = false;
  // A bare number is seconds, as sim has always read it (the Heftfile wants a unit).
  auto [bare_end, bare_ec] = std::from_chars(text.data(), end, seconds);
  if (bare_ec == std::errc() && bare_end == end) {
    if (!std::isfinite(seconds)) not_a_duration();  // "inf", "nan"
  } else {
    // Otherwise a sum of <number><unit> terms, as the Heftfile writes durations
    // (1m30s, 1h30m, 1.5s, 1d), plus "us": sim models sub-millisecond services.
    struct Unit {
      std::string_view name;
      double seconds;
    };
    constexpr Unit kUnits[] = {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}};
    seconds = 0;
    for (const char* p = text.data(); p != end;) {
      double number = 0;
      auto [number_end, ec] = std::from_chars(p, end, number);
      if (ec != std::errc() || !std::isfinite(number)) not_a_duration();  // also "inf" and "nan"
      const char* unit_end = number_end;
      while (unit_end != end && *unit_end >= 'a' && *unit_end <= 'z') ++unit_end;
      const std::string_view unit(number_end, static_cast<size_t>(unit_end - number_end));
      const Unit* found =
          std::find_if(std::begin(kUnits), std::end(kUnits), [&](const Unit& u) { return u.name == unit; });
      if (found == std::end(kUnits)) not_a_duration();  // "1m30": the last term has no unit
      negative = negative || number < 0;
      seconds += number * found->seconds;
      p = unit_end;
    }
  }
  if (!std::isfinite(seconds) && !negative) fail(fmt::format("{}: '{}' is too large", what, text));  // 1e308h
  if (negative || seconds < 0) fail(fmt::format("{}: '{}' is negative", what, text));
  return seconds;
}

std::vector<double> parse_units(std::string_view text) {
  std::vector<double> units;
  for (std::string_view part : split_trimmed(text, ',')) {
    if (part.ends_with('x') || part.ends_with('X')) part.remove_suffix(1);
    units.push_back(positive(parse_number(part, "--servers"), "--servers entries"));
  }
  if (units.empty()) fail("--servers is empty");
  return units;
}

ServerSpec parse_server(std::string_view text) {
  ServerSpec s;
  bool size_given = false, units_given = false;
  std::unordered_set<std::string_view> keys;
  for (std::string_view part : split_trimmed(text, ',')) {
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) fail(fmt::format("--server: '{}' is not key=value", part));
    std::string_view key = trim(part.substr(0, eq)), value = trim(part.substr(eq + 1));
    // The second would silently replace the first.
    if (!keys.insert(key).second) fail(fmt::format("--server: key '{}' is given twice", key));
    if (key == "name") {
      s.name = std::string(value);
    } else if (key == "size") {
      s.size = static_cast<uint32_t>(parse_count(value, "--server size", 1, kMaxWorkers));
      size_given = true;
    } else if (key == "service") {
      s.service_s = parse_duration(value, "--server service");
    } else if (key == "dist") {
      auto d = parse_service_dist(value);
      if (!d) fail(fmt::format("--server dist: '{}' is not fixed, exp or lognormal", value));
      s.dist = *d;
    } else if (key == "sigma") {
      s.sigma = parse_number(value, "--server sigma");
      if (!(s.sigma >= 0 && s.sigma <= kMaxSigma))
        fail(fmt::format("--server sigma must be 0..{} (beyond, the lognormal cannot keep its mean)", kMaxSigma));
    } else if (key == "weight") {
      s.weight = static_cast<uint32_t>(parse_count(value, "--server weight", 0, kMaxWeight));
    } else if (key == "queue") {
      s.queue_limit = parse_count(value, "--server queue");
    } else if (key == "timeout") {
      s.timeout_s = parse_duration(value, "--server timeout");
    } else if (key == "max_conns") {
      s.max_conns = static_cast<uint32_t>(parse_count(value, "--server max_conns", 0, kMaxConns));
    } else if (key == "backup") {
      if (value == "true" || value == "1") s.backup = true;
      else if (value == "false" || value == "0") s.backup = false;
      else fail(fmt::format("--server backup: '{}' is not true or false", value));
    } else if (key == "units") {
      s.units = parse_number(value, "--server units");
      units_given = true;
    } else if (key == "max_fails") {
      s.max_fails = static_cast<uint32_t>(parse_count(value, "--server max_fails", 0, kMaxFails));
    } else if (key == "fail_timeout") {
      s.fail_timeout_s = parse_duration(value, "--server fail_timeout");
    } else if (key == "slow_start") {
      s.slow_start_s = parse_duration(value, "--server slow_start");
    } else {
      fail(fmt::format("--server: unknown key '{}'", key));
    }
  }
  if (size_given && !units_given) s.units = s.size;
  // Only the lognormal has a sigma: given with another, it did nothing.
  if (keys.contains("sigma") && s.dist != ServiceDist::lognormal)
    fail(fmt::format("--server sigma= applies only to dist=lognormal; dist is {}{}", service_dist_name(s.dist),
                     keys.contains("dist") ? "" : " (the default)"));
  return s;
}

Event parse_event(std::string_view text) {
  // The time ends at the first ':' and the action starts after the last (no
  // action holds one), so a server may be named by address: "127.0.0.1:22001".
  const size_t first = text.find(':'), last = text.rfind(':');
  if (first == std::string_view::npos) fail(fmt::format("--event '{}': expected TIME:SERVER:ACTION", text));
  Event e;
  e.at_s = parse_duration(text.substr(0, first), "--event time");
  const std::string_view action = trim(text.substr(last + 1));
  if (last != first) e.server = std::string(trim(text.substr(first + 1, last - first - 1)));
  size_t eq = action.find('=');
  std::string_view verb = trim(action.substr(0, eq));
  std::string_view value = eq == std::string_view::npos ? std::string_view{} : trim(action.substr(eq + 1));
  if (verb == "weights") {
    e.kind = Event::Kind::weights;
    e.weights = parse_weights(value, "--event weights");
    if (!e.server.empty()) fail(fmt::format("--event '{}': weights= applies to every server", text));
    return e;
  }
  if (e.server.empty()) fail(fmt::format("--event '{}': expected TIME:SERVER:ACTION", text));
  if (verb == "slow") {
    e.kind = Event::Kind::slow;
    e.factor = positive(parse_number(value, "--event slow"), "--event slow factor");
    if (!(e.factor >= kMinSlowFactor && e.factor <= kMaxSlowFactor))
      fail(fmt::format("--event '{}': slow factor must be {}", text, kSlowFactorRange));
  } else if (verb == "fail") {
    e.kind = Event::Kind::fail;
  } else if (verb == "recover") {
    e.kind = Event::Kind::recover;
  } else if (verb == "weight") {
    e.kind = Event::Kind::weight;
    e.weight = static_cast<uint32_t>(parse_count(value, "--event weight", 0, kMaxWeight));
  } else {
    fail(fmt::format("--event '{}': action is slow=F, fail, recover, weight=N or weights=A,B,..", text));
  }
  return e;
}

std::string weights_for_servers(size_t weights, size_t servers) {
  return fmt::format("{} weight{} for {} server{}", weights, weights == 1 ? "" : "s", servers, servers == 1 ? "" : "s");
}

std::string event_text(const Event& e) {
  std::string at = fmt::format("{}s", e.at_s);
  switch (e.kind) {
    case Event::Kind::slow: return fmt::format("{}:{}:slow={}", at, e.server, e.factor);
    case Event::Kind::fail: return fmt::format("{}:{}:fail", at, e.server);
    case Event::Kind::recover: return fmt::format("{}:{}:recover", at, e.server);
    case Event::Kind::weight: return fmt::format("{}:{}:weight={}", at, e.server, e.weight);
    case Event::Kind::weights: return fmt::format("{}:weights={}", at, fmt::join(e.weights, ","));
  }
  return at;
}

std::vector<balance::PolicyKind> parse_policies(std::string_view text) {
  if (trim(text).empty()) fail("--policies is empty: name at least one policy");
  std::vector<balance::PolicyKind> out;
  for (std::string_view part : split_trimmed(text, ',')) {
    auto kind = balance::parse_policy(part);
    if (!kind) fail(fmt::format("--policies: unknown policy '{}'", part));
    out.push_back(*kind);
  }
  return out;
}

std::vector<uint32_t> parse_weights(std::string_view text, std::string_view what) {
  std::vector<uint32_t> out;
  for (std::string_view part : split_trimmed(text, ','))
    out.push_back(static_cast<uint32_t>(parse_count(part, what, 0, kMaxWeight)));
  return out;
}

void load_trace(std::string_view text, Scenario& scenario) {
  scenario.has_trace = true;
  scenario.trace_times.clear();
  scenario.trace_keys.clear();
  scenario.trace_keyed.clear();
  struct Row {
    double time;
    uint64_t key;
    bool keyed;
  };
  std::vector<Row> rows;
  bool any_key = false;
  size_t line_no = 0;
  size_t start = 0;
  for (size_t guard = 0; start < text.size() && guard <= text.size(); ++guard) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    // A comment runs from '#' to the end of the line; it is no part of the key.
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t space = line.find_first_of(" \t,");
    std::string_view time_text = line.substr(0, space);
    double t = parse_number(time_text, fmt::format("trace line {}", line_no));
    if (t < 0) fail(fmt::format("trace line {}: negative time", line_no));
    Row row{t, 0, false};
    if (space != std::string_view::npos) {
      std::string_view key_text = trim(line.substr(space + 1));
      if (!key_text.empty()) {
        row.key = balance::hash_key(key_text);
        row.keyed = any_key = true;
      }
    }
    rows.push_back(row);
  }
  // It ran the default 60 s with no arrivals: a wrong file, or one cut short.
  if (rows.empty()) fail("the trace has no arrivals (every line is blank or a comment)");
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.time < b.time; });
  scenario.trace_times.reserve(rows.size());
  for (const Row& r : rows) scenario.trace_times.push_back(r.time);
  if (any_key) {
    scenario.trace_keys.reserve(rows.size());
    scenario.trace_keyed.reserve(rows.size());
    for (const Row& r : rows) {
      scenario.trace_keys.push_back(r.key);
      scenario.trace_keyed.push_back(r.keyed);
    }
  }
}

double trace_span(const Scenario& scenario) {
  const std::vector<double>& times = scenario.trace_times;
  if (times.empty()) return 0;
  const double first = times.front(), last = times.back();
  const double mean_gap = times.size() > 1 ? (last - first) / static_cast<double>(times.size() - 1) : 0;
  const double span = last + (mean_gap > 0 ? mean_gap : 0.001);
  // A gap too small to add to a late time still lets the last arrival in.
  return span > last ? span : std::nextafter(last, std::numeric_limits<double>::infinity());
}

uint64_t trace_arrivals_after_duration(const Scenario& scenario) {
  const auto& times = scenario.trace_times;
  return static_cast<uint64_t>(times.end() - std::lower_bound(times.begin(), times.end(), scenario.duration_s));
}

size_t bucket_count(const Scenario& scenario) {
  const double buckets = std::ceil(scenario.duration_s / scenario.bucket_s * (1 - 1e-9));
  return buckets < 1 ? 1 : static_cast<size_t>(buckets);
}

uint32_t initial_weight(const ServerSpec& server) {
  if (server.weight) return *server.weight;
  double w = std::round(server.units);
  return w < 1 ? 1 : static_cast<uint32_t>(w);
}

namespace {

// The smallest q <= max_q that makes value x q whole, 0 if none does. Walks the
// continued-fraction convergents p/q of `value`; the relative tolerance lets
// decimals that binary cannot hold (0.1, or 0.333333333 for 1/3) count as exact.
uint64_t whole_multiplier(double value, uint64_t max_q) {
  double x = value;
  double p_prev = 1, q_prev = 0, p = std::floor(x), q = 1;
  for (int guard = 0; guard < 64; ++guard) {
    if (std::abs(value * q - p) <= 1e-9 * value * q) return static_cast<uint64_t>(q);
    const double rest = x - std::floor(x);
    if (rest <= 0) return 0;
    x = 1 / rest;
    const double a = std::floor(x);
    const double p_next = a * p + p_prev, q_next = a * q + q_prev;
    if (q_next > static_cast<double>(max_q)) return 0;
    p_prev = p, q_prev = q, p = p_next, q = q_next;
  }
  return 0;
}

// Servers without an explicit weight weigh their units. Fractional units are
// scaled by the smallest whole number that makes every such server's units
// whole, so 1.5x,1x weigh 3:2 exactly; whole units (3x,1x,1x) are unchanged.
void set_default_weights(std::vector<ServerSpec>& servers) {
  double largest = 0;
  for (const ServerSpec& server : servers)
    if (!server.weight) largest = std::max(largest, server.units);
  if (largest == 0) return;
  // At most 2^32 so the lcm of two candidates cannot overflow; tiny units need no more.
  const auto max_multiplier = static_cast<uint64_t>(std::min(kMaxWeight / largest, 0x1p32));
  uint64_t multiplier = 1;
  for (const ServerSpec& server : servers) {
    if (server.weight) continue;
    const uint64_t q = whole_multiplier(server.units, max_multiplier);
    if (q != 0) multiplier = std::lcm(multiplier, q);
    if (q == 0 || multiplier > max_multiplier)
      fail(fmt::format("server '{}': its size {}x has no whole-number ratio to the other sizes with weights up to {}; "
                       "give the weights (--weights or weight=)",
                       server.name, server.units, kMaxWeight));
  }
  for (ServerSpec& server : servers) {
    if (!server.weight)
      server.weight = static_cast<uint32_t>(std::round(server.units * static_cast<double>(multiplier)));
  }
}

}  // namespace

void validate(Scenario& s) {
  if (s.servers.empty()) fail("no servers: give --servers, --server, --scenario or --example");
  if (s.servers.size() > 4096) fail(fmt::format("{} servers; at most 4096 are simulated", s.servers.size()));
  // load_trace() refuses an empty trace; a Scenario built by hand is held to the same.
  if (s.has_trace && s.trace_times.empty()) fail("the trace has no arrivals");
  if (s.duration_s == 0) s.duration_s = s.has_trace ? trace_span(s) : kDefaultDurationS;
  if (!(s.duration_s > 0) || !std::isfinite(s.duration_s)) fail("--duration must be positive");
  if (!s.has_trace) {
    if (!(s.rate > 0) || !std::isfinite(s.rate))
      fail(fmt::format("--rate must be a positive, finite number of requests per second, got {}", s.rate));
    const double expected = s.rate * s.duration_s;
    if (!(expected <= kMaxArrivals))
      fail(fmt::format("rate {:g} req/s x duration {:g}s is {:.3g} expected arrivals; at most {:.0f} per run (10-20 s "
                       "of simulation per policy): lower the rate or the duration (--rate and --duration, or the "
                       "scenario's \"rate\" and \"duration\")",
                       s.rate, s.duration_s, expected, kMaxArrivals));
  } else {
    const auto before_end = std::lower_bound(s.trace_times.begin(), s.trace_times.end(), s.duration_s);
    const auto arrivals = static_cast<double>(before_end - s.trace_times.begin());
    if (arrivals > kMaxArrivals)
      fail(fmt::format("the trace (--trace, or the scenario's \"trace\") has {:.0f} arrivals before the duration; "
                       "at most {:.0f} per run", arrivals, kMaxArrivals));
  }
  if (s.policies.empty()) fail("--policies is empty");
  std::unordered_set<std::string> names;
  uint64_t workers = 0;
  for (size_t i = 0; i < s.servers.size(); ++i) {
    ServerSpec& server = s.servers[i];
    if (server.name.empty()) server.name = fmt::format("s{}", i + 1);
    if (!names.insert(server.name).second) fail(fmt::format("server name '{}' is used twice", server.name));
    if (server.size == 0 || server.size > kMaxWorkers)
      fail(fmt::format("server '{}': size must be 1..{} workers", server.name, kMaxWorkers));
    workers += server.size;
    if (server.weight && *server.weight > kMaxWeight)
      fail(fmt::format("server '{}': weight must be 0..{}", server.name, kMaxWeight));
    if (!(server.service_s > 0) || !std::isfinite(server.service_s))
      fail(fmt::format("server '{}': service time must be positive and finite", server.name));
    if (!(server.sigma >= 0 && server.sigma <= kMaxSigma))
      fail(fmt::format("server '{}': sigma must be 0..{} (beyond, the lognormal cannot keep its mean)", server.name,
                       kMaxSigma));
    if (!(server.timeout_s >= 0) || !std::isfinite(server.timeout_s))
      fail(fmt::format("server '{}': timeout must be >= 0 and finite", server.name));
    if (server.max_conns > kMaxConns)
      fail(fmt::format("server '{}': max_conns must be 0..{}", server.name, kMaxConns));
    if (!(server.units > 0) || server.units > kMaxWeight)
      fail(fmt::format("server '{}': units must be a positive number up to {}", server.name, kMaxWeight));
    if (server.max_fails && *server.max_fails > kMaxFails)
      fail(fmt::format("server '{}': max_fails must be 0..{}", server.name, kMaxFails));
    if (server.fail_timeout_s) pool_duration(*server.fail_timeout_s, fmt::format("server '{}': fail_timeout", server.name));
    if (server.slow_start_s) pool_duration(*server.slow_start_s, fmt::format("server '{}': slow_start", server.name));
  }
  if (s.max_fails > kMaxFails) fail(fmt::format("max_fails must be 0..{}", kMaxFails));
  pool_duration(s.fail_timeout_s, "fail_timeout");
  pool_duration(s.slow_start_s, "slow_start");
  if (workers > kMaxWorkers)
    fail(fmt::format("the servers have {} workers in all; at most {} are simulated", workers, kMaxWorkers));
  // The pool queue: the Heftfile's ranges. Where the proxy only warns of a
  // queue no request can enter, sim refuses it, as it refuses any setting the
  // run would not read (--hash-strategy without hash, --sigma without lognormal).
  constexpr std::string_view kQueue = "the pool queue (--queue, or the scenario's \"queue\")";
  constexpr std::string_view kQueueTimeout = "the queue timeout (--queue-timeout, or the scenario's \"queue_timeout\")";
  if (s.queue > kMaxPoolQueue) fail(fmt::format("{} must be 0..{}, got {}", kQueue, kMaxPoolQueue, s.queue));
  if (s.queue_timeout_s && (!(*s.queue_timeout_s > 0) || !std::isfinite(*s.queue_timeout_s)))
    fail(fmt::format("{} must be positive and finite", kQueueTimeout));
  if (s.queue_timeout_s && s.queue == 0)
    fail(fmt::format("{} applies only to a pool queue: give --queue N (or the scenario's \"queue\")", kQueueTimeout));
  if (s.queue > 0 && !s.limited())
    fail(fmt::format("{} has no effect: no server has max_conns (a request waits only when every server is at its "
                     "max_conns; give a server max_conns=N)",
                     kQueue));
  // Simulated time is a double of seconds: at 1e15 s its step is 0.125 s and a
  // 5 ms service time vanishes. Up to 4.5e9 shortest service times the step is
  // at most a millionth of one.
  double shortest_service = std::numeric_limits<double>::infinity();
  for (const ServerSpec& server : s.servers) shortest_service = std::min(shortest_service, server.service_s);
  if (s.duration_s > shortest_service * kMaxDurationInServiceTimes) {
    // A trace of Unix timestamps (1.7e9 s) ends here: say so.
    const std::string absolute =
        s.has_trace && !s.trace_times.empty() && s.trace_times.front() >= kAbsoluteTraceTimeS
            ? fmt::format(" (the trace's first arrival is at {:.0f}s: its times look like absolute timestamps; a "
                          "trace gives seconds since its start, so subtract the first time from every line)",
                          s.trace_times.front())
            : "";
    fail(fmt::format("duration {:g}s is too long for the shortest service time ({:g}s): simulated time would lose "
                     "its precision; at most {:.3g}s{}",
                     s.duration_s, shortest_service, shortest_service * kMaxDurationInServiceTimes, absolute));
  }
  set_default_weights(s.servers);
  for (const Event& e : s.events) {
    if (!(e.at_s >= 0) || !std::isfinite(e.at_s)) fail("event times must be >= 0 and finite");
    if (e.kind == Event::Kind::slow && !(e.factor >= kMinSlowFactor && e.factor <= kMaxSlowFactor))
      fail(fmt::format("event at {}s: slow factor must be {}", e.at_s, kSlowFactorRange));
    if (e.kind == Event::Kind::weights) {
      if (e.weights.size() != s.servers.size())
        fail(fmt::format("--event '{}': {}", event_text(e), weights_for_servers(e.weights.size(), s.servers.size())));
      for (uint32_t w : e.weights)
        if (w > kMaxWeight) fail(fmt::format("event at {}s: weights must be 0..{}", e.at_s, kMaxWeight));
    } else if (!names.contains(e.server)) {
      fail(fmt::format("event names unknown server '{}'", e.server));
    }
    if (e.kind == Event::Kind::weight && e.weight > kMaxWeight)
      fail(fmt::format("event at {}s: weight must be 0..{}", e.at_s, kMaxWeight));
  }
  std::stable_sort(s.events.begin(), s.events.end(), [](const Event& a, const Event& b) { return a.at_s < b.at_s; });
  if (!std::isfinite(s.bucket_s) || s.bucket_s < 0) fail("--bucket must be positive and finite");
  if (s.bucket_s == 0) s.bucket_s = s.duration_s / 60;
  // The bucket comes from --bucket or a scenario's "bucket" (the default,
  // duration / 60, is never too small): the message names both.
  constexpr std::string_view kBucket = "the bucket (--bucket, or the scenario's \"bucket\")";
  if (s.duration_s / s.bucket_s > 100000)
    fail(fmt::format("{} is too small: {:g}s over {:g}s is {:.0f} buckets, at most 100,000", kBucket, s.bucket_s,
                     s.duration_s, std::ceil(s.duration_s / s.bucket_s * (1 - 1e-9))));
  const double points = static_cast<double>(bucket_count(s)) * static_cast<double>(s.servers.size());
  if (points > static_cast<double>(kMaxSeriesPoints))
    fail(fmt::format("{} is too small for {} servers: {:.0f} utilisation points per policy, at most {}", kBucket,
                     s.servers.size(), points, kMaxSeriesPoints));
}

Scenario seed_example(bool big_half_speed) {
  const Plan plan = make_plan(PlanInputs{});
  constexpr uint32_t kWorkersPerUnit = 4;
  Scenario s;
  s.name = big_half_speed ? "seed: big server at half speed" : "seed: steady";
  s.seed = 1;
  s.duration_s = 600;
  s.rate = plan.traffic_now_rps / static_cast<double>(plan.groups);  // one group's share
  const double service = kWorkersPerUnit / plan.inputs.server_rps;   // 4 workers x 20 ms = 200 req/s
  const char* names[] = {"big", "small1", "small2"};
  for (size_t i = 0; i < plan.inputs.group.size() && i < 3; ++i) {
    ServerSpec server;
    server.name = names[i];
    server.units = plan.inputs.group[i];
    server.size = static_cast<uint32_t>(std::lround(server.units * kWorkersPerUnit));
    server.service_s = service;
    server.dist = ServiceDist::exponential;
    s.servers.push_back(server);
  }
  if (big_half_speed) {
    Event e;
    e.at_s = 0;
    e.kind = Event::Kind::slow;
    e.server = "big";
    e.factor = 2;
    s.events.push_back(e);
  }
  s.bucket_s = 10;
  validate(s);
  return s;
}

}  // namespace heft::sim
