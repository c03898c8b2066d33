// `heft rollout`: a canary (or blue-green) rollout driven through the admin
// API and judged from heft's own per-upstream counters (docs/rollout.md).
//
//   heft rollout --site SITE --stable A --canary B --stages 95:5,80:20,50:50,0:100
//                --hold 5m --max-error-rate 1% --min-requests 200 [--max-p99 300ms]
//                [--dry-run] [--rollback-on-abort] [--address HOST:PORT] [--token T]
//
// The stages, their judge and the rollback are cli/weight_stages.h's, shared
// with `heft calibrate --apply`: each stage sets the stable's and canary's
// weights in one If-Match PATCH (someone else's concurrent change is kept),
// then GET /reverse_proxy/upstreams once a poll judges the canary's requests,
// 5xx responses and p99 since the stage began; a breach rolls back to stable
// 100 : canary 0 at once. The site is found once by SITE and followed by its
// address after that. Exit: 0 done, 1 rolled back or the rollback
// failed (state reported), or stopped (the site, stable or canary left, or
// their weights are no longer the stage's), 2 bad arguments or nothing to
// roll out against, 130 interrupted (state reported).
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "cli/site_lookup.h"
#include "cli/weight_stages.h"
#include "config/values.h"
#include "heft/balance/balancer.h"
#include "heft/balance/policy.h"

