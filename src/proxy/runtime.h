// Internals of the proxy shared by proxy.cc (workers, listeners, reload) and
// the request path (http1_session.cc and the stages after it): the route
// table and the per-worker state.
//
// Thread safety: a RouteTable is immutable once published and shared by all
// workers. A Worker and everything it holds belongs to its own thread (its
// io_context runs on exactly one thread), except `io`, which others post to.
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/model.h"
#include "proxy/block_buffer.h"
#include "net/endpoint.h"
#include "proxy/host_routes.h"
#include "proxy/http_date.h"
#include "proxy/io_types.h"
#include "proxy/parking.h"
#include "proxy/ready_watch.h"
#include "proxy/route_program.h"
#include "proxy/tls_server.h"
#include "proxy/upstream_connection.h"
#include "health/health_checker.h"
#include "proxy/proxy.h"
#include "observe/access_log.h"
#include "upstream/pool.h"

namespace heft::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Now, to a few milliseconds: enough for timeouts and idle ages, and cheaper
// than Clock::now() (read many times per request). Same origin as
// steady_clock (both CLOCK_MONOTONIC), so the two compare.
inline Clock::time_point coarse_now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

struct SiteRoute {
  std::size_t index = 0;
  config::SiteConfig site;
  std::shared_ptr<upstream::Pool> pool;
  std::string server_label;                 // observe::server_label(site): the metrics' server label
  std::shared_ptr<observe::AccessLog> log;  // null when the site logs nothing
  std::string site_label;                   // observe::site_label(site): the metrics' site label
  // The backend's Host for a request without one (HTTP/1.0, or an empty
  // Host): the site's first host that is not a wildcard, an IPv6 literal in
  // brackets ("[::1]"); "localhost" when it has none.
  std::string default_host;
  // A site with routes (SiteConfig::handle): its compiled routes, and the
  // table index of each of its pools (pool 0 is this entry; the others
  // follow the sites, each a SiteRoute of its own with `pool_number` n).
  // Null and empty for a site of one reverse_proxy.
  std::shared_ptr<const RouteProgram> program;
  std::vector<std::size_t> pool_routes;
  std::size_t pool_number = 0;
  // header_up compiled, used when `templated_header_up` (its values hold
  // placeholders, or the site has routes whose edits come first).
  CompiledOps header_up;
  bool templated_header_up = false;
};

// Which site answers a request: by listening port, then Host.
struct RouteTable {
  uint64_t version = 0;
  // As built: a change of weights alone (Proxy::reload_site) goes to the
  // pool in place and not here, so a pool's own snapshot has the weights in
  // service (Impl::live_config(), weights_moved()).
  config::Config config;
  std::vector<SiteRoute> sites;
  std::map<uint16_t, std::vector<std::size_t>> by_port;
  // What route() looks up, per port (sorted by port): built by index() from
  // sites and by_port, once, so that a request's cost does not grow with the
  // number of sites (see host_routes.h).
  std::vector<std::pair<uint16_t, HostRoutes>> host_routes;
  // The ports that terminate TLS, each with its certificates (sorted by port;
  // empty when none does).
  std::vector<std::pair<uint16_t, std::shared_ptr<TlsServer>>> tls;

  // The TLS server of `port`; null when the port speaks plain HTTP.
  std::shared_ptr<TlsServer> tls_server(uint16_t port) const {
    for (const auto& [p, server] : tls)
      if (p == port) return server;
    return nullptr;
  }

  // Ports whose server speaks h2c (sorted; usually none), and of those the
  // ones that do not speak HTTP/1.1 as well.
  std::vector<uint16_t> h2c_ports, h2c_only_ports;
  bool speaks_h2c(uint16_t port) const {
    return !h2c_ports.empty() && std::binary_search(h2c_ports.begin(), h2c_ports.end(), port);
  }
  bool speaks_only_h2c(uint16_t port) const {
    return !h2c_only_ports.empty() && std::binary_search(h2c_only_ports.begin(), h2c_only_ports.end(), port);
  }

  // Fills host_routes (and the h2c ports); call once sites and by_port are complete.
  void index();
  // The site for `host` (a Host header value, port included or not) on `port`:
  // a site naming the host, else one with no hosts, else the port's default; null = 404.
  const SiteRoute* route(uint16_t port, std::string_view host) const;
};

class Http1Session;
class Http2Connection;
struct Worker;

