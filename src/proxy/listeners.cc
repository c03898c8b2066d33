// Listening sockets and the descriptors behind them: claiming an address,
// each worker's SO_REUSEPORT listener, the addresses a configuration listens
// on, the descriptor limit and the sockets' states made up front (runtime.h).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <boost/asio/ip/v6_only.hpp>
#include <fmt/format.h>

#include "config/values.h"
#include "observe/log.h"
#include "proxy/runtime.h"

namespace heft::proxy {

// Every worker listens on its own SO_REUSEPORT socket, and the kernel would
// let any process of the same user join the group and take part of the
// port's connections (and of its weighted split) without a word. A plain
// bind first (SO_REUSEADDR only, so TIME_WAIT does not count) fails if
// anything listens there already, as it would for nginx or HAProxy.
void claim(const tcp::endpoint& endpoint, const config::Config& config) {
  const bool v6 = endpoint.address().is_v6();
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;  // the real bind reports what is wrong
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (v6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  const int failed = ::bind(fd, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0 ? errno : 0;
  ::close(fd);
  if (failed)
    throw std::runtime_error(
        fmt::format("cannot listen on {}: {}", listen_label(endpoint, config), std::strerror(failed)));
}

namespace {

// Whether this host can listen on IPv6 at all (a kernel booted with
// ipv6.disable=1 cannot): the default binding then is IPv4 alone.
bool host_has_ipv6() {
  static const bool has = [] {
    const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }();
  return has;
}

}  // namespace

std::set<tcp::endpoint> listen_endpoints(const config::Config& config) {
  std::set<tcp::endpoint> out;
  for (const auto& site : config.sites) {
    if (site.bind.empty()) {
      out.emplace(asio::ip::address_v4::any(), site.port);
      if (host_has_ipv6()) out.emplace(asio::ip::address_v6::any(), site.port);
    }
    for (const std::string& text : site.bind) {
      boost::system::error_code ec;
      auto address = asio::ip::make_address(text, ec);  // validated by the config parsers
      if (!ec) out.emplace(address, site.port);
    }
  }
  return out;
}

std::string listen_label(const tcp::endpoint& endpoint, const config::Config& config) {
  if (endpoint.address().is_v4() && endpoint.address().to_v4() == asio::ip::address_v4::any() &&
      config::port_bind(config, endpoint.port()).empty())
    return fmt::format(":{}", endpoint.port());
  return config::join_host_port(endpoint.address().to_string(), endpoint.port());
}

std::unique_ptr<Acceptor> Proxy::Impl::listen(Worker& worker, const tcp::endpoint& endpoint,
                                              const config::Config& config) {
  auto acceptor = std::make_unique<Acceptor>(worker.io);
  boost::system::error_code ec;
  acceptor->open(endpoint.protocol(), ec);
  // IPv6 sockets take IPv6 alone: IPv4 has its own listener, and its clients
  // keep plain IPv4 addresses (not ::ffff:a.b.c.d) in logs, headers and hashes.
  if (!ec && endpoint.address().is_v6()) acceptor->set_option(asio::ip::v6_only(true), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) {
    using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
    acceptor->set_option(reuse_port(true), ec);
  }
  if (!ec) {
    // nginx's `listen ... deferred`, HAProxy's `defer-accept`: the kernel
    // hands a connection over once its first bytes are there (a silent one
    // after about a second), so the session's first read finds the request
    // instead of costing an empty read and a readiness wait. An HTTP client
    // speaks first; a kernel without the option just accepts at once.
    using defer_accept = asio::detail::socket_option::integer<IPPROTO_TCP, TCP_DEFER_ACCEPT>;
    boost::system::error_code ignored;
    acceptor->set_option(defer_accept(1), ignored);
  }
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot listen on {}: {}", listen_label(endpoint, config), ec.message()));
  return acceptor;
}

// Enough descriptors for max_connections client connections and as many
// upstream ones (as nginx's worker_rlimit_nofile would be set): the soft
// limit is raised toward the hard one, never lowered. A warning when the hard
// limit cannot even hold max_connections client connections (requests beyond
// it get 500: no socket for the backend); between that and the full need it
// stays quiet, so a default max_connections on a host with 20,000
// descriptors does not warn.
void raise_descriptor_limit(uint32_t max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = std::min<rlim_t>(limit.rlim_max, rlim_t{2} * max_connections + 256);
  if (want > limit.rlim_cur) {
    limit.rlim_cur = want;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_max < rlim_t{max_connections} + 256)
    observe::warn("the descriptor limit ({}) is below max_connections {}: each proxied request needs two "
                  "descriptors; raise the limit (ulimit -n, LimitNOFILE=) or lower max_connections",
                  static_cast<unsigned long long>(limit.rlim_max), max_connections);
}

// Asio keeps the per-socket state of a closed socket for reuse. Creating the
// states of a worker's first connections now, side by side and away from the
// worker's own heap, keeps them from being scattered among session memory
// later, where each would pin a page the freed sessions around it cannot give
// back (what nginx gets from its preallocated connections array).
void preallocate_socket_states(asio::io_context& io, std::size_t count) {
  std::vector<Socket> sockets;
  sockets.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    Socket socket(io);
    boost::system::error_code ec;
    socket.open(tcp::v4(), ec);
    if (ec) break;
    sockets.push_back(std::move(socket));
  }
}  // closed here: their states wait in Asio's free list

}  // namespace heft::proxy
