// Proxy: worker threads, listeners, route tables and reload (see proxy.h).
//
// Each worker runs its own io_context on one thread; the controlling thread
// binds listeners (so errors surface synchronously) and posts everything else.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "config/values.h"
#include "observe/audit.h"
#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/runtime.h"

namespace heft::proxy {
namespace {

constexpr std::chrono::milliseconds kSweepInterval{50};
// Worker 0 ticks the pools (slow start, adaptive weights, passive periods) this often.
constexpr std::chrono::milliseconds kPoolTickInterval{250};
// Ticks with nothing to sweep before the sweep rests: a second, so the trims
// after the last session (every 250 ms) have run.
constexpr unsigned kQuietTicksBeforeRest = 20;


// The client address as text. IPv4 by hand: Asio's to_string goes through
// inet_ntop, which formats with sprintf, once per new connection.
std::string address_text(const asio::ip::address& address) {
  if (!address.is_v4()) return address.to_string();
  std::string text;
  text.reserve(15);
  for (unsigned char b : address.to_v4().to_bytes()) {
    if (!text.empty()) text.push_back('.');
    if (b >= 100) text.push_back(static_cast<char>('0' + b / 100));
    if (b >= 10) text.push_back(static_cast<char>('0' + b / 10 % 10));
    text.push_back(static_cast<char>('0' + b % 10));
  }
  return text;
}

// A new client connection: served, or closed at max_connections.
void admit(Worker& worker, Socket socket, const tcp::endpoint& peer, uint16_t port) {
  if (worker.proxy.open_connections.load(std::memory_order_relaxed) >=
      worker.proxy.max_connections.load(std::memory_order_relaxed)) {
    boost::system::error_code ignored;
    socket.close(ignored);  // max_connections: refuse rather than queue
    return;
  }
  const std::shared_ptr<WorkerRoutes>& routes = worker.current_routes();
  if (!routes->table->tls.empty()) {
    if (std::shared_ptr<TlsServer> server = routes->table->tls_server(port)) {
      start_tls_connection(worker, std::move(socket), port, address_text(peer.address()), std::move(server));
      return;
    }
  }
  if (routes->table->speaks_only_h2c(port)) [[unlikely]] {
    worker.proxy.open_connections.fetch_add(1, std::memory_order_relaxed);
    observe::connection_opened();
    start_http2(worker, std::move(socket), port, address_text(peer.address()), {});
    return;
  }
  start_session(worker, std::move(socket), port, address_text(peer.address()));
  worker.wake_sweep();
}

Task<void> accept_loop(Worker& worker, Acceptor& acceptor, uint16_t port) {
  for (;;) {
    tcp::endpoint peer;  // from accept() itself: no getpeername() per connection
    auto [ec, socket] = co_await acceptor.async_accept(peer, use_task);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec && out_of_descriptors(ec) && close_oldest_idle_connection(worker)) continue;
    if (ec) {
      // Out of descriptors or similar: back off briefly instead of spinning.
      Timer pause(worker.io, std::chrono::milliseconds(10));
      co_await pause.async_wait(use_task);
      continue;
    }
    if (worker.draining) co_return;
    admit(worker, std::move(socket), peer, port);
  }
}

// A listener a reload closes resets the connections still in its queue. Where
// the port stays served (its listeners moved to other addresses), they are
// taken first, as accept_loop() would have.
void take_queued_connections(Worker& worker, Acceptor& acceptor, uint16_t port) {
  boost::system::error_code ec;
  acceptor.non_blocking(true, ec);
  for (int i = 0; i < 4096 && !ec; ++i) {  // a queue holds at most the listen backlog
    tcp::endpoint peer;
    Socket socket = acceptor.accept(peer, ec);
    if (!ec) admit(worker, std::move(socket), peer, port);
  }
}

// Whether a sweep has anything to look after: sessions (deadlines, parking),
// parked client connections, pooled upstream connections, routes kept for
// ports a reload dropped.
bool has_sweep_work(const Worker& worker) {
  if (!worker.sessions.empty() || !worker.h2_connections.empty() || worker.parking->size() > 0 ||
      !worker.dropped_port_routes.empty())
    return true;
  for (const auto& [endpoint, list] : worker.idle)
    if (!list.empty()) return true;
  return false;
}

Task<void> sweep_loop(Worker& worker) {
  // A little under their periods: ticks come a little over 50 ms apart.
  constexpr auto slack = std::chrono::milliseconds(5);
  Clock::time_point last_idle_sweep = Clock::now();
  Clock::time_point last_pool_tick = last_idle_sweep;
  unsigned quiet_ticks = 0;
  for (;;) {
    // Nothing to sweep for a while: rest (worker 0 still ticks its pools)
    // until wake_sweep() (a new connection, a stop) cancels the wait.
    worker.sweep_resting = quiet_ticks >= kQuietTicksBeforeRest;
    if (!worker.sweep_resting) worker.ticker.expires_after(kSweepInterval);
    else if (worker.index == 0) worker.ticker.expires_after(kPoolTickInterval);
    else worker.ticker.expires_at(Timer::time_point::max());
    co_await worker.ticker.async_wait(use_task);
    worker.sweep_resting = false;
    const auto now = Clock::now();
    worker.date.refresh(std::time(nullptr));  // formats only when the second changed
    sweep_timeouts(worker, now);
    if (now - last_idle_sweep >= std::chrono::seconds(1) - slack) {
      last_idle_sweep = now;
      sweep_idle_upstream_connections(worker, now);
      if (!worker.dropped_port_routes.empty()) forget_dropped_ports(worker);
    }
    // Worker 0 ticks every pool (every 250 ms): slow-start and adaptive weights,
    // and passed out periods (an idle pool would report a backend out for good).
    if (worker.index == 0 && now - last_pool_tick >= kPoolTickInterval - slack) {
      last_pool_tick = now;
      auto table = worker.proxy.current();
      for (const SiteRoute& site : table->sites)
        for (const upstream::WeightEvent& event : site.pool->tick(now)) {
          observe::record_weight_decision(site.server_label, site.site_label, upstream::reason_name(event.reason));
          observe::audit_weight(event, site.site_label);
        }
      // And sums up the log lines of any kind held back in a window that has ended.
      observe::flush_log_limits(now);
    }
    if (worker.draining && worker.sessions.empty() && worker.h2_connections.empty() && worker.parking->size() == 0) {
      worker.grace_timer.cancel();
      worker.idle.clear();
      // Nothing is left to finish: stop now instead of waiting for the
      // io_context to run out of work. Once the grace timer is cancelled, a
      // stray pending wait (a watcher left armed) would keep the worker, and
      // the process, alive for good; what is left is destroyed with the
      // worker, as at the end of a grace period.
      worker.io.stop();
      co_return;
    }
    quiet_ticks = has_sweep_work(worker) || worker.draining ? 0 : quiet_ticks + 1;
  }
}

// Worker threads: as configured, else one per CPU.
unsigned worker_count(const config::Config& config) {
  return config.workers ? config.workers : std::max(1u, std::thread::hardware_concurrency());
}

// The pools the health checker follows (all of them; only those with
// health_uri are probed).
std::vector<health::PoolTarget> health_targets(const RouteTable& table) {
  std::vector<health::PoolTarget> out;
  for (const SiteRoute& s : table.sites)
    out.push_back({fmt::format("site{}", s.index), s.pool, s.site.proxy, s.server_label, s.site_label});
  return out;
}

}  // namespace

