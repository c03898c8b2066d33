// The audit trail: one line in heft's log (log.h) for every change to what
// heft serves, numbered, with what it was before and after and the
// configuration's revision, and the last kAuditKept kept for GET
// /config/history:
//   audit #1 config revision 1: start: serving /etc/heft/Heftfile
//   audit #2 config revision 2 ("9f3c…"): admin API PATCH /config/apps/…/weight from 127.0.0.1:51544 (curl/7.88.1): /apps/…/weight: 1 → 5
//   audit #3 health (revision 2): pool site0 backend 10.0.0.5:80: healthy → unhealthy (status 500 (expected 2xx); 1 consecutive failure)
//   audit #4 weight (revision 2): pool site0 backend 10.0.0.5:80: weight factor 1.00 → 0.25 (latency: latency 212.4ms > limit 3.1ms)
// The revision counts the configurations served since start (1 = the one
// heft started with); health and weight entries name the one in service.
// The admin token is never written: a change of it shows as a change of its
// fingerprint.
//
// Threads: every function may be called from any thread (a mutex guards the
// kept entries; entries are rare).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "observe/log.h"
#include "upstream/weights.h"

namespace heft::observe {

// Entries kept for GET /config/history, and changes listed in one entry (the
// rest are counted).
inline constexpr size_t kAuditKept = 1000;
inline constexpr size_t kAuditChangesListed = 20;

// A new configuration in service.
struct ConfigChange {
  std::string source;      // "start", "admin API", "SIGHUP reload of FILE", ...
  std::string remote;      // admin API: the client's address and port
  std::string method;      // admin API: "PATCH", ...
  std::string path;        // admin API: "/config/apps/http/...", "/load"
  std::string user_agent;  // admin API: its User-Agent, if any
  std::string etag;        // the new configuration's ETag, where the admin API runs
  // The JSON forms before and after (before discarded: the start).
  nlohmann::json before = nlohmann::json(nlohmann::json::value_t::discarded);
  nlohmann::json after;
  // Where `before` and `after` are in the JSON form (RFC 6901): "" for the
  // whole documents, else the one part a change was confined to (one site's
  // route), so that it is not compared whole.
  std::string at;
};

// Records `change` (the next revision) and writes its line; returns the revision.
uint64_t audit_config_change(const ConfigChange& change);

// A backend's health changed (`before` and `after`: "healthy", "unhealthy",
// "out", ...) for `why`. Returns the entry's text as in the log, without
// "audit #N …: " (for a health checker's own log sink).
std::string audit_health(std::string_view pool, std::string_view site, std::string_view backend,
                         std::string_view before, std::string_view after, std::string_view why, LogLevel level);

// An adaptive or slow-start weight decision of the pool serving `site`; returns its text as audit_health() does.
std::string audit_weight(const upstream::WeightEvent& event, std::string_view site);

// The revision in service (0 before the first audit_config_change()).
uint64_t config_revision();

// The last `limit` entries (at most kAuditKept), oldest first, as GET
// /config/history answers them.
nlohmann::ordered_json audit_history(size_t limit = kAuditKept);

}  // namespace heft::observe
