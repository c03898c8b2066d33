// AdminHooks over a Proxy (see proxy_admin.h).
#include "admin/proxy_admin.h"

#include "config/heftfile.h"
#include "proxy/proxy.h"

namespace heft::admin {

using json = nlohmann::json;

void ShareTracker::sample(proxy::Proxy& proxy) {
  config::Config running = proxy.snapshot_config();
  rings_.resize(running.sites.size());
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool) continue;
    auto snapshot = pool->snapshot();
    std::vector<std::pair<std::string, Ring>> next;
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      const std::string& name = snapshot->backend(i).name;
      Ring ring;
      for (auto& [old_name, old_ring] : rings_[site])
        if (old_name == name) ring = old_ring;
      ring.values[ring.next] = snapshot->state(i).requests_total();
      ring.next = (ring.next + 1) % kSamples;
      if (ring.filled < kSamples) ++ring.filled;
      next.emplace_back(name, ring);
    }
    rings_[site] = std::move(next);
  }
}

uint64_t ShareTracker::recent(size_t site, const std::string& backend, uint64_t total_now) const {
  if (site >= rings_.size()) return total_now;
  for (const auto& [name, ring] : rings_[site]) {
    if (name != backend || ring.filled == 0) continue;
    // Until the ring spans the whole window, every request so far falls in
    // it (counts start at 0 with the backend); the first sample is no baseline.
    uint64_t then = ring.filled < kSamples ? 0 : ring.values[ring.next];
    return total_now >= then ? total_now - then : 0;
  }
  return total_now;  // not sampled yet: everything so far is recent
}

json upstreams_json(proxy::Proxy& proxy, const ShareTracker& shares) {
  config::Config running = proxy.snapshot_config();
  std::vector<std::string> servers = observe::server_labels(running);
  json out = json::array();
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool) continue;
    auto snapshot = pool->snapshot();
    std::vector<uint64_t> recent(snapshot->size());
    uint64_t recent_sum = 0;
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      recent[i] = shares.recent(site, snapshot->backend(i).name,
                                snapshot->state(i).requests_total());
      recent_sum += recent[i];
    }
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      upstream::BackendState& state = snapshot->state(i);
      uint32_t fails;
      {
        std::lock_guard lock(state.mu);
        fails = state.fails;
      }
      uint32_t active = snapshot->live(i).active.load(std::memory_order_relaxed);
      out.push_back({{"server", servers[site]},
                     {"site", site},
                     {"address", snapshot->backend(i).name},
                     {"num_requests", active},
                     {"fails", fails},
                     {"weight", snapshot->backend(i).weight},
                     {"effective_weight", snapshot->display_effective_weight(i)},
                     {"active", active},
                     {"healthy", snapshot->healthy(i)},
                     {"state", snapshot->state_name(i)},
                     {"requests_total", state.requests_total()},
                     {"share", recent_sum ? double(recent[i]) / double(recent_sum) : 0.0}});
      // Dynamic weights, active health and response counters (docs/health.md, docs/rollout.md).
      json& entry = out.back();
      entry["weight_factor"] = snapshot->factor(i);
      entry["active_healthy"] = state.healthy.load(std::memory_order_relaxed);
      entry["health_changes_total"] = state.health_changes_total.load(std::memory_order_relaxed);
      entry["responses_total"] = state.responses_total();
      entry["responses_5xx_total"] = state.responses_5xx_total();
      json buckets = json::array();
      for (size_t b = 0; b < upstream::kLatencyBuckets; ++b) {
        json le = b < std::size(upstream::kLatencyBucketsMs) ? json(upstream::kLatencyBucketsMs[b]) : json("+Inf");
        buckets.push_back({le, state.latency_bucket(b)});
      }
      entry["latency_ms_buckets"] = std::move(buckets);
    }
  }
  return out;
}

std::vector<observe::UpstreamGauge> upstream_gauges(proxy::Proxy& proxy) {
  config::Config running = proxy.snapshot_config();
  std::vector<std::string> servers = observe::server_labels(running);
  std::vector<observe::UpstreamGauge> gauges;
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool) continue;
    auto snapshot = pool->snapshot();
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      observe::UpstreamGauge g;
      g.server = servers[site];
      g.site = std::to_string(site);  // as upstreams_json() numbers it
      g.upstream = snapshot->backend(i).name;
      g.active = snapshot->live(i).active.load();
      g.weight = snapshot->backend(i).weight;
      g.effective_weight = snapshot->display_effective_weight(i);
      g.healthy = snapshot->healthy(i);
      g.weight_factor = snapshot->factor(i);
      g.health_changes = snapshot->state(i).health_changes_total.load(std::memory_order_relaxed);
      if (i == 0)
        for (int r = 0; r < upstream::kWeightReasons; ++r) {
          auto reason = static_cast<upstream::WeightReason>(r);
          g.pool_decisions.emplace_back(std::string(upstream::reason_name(reason)), pool->decisions(reason));
        }
      gauges.push_back(std::move(g));
    }
  }
  return gauges;
}

std::unique_ptr<ProxyAdmin> ProxyAdmin::start(proxy::Proxy& proxy, std::string state_path) {
  config::Config running = proxy.snapshot_config();
  if (!running.admin.enabled) return nullptr;
  std::unique_ptr<ProxyAdmin> admin(new ProxyAdmin());
  ProxyAdmin* self = admin.get();
  AdminHooks hooks;
  hooks.apply = [&proxy](const config::Config& next, std::string& error) {
    config::Config resolved = next;
    std::vector<config::Diagnostic> unresolved = config::resolve(resolved);
    bool ok = unresolved.empty();
    if (!ok) {
      for (const config::Diagnostic& d : unresolved) error += (error.empty() ? "" : "; ") + d.message;
    } else {
      ok = proxy.reload(std::move(resolved), error);
    }
    return ok;  // counted by AdminApi::commit (a rollback after a failed save is no change)
  };
  hooks.upstreams = [&proxy, self] { return upstreams_json(proxy, self->shares_); };
  hooks.metrics = [&proxy] { return observe::render_metrics(upstream_gauges(proxy)); };
  // The grace period in service when the stop comes (a reload may have changed it).
  hooks.stop = [&proxy] { proxy.shutdown(proxy.snapshot_config().grace_period); };
  hooks.tick = [&proxy, self] { self->shares_.sample(proxy); };
  admin->server_ = std::make_unique<AdminServer>(running, std::move(hooks), std::move(state_path));
  admin->server_->start();
  return admin;
}

ProxyAdmin::~ProxyAdmin() {
  if (server_) server_->stop();
}

}  // namespace heft::admin
