#include "sim/planner.h"

#include "sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace heft::sim {
namespace {

constexpr double kSecondsPerDay = 86'400;
// Groups beyond this are certainly a typo, and int64 arithmetic stays exact.
constexpr double kMaxGroups = 1e12;

// Results are shown through int64 (whole req/s and percents with thousands
// separators); up to 1e15 they stay exact (below 2^53), far beyond any fleet.
constexpr double kMaxResult = 1e15;

// A rate computed from the inputs must be positive, finite and displayable;
// `inputs` names the flags whose product it is.
void check_rate(double rps, std::string_view what, std::string_view inputs) {
  if (!std::isfinite(rps)) {
    throw std::invalid_argument(fmt::format("{}: {} is not a finite number of req/s", inputs, what));
  }
  if (rps > kMaxResult) {
    throw std::invalid_argument(
        fmt::format("{}: {} comes to {:g} req/s, more than heft plan handles ({:g} req/s)", inputs, what, rps,
                    kMaxResult));
  }
  if (!(rps > 0) || !std::isfinite(round_rps(rps))) {
    throw std::invalid_argument(
        fmt::format("{}: {} comes to {:g} req/s, too small to compute with", inputs, what, rps));
  }
}

void check_percent(double percent, std::string_view what, std::string_view inputs) {
  if (!std::isfinite(percent) || percent > kMaxResult) {
    throw std::invalid_argument(fmt::format("{}: {} comes to {:g}%, more than heft plan handles ({:g}%)", inputs,
                                            what, percent, kMaxResult));
  }
}

void require_positive(double value, const char* flag) {
  if (!std::isfinite(value) || value <= 0) {
    throw std::invalid_argument(fmt::format("--{} must be a positive number, got {}", flag, value));
  }
}

std::string with_thousands(int64_t whole) {
  std::string digits = std::to_string(whole < 0 ? -whole : whole);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return whole < 0 ? "-" + out : out;
}

// Over 100% is decided on the unrounded value (100.4% is still over), with the
// same relative tolerance as step 3's group count: a fleet step 3 found exactly
// big enough is not over by rounding noise (100.00000000000003%).
bool over_100(double percent) { return percent > 100 * (1 + 1e-9); }

std::string format_percent(double percent) {
  std::string text = fmt::format("{}%", with_thousands(static_cast<int64_t>(round_percent(percent))));
  if (over_100(percent)) text += " [over 100%]";
  return text;
}

std::string number_word(int64_t n) {
  static const char* const words[] = {"zero", "one", "two",   "three", "four",   "five",  "six",
                                      "seven", "eight", "nine", "ten",  "eleven", "twelve"};
  return n >= 0 && n <= 12 ? words[n] : std::to_string(n);
}

// "big"/"small" when the group mixes sizes, else the size itself ("4x").
std::string size_label(const Plan& plan, double size) {
  if (plan.servers.size() >= 2) {
    if (size == plan.servers.front().size) return "big";
    if (size == plan.servers.back().size) return "small";
  }
  return format_size(size) + "x";
}

// "one 3x and two 1x"
std::string describe_group(const Plan& plan) {
  std::string out;
  for (size_t i = 0; i < plan.servers.size(); ++i) {
    if (i != 0) out += i + 1 == plan.servers.size() ? " and " : ", ";
    out += number_word(plan.servers[i].per_group) + " " + format_size(plan.servers[i].size) + "x";
  }
  return out;
}

// "2 big + 4 small", "2 of 4x + 2 of 2x + 4 of 1x", "6 of 1x"
std::string describe_servers(const Plan& plan) {
  std::string out;
  const bool named = plan.servers.size() == 2;
  for (size_t i = 0; i < plan.servers.size(); ++i) {
    if (i != 0) out += " + ";
    const auto& count = plan.servers[i];
    out += named ? fmt::format("{} {}", with_thousands(count.total), size_label(plan, count.size))
                 : fmt::format("{} of {}x", with_thousands(count.total), format_size(count.size));
  }
  return out;
}

nlohmann::json rps_value(double rps) {
  return {{"value", rps}, {"rounded", round_rps(rps)}, {"display", format_rps(rps) + " req/s"}};
}

nlohmann::json percent_value(double percent) {
  return {{"value", percent},
          {"rounded", round_percent(percent)},
          {"display", fmt::format("{}%", with_thousands(static_cast<int64_t>(round_percent(percent))))},
          {"over_100", over_100(percent)}};
}

}  // namespace