upstream::PoolConfig make_pool_config(const config::SiteConfig& site, std::size_t site_index) {
  upstream::PoolConfig pool;
  pool.name = fmt::format("site{}", site_index);
  pool.policy = {site.proxy.policy, site.proxy.hash_strategy};
  pool.adaptive = site.proxy.adaptive;
  for (const config::UpstreamConfig& u : site.proxy.upstreams) {
    upstream::BackendConfig& b = pool.backends.emplace_back();
    static_cast<balance::BackendSpec&>(b) = u;  // name, weight, backup, down, max_fails, max_conns
    // The first address the resolver returned; the others if it refuses.
    b.address = u.resolved.empty() ? u.name : u.resolved.front();
    if (u.resolved.size() > 1) b.other_addresses.assign(u.resolved.begin() + 1, u.resolved.end());
    b.fail_timeout = u.fail_timeout;
    b.slow_start = u.slow_start.value_or(site.proxy.slow_start.value_or(std::chrono::milliseconds(0)));
  }
  return pool;
}

std::string describe(const config::Config& config) {
  std::string listeners;
  std::map<uint16_t, const std::vector<std::string>*> ports;  // each port's addresses (its sites share them)
  for (const auto& site : config.sites) ports.try_emplace(site.port, &site.bind);
  for (const auto& [port, bind] : ports) {
    if (bind->empty()) listeners += fmt::format("{}:{}", listeners.empty() ? "" : ", ", port);  // every address
    for (const std::string& address : *bind)
      listeners += (listeners.empty() ? "" : ", ") + config::join_host_port(address, port);
  }
  unsigned workers = worker_count(config);
  std::string out = fmt::format("listening on {} with {} worker{}; {} site{}\n", listeners, workers,
                                workers == 1 ? "" : "s", config.sites.size(), config.sites.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < config.sites.size(); ++i) {
    const auto& site = config.sites[i];
    out += fmt::format("  site {}{} -> pool site{} ({}):", observe::site_label(site), site.is_default ? " (default)" : "", i,
                       balance::policy_name(site.proxy.policy));
    for (const auto& u : site.proxy.upstreams) {
      out += fmt::format(" {}", u.name);
      if (!u.resolved.empty() && u.resolved.front() != u.name) out += fmt::format(" ({})", u.resolved.front());
      out += fmt::format(" weight {}", u.weight);
      if (u.backup) out += " backup";
      if (u.down) out += " down";
      out += ";";
    }
    out.back() = '\n';
  }
  return out;
}

