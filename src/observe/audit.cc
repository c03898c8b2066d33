// The audit trail (audit.h): numbered entries, written as log lines and kept
// in a bounded ring for GET /config/history.
#include "observe/audit.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "config/diff.h"

namespace heft::observe {
namespace {

using json = nlohmann::json;
using entry_json = nlohmann::ordered_json;  // an entry's fields in the order written

// A described change longer than this is cut (a whole site added is ~1 KB).
constexpr size_t kChangeShown = 300;

struct Trail {
  std::mutex mu;
  uint64_t seq = 0;
  uint64_t revision = 0;
  std::deque<entry_json> kept;  // the last kAuditKept entries
};

Trail& trail() {
  static Trail* t = new Trail;  // never destroyed: health and worker threads may audit until exit
  return *t;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The admin token as a fingerprint (FNV-1a), so that its change shows and its value does not.
void hide_token(json& document) {
  if (!document.is_object()) return;
  auto admin = document.find("admin");
  if (admin == document.end() || !admin->is_object()) return;
  auto token = admin->find("token");
  if (token == admin->end() || !token->is_string()) return;
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : token->get<std::string>()) h = (h ^ c) * 1099511628211ULL;
  *token = fmt::format("(hidden; fingerprint {:04x})", h & 0xffff);
}

std::string shortened(std::string text) {
  if (text.size() > kChangeShown) {
    text.resize(kChangeShown);
    text += "\u2026";
  }
  return text;
}

// Numbers `entry` (and, for a new configuration, the revision), keeps it and
// writes its line: "audit #N config revision R (ETAG): TEXT", "audit #N KIND
// (revision R): TEXT". Returns the revision.
uint64_t record(const std::string& kind, const entry_json& fields, LogLevel level, const std::string& text) {
  Trail& t = trail();
  std::lock_guard lock(t.mu);
  const bool new_configuration = kind == "config";
  if (new_configuration) ++t.revision;
  entry_json entry = {{"seq", ++t.seq}, {"ts", rfc3339_utc(now_ms())}, {"kind", kind}, {"revision", t.revision}};
  for (const auto& [key, value] : fields.items()) entry[key] = value;
  const std::string etag = fields.value("etag", "");
  const std::string head = !new_configuration ? fmt::format("{} (revision {})", kind, t.revision)
                           : etag.empty()     ? fmt::format("config revision {}", t.revision)
                                              : fmt::format("config revision {} ({})", t.revision, etag);
  const std::string json_fields = "\"audit\":" + entry.dump(-1, ' ', false, json::error_handler_t::replace);
  t.kept.push_back(std::move(entry));
  if (t.kept.size() > kAuditKept) t.kept.pop_front();
  // Written under the lock, so that the log has the entries in their order.
  log(level, fmt::format("audit #{} {}: {}", t.seq, head, text), json_fields);
  return t.revision;
}

}  // namespace

uint64_t audit_config_change(const ConfigChange& change) {
  // The token is hidden in copies of whole documents; a part (`at`) holds none.
  json hidden_before, hidden_after;
  if (change.at.empty()) {
    hidden_before = change.before;
    hidden_after = change.after;
    hide_token(hidden_before);
    hide_token(hidden_after);
  }
  const json& before = change.at.empty() ? hidden_before : change.before;
  const json& after = change.at.empty() ? hidden_after : change.after;
  std::vector<std::string> changes;
  size_t total = 0;
  if (!before.is_discarded()) {
    for (config::JsonChange& c : config::diff_json(before, after)) {
      c.pointer.insert(0, change.at);
      if (++total <= kAuditChangesListed) changes.push_back(shortened(config::describe(c)));
    }
  }
  entry_json entry = {{"source", change.source}};
  std::string who = change.source;
  if (!change.method.empty()) {
    entry["remote"] = change.remote;
    entry["method"] = change.method;
    entry["path"] = change.path;
    if (!change.user_agent.empty()) entry["user_agent"] = change.user_agent;
    who = fmt::format("{} {} {} from {}{}", change.source, change.method, change.path, change.remote,
                      change.user_agent.empty() ? "" : fmt::format(" ({})", change.user_agent));
  }
  if (!change.etag.empty()) entry["etag"] = change.etag;
  if (!before.is_discarded()) {
    entry["changes"] = changes;
    entry["changes_total"] = total;
  }
  std::string text = who;
  if (!before.is_discarded()) {
    text += ": ";
    for (size_t i = 0; i < changes.size(); ++i) text += (i ? "; " : "") + changes[i];
    if (total > changes.size()) text += fmt::format("; and {} more", total - changes.size());
    if (total == 0) text += "no change in the configuration's JSON form";
  }
  return record("config", entry, LogLevel::info, text);
}

std::string audit_health(std::string_view pool, std::string_view site, std::string_view backend,
                         std::string_view before, std::string_view after, std::string_view why, LogLevel level) {
  const std::string text = fmt::format("pool {} backend {}: {} \u2192 {} ({})", pool, backend, before, after, why);
  const entry_json entry = {{"pool", pool},     {"site", site},   {"backend", backend},
                            {"before", before}, {"after", after}, {"reason", why}};
  record("health", entry, level, text);
  return text;
}

std::string audit_weight(const upstream::WeightEvent& event, std::string_view site) {
  const std::string_view reason = upstream::reason_name(event.reason);
  const std::string text =
      fmt::format("pool {} backend {}: weight factor {:.2f} \u2192 {:.2f} ({}{}{})", event.pool, event.backend,
                  event.factor_before, event.factor_after, reason, event.detail.empty() ? "" : ": ", event.detail);
  entry_json entry = {{"pool", event.pool},
                {"site", site},
                {"backend", event.backend},
                {"before", event.factor_before},
                {"after", event.factor_after},
                {"reason", reason}};
  if (!event.detail.empty()) entry["detail"] = event.detail;
  // A cut is news; a step back up is routine.
  const LogLevel level = event.factor_after < event.factor_before ? LogLevel::warn : LogLevel::info;
  record("weight", entry, level, text);
  return text;
}

uint64_t config_revision() {
  Trail& t = trail();
  std::lock_guard lock(t.mu);
  return t.revision;
}

nlohmann::ordered_json audit_history(size_t limit) {
  Trail& t = trail();
  std::lock_guard lock(t.mu);
  entry_json out = entry_json::array();
  const size_t skip = t.kept.size() > limit ? t.kept.size() - limit : 0;
  for (size_t i = skip; i < t.kept.size(); ++i) out.push_back(t.kept[i]);
  return out;
}

}  // namespace heft::observe
