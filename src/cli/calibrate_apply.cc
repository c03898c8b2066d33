// `heft calibrate --apply`: from the weights heft has now to the calibrated
// ones in stages, through cli/weight_stages.h (rollout's stages, judge and
// rollback). Each stage moves every backend's share of the traffic part of
// the way; the backends a stage gives more traffic than they had are judged,
// and a breach puts the weights back as they were.
#include <cmath>
#include <cstdio>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/calibrate.h"
#include "cli/site_lookup.h"
#include "config/values.h"

namespace heft::cli {

using json = nlohmann::json;

namespace {

std::vector<double> shares(const std::vector<uint32_t>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> out;
  for (uint32_t w : weights) out.push_back(sum > 0 ? double(w) / sum : 0);
  return out;
}

// The weights of stage j of k: each share moved j/k of the way, as weights
// summing to about 100 (at least 1 each); the last stage is `to` itself.
std::vector<std::vector<uint32_t>> plan_stages(const std::vector<uint32_t>& from, const std::vector<uint32_t>& to,
                                               size_t k) {
  const std::vector<double> a = shares(from), b = shares(to);
  std::vector<std::vector<uint32_t>> stages;
  for (size_t j = 1; j < k; ++j) {
    std::vector<uint32_t> weights;
    for (size_t u = 0; u < from.size(); ++u) {
      const double share = a[u] + (b[u] - a[u]) * double(j) / double(k);
      weights.push_back(uint32_t(std::max(1.0, std::round(share * 100))));
    }
    if (shares(weights) != shares(from) && (stages.empty() || stages.back() != weights)) stages.push_back(weights);
  }
  stages.push_back(to);
  return stages;
}

}  // namespace

int apply_calibration(const Calibration& c, const ApplyOptions& o, StageTarget target) {
  // The weights heft has now: someone may have changed them since the measurement began.
  AdminReply cfg = admin_request(o.admin, "GET", "/config/");
  if (cfg.status != 200) {
    fmt::print(stderr, "heft: calibrate: --apply: cannot read the configuration: {}\n", cfg.error_message());
    return 1;
  }
  std::string why;
  const json config = json::parse(cfg.body, nullptr, false);
  auto site = find_site_by_address(config, target.address, why);
  if (!site) {
    fmt::print(stderr, "heft: calibrate: --apply: {}\n", why);
    return 1;
  }
  StagePlan plan;
  std::vector<uint32_t> now, to;
  for (const CalibratedBackend& b : c.backends) {
    if (!b.weight) continue;
    auto index = upstream_index(*site->upstreams, b.dial);
    if (!index) {
      fmt::print(stderr, "heft: calibrate: --apply: {} is no longer a backend of site {}: not applied\n", b.dial,
                 target.address);
      return 1;
    }
    const uint32_t present = (*site->upstreams)[*index].value("weight", uint32_t(1));
    if (present == 0) {
      fmt::print("--apply: {} is drained (weight 0): left so\n", b.dial);
      continue;
    }
    plan.dials.push_back(b.dial);
    plan.roles.push_back("");
    now.push_back(present);
    to.push_back(*b.weight);
  }
  if (plan.dials.empty() || now == to) {
    fmt::print("--apply: nothing to change: {}\n", plan.dials.empty() ? "no weighted backend takes traffic"
                                                                         : "the weights are already these");
    return 0;
  }
  plan.stages = plan_stages(now, to, o.stages);
  plan.rollback = now;
  const std::vector<double> before = shares(now);
  std::vector<std::vector<double>> stage_shares;
  for (const auto& stage : plan.stages) stage_shares.push_back(shares(stage));
  // A stage is judged on the backends it gives a larger share than they had:
  // the ones a wrong measurement could overload.
  plan.judged = [before, stage_shares](size_t s, size_t u) { return stage_shares[s][u] > before[u] + 1e-9; };
  plan.judge = o.judge;
  plan.complete = "calibrated weights applied";
  plan.admin = o.admin;
  fmt::print("\napplying to site {} ({}): {} -> {} in {} stage{}, hold {}, max 5xx rate {}, min {} requests{}\n",
             target.address, site->upstreams_path, describe_weights(plan.dials, now), describe_weights(plan.dials, to),
             plan.stages.size(), plan.stages.size() == 1 ? "" : "s", config::format_duration(o.judge.hold),
             config::format_fraction(o.judge.max_error_rate), o.judge.min_requests,
             o.judge.max_p99 ? ", max p99 " + config::format_duration(*o.judge.max_p99) : "");
  std::fflush(stdout);
  return run_weight_stages(plan, std::move(target));
}

}  // namespace heft::cli