void RouteTable::index() {
  host_routes.clear();
  host_routes.reserve(by_port.size());
  for (const auto& [port, indexes] : by_port) {  // a std::map: sorted by port
    HostRoutes& routes = host_routes.emplace_back(port, HostRoutes{}).second;
    for (std::size_t i : indexes) routes.add(i, sites[i].site.hosts, sites[i].site.is_default);
    routes.finish();
  }
  h2c_ports.clear();
  h2c_only_ports.clear();
  for (const auto& [port, indexes] : by_port) {
    if (indexes.empty()) continue;
    const config::Protocols& spoken = sites[indexes.front()].site.protocols;  // the same for every site of a port
    if (spoken.h2c) h2c_ports.push_back(port);
    if (spoken.h2c && !spoken.h1) h2c_only_ports.push_back(port);
  }
}

const SiteRoute* RouteTable::route(uint16_t port, std::string_view host) const {
  const auto it = std::lower_bound(host_routes.begin(), host_routes.end(), port,
                                   [](const auto& entry, uint16_t p) { return entry.first < p; });
  if (it == host_routes.end() || it->first != port) return nullptr;
  const HostRoutes& routes = it->second;
  std::size_t site;
  if (!routes.by_host()) {
    site = routes.otherwise();  // no site on the port names a host (a lone ":PORT" site): the Host is not even read
  } else {
    // Host without its port, IPv6 literals without their brackets (as sites
    // store them), and without a trailing dot (an absolute name; nginx drops it too).
    if (!host.empty() && host.front() == '[') {
      if (auto close = host.find(']'); close != std::string_view::npos) host = host.substr(1, close - 1);
    } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
      host = host.substr(0, colon);
    }
    if (!host.empty() && host.back() == '.') host.remove_suffix(1);
    // An exact host wins over a wildcard, a wildcard over a site for any host;
    // among wildcards the most specific (most literal labels: *.example.test
    // over *.*.test, as nginx prefers the longest), then the first.
    site = routes.find(host);
  }
  return site == HostRoutes::none ? nullptr : &sites[site];
}

Worker::Worker(Proxy::Impl& owner, unsigned i) : proxy(owner), index(i) {
  parking = std::make_unique<Parking>(
      io,
      [this](Socket socket, Parking::Entry& entry) {
        resume_session(*this, std::move(socket), entry.local_port, std::move(entry.client_ip),
                       entry.no_request_yet ? entry.deadline : Clock::time_point::max());
      },
      [this](const Parking::Entry&) { parked_connection_closed(*this); });
  rng_state = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ (uint64_t{i} << 32) ^ 0x5eedULL;
}

