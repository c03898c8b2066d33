// AdminHooks over a Proxy (see proxy_admin.h).
#include "admin/proxy_admin.h"

#include <unordered_map>

#include "config/heftfile.h"
#include "proxy/proxy.h"

namespace heft::admin {

using json = nlohmann::json;

void ShareTracker::sample(proxy::Proxy& proxy) {
  std::vector<std::shared_ptr<const upstream::PoolSnapshot>> snapshots;
  std::unordered_map<const upstream::BackendState*, Ring> next;
  // Every site's pool (not a copy of the whole configuration once a second).
  for (size_t site = 0;; ++site) {
    auto pool = proxy.pool(site);
    if (!pool) break;
    snapshots.push_back(pool->snapshot());
    const upstream::PoolSnapshot& snapshot = *snapshots.back();
    for (uint32_t i = 0; i < snapshot.size(); ++i) {
      const upstream::BackendState* state = &snapshot.state(i);
      auto [at, added] = next.try_emplace(state);
      if (!added) continue;  // the same backend twice in a pool: one state, one ring
      Ring& ring = at->second;
      if (auto old = rings_.find(state); old != rings_.end()) ring = old->second;
      ring.values[ring.next] = state->requests_total();
      ring.next = (ring.next + 1) % kSamples;
      if (ring.filled < kSamples) ++ring.filled;
    }
  }
  rings_ = std::move(next);
  sampled_ = std::move(snapshots);  // the old ones go only now: their states' addresses were keys until here
}

uint64_t ShareTracker::recent(const upstream::BackendState& state, uint64_t total_now) const {
  auto it = rings_.find(&state);
  if (it == rings_.end() || it->second.filled == 0) return total_now;  // not sampled yet: everything so far is recent
  const Ring& ring = it->second;
  // Until the ring spans the whole window, every request so far falls in
  // it (counts start at 0 with the state); the first sample is no baseline.
  uint64_t then = ring.filled < kSamples ? 0 : ring.values[ring.next];
  return total_now >= then ? total_now - then : 0;
}

json upstreams_json(proxy::Proxy& proxy, const ShareTracker& shares) {
  config::Config running = proxy.snapshot_config();
  json out = json::array();
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool) continue;
    const std::string site_label = observe::site_label(running.sites[site]);  // the metrics' site label
    auto snapshot = pool->snapshot();
    const uint32_t queue = running.sites[site].proxy.queue;
    const size_t queued = queue ? snapshot->places()->size() : 0;
    std::vector<uint64_t> recent(snapshot->size());
    uint64_t recent_sum = 0;
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      recent[i] = shares.recent(snapshot->state(i), snapshot->state(i).requests_total());
      recent_sum += recent[i];
    }
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      upstream::BackendState& state = snapshot->state(i);
      const uint32_t fails = snapshot->recent_fails(i, std::chrono::steady_clock::now());
      uint32_t active = snapshot->live(i).active.load(std::memory_order_relaxed);
      out.push_back({{"server", observe::server_label(running.sites[site])},
                     {"site", site},
                     {"site_address", site_label},
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
      entry["backup"] = snapshot->backend(i).backup;  // takes traffic only when no primary can
      entry["max_conns"] = snapshot->backend(i).max_conns;  // 0: no limit on `active`
      // The pool's queue (the same for each of its backends): its length, 0 = none, and who waits in it now.
      entry["queue"] = queue;
      entry["queued"] = queued;
      entry["weight_factor"] = snapshot->factor(i);
      entry["active_healthy"] = state.healthy.load(std::memory_order_relaxed);
      // The hung-backend watch (docs/health.md): the current limit (0: none) and the requests past it.
      entry["stall_limit_ms"] = state.stall_limit_ms.load(std::memory_order_relaxed);
      entry["stalls_total"] = state.stalls_total.load(std::memory_order_relaxed);
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

std::vector<observe::UpstreamGauge> upstream_gauges(proxy::Proxy& proxy, const config::Config& running) {
  std::vector<observe::UpstreamGauge> gauges;
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool) continue;
    auto snapshot = pool->snapshot();
    for (uint32_t i = 0; i < snapshot->size(); ++i) {
      observe::UpstreamGauge g;
      g.server = observe::server_label(running.sites[site]);
      g.site = observe::site_label(running.sites[site]);  // as upstreams_json()'s site_address
      g.upstream = snapshot->backend(i).name;
      g.active = snapshot->live(i).active.load();
      g.weight = snapshot->backend(i).weight;
      g.effective_weight = snapshot->display_effective_weight(i);
      g.healthy = snapshot->healthy(i);
      g.weight_factor = snapshot->factor(i);
      g.max_conns = snapshot->backend(i).max_conns;
      gauges.push_back(std::move(g));
    }
  }
  return gauges;
}

