// `heft plan`: the capacity calculator (src/sim/planner.h) on the command line.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "sim/planner.h"

namespace heft::cli {
namespace {

struct PlanFlags {
  sim::PlanInputs inputs;
  std::string group = "3,1,1";
  bool json = false;
};

void run_plan(const PlanFlags& flags) {
  sim::PlanInputs inputs = flags.inputs;
  sim::Plan plan;
  try {
    inputs.group = sim::parse_group(flags.group);
    plan = sim::make_plan(inputs);
  } catch (const std::invalid_argument& e) {
    throw BadArguments(e.what());
  }
  const std::string out = flags.json ? sim::plan_to_json(plan).dump(2) + "\n" : sim::format_plan_text(plan);
  std::fputs(out.c_str(), stdout);
}

void setup(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = root.add_subcommand("plan", "Size a fleet of weighted servers and show what the weights buy");
  sim::PlanInputs& in = flags->inputs;
  cmd->add_option("--dau", in.daily_active_users, "Daily active users")->capture_default_str();
  cmd->add_option("--requests-per-user", in.requests_per_user, "Requests per user per day")->capture_default_str();
  cmd->add_option("--peak-factor", in.peak_factor, "Busiest hour vs the daily average")->capture_default_str();
  cmd->add_option("--server-rps", in.server_rps, "Requests/s one size-1 server handles (load tested)")
      ->capture_default_str();
  cmd->add_option("--target-busy", in.target_busy_percent, "How busy servers may be at peak, in %")
      ->capture_default_str();
  cmd->add_option("--group", flags->group, "Sizes of the servers in one group, e.g. 3,1,1")->capture_default_str();
  cmd->add_option("--planned-peak", in.planned_peak, "Traffic now as a multiple of the planned peak")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print every value as JSON (unrounded and rounded)");
  cmd->callback([flags] { run_plan(*flags); });
}

const bool registered = add_command(60, &setup);

}  // namespace
}  // namespace heft::cli