const std::shared_ptr<WorkerRoutes>& Worker::current_routes() {
  uint64_t v = proxy.routes_version.load(std::memory_order_acquire);
  if (!routes || v != routes_version) {
    auto next = std::make_shared<WorkerRoutes>();
    next->table = proxy.current();
    next->sites.reserve(next->table->sites.size());
    for (const SiteRoute& s : next->table->sites) next->sites.emplace_back(*s.pool);
    routes_version = next->table->version;
    if (routes) {
      for (const auto& [port, sites] : routes->table->by_port)
        if (!next->table->by_port.count(port)) dropped_port_routes[port] = routes;
      std::erase_if(dropped_port_routes, [&](const auto& entry) { return next->table->by_port.count(entry.first) > 0; });
    }
    routes = std::move(next);
  }
  return routes;
}

void Worker::prepare_site(WorkerSite& site, const upstream::PoolSnapshot& snapshot) {
  if (site.parsed_version == snapshot.version()) return;
  site.endpoints.clear();
  site.idle.clear();
  for (uint32_t i = 0; i < snapshot.size(); ++i) {
    const tcp::endpoint endpoint = backend_endpoint(snapshot.backend(i).address);
    site.endpoints.push_back(endpoint);
    site.idle.push_back(&idle[endpoint]);
  }
  site.parsed_version = snapshot.version();
}

void Worker::start_accepting(const tcp::endpoint& endpoint) {
  auto it = acceptors.find(endpoint);
  if (it == acceptors.end()) return;
  asio::co_spawn(io, accept_loop(*this, *it->second, endpoint.port()), asio::detached);
}

void Worker::drain() {
  draining = true;
  for (auto& [endpoint, acceptor] : acceptors) {
    boost::system::error_code ignored;
    acceptor->close(ignored);
  }
  // Close the idle upstream connections but keep the lists: sessions still
  // finishing hold references to them (WorkerSite::idle).
  for (auto& [endpoint, list] : idle) list.clear();
  close_idle_sessions(*this);
  wake_sweep();  // it stops the worker once nothing is left
}

void Worker::wake_sweep() {
  if (!sweep_resting) return;
  sweep_resting = false;
  date.refresh(std::time(nullptr));  // may be seconds old: the tick that refreshes it is later
  ticker.cancel();                   // the sweep runs now and ticks again
}

