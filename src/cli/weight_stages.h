// Changing some of a site's weights through the admin API in stages, each
// stage held and judged from heft's own per-backend counters, rolled back on
// a breach: what `heft rollout` (a stable and a canary) and `heft calibrate
// --apply` (a whole pool) share (docs/rollout.md, docs/calibrate.md).
//
// Each stage reads the site's `upstreams` array afresh with its ETag, sets
// the weights of the stage's upstreams in that copy and PATCHes it with
// If-Match: they change in one transaction, and a concurrent change by
// someone else (another upstream marked down, re-weighted, removed) is kept,
// not overwritten (on 412 it reads again). Then GET /reverse_proxy/upstreams
// every poll: each judged backend's requests, 5xx responses and p99 since the
// stage began. A breach at any poll sets the rollback weights at once. The
// site is followed by its address, so sites added or removed before it do
// not shift the stages onto another.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/admin_client.h"

namespace heft::cli {

// One backend's counters as /reverse_proxy/upstreams shows them.
struct Counters {
  uint64_t requests = 0, errors = 0;
  std::vector<std::pair<double, uint64_t>> buckets;  // (upper bound ms, count), last = +Inf
};
Counters read_counters(const nlohmann::json& upstream_entry);

// A backend's figures over a span of time.
struct Window {
  uint64_t requests = 0, errors = 0;
  std::optional<double> p99_ms;  // upper bound of the p99 bucket; nullopt with no data
  double error_rate() const { return requests ? double(errors) / double(requests) : 0.0; }
};

// One backend over a stage: its counters at the start of the window and at
// the latest poll.
struct Watch {
  Counters base, last;
  explicit Watch(Counters start) : base(start), last(std::move(start)) {}
  // Takes a poll's counters. True when they went down since the last poll (a
  // restart): the window starts again from 0, so that it counts what the
  // backend served since (and later polls do not mix spans either).
  bool update(Counters now);
  Window window() const;
};

// "301 req, 0.17% 5xx, p99 <= 10ms"
std::string describe(const Window& w);

// The index of the upstream dialled as `dial` in a site's `upstreams` array.
std::optional<size_t> upstream_index(const nlohmann::json& upstreams, const std::string& dial);

// How the site's balancing policy spreads traffic when it ignores the weights
// (docs/balancing.md), or nullopt for the policies that split by weight;
// `policy` gets the policy's name.
std::optional<std::string> ignores_weights(const nlohmann::json& reverse_proxy, std::string& policy);

// The entry of the backend dialled as `address` in site `site` of a
// /reverse_proxy/upstreams answer, or null.
const nlohmann::json* find_upstream(const nlohmann::json& list, size_t site, const std::string& address);

// The index under which a /reverse_proxy/upstreams answer lists the site
// whose site_address is `address`; nullopt with `why` set when none does
// (removed, or its hosts or port changed) or several do.
std::optional<size_t> site_index_in(const nlohmann::json& list, const std::string& address, std::string& why);

// Ctrl-C and SIGTERM while it lives: interrupted() turns true (handled within
// 50 ms by the loops that ask). sigaction without SA_RESTART (std::signal sets
// it): a blocking call ends with EINTR rather than going on as if nothing came.
class InterruptCatcher {
 public:
  InterruptCatcher();
  ~InterruptCatcher();
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

 private:
  struct Saved;
  Saved* saved_;
};
bool interrupted();
// Sleeps until `until`, in 50 ms slices; returns early (false) on an interrupt.
bool sleep_unless_interrupted(std::chrono::steady_clock::time_point until);

// The site whose weights change, followed by its address: a site added or
// removed before it (an admin write, a reload) shifts its index and its path,
// and the index would then name another site's traffic and weights.
struct StageTarget {
  std::string site;     // as the user gave it (for messages)
  std::string address;  // HOSTS:PORT, as /reverse_proxy/upstreams' site_address says it
  std::string path;     // /config/.../upstreams (as last read)
  size_t site_index = 0;  // (as last read)
};

// How a write of weights ended: `gone` when the site or one of the upstreams
// is no longer in the configuration (nothing to set); `changed` when their
// weights were not the ones expected (nothing set); `interrupted` when a
// signal came while the configuration was read.
enum class WeightWrite { ok, failed, gone, changed, interrupted };

struct WeightChange {
  std::vector<std::string> dials;
  std::vector<uint32_t> weights;
  // Write only if the weights are these now (another's change is not overwritten).
  std::optional<std::vector<uint32_t>> only_if;
  // How the configuration is read (GET /config/); a plain admin_request by default.
  std::function<AdminReply()> read_config;
  std::function<bool()> gave_up;  // true after read_config: the write is abandoned (`interrupted`)
  // Names the upstreams in messages ("the canary upstream ..."); may be empty.
  std::vector<std::string> roles;
};

// Sets the weights of `change.dials` in the site at `target.address` in one
// PATCH of its upstreams array with If-Match, so nothing else changes; on 412
// it reads again, 5 times at most. `target`'s path and index follow the site.
WeightWrite write_weights(const AdminClientOptions& admin, StageTarget& target, const WeightChange& change,
                          std::string& error);

// How each stage is held and judged: the options `heft rollout` and `heft
// calibrate --apply` both take.
struct StageJudge {
  std::chrono::milliseconds hold{0}, poll{1000};
  double max_error_rate = 0.01;
  uint64_t min_requests = 200;
  std::optional<std::chrono::milliseconds> max_p99;
  bool rollback_on_abort = false;  // on Ctrl-C, set the rollback weights
};

struct StagePlan {
  // The upstreams whose weights the stages set, by dial address, and how the
  // lines name them: their role ("stable", "canary"), or their address when
  // the role is empty.
  std::vector<std::string> dials, roles;
  std::vector<std::vector<uint32_t>> stages;  // weights per stage, one per dial
  std::vector<uint32_t> rollback;             // what a breach or a failed stage sets
  // Whether stage `s` judges upstream `u` (the others are shown for comparison).
  std::function<bool(size_t s, size_t u)> judged;
  StageJudge judge;
  std::string complete = "complete";  // the last line: "<complete>: A 0 : B 100"
  AdminClientOptions admin;
};

// Runs the stages. Exit code: 0 every stage passed; 1 rolled back, the
// rollback failed, or stopped (the site or an upstream left, or the stage's
// weights were changed by someone else); 130 interrupted. Every ending
// prints the state left, as far as it is known.
int run_weight_stages(const StagePlan& plan, StageTarget target);

// "A 80 : B 20", the weights given per dial.
std::string describe_weights(const std::vector<std::string>& dials, const std::vector<uint32_t>& weights);

}  // namespace heft::cli
