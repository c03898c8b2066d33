// Admin API request handling: access checks, routing and the write transaction.
#include "admin/admin_api.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "admin/admin_parts.h"
#include "admin/config_tree.h"
#include "admin/state_file.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "config/values.h"
#include "observe/audit.h"
#include "observe/log.h"
#include "observe/metrics.h"
#include "net/http_chars.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;

bool is_wildcard_host(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// Constant-time comparison (for equal lengths), so the token cannot be guessed byte by byte.
bool same_secret(const std::string& given, const std::string& expected) {
  if (expected.empty() || given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

// An entity tag without W/ and quotes, so "abc", W/"abc" and abc compare equal.
std::string bare_tag(std::string tag) {
  if (tag.rfind("W/", 0) == 0) tag.erase(0, 2);
  if (tag.size() >= 2 && tag.front() == '"' && tag.back() == '"') tag = tag.substr(1, tag.size() - 2);
  return tag;
}

enum class IfMatch { holds, weak_current, stale };

// If-Match holds "*" or a list of entity tags (RFC 9110 13.1.1): any one may
// match, by strong comparison, so a weak tag (W/"...") never does; one that is
// the current tag made weak is told apart from a stale one, for the message.
IfMatch if_match_result(const std::string& field, const std::string& current) {
  const std::string wanted = bare_tag(current);
  IfMatch result = IfMatch::stale;
  // each_list_item stops as soon as the callback returns false (a match).
  net::each_list_item(field, [&](std::string_view item) {
    if (item == "*" || (!item.empty() && bare_tag(std::string(item)) == wanted)) {
      if (!item.starts_with("W/")) {
        result = IfMatch::holds;
        return false;
      }
      result = IfMatch::weak_current;
    }
    return true;
  });
  return result;
}

// 405 with the `Allow` field RFC 9110 15.5.6 requires: the methods `path` takes.
AdminResponse method_not_allowed(const std::string& path, const std::string& allow) {
  AdminResponse r = error_response(405, fmt::format("method not allowed: {} takes {}", path, allow));
  r.headers.emplace_back("Allow", allow);
  return r;
}

// The media type without parameters ("application/json; charset=utf-8" → "application/json").
std::string media_type(const std::string& content_type) {
  std::string t = config::lowercase(content_type.substr(0, content_type.find(';')));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return t;
}

}  // namespace

// FNV-1a over the serialized tree: cheap, stable, good enough to detect change.
std::string make_etag(const std::string& serialized) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : serialized) h = (h ^ c) * 1099511628211ULL;
  return fmt::format("\"{:016x}\"", h);
}

