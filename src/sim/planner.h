// Capacity planner behind `heft plan`: sizes a fleet of servers built from
// identical groups (e.g. one 3x and two 1x servers) and shows what weights buy.
//
// Steps (docs/plan.md has the derivations):
//   1. average rps      = DAU x requests per user / 86,400
//   2. peak rps         = average x peak factor
//   3. groups           = ceil(peak / (server rps x target busy) / group capacity)
//   4. weighted         = traffic now / total capacity
//   5. unweighted       = (traffic now / servers) / (size x server rps), per size
//   6. half speed       = the largest servers run at half speed: fixed weighted
//                         share vs a perfect split over the reduced capacity
//
// Pure functions of their inputs: no I/O, no global state, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace heft::sim {

// Defaults are the worked example of the planning page (1M DAU, 2x peak, ...).
struct PlanInputs {
  double daily_active_users = 1'000'000;
  double requests_per_user = 50;         // per user per day
  double peak_factor = 2;                // busiest hour vs the daily average
  double server_rps = 200;               // requests/s one size-1 server handles
  double target_busy_percent = 60;       // headroom: plan servers to be this busy
  std::vector<double> group = {3, 1, 1};  // sizes of the servers in one group
  double planned_peak = 1;               // traffic now = peak x this
};

// Parses "3,1,1" into sizes; throws std::invalid_argument on empty, non-numeric
// or non-positive entries.
std::vector<double> parse_group(std::string_view text);

// Throws std::invalid_argument (one-line message naming the flag) on zero,
// negative or non-finite inputs, a target busy above 100 or an empty group.
void validate(const PlanInputs& inputs);

// How many servers of one size the fleet has.
struct ServerCount {
  double size = 0;
  int64_t per_group = 0;
  int64_t total = 0;
};

// Step 5 for one server size: its equal share and how busy that makes it.
struct SizeUtilisation {
  double size = 0;
  double share_rps = 0;     // traffic now / number of servers
  double busy_percent = 0;  // share / (size x server rps) x 100
};

// Every intermediate value, unrounded. Percentages are in percent (58.0, not 0.58).
struct Plan {
  PlanInputs inputs;
  // 1, 2
  double average_rps = 0;
  double peak_rps = 0;
  double traffic_now_rps = 0;  // peak x planned_peak: what steps 4-6 carry
  // 3
  double small_server_equivalents = 0;  // peak / (server rps x target busy)
  double group_capacity = 0;            // sum of the group's sizes
  int64_t groups = 0;
  std::vector<ServerCount> servers;  // one per distinct size, largest first
  int64_t total_servers = 0;
  double total_capacity_rps = 0;  // groups x group capacity x server rps
  // 4
  double utilisation_weighted_percent = 0;
  // 5
  double equal_share_rps = 0;
  std::vector<SizeUtilisation> utilisation_unweighted;  // largest size first
  // 6: every server of the largest size runs at half speed
  double largest_size = 0;
  double slow_server_capacity_rps = 0;  // largest size x 0.5 x server rps
  double fixed_share_big_rps = 0;       // traffic now x largest size / (groups x group capacity)
  double fixed_share_big_percent = 0;   // fixed share / slow server capacity
  double reduced_capacity_rps = 0;      // total capacity with the largest servers halved
  double perfect_split_percent = 0;     // traffic now / reduced capacity
};

// Computes every step; validates first (std::invalid_argument).
Plan make_plan(const PlanInputs& inputs);

// Display rounding shared by the text and JSON outputs.
double round_rps(double rps);          // >= 100: whole; below: 3 significant digits
double round_percent(double percent);  // whole percent
double round_equivalents(double x);    // 2 decimals
std::string format_rps(double rps);    // "1,157", "57.9"
std::string format_size(double size);  // "3", "1.5"

// The six steps with formulas and numbers, values over 100% marked.
std::string format_plan_text(const Plan& plan);

// Unrounded values plus rounded display values; see docs/plan.md for the keys.
nlohmann::json plan_to_json(const Plan& plan);

}  // namespace heft::sim
