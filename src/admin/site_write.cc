// A write confined to one site's handler, done on that site alone (see
// AdminApi::commit_site): the one route checked by the validator's own code,
// its pool alone changed, the change appended to the state file's journal,
// and the route replaced in the published tree. The rest of the
// configuration is neither copied, checked, compared nor written again, so
// the cost of such a write does not grow with the number of sites.
#include <utility>

#include <fmt/format.h>

#include "admin/admin_api.h"
#include "admin/admin_parts.h"
#include "config/source_map.h"
#include "observe/audit.h"
#include "observe/metrics.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;

const json::json_pointer kServers("/apps/http/servers");

// The deepest place holding every change between `before` and `after` that
// `after` has (a removal's parent): the one value a journal record needs.
std::string changed_place(const std::vector<config::JsonChange>& changes, const json& after) {
  std::vector<std::string> common;
  bool first = true;
  for (const config::JsonChange& change : changes) {
    const json::json_pointer at(change.pointer);
    std::vector<std::string> tokens;
    for (json::json_pointer p = at; !p.empty(); p.pop_back()) tokens.insert(tokens.begin(), p.back());
    if (first) {
      common = std::move(tokens);
      first = false;
      continue;
    }
    size_t same = 0;
    while (same < common.size() && same < tokens.size() && common[same] == tokens[same]) ++same;
    common.resize(same);
  }
  json::json_pointer place;
  for (const std::string& token : common) place /= token;
  while (!place.empty() && !after.contains(place)) place.pop_back();
  return place.to_string();
}

}  // namespace

std::optional<AdminResponse> AdminApi::commit_site(const AdminRequest& request, TreeMethod op,
                                                   const std::string& tree_path, const json& value) {
  if (!hooks_.apply_site) return std::nullopt;
  // Appended to a journal that follows a whole state file this process wrote;
  // the first change (and one once the journal outgrows it) writes it whole.
  if (journal_ && !journal_->ready()) return std::nullopt;
  // /apps/http/servers/S/routes/R/handle/...: the route's hosts, log and
  // place among its server's routes are outside it, so no other site is
  // concerned.
  const std::vector<std::string> raw = split_tree_path(tree_path);
  if (raw.size() < 7) return std::nullopt;
  std::vector<std::string> segments;
  for (size_t i = 0; i < 7; ++i) {
    std::optional<std::string> decoded = percent_decode(raw[i]);
    if (!decoded) return std::nullopt;
    segments.push_back(std::move(*decoded));
  }
  if (segments[0] != "apps" || segments[1] != "http" || segments[2] != "servers" || segments[4] != "routes" ||
      segments[6] != "handle")
    return std::nullopt;
  const std::string& server = segments[3];
  size_t index = 0;
  json listen, before;
  {
    std::lock_guard lock(mu_);
    const json* servers = current_.contains(kServers) ? &current_.at(kServers) : nullptr;
    if (!servers || !servers->is_object() || !servers->contains(server) || !servers->at(server).is_object())
      return std::nullopt;
    const json& at = servers->at(server);
    const auto routes = at.find("routes");  // not value(): that copies every route
    const std::string& r = segments[5];
    if (routes == at.end() || !routes->is_array() || r.empty() || r.size() > 9 ||
        r.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    index = std::stoul(r);
    if (index >= routes->size()) return std::nullopt;
    if (const auto found = at.find("listen"); found != at.end()) listen = *found;
    before = (*routes)[index];
  }
  json route = before;
  std::string inside;  // the path within the route
  for (size_t i = 6; i < raw.size(); ++i) inside += "/" + raw[i];
  if (tree_apply(route, op, inside, value)) return std::nullopt;  // commit() words the error for the whole path

  const std::string server_pointer = config::pointer_append("/apps/http/servers", server);
  const std::string route_pointer = config::pointer_append(config::pointer_append(server_pointer, "routes"), index);
  config::Result<config::SiteConfig> site = config::site_from_json(listen, route, server_pointer, index);
  if (AdminResponse refused = if_match_refusal(request); refused.status != 0) return refused;
  const auto refused = [](int status, const std::string& message) {
    observe::record_reload(false);
    return error_response(status, message);
  };
  if (!site.ok()) return refused(400, joined(site.errors, "invalid configuration"));
  json after = config::route_to_json(*site);
  if (after == before) return std::nullopt;  // no change: commit() answers it as for any write
  std::string error;
  if (!hooks_.apply_site(*site, error))
    return refused(422, error.empty() ? "the proxy refused the configuration" : error);
  const std::vector<config::JsonChange> changes = config::diff_json(before, after);
  if (journal_) {
    JournalRecord record;
    record.method = request.method;
    record.path = path_of(request.target);
    const std::string place = changed_place(changes, after);
    record.pointer = route_pointer + place;
    record.value = after.at(json::json_pointer(place));
    if (!journal_->append(record, error)) {
      // Not durable, so not accepted: the site as it was back in service.
      config::Result<config::SiteConfig> old = config::site_from_json(listen, before, server_pointer, index);
      std::string ignored;
      if (old.ok()) hooks_.apply_site(*old, ignored);
      return refused(500, "cannot save the configuration: " + error);
    }
  }
  observe::ConfigChange change;
  change.source = "admin API";
  change.remote = request.remote;
  change.method = request.method;
  change.path = path_of(request.target);
  change.user_agent = request.header("user-agent");
  change.at = route_pointer;
  {
    std::lock_guard lock(mu_);
    // The tag names the configuration's history: every change gives a new
    // one, so a tag read before it is stale for If-Match.
    etag_ = make_etag(etag_ + route_pointer + after.dump());
    change.etag = etag_;
    current_.at(kServers).at(server).at("routes").at(index) = after;
  }
  change.before = std::move(before);
  change.after = std::move(after);
  observe::record_reload(true);
  observe::audit_config_change(change);
  AdminResponse r;
  r.body = "{}\n";
  r.headers.emplace_back("ETag", change.etag);
  return r;
}

}  // namespace heft::admin