// The diagnostics as one message: the first 200, then how many more (a
// Heftfile of a million bad lines must not get a million-line answer).
std::string joined(const std::vector<config::Diagnostic>& diagnostics, const std::string& if_none) {
  constexpr size_t kShown = 200;
  std::string message;
  for (size_t i = 0; i < diagnostics.size() && i < kShown; ++i)
    message += (message.empty() ? "" : "; ") + diagnostics[i].to_string();
  if (diagnostics.size() > kShown) message += fmt::format("; and {} more", diagnostics.size() - kShown);
  return message.empty() ? if_none : message;
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

std::string admin_config_error(const config::AdminConfig& admin) {
  if (!admin.enabled) return "";
  auto split = config::split_host_port(admin.address, 0);
  if (!split.value) return "/admin/listen: " + split.error;
  if (!config::admin_listen_ip(split.value->host)) return "/admin/listen: " + std::string(config::kAdminHostProblem);
  if (std::string missing = config::admin_token_missing(admin); !missing.empty()) return "/admin/token: " + missing;
  return "";
}

size_t admin_body_limit(const std::string& content_type) {
  const std::string type = media_type(content_type);
  if (type == "application/json") return kMaxAdminJsonBody;
  if (type == "text/heftfile") return kMaxAdminHeftfileBody;
  return kMaxAdminOtherBody;
}

json changes_json(const std::vector<config::JsonChange>& changes) {
  json out = json::array();
  for (const config::JsonChange& change : changes) {
    json entry = {{"pointer", change.pointer}};
    if (!change.before.is_discarded()) entry["before"] = change.before;
    if (!change.after.is_discarded()) entry["after"] = change.after;
    entry["text"] = config::describe(change);
    out.push_back(std::move(entry));
  }
  return out;
}

void log_undone_changes(const std::string& source, const std::vector<config::JsonChange>& changes) {
  std::string lines;
  for (size_t i = 0; i < changes.size() && i < kMaxLoggedChanges; ++i)
    lines += fmt::format("{} undoes {}\n", source, config::describe(changes[i]));
  if (changes.size() > kMaxLoggedChanges)
    lines += fmt::format("{} undoes {} more changes (POST /load?dry_run=1 lists them all)\n", source,
                         changes.size() - kMaxLoggedChanges);
  observe::log(observe::LogLevel::warn, lines);  // one record: the lines stay together
}

AdminResponse error_response(int status, const std::string& message) {
  AdminResponse r;
  r.status = status;
  r.body = json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

AdminApi::AdminApi(const config::Config& running, AdminHooks hooks, std::string state_path)
    : hooks_(std::move(hooks)), state_path_(std::move(state_path)), admin_(running.admin), workers_(running.workers),
      demo_backends_(running.demo_backends) {
  current_ = config::to_json(running);
  etag_ = make_etag(current_.dump());
  if (!state_path_.empty()) journal_ = std::make_unique<StateJournal>(state_path_);
}

json AdminApi::config_json() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::string AdminApi::etag() const {
  std::lock_guard lock(mu_);
  return etag_;
}

AdminResponse AdminApi::check_access(const AdminRequest& request) const {
  auto listen = config::split_host_port(admin_.address, 0);
  const uint16_t port = listen.value ? listen.value->port : 0;
  const std::string listen_host = listen.value ? config::lowercase(listen.value->host) : "";
  // Caddy's rule against DNS rebinding: the Host (and Origin, if sent) must be
  // the admin address itself, or a loopback name with its port.
  auto allowed = [&](const std::string& authority) {
    auto split = config::split_host_port(authority, 0);
    if (!split.value || split.value->port != port) return false;
    std::string host = config::lowercase(split.value->host);
    if (host == listen_host) return true;
    if (config::is_loopback_host(listen_host) || is_wildcard_host(listen_host))
      return host == "localhost" || host == "127.0.0.1" || host == "::1" || is_wildcard_host(listen_host);
    return false;
  };
  std::string host = request.header("host");
  if (host.empty() || !allowed(host)) return error_response(403, fmt::format("host not allowed: \"{}\"", host));
  if (std::string origin = request.header("origin"); !origin.empty()) {
    std::string authority = origin;
    if (auto scheme = authority.find("://"); scheme != std::string::npos) authority.erase(0, scheme + 3);
    authority = authority.substr(0, authority.find('/'));
    if (!allowed(authority)) return error_response(403, fmt::format("origin not allowed: \"{}\"", origin));
  }
  if (!admin_.token.empty()) {
    std::string auth = request.header("authorization");
    const std::string scheme = "bearer ";
    bool ok = auth.size() > scheme.size() && config::lowercase(auth.substr(0, scheme.size())) == scheme &&
              same_secret(auth.substr(scheme.size()), admin_.token);
    if (!ok) {
      AdminResponse r = error_response(401, "missing or wrong bearer token (Authorization: Bearer <token>)");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  AdminResponse allowed_response;
  allowed_response.status = 0;  // 0: go on
  return allowed_response;
}

AdminResponse AdminApi::handle(const AdminRequest& request) {
  AdminResponse response = route(request);
  const bool write = request.method != "GET" && request.method != "HEAD";
  if (response.status >= 400 && (write || response.status == 401 || response.status == 403))
    return log_refusal(request, std::move(response));
  return response;
}

AdminResponse AdminApi::log_refusal(const AdminRequest& request, AdminResponse response) const {
  // One line per refusal, but not a flood of them from a client in a loop.
  static observe::LogLimit refusals("admin API requests refused");
  if (refusals.admit()) {
    const json body = json::parse(response.body, nullptr, false);
    const std::string why = body.is_object() && body.contains("error") && body["error"].is_string()
                                ? body["error"].get<std::string>()
                                : std::string("HTTP ") + std::to_string(response.status);
    observe::warn("admin API: {} {} from {} refused ({}): {}", request.method.empty() ? "request" : request.method,
                  path_of(request.target), request.remote, response.status, why);
  }
  return response;
}

AdminResponse AdminApi::route(const AdminRequest& request) {
  if (AdminResponse denied = check_access(request); denied.status != 0) return denied;
  const std::string path = path_of(request.target);
  // HEAD is answered as GET; the transport sends the head alone (RFC 9110 9.3.2).
  const std::string method = request.method == "HEAD" ? "GET" : request.method;

  // The audit trail's last entries: not a part of the configuration (its root has no "history").
  if (path == "/config/history" || path == "/config/history/") return handle_history(request, method);
  if (path == "/config" || path.rfind("/config/", 0) == 0) return handle_config(request, path.substr(7));
  if (path == "/load") {
    if (method != "POST") return method_not_allowed("/load", "POST");
    return handle_load(request);
  }
  if (path == "/heft/instance") {
    if (method != "GET") return method_not_allowed("/heft/instance", "GET, HEAD");
    AdminResponse r;
    r.body = (hooks_.instance ? hooks_.instance() : json::object()).dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    return r;
  }
  if (path == "/stop") {
    if (method != "POST") return method_not_allowed("/stop", "POST");
    AdminResponse r;
    r.body = "{}\n";
    r.stop_after = true;
    return r;
  }
  if (path == "/reverse_proxy/upstreams") {
    if (method != "GET") return method_not_allowed("/reverse_proxy/upstreams", "GET, HEAD");
    AdminResponse r;
    r.body = (hooks_.upstreams ? hooks_.upstreams() : json::array()).dump() + "\n";
    return r;
  }
  if (path == "/metrics") {
    if (method != "GET") return method_not_allowed("/metrics", "GET, HEAD");
    AdminResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = hooks_.metrics ? hooks_.metrics() : "";
    return r;
  }
  return error_response(404, fmt::format("not found: {}", path));
}

AdminResponse AdminApi::handle_history(const AdminRequest& request, const std::string& method) {
  if (method != "GET") return method_not_allowed("/config/history", "GET, HEAD");
  size_t limit = observe::kAuditKept;
  const size_t query = request.target.find('?');
  if (query != std::string::npos) {
    const std::string wanted = "limit=";
    for (std::string_view rest = std::string_view(request.target).substr(query + 1); !rest.empty();) {
      const std::string_view item = rest.substr(0, rest.find('&'));
      rest.remove_prefix(std::min(rest.size(), item.size() + 1));
      if (!item.starts_with(wanted)) continue;
      const std::string_view digits = item.substr(wanted.size());
      size_t n = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || n == 0 ||
          n > observe::kAuditKept)
        return error_response(400, fmt::format("limit must be an integer 1..{}, got \"{}\"", observe::kAuditKept,
                                               std::string(digits)));
      limit = n;
    }
  }
  AdminResponse r;
  r.body = observe::audit_history(limit).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  return r;
}

AdminResponse AdminApi::handle_config(const AdminRequest& request, const std::string& tree_path) {
  const std::string& method = request.method;
  if (method == "GET" || method == "HEAD") {
    TreeError error;
    json value;
    std::string tag;
    {
      std::lock_guard lock(mu_);
      value = tree_get(current_, tree_path, error);
      tag = etag_;
    }
    if (error) return error_response(error.status, error.message);
    AdminResponse r;
    r.body = value.dump() + "\n";
    r.headers.emplace_back("ETag", tag);
    return r;
  }
  TreeMethod op;
  if (method == "POST") op = TreeMethod::post;
  else if (method == "PUT") op = TreeMethod::put;
  else if (method == "PATCH") op = TreeMethod::patch;
  else if (method == "DELETE") op = TreeMethod::remove;
  else return method_not_allowed("/config/", "GET, HEAD, POST, PUT, PATCH, DELETE");

  json value;
  if (op != TreeMethod::remove) {
    if (media_type(request.header("content-type")) != "application/json")
      return error_response(400, "Content-Type must be application/json");
    std::string syntax;
    value = config::parse_json_text(request.body, syntax, kAdminJsonLimits);
    if (value.is_discarded()) return error_response(400, "request body is " + syntax);
  }
  if (std::optional<AdminResponse> done = commit_site(request, op, tree_path, value)) return std::move(*done);
  json candidate = config_json();
  if (TreeError error = tree_apply(candidate, op, tree_path, std::move(value)))
    return error_response(error.status, error.message);
  return commit(request, std::move(candidate));
}

AdminResponse AdminApi::handle_load(const AdminRequest& request) {
  // ?dry_run=1 (or true): what the load would change, nothing applied.
  bool dry_run = false;
  if (const size_t q = request.target.find('?'); q != std::string::npos) {
    const std::string query = request.target.substr(q + 1);
    size_t start = 0;
    while (start <= query.size()) {
      const size_t end = std::min(query.find('&', start), query.size());
      const std::string item = query.substr(start, end - start);
      if (item == "dry_run" || item == "dry_run=1" || item == "dry_run=true") dry_run = true;
      else if (item.starts_with("dry_run=") && item != "dry_run=0" && item != "dry_run=false")
        return error_response(400, fmt::format("dry_run must be 1, true, 0 or false, got \"{}\"", item.substr(8)));
      start = end + 1;
    }
  }
  const Commit kind = dry_run ? Commit::dry_run : Commit::load;
  std::string type = media_type(request.header("content-type"));
  if (type == "text/heftfile") {
    config::Result<config::Config> parsed = config::parse_heftfile(request.body, "request body");
    if (!parsed.ok()) {
      if (!dry_run) observe::record_reload(false);
      return error_response(400, joined(parsed.errors, "invalid Heftfile"));
    }
    return commit(request, config::to_json(*parsed), kind, "POST /load");
  }
  if (type != "application/json") return error_response(400, "Content-Type must be application/json or text/heftfile");
  std::string syntax;
  json value = config::parse_json_text(request.body, syntax, kAdminJsonLimits);
  if (value.is_discarded()) return error_response(400, "request body is " + syntax);
  return commit(request, std::move(value), kind, "POST /load");
}

AdminResponse AdminApi::if_match_refusal(const AdminRequest& request) const {
  if (std::string match = request.header("if-match"); !match.empty()) {
    const IfMatch result = if_match_result(match, etag());
    if (result == IfMatch::weak_current)
      return error_response(412, fmt::format("If-Match {} is the current tag in its weak form, which never matches "
                                             "(RFC 9110's strong comparison): send {}",
                                             match, etag()));
    if (result == IfMatch::stale)
      return error_response(412, fmt::format("If-Match {} is stale: the configuration is now {}", match, etag()));
  }
  AdminResponse holds;
  holds.status = 0;
  return holds;
}

AdminResponse AdminApi::commit(const AdminRequest& request, json candidate, Commit kind, const std::string& source) {
  if (AdminResponse refused = if_match_refusal(request); refused.status != 0) return refused;
  // From here on a change is applied or refused for what it is: counted in
  // heft_config_reloads_total (a no-op is neither).
  const auto refused = [kind](int status, const std::string& message) {
    if (kind != Commit::dry_run) observe::record_reload(false);
    return error_response(status, message);
  };

  config::Result<config::Config> parsed = config::from_json(candidate);
  if (!parsed.ok()) {
    return refused(400, joined(parsed.errors, "invalid configuration"));
  }
  config::Config& next = *parsed;
  // Settings that take effect only at start: the admin listener (moving it
  // under a live API would cut off the caller) and the worker threads. A
  // configuration that leaves them at their defaults, as one that does not
  // mention them does, keeps the running ones (a /load of a file without an
  // admin block must not mean "move the API to :2019"); another value is refused.
  if (next.admin == config::AdminConfig{}) next.admin = admin_;
  if (next.workers == 0) next.workers = workers_;
  if (next.demo_backends.empty()) next.demo_backends = demo_backends_;
  if (std::string problem = admin_config_error(next.admin); !problem.empty()) return refused(400, problem);
  if (next.admin.enabled != admin_.enabled || next.admin.address != admin_.address)
    return refused(400, fmt::format("/admin/listen and /admin/disabled take effect only at start (running: {}); "
                                           "restart heft to change them",
                                           admin_.enabled ? admin_.address : "admin off"));
  if (next.workers != workers_)
    return refused(400, fmt::format("/apps/http/workers takes effect only at start (running: {}); restart "
                                           "heft to change it",
                                           workers_ ? std::to_string(workers_) : "0, one per core"));
  if (next.demo_backends != demo_backends_)
    return refused(400, "/apps/demo (demo_backends) takes effect only at start; restart heft to change it");
  // The sites must leave the running API its address: checked here, where
  // that address is known (the JSON reader cannot tell a default section from
  // "keep the running one"). The proxy would refuse the port anyway, but
  // with "Address already in use" and no word of why.
  uint16_t port = 0;
  if (std::string where = config::admin_listen_overlap(next, port); !where.empty())
    return refused(400, fmt::format("the sites on port {} would listen on {}, the running admin API's {} among "
                                    "them: serve them on another port (the admin address changes only at "
                                    "restart)",
                                    port, where, next.admin.address));

  json canonical = config::to_json(next);
  std::string serialized = canonical.dump();
  // A whole configuration replaces the running one: what it changes (the
  // live changes it undoes, among them) is answered, and logged once applied.
  std::vector<config::JsonChange> changes;
  if (kind != Commit::write) changes = config::diff_json(config_json(), canonical);
  const auto answer = [&](const std::string& tag) {
    AdminResponse r;
    if (kind == Commit::write) {
      r.body = "{}\n";
    } else {
      json body = {{"changes", changes_json(changes)}};
      if (kind == Commit::dry_run) body["dry_run"] = true;
      r.body = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    }
    r.headers.emplace_back("ETag", tag);
    return r;
  };
  if (kind == Commit::dry_run) return answer(etag());
  if (canonical == config_json()) {  // nothing to change: the same answer as a change
    // ... but backend names may resolve elsewhere now, and a reload of an
    // unchanged file is how an operator picks that up (nginx -s reload).
    // Applied, an unchanged configuration keeps every pool as it is; only a
    // backend whose address moved is replaced.
    if (hooks_.apply) {
      std::string error;
      if (!hooks_.apply(next, error)) return refused(422, error.empty() ? "the proxy refused the configuration" : error);
    }
    return answer(etag());
  }
  // Saved exactly when applied: the new text waits in a temporary file (a
  // save that cannot even start refuses the change before it touches the
  // proxy), the proxy applies it, and only then does it replace the state file.
  std::optional<StateFileWrite> save;
  std::string saved_text;
  if (!state_path_.empty()) {
    std::string error;
    save.emplace(state_path_);
    saved_text = canonical.dump(2) + "\n";
    if (!save->prepare(saved_text, error)) return refused(500, "cannot save the configuration: " + error);
  }
  if (hooks_.apply) {
    std::string error;
    if (!hooks_.apply(next, error)) return refused(422, error.empty() ? "the proxy refused the configuration" : error);
  }
  if (save) {
    std::string error;
    // The journal of the state file replaced is gone with it (commit removes it).
    if (journal_) journal_->forget();
    if (!save->commit(error)) {
      // Not durable, so not accepted: put the old configuration back in service.
      // Only a failed rename or directory fsync gets here, after the write
      // itself succeeded; backends the change removed come back afresh.
      if (hooks_.apply) {
        config::Result<config::Config> old = config::from_json(config_json());
        std::string ignored;
        if (old.ok()) hooks_.apply(*old, ignored);
      }
      return refused(500, "cannot save the configuration: " + error);
    }
    if (journal_) journal_->follow(saved_text);
  }
  std::string tag = make_etag(serialized);
  observe::ConfigChange change;
  change.source = request.method.empty() ? source : "admin API";
  change.remote = request.remote;
  change.method = request.method;
  change.path = path_of(request.target);
  change.user_agent = request.header("user-agent");
  change.etag = tag;
  change.after = canonical;
  {
    std::lock_guard lock(mu_);
    change.before = std::exchange(current_, std::move(canonical));
    etag_ = tag;
  }
  admin_.token = next.admin.token;
  observe::record_reload(true);
  observe::audit_config_change(change);
  if (!changes.empty()) log_undone_changes(source.empty() ? "a load" : source, changes);
  return answer(tag);
}

}  // namespace heft::admin