std::vector<observe::QueueGauge> queue_gauges(proxy::Proxy& proxy, const config::Config& running) {
  std::vector<observe::QueueGauge> gauges;
  for (size_t site = 0; site < running.sites.size(); ++site) {
    auto pool = proxy.pool(site);
    if (!pool || running.sites[site].proxy.queue == 0) continue;
    const upstream::PlaceQueue& places = *pool->snapshot()->places();
    const upstream::PlaceQueue::Counts counts = places.counts();
    gauges.push_back({observe::server_label(running.sites[site]), observe::site_label(running.sites[site]),
                      places.size(), counts.joined, counts.full, counts.timed_out});
  }
  return gauges;
}

std::unique_ptr<ProxyAdmin> ProxyAdmin::start(proxy::Proxy& proxy, std::string state_path, nlohmann::json instance) {
  std::unique_ptr<ProxyAdmin> admin = listen(proxy, std::move(state_path), std::move(instance));
  if (admin) admin->serve();
  return admin;
}

std::unique_ptr<ProxyAdmin> ProxyAdmin::listen(proxy::Proxy& proxy, std::string state_path, nlohmann::json instance) {
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
  hooks.apply_site = [&proxy](const config::SiteConfig& site, std::string& error) {
    // Only the names that changed are resolved: a backend that stayed keeps
    // the addresses it has (a whole reload resolves every name again).
    config::SiteConfig resolved = site;
    config::Config fresh;  // the backends new to the site, to resolve
    fresh.sites.emplace_back().file = site.file;
    const std::optional<config::SiteConfig> running = proxy.site_config(site.port, site.hosts);
    std::unordered_map<std::string, const config::UpstreamConfig*> known;  // by dial
    if (running)
      for (const config::UpstreamConfig& old : running->proxy.upstreams)
        if (!old.resolved.empty()) known.emplace(old.name, &old);
    std::vector<size_t> unresolved;
    for (size_t i = 0; i < resolved.proxy.upstreams.size(); ++i) {
      config::UpstreamConfig& u = resolved.proxy.upstreams[i];
      if (auto same = known.find(u.name); same != known.end()) {
        u.resolved = same->second->resolved;
        continue;
      }
      unresolved.push_back(i);
      fresh.sites[0].proxy.upstreams.push_back(u);
    }
    if (!unresolved.empty()) {
      std::vector<config::Diagnostic> problems = config::resolve(fresh);
      for (const config::Diagnostic& d : problems) error += (error.empty() ? "" : "; ") + d.message;
      if (!problems.empty()) return false;
      for (size_t k = 0; k < unresolved.size(); ++k)
        resolved.proxy.upstreams[unresolved[k]].resolved = fresh.sites[0].proxy.upstreams[k].resolved;
    }
    return proxy.reload_site(std::move(resolved), error);
  };
  hooks.upstreams = [&proxy, self] { return upstreams_json(proxy, self->shares_); };
  hooks.metrics = [&proxy] {
    const config::Config running = proxy.snapshot_config();  // one copy for both
    return observe::render_metrics(upstream_gauges(proxy, running), queue_gauges(proxy, running));
  };
  // The grace period in service when the stop comes (a reload may have changed it).
  hooks.stop = [&proxy] { proxy.shutdown(proxy.snapshot_config().grace_period); };
  hooks.tick = [&proxy, self] { self->shares_.sample(proxy); };
  hooks.instance = [instance = std::move(instance)] { return instance; };
  admin->server_ = std::make_unique<AdminServer>(running, std::move(hooks), std::move(state_path));
  admin->server_->listen();
  return admin;
}

ProxyAdmin::~ProxyAdmin() {
  if (server_) server_->stop();
}

}  // namespace heft::admin
