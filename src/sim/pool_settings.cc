#include "sim/pool_settings.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/scenario.h"

namespace heft::sim {
namespace {

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

// One adaptive option from its text (a flag's key=value) or JSON value,
// checked against the Heftfile's range (docs/heftfile.md, adaptive).
struct AdaptiveOption {
  std::string_view key;
  enum class Kind { duration, positive_duration, number } kind;
  double min = 0, max = 0;
  bool open_min = false;  // the value must be greater than min
};
constexpr AdaptiveOption kAdaptiveOptions[] = {
    {"interval", AdaptiveOption::Kind::positive_duration},
    {"latency_threshold", AdaptiveOption::Kind::duration},
    {"median_factor", AdaptiveOption::Kind::number, 1, 100},
    {"error_threshold", AdaptiveOption::Kind::number, 0, 1},
    {"cut", AdaptiveOption::Kind::number, 0, 1, true},
    {"min_weight_ratio", AdaptiveOption::Kind::number, 0, 1},
};

const AdaptiveOption* find_option(std::string_view key) {
  for (const AdaptiveOption& o : kAdaptiveOptions)
    if (o.key == key) return &o;
  return nullptr;
}

std::string option_names() {
  std::string names;
  for (const AdaptiveOption& o : kAdaptiveOptions) names += (names.empty() ? "" : ", ") + std::string(o.key);
  return names;
}

// Sets option `o` of `a` to `value` (seconds for durations), checking its range.
void set_option(upstream::AdaptiveOptions& a, const AdaptiveOption& o, double value, const std::string& what) {
  using Kind = AdaptiveOption::Kind;
  if (o.kind == Kind::number) {
    if (!std::isfinite(value) || value < o.min || value > o.max || (o.open_min && value <= o.min))
      fail(fmt::format("{} must be a number {}{}..{}, got {}", what, o.open_min ? "above " : "", o.min, o.max, value));
  } else if (o.kind == Kind::positive_duration && !(value > 0)) {
    fail(fmt::format("{} must be a duration greater than 0", what));
  }
  if (o.key == "interval") a.interval = pool_duration(value, what);
  else if (o.key == "latency_threshold") a.latency_threshold = pool_duration(value, what);
  else if (o.key == "median_factor") a.median_factor = value;
  else if (o.key == "error_threshold") a.error_threshold = value;
  else if (o.key == "cut") a.cut = value;
  else a.min_weight_ratio = value;
}

double seconds_of(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000; }

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "0.25", or a percentage as the Heftfile takes it: "25%".
double parse_fraction(std::string_view text, const std::string& what) {
  const bool percent = text.ends_with('%');
  if (percent) text.remove_suffix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    fail(fmt::format("{}: '{}{}' is not a number", what, text, percent ? "%" : ""));
  return percent ? value / 100 : value;
}

}  // namespace

std::chrono::milliseconds pool_duration(double seconds, std::string_view what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxPoolDurationS)
    fail(fmt::format("{} must be 0..365d, got {}s", what, seconds));
  const double ms = seconds * 1000;
  const double whole = std::round(ms);
  // As the Heftfile's durations: whole milliseconds (the pool counts in them).
  if (std::abs(ms - whole) > 1e-6 * std::max(1.0, ms))
    fail(fmt::format("{} must be a whole number of milliseconds, got {}s", what, seconds));
  return std::chrono::milliseconds(static_cast<int64_t>(whole));
}

upstream::AdaptiveOptions parse_adaptive(std::string_view text, upstream::AdaptiveOptions base) {
  const std::vector<std::string_view> parts = split_trimmed(text, ',');
  if (parts.size() == 1 && (parts[0] == "on" || parts[0].empty())) {
    base.enabled = true;
    return base;
  }
  if (parts.size() == 1 && parts[0] == "off") {
    base.enabled = false;
    return base;
  }
  base.enabled = true;
  std::unordered_set<std::string_view> seen;
  for (std::string_view part : parts) {
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos)
      fail(fmt::format("--adaptive: '{}' is not key=value (on, off, or the options {})", part, option_names()));
    const std::string_view key = trim(part.substr(0, eq));
    const std::string_view value = trim(part.substr(eq + 1));
    const AdaptiveOption* option = find_option(key);
    if (!option) fail(fmt::format("--adaptive: unknown option '{}' (the options are {})", key, option_names()));
    if (!seen.insert(key).second) fail(fmt::format("--adaptive: option '{}' is given twice", key));
    const std::string what = fmt::format("--adaptive {}", key);
    const double number =
        option->kind == AdaptiveOption::Kind::number ? parse_fraction(value, what) : parse_duration(value, what);
    set_option(base, *option, number, what);
  }
  return base;
}

