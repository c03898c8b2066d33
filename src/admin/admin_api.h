// The admin API's request handling, without any networking: routing, auth,
// Host/Origin checks, ETags and the write transaction (see admin_server.h for
// the endpoints). AdminServer feeds it parsed HTTP requests; tests call it
// directly.
//
// Threads: handle() and tick() are for one thread at a time (the admin
// thread), which serialises writes; config_json() and etag() may be called
// from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "admin/config_tree.h"
#include "admin/state_journal.h"
#include "config/diff.h"
#include "config/json.h"
#include "config/model.h"

namespace heft::admin {

// What the admin API needs from the proxy (kept small so it does not depend
// on the proxy's internals). Every member may be empty.
struct AdminHooks {
  // Puts a validated configuration in service; false + `error` to refuse.
  std::function<bool(const config::Config&, std::string& error)> apply;
  // Puts a validated change to one site's handler in service (the site named
  // by its port and hosts, which stay; every other site as it is); false +
  // `error` to refuse. Without it, such a change goes through `apply` whole.
  std::function<bool(const config::SiteConfig&, std::string& error)> apply_site;
  // GET /reverse_proxy/upstreams.
  std::function<nlohmann::json()> upstreams;
  // GET /metrics (Prometheus text format).
  std::function<std::string()> metrics;
  // Called (after the response is sent) on POST /stop.
  std::function<void()> stop;
  // Called about once a second on the admin thread (e.g. to sample counters).
  std::function<void()> tick;
  // GET /heft/instance: which configuration file and state file this heft
  // serves, so that the `heft` command can tell it talks to the right one.
  std::function<nlohmann::json()> instance;
};

// The changes a whole new configuration makes to the one running (what a
// /load, `heft reload` or SIGHUP undoes of the live changes), as the /load
// answer lists them: [{"pointer", "before", "after", "text"}], "before"
// left out for an addition and "after" for a removal.
nlohmann::json changes_json(const std::vector<config::JsonChange>& changes);

// Logs each change `source` ("POST /load", "SIGHUP reload of FILE") makes at
// warning level, in one record of a line each ("SOURCE undoes POINTER:
// BEFORE → AFTER"), at most kMaxLoggedChanges and a count of the rest.
void log_undone_changes(const std::string& source, const std::vector<config::JsonChange>& changes);
inline constexpr size_t kMaxLoggedChanges = 50;

// Why `admin` cannot be served as configured ("" if it can): a non-loopback
// address requires a token.
std::string admin_config_error(const config::AdminConfig& admin);

// Request bodies, by Content-Type. A whole configuration is one body (POST
// /load, PUT /config/). Its compact JSON takes ~950 bytes a site (every
// default written out), so 8 MiB holds ~8,800 sites, about as many as the
// 1,000,000 values and keys a body may hold (config::JsonLimits). Caddy
// allows 100 MB, but a document takes up to ~10 times its text while it is
// checked, and the admin API's memory is the proxy's. A Heftfile takes up to
// ~350 times its text while parsed (a directive and an error for each line
// of `a`), so 256 KiB (~4,000 sites; `heft reload` sends JSON). Any other
// body is refused once read (400), so it need not be large.
inline constexpr size_t kMaxAdminJsonBody = 8 << 20;
inline constexpr size_t kMaxAdminHeftfileBody = 256 << 10;
inline constexpr size_t kMaxAdminOtherBody = 64 << 10;
// The most a body with this Content-Type may hold.
size_t admin_body_limit(const std::string& content_type);
// What a body of the admin API may hold once parsed (JSON nesting, values).
inline constexpr config::JsonLimits kAdminJsonLimits{};

struct AdminRequest {
  std::string remote;  // the client's address and port, "127.0.0.1:51544" (for the audit trail)
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/config/apps/http?x" (query ignored)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct AdminResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool stop_after = false;  // call AdminHooks::stop once this is sent
};

// {"error": message} with `status`.
AdminResponse error_response(int status, const std::string& message);

class AdminApi {
 public:
  AdminApi(const config::Config& running, AdminHooks hooks, std::string state_path);

  AdminResponse handle(const AdminRequest& request);
  // The refusal a request's head alone earns (Host, Origin, token), or
  // status 0: the transport asks before it reads a body (or says 100 Continue).
  AdminResponse check_access(const AdminRequest& request) const;
  // A whole new configuration from elsewhere (SIGHUP): the same transaction
  // as POST /load; `source` names it in the warnings of what it undoes and
  // in the audit trail.
  AdminResponse load(const config::Config& next, const std::string& source) {
    return commit(AdminRequest{}, config::to_json(next), Commit::load, source);
  }
  void tick() {
    if (hooks_.tick) hooks_.tick();
  }
  const AdminHooks& hooks() const { return hooks_; }
  const config::AdminConfig& admin() const { return admin_; }

  nlohmann::json config_json() const;
  std::string etag() const;

  // Logs a refused request at warning level (within a LogLimit: a client in
  // a loop gets a summary line, not one a request); returns `response`.
  // handle() calls it for refused writes and for every 401 and 403.
  AdminResponse log_refusal(const AdminRequest& request, AdminResponse response) const;

 private:
  AdminResponse handle_config(const AdminRequest& request, const std::string& path);
  AdminResponse handle_load(const AdminRequest& request);
  AdminResponse route(const AdminRequest& request);
  AdminResponse handle_history(const AdminRequest& request, const std::string& method);
  // A change to part of the tree, a whole configuration loaded (answered with
  // the changes it made, each logged as a warning), or one only checked and
  // compared (`POST /load?dry_run=1`: nothing applied, saved or counted).
  enum class Commit { write, load, dry_run };
  // Validates, applies, persists, publishes and audits `candidate`. `source`
  // names a load from elsewhere (SIGHUP) in the warnings and the audit trail;
  // a request is named by its method, path and client.
  AdminResponse commit(const AdminRequest& request, nlohmann::json candidate, Commit kind = Commit::write,
                       const std::string& source = "");
  // A write confined to one site's handler (a path under
  // /apps/http/servers/S/routes/R/handle), when it can be done on that site
  // alone (site_write.cc): that route checked, applied to its pool, journaled
  // and published. nullopt when it must go through commit(): another path,
  // one that does not fit the tree (for commit's message), a write that
  // changes nothing, or no journal to append to yet.
  std::optional<AdminResponse> commit_site(const AdminRequest& request, TreeMethod op, const std::string& tree_path,
                                           const nlohmann::json& value);
  // The 412 an If-Match field earns against the current ETag, or status 0.
  AdminResponse if_match_refusal(const AdminRequest& request) const;

  AdminHooks hooks_;
  std::string state_path_;
  config::AdminConfig admin_;  // the admin section in service
  unsigned workers_ = 0;       // the worker count in service (fixed at start)
  std::vector<config::DemoBackendConfig> demo_backends_;  // served by heft run (fixed at start)
  mutable std::mutex mu_;      // guards current_ and etag_ for readers on other threads
  nlohmann::json current_;
  std::string etag_;
  // The changes saved since the state file was last written whole (null
  // without a state file).
  std::unique_ptr<StateJournal> journal_;
};

}  // namespace heft::admin