namespace heft::cli {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

struct Stage {
  uint32_t stable = 0;
  uint32_t canary = 0;
};

struct RolloutOptions {
  std::string site, stable, canary, stages_text = "95:5,80:20,50:50,0:100", hold_text = "5m";
  std::string max_error_rate_text = "1%", max_p99_text, poll_text = "1s", min_requests_text = "200";
  bool dry_run = false;
  AdminClientOptions admin;
  // Parsed:
  std::vector<Stage> stages;
  StageJudge judge;  // from the option texts (parse())
};

void parse(RolloutOptions& o) {
  if (o.site.empty()) throw BadArguments("rollout: --site is required");
  if (o.stable.empty() || o.canary.empty()) throw BadArguments("rollout: --stable and --canary are required");
  if (o.stable == o.canary) throw BadArguments("rollout: --stable and --canary must differ");
  size_t start = 0;
  while (start <= o.stages_text.size()) {
    size_t comma = o.stages_text.find(',', start);
    std::string item = o.stages_text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto bad_stage = [&item] {
      return BadArguments(fmt::format("rollout: bad stage \"{}\" in --stages (want STABLE:CANARY weights, e.g. 95:5)", item));
    };
    auto colon = item.find(':');
    if (colon == std::string::npos) throw bad_stage();
    auto a = config::parse_uint(item.substr(0, colon), balance::kMaxWeight);
    auto b = config::parse_uint(item.substr(colon + 1), balance::kMaxWeight);
    if (!a || !b || *a + *b == 0) throw bad_stage();
    o.stages.push_back({uint32_t(*a), uint32_t(*b)});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto hold = config::parse_duration(o.hold_text);
  if (!hold || hold->count() <= 0) throw BadArguments(fmt::format("rollout: bad --hold \"{}\" (e.g. 5m)", o.hold_text));
  o.judge.hold = *hold;
  auto poll = config::parse_duration(o.poll_text);
  if (!poll || poll->count() <= 0) throw BadArguments(fmt::format("rollout: bad --poll \"{}\"", o.poll_text));
  o.judge.poll = *poll;
  auto rate = config::parse_fraction(o.max_error_rate_text);
  if (!rate || *rate < 0 || *rate > 1)
    throw BadArguments(fmt::format("rollout: bad --max-error-rate \"{}\" (e.g. 1% or 0.01)", o.max_error_rate_text));
  // "1" is 100 %: a guard that never trips, almost surely meant as 1 %.
  if (*rate == 1 && o.max_error_rate_text.back() != '%')
    throw BadArguments(fmt::format("rollout: --max-error-rate \"{}\" would be 100% (never rolled back for errors): "
                                   "write 1% for one percent, or 100% if that is meant",
                                   o.max_error_rate_text));
  o.judge.max_error_rate = *rate;
  // Read as text: CLI11 reads "-5" into an unsigned as 18446744073709551611.
  auto min_requests = config::parse_uint(o.min_requests_text, UINT64_MAX);
  if (!min_requests)
    throw BadArguments(fmt::format("rollout: bad --min-requests \"{}\" (a whole number, 0 or more)", o.min_requests_text));
  o.judge.min_requests = *min_requests;
  if (!o.max_p99_text.empty()) {
    auto p99 = config::parse_duration(o.max_p99_text);
    if (!p99 || p99->count() <= 0) throw BadArguments(fmt::format("rollout: bad --max-p99 \"{}\" (e.g. 300ms)", o.max_p99_text));
    o.judge.max_p99 = *p99;
  }
}

// SITE as find_site() reads it. Both upstreams must be primaries in service:
// a backup takes no traffic while a primary is up, so its stage could never
// pass, and the rollback would drain the pool's failover. The site's policy
// must split by weight, or a 95:5 stage is not 95:5.
std::optional<StageTarget> find_target(const json& config, const RolloutOptions& o, std::string& why) {
  auto site = find_site(config, o.site, why);
  if (!site) return std::nullopt;
  const json& upstreams = *site->upstreams;
  auto stable = upstream_index(upstreams, o.stable), canary = upstream_index(upstreams, o.canary);
  if (!stable || !canary) {
    why = fmt::format("site {} has no upstream {}", o.site, stable ? o.canary : o.stable);
    return std::nullopt;
  }
  for (size_t u : {*stable, *canary}) {
    const json& upstream = upstreams[u];
    const char* role = u == *stable ? "stable" : "canary";
    if (upstream.value("backup", false)) {
      why = fmt::format("the {} upstream {} is a backup server (it takes traffic only when every primary is out); "
                        "a rollout moves traffic between two primaries",
                        role, upstream.value("dial", ""));
      return std::nullopt;
    }
    if (upstream.value("down", false)) {
      why = fmt::format("the {} upstream {} is marked down", role, upstream.value("dial", ""));
      return std::nullopt;
    }
  }
  std::string policy;
  if (auto how = ignores_weights(*site->reverse_proxy, policy)) {
    why = fmt::format("site {} balances with lb_policy {}, which ignores weights ({}), so no stage would split "
                      "the traffic as given; switch the site to a weighted policy (weighted_round_robin, the "
                      "default, least_conn, random, p2c or hash) first",
                      o.site, policy, *how);
    return std::nullopt;
  }
  return StageTarget{o.site, site->address, site->upstreams_path, site->index};
}

int run_rollout(const RolloutOptions& o) {
  // Each line as it happens, also into a file or a pipe (a log, `| tee`),
  // where stdout would otherwise hold the stages' lines until the end.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  AdminReply cfg = admin_request(o.admin, "GET", "/config/");
  if (cfg.status != 200) {
    fmt::print(stderr, "heft: rollout: cannot read the configuration: {}\n", cfg.error_message());
    return kBadArguments;
  }
  auto config = json::parse(cfg.body, nullptr, false);
  std::string why;
  auto target = find_target(config, o, why);
  if (!target) {
    fmt::print(stderr, "heft: rollout: {}\n", why);
    return kBadArguments;
  }
  fmt::print("rollout of site {} ({}{}): stable {} -> canary {}, {} stage{}, hold {}, max 5xx rate {}, min {} requests{}\n",
             o.site, o.site == target->address ? "" : target->address + ", ", target->path, o.stable, o.canary,
             o.stages.size(), o.stages.size() == 1 ? "" : "s",
             config::format_duration(o.judge.hold), config::format_fraction(o.judge.max_error_rate), o.judge.min_requests,
             o.judge.max_p99 ? ", max p99 " + config::format_duration(*o.judge.max_p99) : "");
  if (o.dry_run) {
    for (size_t i = 0; i < o.stages.size(); ++i)
      fmt::print("  stage {}/{}: PATCH {} with {} weight {}, {} weight {}; hold {}\n", i + 1, o.stages.size(),
                 target->path, o.stable, o.stages[i].stable, o.canary, o.stages[i].canary,
                 config::format_duration(o.judge.hold));
    fmt::print("dry run: nothing changed\n");
    return 0;
  }
  StagePlan plan;
  plan.dials = {o.stable, o.canary};
  plan.roles = {"stable", "canary"};
  for (const Stage& stage : o.stages) plan.stages.push_back({stage.stable, stage.canary});
  plan.rollback = {100, 0};
  // Only the canary's figures trigger a rollback, and only while it takes traffic.
  plan.judged = [&o](size_t s, size_t u) { return u == 1 && o.stages[s].canary > 0; };
  plan.judge = o.judge;
  plan.complete = "rollout complete";
  plan.admin = o.admin;
  return run_weight_stages(plan, std::move(*target));
}

void setup(CLI::App& root) {
  auto options = std::make_shared<RolloutOptions>();
  CLI::App* cmd = root.add_subcommand("rollout", "Canary / blue-green rollout with automatic rollback");
  cmd->add_option("--site", options->site, "Site: a host name, :PORT, or its index")->required();
  cmd->add_option("--stable", options->stable, "Stable upstream (dial address as configured)")->required();
  cmd->add_option("--canary", options->canary, "Canary upstream (dial address as configured)")->required();
  cmd->add_option("--stages", options->stages_text, "STABLE:CANARY weights per stage (default 95:5,80:20,50:50,0:100)");
  cmd->add_option("--hold", options->hold_text, "Time each stage is watched (default 5m)");
  cmd->add_option("--max-error-rate", options->max_error_rate_text, "Largest canary 5xx rate (default 1%)");
  cmd->add_option("--min-requests", options->min_requests_text, "Canary requests needed to judge a stage (default 200)");
  cmd->add_option("--max-p99", options->max_p99_text, "Largest canary p99 time to the response head (e.g. 300ms)");
  cmd->add_option("--poll", options->poll_text, "How often counters are read (default 1s)");
  cmd->add_flag("--dry-run", options->dry_run, "Print the plan; change nothing");
  cmd->add_flag("--rollback-on-abort", options->judge.rollback_on_abort, "On Ctrl-C, roll back to 100:0");
  add_admin_options(cmd, options->admin);
  cmd->callback([options] {
    settle_admin_options(options->admin);
    parse(*options);
    set_exit_code(run_rollout(*options));
  });
}

const bool registered = add_command(40, &setup);

}  // namespace
}  // namespace heft::cli