upstream::AdaptiveOptions adaptive_from_json(const nlohmann::json& value, std::string_view path) {
  upstream::AdaptiveOptions a;
  if (value.is_boolean()) {
    a.enabled = value.get<bool>();
    return a;
  }
  if (!value.is_object())
    fail(fmt::format("scenario: {}: must be true, false or an object of adaptive options, got {}", path,
                     value.dump()));
  a.enabled = true;
  for (const auto& [key, v] : value.items()) {
    const std::string at = fmt::format("scenario: {}.{}", path, key);
    if (key == "enabled") {
      if (!v.is_boolean()) fail(fmt::format("{}: must be true or false, got {}", at, v.dump()));
      a.enabled = v.get<bool>();
      continue;
    }
    const AdaptiveOption* option = find_option(key);
    if (!option) fail(fmt::format("{}: unknown key (the options are enabled, {})", at, option_names()));
    double number = 0;
    if (option->kind == AdaptiveOption::Kind::number) {
      if (!v.is_number()) fail(fmt::format("{}: must be a number, got {}", at, v.dump()));
      number = v.get<double>();
    } else if (v.is_string()) {
      number = parse_duration(v.get<std::string>(), at);
    } else if (v.is_number()) {
      number = v.get<double>();
    } else {
      fail(fmt::format("{}: must be a duration (\"30s\" or seconds), got {}", at, v.dump()));
    }
    set_option(a, *option, number, at);
  }
  return a;
}

std::string adaptive_text(const upstream::AdaptiveOptions& a) {
  const std::string latency = a.latency_threshold.count() > 0
                                  ? fmt::format("latency_threshold {} s", seconds_of(a.latency_threshold))
                                  : fmt::format("median_factor {:g}", a.median_factor);
  return fmt::format("interval {} s, {}, error_threshold {:g}%, cut {:g}%, min_weight_ratio {:g}",
                     seconds_of(a.interval), latency, a.error_threshold * 100, a.cut * 100, a.min_weight_ratio);
}

nlohmann::ordered_json adaptive_json(const upstream::AdaptiveOptions& a) {
  nlohmann::ordered_json j;
  j["interval_s"] = seconds_of(a.interval);
  j["latency_threshold_s"] = seconds_of(a.latency_threshold);
  j["median_factor"] = a.median_factor;
  j["error_threshold"] = a.error_threshold;
  j["cut"] = a.cut;
  j["min_weight_ratio"] = a.min_weight_ratio;
  return j;
}

bool dynamic_weights(const Scenario& s) {
  if (s.adaptive.enabled) return true;
  for (const ServerSpec& server : s.servers)
    if (server.slow_start_s.value_or(s.slow_start_s) > 0) return true;
  return false;
}

upstream::PoolConfig pool_config(const Scenario& s, balance::PolicyKind policy, const std::vector<uint32_t>& weights) {
  upstream::PoolConfig config;
  config.name = s.name;
  config.policy.kind = policy;
  config.policy.hash_strategy = s.hash_strategy;
  config.adaptive = s.adaptive;
  config.backends.reserve(s.servers.size());
  for (size_t i = 0; i < s.servers.size(); ++i) {
    const ServerSpec& server = s.servers[i];
    upstream::BackendConfig b;
    b.name = server.name;
    b.address = server.name;
    b.weight = weights[i];
    b.max_fails = server.max_fails.value_or(s.max_fails);
    b.fail_timeout = pool_duration(server.fail_timeout_s.value_or(s.fail_timeout_s), "fail_timeout");
    b.slow_start = pool_duration(server.slow_start_s.value_or(s.slow_start_s), "slow_start");
    b.backup = server.backup;
    b.down = server.down;
    b.max_conns = server.max_conns;
    config.backends.push_back(std::move(b));
  }
  return config;
}

}  // namespace heft::sim
