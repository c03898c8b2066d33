// heft's admin API: Caddy's HTTP endpoints over the running configuration.
//
//   GET    /config/<path>             the JSON tree (or a part), with an ETag
//   POST|PUT|PATCH|DELETE /config/<path>   Caddy's semantics (config_tree.h)
//   POST   /load                      replaces everything (application/json,
//                                     or a Heftfile as text/heftfile)
//   POST   /stop                      stops heft gracefully
//   GET    /heft/instance             the configuration and state files served
//   GET    /reverse_proxy/upstreams   per-backend runtime state
//   GET    /metrics                   Prometheus text exposition
//
// Every write is one transaction: the change is applied to a copy of the
// tree, the whole result is validated (config::from_json), handed to
// AdminHooks::apply, written to the state file (if any), and only then is the
// copy published and 200 answered. Any refusal answers 4xx with
// {"error":"..."} and leaves the running configuration byte-for-byte as it
// was. `If-Match` with a stale ETag → 412. A body over its Content-Type's
// limit (admin_body_limit()) → 413, before it is read.
// Host/Origin must name the admin address (or a loopback alias with its port)
// → else 403, against DNS rebinding. HEAD is answered wherever GET is, with
// the head alone; 405 lists the allowed methods in `Allow`. A request head
// over 16 KiB → 431; `Expect: 100-continue` is answered before the body is
// read. With a token, every request needs
// `Authorization: Bearer <token>` → else 401. At most kMaxAdminConnections
// connections are served at once; one more is closed as soon as it is
// accepted, so idle clients cannot use up heft's descriptors.
//
// Threads: the server runs on its own thread and io_context; the hooks are
// called on that thread, one request at a time, so writes are serialised.
// start() and stop() are for the owning thread. No Boost type appears here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "admin/admin_api.h"
#include "config/model.h"

namespace heft::admin {

inline constexpr size_t kMaxAdminConnections = 64;

class AdminServer {
 public:
  // `running` is the configuration in service (its admin section says where
  // to listen). `state_path` empty = no autosave.
  AdminServer(const config::Config& running, AdminHooks hooks, std::string state_path);
  ~AdminServer();  // stops
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds the admin address and starts the thread. Throws std::runtime_error
  // naming the address (or the config problem) on failure.
  void start();
  // start() in two steps: listen() binds (and throws as start() does); the
  // connections that come wait in the backlog until serve() starts the thread.
  // For `heft run`, which binds everything before it serves anything.
  void listen();
  void serve();
  // Closes the listener and connections and joins the thread. Idempotent.
  void stop();

  // Runs `next` through the same transaction as POST /load, on the admin
  // thread (for SIGHUP reloads, so the API's tree stays what is in service);
  // `source` names it in the warnings of what it undoes and in the audit
  // trail. False with `error` set when refused.
  bool load(const config::Config& next, std::string& error, const std::string& source);

  // The port actually bound (useful with port 0 in tests).
  uint16_t port() const;
  // The JSON tree in service and its ETag (thread-safe copies).
  nlohmann::json config_json() const;
  std::string etag() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace heft::admin
