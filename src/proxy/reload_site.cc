// A change to one site's reverse_proxy settings (see Proxy::reload_site).
#include <fmt/format.h>

#include "observe/log.h"
#include "proxy/runtime.h"

namespace heft::proxy {
namespace {

// Whether `a` and `b` differ in their backends' weights alone: the same
// backends in the same order, every other setting the same.
bool only_weights_differ(const config::ProxyConfig& a, const config::ProxyConfig& b) {
  if (a.upstreams.size() != b.upstreams.size()) return false;
  config::ProxyConfig same_weights = b;
  for (size_t i = 0; i < a.upstreams.size(); ++i) same_weights.upstreams[i].weight = a.upstreams[i].weight;
  return same_weights == a;
}

}  // namespace

bool weights_moved(const upstream::Pool& pool, const config::ProxyConfig& proxy) {
  const auto snapshot = pool.snapshot();  // held: a reload may replace it meanwhile
  const upstream::PoolConfig& live = snapshot->config();
  if (live.backends.size() != proxy.upstreams.size()) return true;
  for (size_t i = 0; i < live.backends.size(); ++i)
    if (live.backends[i].weight != proxy.upstreams[i].weight) return true;
  return false;
}

config::Config Proxy::Impl::live_config() const {
  auto table = current();
  config::Config config = table->config;
  for (size_t i = 0; i < table->sites.size() && i < config.sites.size(); ++i) {
    const auto snapshot = table->sites[i].pool->snapshot();
    const upstream::PoolConfig& live = snapshot->config();
    std::vector<config::UpstreamConfig>& upstreams = config.sites[i].proxy.upstreams;
    if (live.backends.size() != upstreams.size()) continue;  // not the pool of this site's backends
    for (size_t b = 0; b < upstreams.size(); ++b) upstreams[b].weight = live.backends[b].weight;
  }
  return config;
}

bool Proxy::reload_site(config::SiteConfig site, std::string& error) {
  Impl& impl = *impl_;
  auto old = impl.current();
  size_t index = old->sites.size();
  for (size_t i = 0; i < old->sites.size() && index == old->sites.size(); ++i)
    if (old->sites[i].site.port == site.port && old->sites[i].site.hosts == site.hosts) index = i;
  if (index == old->sites.size()) {
    error = fmt::format("no site on port {} with these hosts to change", site.port);
    return false;
  }
  const SiteRoute& before = old->sites[index];
  // Where it was written (diagnostics) is not part of the JSON form: kept.
  site.file = before.site.file;
  site.line = before.site.line;
  site.column = before.site.column;
  // Its server's settings (TLS, protocols) are not part of a route: kept.
  site.protocols = before.site.protocols;
  site.tls = before.site.tls;
  site.tls_policies = before.site.tls_policies;
  if (site.bind != before.site.bind || site.is_default != before.site.is_default || !(site.log == before.site.log) ||
      !(site.handle == before.site.handle) || !(site.pools == before.site.pools) ||
      !only_weights_differ(before.site.proxy, site.proxy)) {
    // Anything but weights (backends, addresses, timeouts, health checks, the
    // log) goes through reload(), which still keeps every other site's pool.
    config::Config next = impl.live_config();
    next.sites[index] = std::move(site);
    return reload(std::move(next), error);
  }
  // Weights alone: the pool takes them in place (a new snapshot of its own,
  // its backends' balancing state carried over). The route table, every other
  // site, pool and snapshot stay as they are; nothing is bound, resolved,
  // retired or published. The table keeps the weights it was built with (see
  // RouteTable::config).
  upstream::PoolConfig pool_config = make_pool_config(site, index);
  pool_config.counter_slots = before.pool->snapshot()->config().counter_slots;
  before.pool->update(pool_config);
  return true;
}

std::optional<config::SiteConfig> Proxy::site_config(uint16_t port, const std::vector<std::string>& hosts) const {
  auto table = impl_->current();
  for (const SiteRoute& route : table->sites)
    if (route.site.port == port && route.site.hosts == hosts) return route.site;
  return std::nullopt;
}

}  // namespace heft::proxy