std::vector<double> parse_group(std::string_view text) {
  std::vector<double> sizes;
  // Spaces and tabs around a size are trimmed ("3, 1,\t1"), as in heft
  // pick's and heft sim's lists; a tab after the number was an error.
  for (std::string_view part : split_trimmed(text, ',')) {
    const std::string item(part);
    size_t used = 0;
    double size = 0;
    try {
      size = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !std::isfinite(size) || size <= 0) {
      throw std::invalid_argument(fmt::format(
          "--group must be comma-separated positive server sizes like 3,1,1, got '{}'", text));
    }
    sizes.push_back(size);
  }
  return sizes;
}

void validate(const PlanInputs& in) {
  require_positive(in.daily_active_users, "dau");
  require_positive(in.requests_per_user, "requests-per-user");
  require_positive(in.peak_factor, "peak-factor");
  require_positive(in.server_rps, "server-rps");
  require_positive(in.target_busy_percent, "target-busy");
  if (in.target_busy_percent > 100) {
    throw std::invalid_argument(
        fmt::format("--target-busy is a percentage of 0 to 100, got {}", in.target_busy_percent));
  }
  require_positive(in.planned_peak, "planned-peak");
  if (in.group.empty()) throw std::invalid_argument("--group needs at least one server size");
  for (double size : in.group) require_positive(size, "group");
}

double round_rps(double rps) {
  if (rps >= 100 || rps == 0) return std::round(rps);
  const double scale = std::pow(10.0, 2 - static_cast<int>(std::floor(std::log10(rps))));
  return std::round(rps * scale) / scale;
}

double round_percent(double percent) { return std::round(percent); }

double round_equivalents(double x) { return std::round(x * 100) / 100; }

std::string format_rps(double rps) {
  const double rounded = round_rps(rps);
  if (rounded >= 100) return with_thousands(static_cast<int64_t>(rounded));
  return fmt::format("{:.3g}", rounded);  // 57.9, 0.579, 1.16e-297 (not 1.1599999999999999e-297)
}

// Sizes as given (1.5, 0.3) without the noise of a binary sum (0.30000000000000004).
std::string format_size(double size) { return fmt::format("{:.12g}", size); }

Plan make_plan(const PlanInputs& in) {
  validate(in);
  Plan plan;
  plan.inputs = in;
  // Every product is checked as it is made (docs/plan.md: every number must be
  // finite), so an error names the flags that overflowed.
  plan.average_rps = in.daily_active_users * in.requests_per_user / kSecondsPerDay;
  check_rate(plan.average_rps, "the average", "--dau x --requests-per-user");
  plan.peak_rps = plan.average_rps * in.peak_factor;
  check_rate(plan.peak_rps, "the peak", "--dau x --requests-per-user x --peak-factor");
  plan.traffic_now_rps = plan.peak_rps * in.planned_peak;
  check_rate(plan.traffic_now_rps, "traffic now", "--planned-peak");

  for (double size : in.group) plan.group_capacity += size;
  check_rate(plan.group_capacity * in.server_rps, "one group's capacity", "--server-rps x --group");
  for (double size : in.group) {
    check_rate(size * in.server_rps, fmt::format("a {}x server's capacity", format_size(size)),
               "--server-rps x --group");
  }
  const double busy = in.target_busy_percent / 100;
  plan.small_server_equivalents = plan.peak_rps / (in.server_rps * busy);
  if (!std::isfinite(plan.small_server_equivalents)) {
    throw std::invalid_argument("--server-rps x --target-busy: too small to compute with");
  }
  // A hair of tolerance so 10.000000000001 groups' worth of rounding noise is 10.
  const double groups_needed = std::ceil(plan.small_server_equivalents / plan.group_capacity - 1e-9);
  if (groups_needed > kMaxGroups) {
    // Groups = peak / (server rps x target busy) / group capacity: every flag but --planned-peak.
    throw std::invalid_argument(fmt::format(
        "--dau x --requests-per-user x --peak-factor / (--server-rps x --target-busy x the sum of --group): "
        "the plan needs {:.3g} groups, more than heft plan handles ({:g})",
        groups_needed, kMaxGroups));
  }
  plan.groups = std::max<int64_t>(1, static_cast<int64_t>(groups_needed));

  std::map<double, int64_t, std::greater<>> per_group;  // largest size first
  for (double size : in.group) ++per_group[size];
  for (auto [size, count] : per_group) {
    plan.servers.push_back({size, count, count * plan.groups});
    plan.total_servers += count * plan.groups;
  }
  plan.total_capacity_rps = static_cast<double>(plan.groups) * plan.group_capacity * in.server_rps;

  plan.utilisation_weighted_percent = plan.traffic_now_rps / plan.total_capacity_rps * 100;

  plan.equal_share_rps = plan.traffic_now_rps / static_cast<double>(plan.total_servers);
  for (const auto& count : plan.servers) {
    plan.utilisation_unweighted.push_back(
        {count.size, plan.equal_share_rps, plan.equal_share_rps / (count.size * in.server_rps) * 100});
  }

  const ServerCount& largest = plan.servers.front();
  plan.largest_size = largest.size;
  plan.slow_server_capacity_rps = largest.size * 0.5 * in.server_rps;
  plan.fixed_share_big_rps =
      plan.traffic_now_rps * largest.size / (static_cast<double>(plan.groups) * plan.group_capacity);
  plan.fixed_share_big_percent = plan.fixed_share_big_rps / plan.slow_server_capacity_rps * 100;
  const double reduced_group_capacity =
      plan.group_capacity - static_cast<double>(largest.per_group) * largest.size * 0.5;
  plan.reduced_capacity_rps = static_cast<double>(plan.groups) * reduced_group_capacity * in.server_rps;
  plan.perfect_split_percent = plan.traffic_now_rps / plan.reduced_capacity_rps * 100;

  const char* const fleet = "--server-rps x --group";
  check_rate(plan.total_capacity_rps, "the fleet's capacity", fleet);
  check_rate(plan.equal_share_rps, "the equal share", fleet);
  check_rate(plan.slow_server_capacity_rps, "the slowed server's capacity", fleet);
  check_rate(plan.fixed_share_big_rps, "the big server's fixed share", fleet);
  check_rate(plan.reduced_capacity_rps, "the reduced capacity", fleet);
  check_percent(plan.utilisation_weighted_percent, "step 4's utilisation", fleet);
  for (const SizeUtilisation& u : plan.utilisation_unweighted) {
    check_percent(u.busy_percent, fmt::format("step 5's utilisation of a {}x server", format_size(u.size)), fleet);
  }
  check_percent(plan.fixed_share_big_percent, "step 6's fixed share", fleet);
  check_percent(plan.perfect_split_percent, "step 6's perfect split", fleet);
  return plan;
}