// A worker's view of one site: its cached pool snapshot and, per snapshot, the
// parsed backend endpoints and their idle-connection lists.
struct WorkerSite {
  explicit WorkerSite(const upstream::Pool& pool) : cache(pool) {}
  upstream::CachedSnapshot cache;
  // The snapshot version `endpoints` and `idle` follow, index for index. The
  // requests of a worker may hold different versions (one picked before a
  // change, one after), so each matches them to its own before indexing.
  uint64_t parsed_version = 0;
  std::vector<tcp::endpoint> endpoints;
  std::vector<IdleList*> idle;
};

// What a worker's requests hold on to for their whole life: the route table
// and the worker's per-site caches (reference counted per worker, so requests
// never bounce a cache line shared with other workers).
struct WorkerRoutes {
  std::shared_ptr<const RouteTable> table;
  std::vector<WorkerSite> sites;
};

struct Worker {
  Worker(Proxy::Impl& owner, unsigned index);

  Proxy::Impl& proxy;
  unsigned index;
  BlockPool blocks;  // before io: sessions (destroyed with io) give their blocks back
  // Before io too: sessions still running when a grace period ran out are
  // destroyed with io's pending operations, and leave this list then.
  std::list<Http1Session*> sessions;            // for the timeout sweep and draining
  std::size_t sessions_ended_since_trim = 0;  // sessions freed (closed or parked) since the last malloc_trim
  std::list<Http2Connection*> h2_connections;  // likewise, for HTTP/2 connections
  // One thread runs it and only that thread touches its sockets (others post
  // to it), so the reactor's per-socket locks are off; posting stays locked.
  asio::io_context io{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  std::thread thread;
  std::map<tcp::endpoint, std::unique_ptr<Acceptor>> acceptors;  // one per listened address and port
  std::shared_ptr<WorkerRoutes> routes;
  uint64_t routes_version = 0;
  // Before idle: its connections leave the order as they are destroyed.
  IdleOrder idle_order;
  std::map<tcp::endpoint, IdleList> idle;  // idle upstream connections per backend address
  std::unique_ptr<Parking> parking;        // idle client connections without a session (after io)
  ReadyWatch ready_watch{io};  // waits for a response or a next request (after io)
  Clock::time_point last_trim{};
  bool draining = false;
  // Ports a reload stopped serving: their connections close after the request
  // in flight (rarely any; a port served again leaves the list).
  std::vector<uint16_t> unserved_ports;
  // For each of those ports, the last routes that served it: a request whose
  // head was still coming in when the reload came is served by them (then
  // its connection closes), not answered 404. Dropped once no session is
  // left on the port (see forget_dropped_ports()).
  std::map<uint16_t, std::shared_ptr<WorkerRoutes>> dropped_port_routes;
  Timer ticker{io};  // the sweep's: every 50 ms, slower or not at all with nothing to sweep
  bool sweep_resting = false;  // the sweep waits longer than its tick (see wake_sweep())
  Timer grace_timer{io};
  DateField date;  // the Date line of its responses, refreshed on the sweep tick
  uint64_t rng_state;

  // Current routes (refreshed when a reload published a new table).
  const std::shared_ptr<WorkerRoutes>& current_routes();
  // Endpoints and idle lists matching `snapshot` for site `site` (a compare when they already do).
  void prepare_site(WorkerSite& site, const upstream::PoolSnapshot& snapshot);
  uint64_t next_random() {
    // splitmix64: fast, good enough for balancing choices.
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  void start_accepting(const tcp::endpoint& endpoint);
  void drain();
  // A worker with nothing to sweep (no session, parked or pooled connection)
  // stops ticking (worker 0 ticks every 250 ms for its pools): an idle heft
  // wakes no more than it must. A new connection, or a stop, brings the
  // sweep back at once.
  void wake_sweep();
};

struct Proxy::Impl {
  explicit Impl(config::Config config);

  mutable std::mutex mu;  // guards routes (the pointer) and config
  std::shared_ptr<const RouteTable> routes;
  std::atomic<uint64_t> routes_version{0};
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<uint32_t> open_connections{0};
  std::atomic<uint32_t> max_connections{10000};
  bool started = false;
  // Active health checks of every pool (docs/health.md); started with the proxy.
  std::unique_ptr<health::HealthChecker> health;

  std::shared_ptr<const RouteTable> current() const {
    std::lock_guard lock(mu);
    return routes;
  }
  // `logs`: each site's access log (open_access_logs()), moved into the table.
  std::shared_ptr<const RouteTable> build(config::Config next, const RouteTable* previous,
                                          std::vector<std::shared_ptr<observe::AccessLog>> logs) const;
  void publish(std::shared_ptr<const RouteTable> table);
  // The configuration in service with the weights each pool has now: the
  // table's, but for weights changed in place since (reload_site.cc).
  config::Config live_config() const;
  // Opens an SO_REUSEPORT listener on `endpoint` for `worker` (throws on failure;
  // `config` names the address in the message).
  std::unique_ptr<Acceptor> listen(Worker& worker, const tcp::endpoint& endpoint, const config::Config& config);
};

// Whether `pool` balances by other weights than `proxy`'s (changed in place
// since the table holding `proxy` was built, or other backends).
bool weights_moved(const upstream::Pool& pool, const config::ProxyConfig& proxy);

// Claims `endpoint` with a plain bind before the workers' SO_REUSEPORT
// listeners join it: throws, naming the address, when anything listens there
// already (listeners.cc).
void claim(const tcp::endpoint& endpoint, const config::Config& config);
// Raises the descriptor limit toward what max_connections needs (listeners.cc).
void raise_descriptor_limit(uint32_t max_connections);
// Creates `count` sockets' states in Asio's free list up front (listeners.cc).
void preallocate_socket_states(asio::io_context& io, std::size_t count);

// Where a configuration listens: each site's port on each of its `bind`
// addresses (every IPv4 and, where the host has it, every IPv6 address when
// it has none).
std::set<tcp::endpoint> listen_endpoints(const config::Config& config);
// An endpoint as messages name it: ":PORT" for every IPv4 address under the
// default binding, else "ADDRESS:PORT" ("[::]:PORT", "127.0.0.1:PORT").
std::string listen_label(const tcp::endpoint& endpoint, const config::Config& config);

// Runs one client connection to its end (http1_session.cc).
void start_session(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip);
// Runs a client connection on a TLS port: its handshake, then the protocol
// ALPN chose (tls_accept.cc).
void start_tls_connection(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip,
                          std::shared_ptr<TlsServer> server);
// Runs an HTTP/1.1 session on a connection whose TLS handshake is done
// (http1_session.cc); it was counted open by start_tls_connection().
void start_tls_session(Worker& worker, std::unique_ptr<TlsStream> stream, uint16_t local_port, std::string client_ip,
                       ClientTls tls);
// Runs a new session on a connection back from parking (http1_session.cc).
// `head_deadline`: the header timeout of a first request the connection has
// not sent yet (it runs from the connection), else max.
void resume_session(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip,
                    Clock::time_point head_deadline);
// A parked connection was closed (idle timeout, drain): counted closed (http1_session.cc).
void parked_connection_closed(Worker& worker);
// Checks every session of the worker for an expired deadline (http1_session.cc).
void sweep_timeouts(Worker& worker, Clock::time_point now);
// Records every request still in flight (metrics, access log), when the
// grace period ends and the worker is about to stop with them (http1_session.cc).
void cut_requests(Worker& worker);
// Closes sessions waiting for a request (http1_session.cc), for draining.
void close_idle_sessions(Worker& worker);
// Closes the worker's pooled upstream connections that the backend closed (or
// wrote to unasked) while they waited: they would sit in CLOSE_WAIT until
// their next use; and those idle past their pool's keepalive_timeout at `now` (upstream_connection.cc).
void sweep_idle_upstream_connections(Worker& worker, Clock::time_point now);
// Closes the worker's idle client connections that came in on `port`, parked ones included.
void close_idle_sessions(Worker& worker, uint16_t port);
// Lets go of Worker::dropped_port_routes of ports no session is on any more (http1_session.cc).
void forget_dropped_ports(Worker& worker);

// HTTP/2 with prior knowledge (h2c) on `socket`, counted open already;
// `received`: what was read of it (http2_plain.cc).
void start_http2(Worker& worker, Socket socket, uint16_t local_port, std::string client_ip, std::string received);
// The worker's HTTP/2 connections (http2_connection.cc): the sweep (idle,
// write and stream deadlines); GOAWAY on a drain, or for a port a reload
// stopped serving; the end of the grace period; whether any is on `port`.
void sweep_http2(Worker& worker, Clock::time_point now);
void go_away_http2(Worker& worker);
void go_away_http2(Worker& worker, uint16_t port);
void cut_http2(Worker& worker);
bool http2_on_port(const Worker& worker, uint16_t port);

}  // namespace heft::proxy
