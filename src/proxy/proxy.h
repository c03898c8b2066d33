// heft's HTTP/1.1 reverse proxy: the data plane behind `heft run`.
//
// A Proxy owns `workers` threads, each with its own event loop and its own
// SO_REUSEPORT listener per port, and one upstream::Pool per site shared by
// every worker (so the weighted split is exact across workers). Requests are
// routed by port and Host to a site, and its pool's balancer picks the backend.
//
// Thread safety: start(), reload(), shutdown() and wait() are for one
// controlling thread (reload and shutdown may also be called while other
// threads use pool() and config()). pool() and snapshot_config() may be called
// from any thread. No Boost type appears here.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/model.h"
#include "upstream/pool.h"

namespace heft::proxy {

// The upstream pool configuration a site's reverse_proxy block means.
upstream::PoolConfig make_pool_config(const config::SiteConfig& site, std::size_t site_index);

// One line per listener/site/pool/backend, for the startup log.
std::string describe(const config::Config& config);

class Proxy {
 public:
  // Takes a validated, resolved configuration and opens its access logs
  // (std::runtime_error naming the site if one cannot be opened). Nothing
  // listens until start().
  explicit Proxy(config::Config config);
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Binds every listener (throws std::runtime_error naming the address if one
  // cannot be bound) and starts the worker threads. Returns at once.
  void start();
  // start()'s first half: every listener bound (or thrown), nothing served
  // yet; connections wait in the listen backlog until start(). `heft run`
  // binds everything, then saves its state, then serves.
  void bind();

  // Swaps in `next` without dropping a connection or a request: sites whose
  // (hosts, port) stayed keep their Pool (pool->update), so backends that stayed
  // keep their balancing state; new ports are bound, removed ports closed.
  // On failure (e.g. a new port cannot be bound) returns false with `error`
  // set, and the old configuration stays in service.
  bool reload(config::Config next, std::string& error);
  // A change to one site's reverse_proxy settings (a resolved `site`, named by
  // its port and hosts, which stay as they are): its pool alone is updated,
  // and every other site keeps its pool and snapshot objects. A change of
  // weights alone is applied without rebuilding anything else (nothing is
  // bound or retired); any other goes through reload(). False with `error`
  // set when no site has that port and those hosts, or as reload().
  bool reload_site(config::SiteConfig site, std::string& error);
  // The site in service on `port` with `hosts` (a copy), if there is one.
  std::optional<config::SiteConfig> site_config(uint16_t port, const std::vector<std::string>& hosts) const;

  // Stops accepting, closes idle connections, lets in-flight requests finish
  // for up to `grace`, then stops the workers. Returns at once; see wait().
  // Called again while draining, it can only shorten what is left (a second
  // SIGTERM stops at once).
  void shutdown(std::chrono::milliseconds grace);

  // Blocks until every worker thread has finished (after shutdown()).
  void wait();

  // The pool of site `site` (index into config().sites); null if out of range.
  std::shared_ptr<upstream::Pool> pool(std::size_t site) const;
  // The configuration in service (a copy: it may be swapped by reload at any time).
  config::Config snapshot_config() const;
  // The configuration in service; only for the controlling thread.
  const config::Config& config() const;
  // Listening ports, in order (useful when the config asked for port 0... not allowed; for logs/tests).
  std::vector<uint16_t> ports() const;
  unsigned workers() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace heft::proxy