std::string format_plan_text(const Plan& plan) {
  const PlanInputs& in = plan.inputs;
  const std::string traffic = format_rps(plan.traffic_now_rps);
  std::string out;
  auto step = [&out](int number, std::string_view title, const std::string& body) {
    out += fmt::format("{}. {}\n   {}\n\n", number, title, body);
  };

  step(1, "Average requests per second",
       fmt::format("DAU x requests per user per day / 86,400 = {} x {} / 86,400 = {} req/s",
                   format_rps(in.daily_active_users), format_rps(in.requests_per_user),
                   format_rps(plan.average_rps)));

  step(2, "Peak requests per second",
       fmt::format("average x peak factor = {} x {} = {} req/s", format_rps(plan.average_rps),
                   fmt::format("{}", in.peak_factor), format_rps(plan.peak_rps)));

  step(3, "Servers needed",
       fmt::format("peak / (server req/s x target busy) = {} / ({} x {}%) = {:.2f} small servers' worth,\n"
                   "   in groups of {} server{} (capacity {}) = {} group{} = {}",
                   format_rps(plan.peak_rps), format_rps(in.server_rps), fmt::format("{}", in.target_busy_percent),
                   plan.small_server_equivalents, describe_group(plan), in.group.size() == 1 ? "" : "s",
                   format_size(plan.group_capacity),
                   with_thousands(plan.groups), plan.groups == 1 ? "" : "s", describe_servers(plan)));

  std::string now_line;
  if (in.planned_peak != 1) {
    now_line = fmt::format("traffic now = peak x planned peak = {} x {} = {} req/s\n   ",
                           format_rps(plan.peak_rps), in.planned_peak, traffic);
  }
  std::string weights;
  for (const auto& count : plan.servers) weights += (weights.empty() ? "" : ", ") + format_size(count.size);
  step(4, "With the weight matching the size",
       fmt::format("{}weights = sizes ({}): every server at traffic now / total capacity\n"
                   "   = {} / ({} group{} x {} x {} = {} req/s) = {}",
                   now_line, weights, traffic, with_thousands(plan.groups), plan.groups == 1 ? "" : "s",
                   format_size(plan.group_capacity),
                   format_rps(in.server_rps), format_rps(plan.total_capacity_rps),
                   format_percent(plan.utilisation_weighted_percent)));

  std::string per_size;
  for (size_t i = 0; i < plan.utilisation_unweighted.size(); ++i) {
    const auto& u = plan.utilisation_unweighted[i];
    const bool plural = plan.servers[i].per_group > 1;
    const std::string label = size_label(plan, u.size);
    const std::string size_note = label.back() == 'x' ? "" : " (" + format_size(u.size) + "x)";
    per_size += fmt::format("\n   {} server{}{}: {} / ({} x {}) = {}", label, plural ? "s" : "", size_note,
                            format_rps(u.share_rps), format_size(u.size),
                            format_rps(in.server_rps), format_percent(u.busy_percent));
  }
  step(5, "Without the weight",
       fmt::format("equal shares, as with round robin while queues are short:\n"
                   "   traffic now / servers = {} / {} = {} req/s each{}",
                   traffic, with_thousands(plan.total_servers), format_rps(plan.equal_share_rps), per_size));

  const std::string big = size_label(plan, plan.largest_size);
  const double reduced_group = plan.reduced_capacity_rps / (static_cast<double>(plan.groups) * in.server_rps);
  step(6, fmt::format("If the {} server{} slow{} to half speed", big, plan.servers.front().per_group > 1 ? "s" : "",
                      plan.servers.front().per_group > 1 ? "" : "s"),
       fmt::format("a fixed share (weighted round robin) asks {} for traffic now x {} / ({} x {})\n"
                   "   = {} req/s of its {} x {} x 0.5 = {} req/s = {}\n"
                   "   least connections moves work off it; a perfect split puts every server at\n"
                   "   traffic now / reduced capacity = {} / ({} x {} x {} = {} req/s) = {}",
                   plan.servers.front().per_group > 1 ? "each" : "it", format_size(plan.largest_size),
                   with_thousands(plan.groups), format_size(plan.group_capacity), format_rps(plan.fixed_share_big_rps), format_size(plan.largest_size), format_rps(in.server_rps),
                   format_rps(plan.slow_server_capacity_rps), format_percent(plan.fixed_share_big_percent), traffic,
                   with_thousands(plan.groups), format_size(reduced_group), format_rps(in.server_rps),
                   format_rps(plan.reduced_capacity_rps), format_percent(plan.perfect_split_percent)));

  out += "Set weights from each server's size, and let the counts in progress handle what the\n"
         "weights cannot know about. Values marked [over 100%] exceed the servers' capacity.\n";
  return out;
}