namespace {

// Every site's access log (null where logging is off), or nullopt with `error`
// set if one cannot be opened: a configuration is refused as a whole then, at
// start as on reload (nginx -t fails on an unwritable log too).
std::optional<std::vector<std::shared_ptr<observe::AccessLog>>> open_access_logs(const config::Config& config,
                                                                                 std::string& error) {
  std::vector<std::shared_ptr<observe::AccessLog>> logs(config.sites.size());
  for (std::size_t i = 0; i < config.sites.size(); ++i) {
    if (!config.sites[i].log.enabled) continue;
    std::string why;
    logs[i] = observe::open_access_log(config.sites[i].log, why);
    if (!logs[i]) {
      error = fmt::format("access log of site {}: {}", observe::site_label(config.sites[i]), why);
      return std::nullopt;
    }
  }
  return logs;
}

// A request without a Host reaches the backend with one that names the site:
// a wildcard ("*.example.com") is no host name, and an IPv6 literal takes its
// brackets (RFC 9110 7.2, RFC 3986 3.2.2; "::1" would read as host ":" with a port).
std::string default_host(const config::SiteConfig& site) {
  for (const std::string& host : site.hosts) {
    if (host.find('*') != std::string::npos) continue;
    return host.find(':') != std::string::npos ? "[" + host + "]" : host;
  }
  return "localhost";
}

// A site's identity across reloads: its port and its hosts as written (in
// order). Points into a configuration that outlives the lookup.
struct SiteKey {
  uint16_t port;
  const std::vector<std::string>* hosts;
  bool operator==(const SiteKey& other) const { return port == other.port && *hosts == *other.hosts; }
};

struct SiteKeyHash {
  std::size_t operator()(const SiteKey& key) const {
    std::size_t h = key.port;
    for (const std::string& host : *key.hosts) h = (h ^ std::hash<std::string>{}(host)) * 0x100000001b3ULL;
    return h;
  }
};

// The site's routes compiled, and its header_up when it needs the route step.
void compile_routes(SiteRoute& route) {
  if (!route.site.handle.empty()) {
    route.program = std::make_shared<const RouteProgram>(route.site.handle);
    route.pool_routes.push_back(route.index);
  }
  route.header_up = compile_ops(route.site.proxy.header_up);
  route.templated_header_up = route.program != nullptr || std::any_of(route.header_up.begin(), route.header_up.end(),
                                                                      [](const CompiledOp& op) {
                                                                        return !op.value.literal();
                                                                      });
}

// The pools of sites with routes beyond their first: each a SiteRoute after
// the sites (not routed by host: a site's routes pick it), labelled
// "SITE#N" (N = 2, 3, ... in the order written) in metrics and health lines,
// and keeping its state across reloads as a site's pool does.
void add_route_pools(RouteTable& table, const RouteTable* previous, unsigned workers) {
  std::map<std::tuple<uint16_t, std::vector<std::string>, std::size_t>, const SiteRoute*> old_pools;
  if (previous)
    for (const SiteRoute& old : previous->sites)
      if (old.pool_number > 0) old_pools.try_emplace({old.site.port, old.site.hosts, old.pool_number}, &old);
  const std::size_t sites = table.sites.size();
  for (std::size_t i = 0; i < sites; ++i) {
    for (std::size_t n = 1; n < table.sites[i].site.pool_count(); ++n) {
      const SiteRoute& owner = table.sites[i];
      SiteRoute route;
      route.index = table.sites.size();
      route.site = owner.site;
      route.server_label = owner.server_label;
      route.log = owner.log;
      route.default_host = owner.default_host;
      route.site.proxy = owner.site.pools[n - 1];
      route.site.handle.clear();
      route.site.pools.clear();
      route.pool_number = n;
      route.site_label = fmt::format("{}#{}", owner.site_label, n + 1);
      upstream::PoolConfig pool_config = make_pool_config(route.site, i);
      pool_config.name = fmt::format("site{}#{}", i, n + 1);
      pool_config.counter_slots = workers;
      if (auto found = old_pools.find({route.site.port, route.site.hosts, n}); found != old_pools.end()) {
        route.pool = found->second->pool;
        if (!(found->second->site.proxy == route.site.proxy) || found->second->site_label != route.site_label ||
            found->second->index != route.index)
          route.pool->update(pool_config);
      } else {
        route.pool = std::make_shared<upstream::Pool>(pool_config);
      }
      compile_routes(route);
      table.sites[i].pool_routes.push_back(route.index);
      table.sites.push_back(std::move(route));
    }
  }
}

}  // namespace

Proxy::Impl::Impl(config::Config config) {
  observe::set_log_format(config.log_format);
  max_connections = config.max_connections ? config.max_connections : UINT32_MAX;
  std::string error;
  auto logs = open_access_logs(config, error);
  if (!logs) throw std::runtime_error(error);
  routes = build(std::move(config), nullptr, std::move(*logs));
  routes_version = routes->version;
}