nlohmann::json plan_to_json(const Plan& plan) {
  const PlanInputs& in = plan.inputs;
  nlohmann::json servers = nlohmann::json::object();
  nlohmann::json unweighted = nlohmann::json::object();
  for (const auto& count : plan.servers) servers[format_size(count.size)] = count.total;
  for (const auto& u : plan.utilisation_unweighted) {
    nlohmann::json value = percent_value(u.busy_percent);
    value["share_rps"] = u.share_rps;
    unweighted[format_size(u.size)] = std::move(value);
  }
  nlohmann::json fixed_share = percent_value(plan.fixed_share_big_percent);
  fixed_share["share_rps"] = plan.fixed_share_big_rps;
  fixed_share["capacity_rps"] = plan.slow_server_capacity_rps;
  nlohmann::json perfect = percent_value(plan.perfect_split_percent);
  perfect["capacity_rps"] = plan.reduced_capacity_rps;

  return {
      {"inputs",
       {{"dau", in.daily_active_users},
        {"requests_per_user", in.requests_per_user},
        {"peak_factor", in.peak_factor},
        {"server_rps", in.server_rps},
        {"target_busy", in.target_busy_percent},
        {"group", in.group},
        {"planned_peak", in.planned_peak}}},
      {"average_rps", rps_value(plan.average_rps)},
      {"peak_rps", rps_value(plan.peak_rps)},
      {"traffic_now_rps", rps_value(plan.traffic_now_rps)},
      {"small_server_equivalents",
       {{"value", plan.small_server_equivalents},
        {"rounded", round_equivalents(plan.small_server_equivalents)},
        {"display", fmt::format("{:.2f}", plan.small_server_equivalents)}}},
      {"group_capacity", plan.group_capacity},
      {"groups", plan.groups},
      {"servers", servers},
      {"total_servers", plan.total_servers},
      {"total_capacity_rps", plan.total_capacity_rps},
      {"utilisation_weighted", percent_value(plan.utilisation_weighted_percent)},
      {"equal_share_rps", rps_value(plan.equal_share_rps)},
      {"utilisation_unweighted", unweighted},
      {"half_speed",
       {{"largest_size", plan.largest_size}, {"fixed_share_big", fixed_share}, {"perfect_split", perfect}}},
  };
}

}  // namespace heft::sim