std::shared_ptr<const RouteTable> Proxy::Impl::build(config::Config next, const RouteTable* previous,
                                                     std::vector<std::shared_ptr<observe::AccessLog>> logs) const {
  auto table = std::make_shared<RouteTable>();
  table->version = previous ? previous->version + 1 : 1;
  // Each TLS port's certificates, first: OpenSSL refusing one (throws) must
  // leave the pools below untouched. Kept from the previous table when they
  // did not change (with their session cache), else built anew; connections
  // already open keep what their handshake used.
  for (const config::SiteConfig& site : next.sites) {
    if (!site.tls || table->tls_server(site.port)) continue;
    std::shared_ptr<TlsServer> server = previous ? previous->tls_server(site.port) : nullptr;
    if (!server || !server->built_from(next.certificates, site.tls_policies, site.protocols.h2))
      server = std::make_shared<TlsServer>(next.certificates, site.tls_policies, site.protocols.h2);
    table->tls.emplace_back(site.port, std::move(server));
  }
  std::sort(table->tls.begin(), table->tls.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // The old sites by (port, hosts), looked up once per new site: scanning
  // them all for each was quadratic (a 5,000-site reload spent most of its
  // time there). The first old site with a key wins, as the scan's did.
  std::unordered_map<SiteKey, const SiteRoute*, SiteKeyHash> old_sites;
  if (previous) {
    old_sites.reserve(previous->sites.size());
    for (const SiteRoute& old : previous->sites)
      if (old.pool && old.pool_number == 0) old_sites.try_emplace(SiteKey{old.site.port, &old.site.hosts}, &old);
  }
  for (std::size_t i = 0; i < next.sites.size(); ++i) {
    const config::SiteConfig& site = next.sites[i];
    SiteRoute route;
    route.index = i;
    route.site = site;
    route.server_label = observe::server_label(site);
    route.site_label = observe::site_label(site);
    route.default_host = default_host(site);
    route.log = std::move(logs[i]);
    upstream::PoolConfig pool_config = make_pool_config(site, i);
    pool_config.counter_slots = worker_count(next);
    if (auto found = old_sites.find(SiteKey{site.port, &site.hosts}); found != old_sites.end()) {
      const SiteRoute& old = *found->second;
      route.pool = old.pool;
      // Keep balancing state of backends that stayed (same name). A
      // site at another index gets its pool renamed ("site0"), or its
      // weight events would name the index it had, as health lines do not.
      if (!(old.site.proxy == site.proxy) || old.index != i || weights_moved(*old.pool, site.proxy))
        route.pool->update(pool_config);
    }
    if (!route.pool) route.pool = std::make_shared<upstream::Pool>(pool_config);
    compile_routes(route);
    table->by_port[site.port].push_back(i);
    table->sites.push_back(std::move(route));
  }
  add_route_pools(*table, previous, worker_count(next));
  table->index();
  table->config = std::move(next);
  return table;
}

void Proxy::Impl::publish(std::shared_ptr<const RouteTable> table) {
  uint64_t v = table->version;
  observe::set_log_format(table->config.log_format);
  {
    std::lock_guard lock(mu);
    routes = std::move(table);
  }
  max_connections = routes->config.max_connections ? routes->config.max_connections : UINT32_MAX;
  routes_version.store(v, std::memory_order_release);
}

Proxy::Proxy(config::Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Proxy::~Proxy() {
  if (impl_->started) {
    for (auto& w : impl_->workers) w->io.stop();
    wait();
  }
}

void Proxy::start() {
  bind();
  Impl& impl = *impl_;
  if (impl.started) return;
  auto table = impl.current();
  for (auto& w : impl.workers) {
    for (const auto& [endpoint, acceptor] : w->acceptors) w->start_accepting(endpoint);
    asio::co_spawn(w->io, sweep_loop(*w), asio::detached);
    w->thread = std::thread([worker = w.get()] {
      // Named for top -H, perf and /proc: "heft-worker-N" (at most 15 characters; longer stays unnamed).
      pthread_setname_np(pthread_self(), fmt::format("heft-worker-{}", worker->index).c_str());
      worker->io.run();
    });
  }
  impl.started = true;
  // Active health checks (off the request path, on their own thread).
  impl.health = std::make_unique<health::HealthChecker>();
  impl.health->set_pools(health_targets(*table));
}

void Proxy::bind() {
  Impl& impl = *impl_;
  if (!impl.workers.empty()) return;
  auto table = impl.current();
  unsigned count = worker_count(table->config);
  raise_descriptor_limit(impl.max_connections.load());
  for (unsigned i = 0; i < count; ++i) impl.workers.push_back(std::make_unique<Worker>(impl, i));
  // Idle upstream connections may hold half the descriptors, shared among the workers.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    for (auto& w : impl.workers)
      w->idle_order.cap = std::max<std::size_t>(8, static_cast<std::size_t>(limit.rlim_cur) / 2 / count);
  // As many as nginx's usual worker_connections (4,096), fewer when
  // max_connections is lower: client and upstream sockets of a busy worker.
  const std::size_t states = std::clamp<std::size_t>(2 * std::size_t{impl.max_connections.load()} + 64, 256, 4096);
  for (auto& w : impl.workers) preallocate_socket_states(w->io, states);
  const std::set<tcp::endpoint> endpoints = listen_endpoints(table->config);
  try {
    for (const auto& endpoint : endpoints) claim(endpoint, table->config);
    for (auto& w : impl.workers)
      for (const auto& endpoint : endpoints) w->acceptors[endpoint] = impl.listen(*w, endpoint, table->config);
  } catch (...) {
    impl.workers.clear();  // nothing half bound stays: a later bind() starts over
    throw;
  }
}

bool Proxy::reload(config::Config next, std::string& error) {
  Impl& impl = *impl_;
  auto old = impl.current();
  const std::set<tcp::endpoint> old_endpoints = listen_endpoints(old->config);
  const std::set<tcp::endpoint> new_endpoints = listen_endpoints(next);
  if (next.workers && impl.started && next.workers != impl.workers.size()) {
    // Changing the thread count needs a restart; everything else applies now.
    next.workers = static_cast<unsigned>(impl.workers.size());
  }
  // Open the access logs and bind new listeners first: if one fails, nothing changed.
  auto logs = open_access_logs(next, error);
  if (!logs) return false;
  using Opened = std::vector<std::pair<tcp::endpoint, std::unique_ptr<Acceptor>>>;
  std::vector<Opened> opened(impl.workers.size());
  // claim() is for ports heft does not hold yet: where it already listens
  // in the same family (moving from 0.0.0.0 to 127.0.0.1, say), a plain bind
  // would collide with heft's own listeners, and the reuseport bind beside
  // them is what a foreign listener would have stopped in the first place.
  const auto held = [&](const tcp::endpoint& endpoint) {
    return std::any_of(old_endpoints.begin(), old_endpoints.end(), [&](const tcp::endpoint& old) {
      return old.port() == endpoint.port() && old.address().is_v6() == endpoint.address().is_v6();
    });
  };
  try {
    for (const auto& endpoint : new_endpoints) {
      if (old_endpoints.count(endpoint)) continue;
      if (!held(endpoint)) claim(endpoint, next);
      for (std::size_t i = 0; i < impl.workers.size(); ++i)
        opened[i].emplace_back(endpoint, impl.listen(*impl.workers[i], endpoint, next));
    }
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
  std::shared_ptr<const RouteTable> table;
  try {
    table = impl.build(std::move(next), old.get(), std::move(*logs));
  } catch (const std::exception& e) {  // OpenSSL refused a certificate (TlsServer)
    error = e.what();
    return false;
  }
  impl.publish(std::move(table));
  if (impl.health) impl.health->set_pools(health_targets(*impl.current()));  // follow the pools across reloads
  std::vector<tcp::endpoint> removed;
  for (const auto& endpoint : old_endpoints)
    if (!new_endpoints.count(endpoint)) removed.push_back(endpoint);
  std::set<uint16_t> served, dropped;  // ports the new configuration serves, and those it stops serving
  for (const auto& endpoint : new_endpoints) served.insert(endpoint.port());
  for (const auto& endpoint : removed)
    if (!served.count(endpoint.port())) dropped.insert(endpoint.port());
  // Backend addresses the new configuration uses, with the shortest
  // keepalive_timeout of the pools using each (max: none).
  std::map<tcp::endpoint, std::chrono::milliseconds> backends;
  std::vector<observe::UpstreamGauge> live;  // and their metrics' labels
  for (const SiteRoute& site : impl.current()->sites) {
    auto snapshot = site.pool->snapshot();
    const std::chrono::milliseconds timeout = site.site.proxy.keepalive_timeout.count() == 0
                                                  ? std::chrono::milliseconds::max()
                                                  : site.site.proxy.keepalive_timeout;
    for (uint32_t b = 0; b < snapshot->size(); ++b) {
      auto [it, added] = backends.try_emplace(backend_endpoint(snapshot->backend(b).address), timeout);
      if (!added) it->second = std::min(it->second, timeout);
      live.push_back({.server = site.server_label, .site = site.site_label, .upstream = snapshot->backend(b).name});
    }
  }
  // A heft nobody scrapes forgets removed backends' series too (kRemovedSeriesKept).
  observe::forget_removed_series(live, std::chrono::steady_clock::now());
  for (std::size_t i = 0; i < impl.workers.size(); ++i) {
    Worker& w = *impl.workers[i];
    auto acceptors = std::make_shared<Opened>(std::move(opened[i]));
    asio::post(w.io, [&w, acceptors, removed, served, dropped, backends] {
      if (w.draining) return;
      // Pooled connections to backends no site uses any more: closed, and so
      // are those still busy once their request is done (the lists stay,
      // requests still finishing may hold them). The others' idle time is
      // bounded by the new keepalive_timeout at once (the shortest of the
      // pools sharing the backend), as nginx's new workers start afresh;
      // the sweep closes those past it.
      for (auto& [endpoint, list] : w.idle) {
        list.retired = !backends.count(endpoint);
        if (list.retired) {
          list.clear();
          continue;
        }
        const std::chrono::milliseconds timeout = backends.at(endpoint);
        for (const std::unique_ptr<UpstreamConnection>& conn : list)
          conn->idle_deadline = timeout == std::chrono::milliseconds::max() ? Clock::time_point::max()
                                                                              : conn->idle_since + timeout;
      }
      // Connections on a port no longer served end after their request in
      // flight (nginx's old workers do the same); idle ones end now.
      std::erase_if(w.unserved_ports, [&](uint16_t port) { return served.count(port) > 0; });
      for (uint16_t port : dropped) {
        w.unserved_ports.push_back(port);
        close_idle_sessions(w, port);
      }
      for (const auto& endpoint : removed) {
        auto it = w.acceptors.find(endpoint);
        if (it == w.acceptors.end()) continue;
        if (served.count(endpoint.port())) take_queued_connections(w, *it->second, endpoint.port());
        boost::system::error_code ignored;
        it->second->close(ignored);
        // The accept loop still references it until it sees the abort: keep it alive briefly.
        asio::post(w.io, [a = std::shared_ptr<Acceptor>(std::move(it->second))] {});
        w.acceptors.erase(it);
      }
      for (auto& [endpoint, acceptor] : *acceptors) {
        w.acceptors[endpoint] = std::move(acceptor);
        w.start_accepting(endpoint);
      }
    });
  }
  return true;
}

void Proxy::shutdown(std::chrono::milliseconds grace) {
  if (impl_->health) impl_->health->stop();  // no more probes while draining
  for (auto& w : impl_->workers) {
    Worker* worker = w.get();
    asio::post(worker->io, [worker, grace] {
      if (!worker->draining) {
        worker->drain();
      } else if (std::chrono::steady_clock::now() + grace >= worker->grace_timer.expiry()) {
        return;  // draining already, and sooner over than this would make it
      }
      worker->grace_timer.expires_after(grace);  // (re)armed: a second stop may shorten the grace
      worker->grace_timer.async_wait([worker](const boost::system::error_code& ec) {
        if (ec) return;
        // Grace period over: drop what is left, logged and counted as it stands.
        cut_requests(*worker);
        worker->io.stop();
      });
    });
  }
}

void Proxy::wait() {
  for (auto& w : impl_->workers)
    if (w->thread.joinable()) w->thread.join();
}

std::shared_ptr<upstream::Pool> Proxy::pool(std::size_t site) const {
  auto table = impl_->current();
  return site < table->sites.size() ? table->sites[site].pool : nullptr;
}

config::Config Proxy::snapshot_config() const { return impl_->live_config(); }

const config::Config& Proxy::config() const {
  std::lock_guard lock(impl_->mu);
  return impl_->routes->config;
}

std::vector<uint16_t> Proxy::ports() const {
  std::vector<uint16_t> out;
  for (const auto& [port, sites] : impl_->current()->by_port) out.push_back(port);
  return out;
}

unsigned Proxy::workers() const { return static_cast<unsigned>(impl_->workers.size()); }

}  // namespace heft::proxy
