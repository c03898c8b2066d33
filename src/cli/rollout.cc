// `heft rollout`: a canary (or blue-green) rollout driven through the admin
// API and judged from heft's own per-upstream counters (docs/rollout.md).
//
//   heft rollout --site SITE --stable A --canary B --stages 95:5,80:20,50:50,0:100
//                --hold 5m --max-error-rate 1% --min-requests 200 [--max-p99 300ms]
//                [--dry-run] [--rollback-on-abort] [--address HOST:PORT] [--token T]
//
// Each stage reads the site's `upstreams` array afresh with its ETag, sets the
// stable's and canary's weights in that copy and PATCHes it with If-Match: both
// weights change in one transaction, and a concurrent change by someone else
// (another upstream marked down, re-weighted, removed) is kept, not overwritten
// (on 412 it reads again). Then it watches GET /reverse_proxy/upstreams once a second:
// the canary's requests, 5xx responses and p99 (from the per-backend response
// time histogram) since the stage began. A breach at any poll rolls back to
// stable 100 : canary 0 at once. The site is found once by SITE and followed
// by its address after that, so sites added or removed before it do not
// shift the rollout onto another. Exit: 0 done, 1 rolled back or the rollback
// failed (state reported), or stopped (the site, stable or canary left, or
// their weights are no longer the stage's), 2 bad arguments or nothing to
// roll out against, 130 interrupted (state reported).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "cli/site_lookup.h"
#include "config/values.h"
#include "heft/balance/balancer.h"
#include "heft/balance/policy.h"

namespace heft::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

struct Stage {
  uint32_t stable = 0;
  uint32_t canary = 0;
};

struct RolloutOptions {
  std::string site, stable, canary, stages_text = "95:5,80:20,50:50,0:100", hold_text = "5m";
  std::string max_error_rate_text = "1%", max_p99_text, poll_text = "1s", min_requests_text = "200";
  bool dry_run = false, rollback_on_abort = false;
  AdminClientOptions admin;
  // Parsed:
  std::vector<Stage> stages;
  milliseconds hold{0}, poll{1000};
  double max_error_rate = 0.01;
  uint64_t min_requests = 200;
  std::optional<milliseconds> max_p99;
};

void parse(RolloutOptions& o) {
  if (o.site.empty()) throw BadArguments("rollout: --site is required");
  if (o.stable.empty() || o.canary.empty()) throw BadArguments("rollout: --stable and --canary are required");
  if (o.stable == o.canary) throw BadArguments("rollout: --stable and --canary must differ");
  size_t start = 0;
  while (start <= o.stages_text.size()) {
    size_t comma = o.stages_text.find(',', start);
    std::string item = o.stages_text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto bad_stage = [&item] {
      return BadArguments(fmt::format("rollout: bad stage \"{}\" in --stages (want STABLE:CANARY weights, e.g. 95:5)", item));
    };
    auto colon = item.find(':');
    if (colon == std::string::npos) throw bad_stage();
    auto a = config::parse_uint(item.substr(0, colon), balance::kMaxWeight);
    auto b = config::parse_uint(item.substr(colon + 1), balance::kMaxWeight);
    if (!a || !b || *a + *b == 0) throw bad_stage();
    o.stages.push_back({uint32_t(*a), uint32_t(*b)});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto hold = config::parse_duration(o.hold_text);
  if (!hold || hold->count() <= 0) throw BadArguments(fmt::format("rollout: bad --hold \"{}\" (e.g. 5m)", o.hold_text));
  o.hold = *hold;
  auto poll = config::parse_duration(o.poll_text);
  if (!poll || poll->count() <= 0) throw BadArguments(fmt::format("rollout: bad --poll \"{}\"", o.poll_text));
  o.poll = *poll;
  auto rate = config::parse_fraction(o.max_error_rate_text);
  if (!rate || *rate < 0 || *rate > 1)
    throw BadArguments(fmt::format("rollout: bad --max-error-rate \"{}\" (e.g. 1% or 0.01)", o.max_error_rate_text));
  // "1" is 100 %: a guard that never trips, almost surely meant as 1 %.
  if (*rate == 1 && o.max_error_rate_text.back() != '%')
    throw BadArguments(fmt::format("rollout: --max-error-rate \"{}\" would be 100% (never rolled back for errors): "
                                   "write 1% for one percent, or 100% if that is meant",
                                   o.max_error_rate_text));
  o.max_error_rate = *rate;
  // Read as text: CLI11 reads "-5" into an unsigned as 18446744073709551611.
  auto min_requests = config::parse_uint(o.min_requests_text, UINT64_MAX);
  if (!min_requests)
    throw BadArguments(fmt::format("rollout: bad --min-requests \"{}\" (a whole number, 0 or more)", o.min_requests_text));
  o.min_requests = *min_requests;
  if (!o.max_p99_text.empty()) {
    auto p99 = config::parse_duration(o.max_p99_text);
    if (!p99 || p99->count() <= 0) throw BadArguments(fmt::format("rollout: bad --max-p99 \"{}\" (e.g. 300ms)", o.max_p99_text));
    o.max_p99 = *p99;
  }
}

// The site rolled out, followed by its address: a site added or removed
// before it (an admin write, a reload) shifts its index and its path, and
// the index would then name another site's traffic and weights.
struct Target {
  std::string address;  // HOSTS:PORT, as /reverse_proxy/upstreams' site_address says it
  std::string path;     // /config/.../upstreams (as last read)
  size_t site_index = 0;  // (as last read)
};

// The index of the upstream dialled as `dial` in a site's `upstreams` array.
std::optional<size_t> upstream_index(const json& upstreams, const std::string& dial) {
  for (size_t u = 0; u < upstreams.size(); ++u)
    if (upstreams[u].value("dial", "") == dial) return u;
  return std::nullopt;
}

// How the site's balancing policy spreads traffic when it ignores the weights
// (docs/balancing.md), or nullopt for the policies that split by weight.
std::optional<std::string> ignores_weights(const json& reverse_proxy, std::string& policy) {
  const json::json_pointer at("/load_balancing/selection_policy/policy");
  policy = reverse_proxy.contains(at) && reverse_proxy[at].is_string() ? reverse_proxy[at].get<std::string>()
                                                                        : "weighted_round_robin";
  switch (balance::parse_policy(policy).value_or(balance::PolicyKind::weighted_round_robin)) {
    case balance::PolicyKind::round_robin: return "every upstream takes its turn, whatever its weight";
    case balance::PolicyKind::first: return "the first available upstream in configured order takes all the traffic";
    default: return std::nullopt;
  }
}

// SITE as find_site() reads it. Both upstreams must be primaries in service:
// a backup takes no traffic while a primary is up, so its stage could never
// pass, and the rollback would drain the pool's failover. The site's policy
// must split by weight, or a 95:5 stage is not 95:5.
std::optional<Target> find_target(const json& config, const RolloutOptions& o, std::string& why) {
  auto site = find_site(config, o.site, why);
  if (!site) return std::nullopt;
  const json& upstreams = *site->upstreams;
  auto stable = upstream_index(upstreams, o.stable), canary = upstream_index(upstreams, o.canary);
  if (!stable || !canary) {
    why = fmt::format("site {} has no upstream {}", o.site, stable ? o.canary : o.stable);
    return std::nullopt;
  }
  for (size_t u : {*stable, *canary}) {
    const json& upstream = upstreams[u];
    const char* role = u == *stable ? "stable" : "canary";
    if (upstream.value("backup", false)) {
      why = fmt::format("the {} upstream {} is a backup server (it takes traffic only when every primary is out); "
                        "a rollout moves traffic between two primaries",
                        role, upstream.value("dial", ""));
      return std::nullopt;
    }
    if (upstream.value("down", false)) {
      why = fmt::format("the {} upstream {} is marked down", role, upstream.value("dial", ""));
      return std::nullopt;
    }
  }
  std::string policy;
  if (auto how = ignores_weights(*site->reverse_proxy, policy)) {
    why = fmt::format("site {} balances with lb_policy {}, which ignores weights ({}), so no stage would split "
                      "the traffic as given; switch the site to a weighted policy (weighted_round_robin, the "
                      "default, least_conn, random, p2c or hash) first",
                      o.site, policy, *how);
    return std::nullopt;
  }
  return Target{site->address, site->upstreams_path, site->index};
}

// The index under which a /reverse_proxy/upstreams answer lists the site
// whose site_address is `address`; nullopt with `why` set when none does
// (removed, or its hosts or port changed) or several do.
std::optional<size_t> site_index_in(const json& list, const std::string& address, std::string& why) {
  std::vector<size_t> indices;
  for (const json& u : list)
    if (u.value("site_address", "") == address) {
      const size_t index = u.value("site", size_t(-1));
      if (std::find(indices.begin(), indices.end(), index) == indices.end()) indices.push_back(index);
    }
  if (indices.size() == 1) return indices.front();
  why = indices.empty()
            ? fmt::format("site {} is no longer in /reverse_proxy/upstreams (removed, or its hosts or port changed)",
                          address)
            : fmt::format("site {} is ambiguous: /reverse_proxy/upstreams lists sites {} with that address", address,
                          fmt::join(indices, ", "));
  return std::nullopt;
}

// The entry of the backend dialled as `address` in site `site` of a
// /reverse_proxy/upstreams answer, or null.
const json* find_upstream(const json& list, size_t site, const std::string& address) {
  for (const json& u : list)
    if (u.value("site", size_t(-1)) == site && u.value("address", "") == address) return &u;
  return nullptr;
}

// One backend's counters as /reverse_proxy/upstreams shows them.
struct Counters {
  uint64_t requests = 0, errors = 0;
  std::vector<std::pair<double, uint64_t>> buckets;  // (upper bound ms, count), last = +Inf
};

Counters read_counters(const json& u) {
  Counters c;
  c.requests = u.value("responses_total", u.value("requests_total", uint64_t(0)));
  c.errors = u.value("responses_5xx_total", uint64_t(0));
  for (const json& b : u.value("latency_ms_buckets", json::array())) {
    double le = b.at(0).is_number() ? b.at(0).get<double>() : 1e300;
    c.buckets.emplace_back(le, b.at(1).get<uint64_t>());
  }
  return c;
}

// Whether any counter of `now` is below `before`: heft restarted (or the
// backend left the pool and came back), and all of them count from 0 again.
bool went_down(const Counters& now, const Counters& before) {
  if (now.requests < before.requests || now.errors < before.errors) return true;
  for (size_t i = 0; i < now.buckets.size() && i < before.buckets.size(); ++i)
    if (now.buckets[i].second < before.buckets[i].second) return true;
  return false;
}

struct Window {
  uint64_t requests = 0, errors = 0;
  std::optional<double> p99_ms;  // upper bound of the p99 bucket; nullopt with no data
  double error_rate() const { return requests ? double(errors) / double(requests) : 0.0; }
};

Window delta(const Counters& now, const Counters& then) {
  // Counters that went down count from 0 again: the window is then all of
  // `now`, every field alike (one field's difference beside another's raw
  // value mixed two spans: a false breach or a false pass).
  const Counters zero;
  const Counters& from = went_down(now, then) ? zero : then;
  Window w;
  w.requests = now.requests - from.requests;
  w.errors = now.errors - from.errors;
  uint64_t total = 0;
  std::vector<uint64_t> d(now.buckets.size());
  for (size_t i = 0; i < now.buckets.size(); ++i) {
    d[i] = now.buckets[i].second - (i < from.buckets.size() ? from.buckets[i].second : 0);
    total += d[i];
  }
  if (total) {
    uint64_t need = (total * 99 + 99) / 100, seen = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      seen += d[i];
      if (seen >= need) {
        w.p99_ms = now.buckets[i].first;
        break;
      }
    }
  }
  return w;
}

// One backend over a stage: its counters at the start of the window and at
// the latest poll.
struct Watch {
  Counters base, last;
  explicit Watch(Counters start) : base(start), last(std::move(start)) {}
  // Takes a poll's counters. True when they went down since the last poll: a
  // restart, and the window starts again from 0, so that it counts what the
  // backend served since (and later polls do not mix spans either).
  bool update(Counters now) {
    const bool restarted = went_down(now, last);
    if (restarted) base = Counters{};
    last = std::move(now);
    return restarted;
  }
  Window window() const { return delta(last, base); }
};

std::string describe(const Window& w) {
  std::string p99 = !w.p99_ms ? "-" : *w.p99_ms > 1e299 ? "> 30s" : fmt::format("<= {}ms", *w.p99_ms);
  return fmt::format("{} req, {:.2f}% 5xx, p99 {}", w.requests, w.error_rate() * 100, p99);
}

class Rollout {
 public:
  explicit Rollout(RolloutOptions o) : o_(std::move(o)), reads_(o_.admin) {
    reads_.give_up = [] { return g_interrupted.load(); };
  }
  int run();

 private:
  // How setting a stage's weights ended: `gone` when the site, the stable or
  // the canary is no longer in the configuration (nothing to set);
  // `interrupted` when a signal came while it read the configuration.
  enum class Applied { ok, failed, gone, interrupted };
  Applied apply(const Stage& stage, std::string& error, bool interruptible);
  std::optional<json> upstreams_state(std::string& error);
  // GET `target` as the watch reads: while the admin API gives no answer at
  // all (heft restarting: refused, timed out), asked again every poll for up
  // to kOutageWait, saying so, instead of taking the first miss for good.
  AdminReply read(const std::string& target);
  // Sets stable 100 : canary 0 and says how it went.
  Applied roll_back_and_report(const std::string& reason);
  // A rollback that failed still ends with the state left, as far as known,
  // as an interrupt's does: the operator must not be left guessing.
  int roll_back(const std::string& reason) {
    const Applied rollback = roll_back_and_report(reason);
    if (rollback == Applied::failed || rollback == Applied::interrupted) report_unconfirmed_rollback();
    return 1;
  }
  void report_unconfirmed_rollback() const;
  // The site's index in a /reverse_proxy/upstreams answer, found by its
  // address (saying so when it moved), or nullopt with `why` set.
  std::optional<size_t> follow_site(const json& list, std::string& why);
  // SITE as given, with the address it stands for when that says more.
  std::string site_name() const {
    return o_.site == target_.address ? o_.site : fmt::format("{} ({})", o_.site, target_.address);
  }
  int stopped(size_t stage_index, const std::string& why);
  int interrupted(size_t stage_index);
  std::string stage_lost(const json& stable, const json& canary, const Stage& stage) const;

  RolloutOptions o_;
  // For reads, which give way to a signal at once (a stopped heft would hold
  // one for the whole request timeout). The weight changes are waited for, so
  // the state reported after an interrupt is the one heft has.
  AdminClientOptions reads_;
  Target target_;
  std::optional<Stage> applied_;
  size_t stage_ = 0;  // the stage under way (for read()'s lines)
};

// How long a stage waits for an admin API that stopped answering (a restart
// of heft) before it counts the counters as unreadable.
constexpr std::chrono::seconds kOutageWait{30};

AdminReply Rollout::read(const std::string& target) {
  std::optional<Clock::time_point> since;
  for (;;) {
    AdminReply r = admin_request(reads_, "GET", target);
    if (g_interrupted) return r;
    const auto now = Clock::now();
    if (r.status != 0) {
      if (since)
        fmt::print("stage {}/{}: the admin API answers again after {:.1f}s\n", stage_ + 1, o_.stages.size(),
                   std::chrono::duration<double>(now - *since).count());
      return r;
    }
    if (!since) {
      since = now;
      fmt::print("stage {}/{}: no answer from the admin API ({}); waiting up to {} for it\n", stage_ + 1,
                 o_.stages.size(), r.transport_error, config::format_duration(kOutageWait));
    } else if (now - *since >= kOutageWait) {
      return r;
    }
    const auto wake = std::min(*since + kOutageWait, Clock::now() + o_.poll);
    while (Clock::now() < wake && !g_interrupted) std::this_thread::sleep_for(milliseconds(50));
    if (g_interrupted) return r;
  }
}

Rollout::Applied Rollout::apply(const Stage& stage, std::string& error, bool interruptible) {
  // Someone else may change the site meanwhile (mark another upstream down,
  // re-weight or remove one): each try sets the two weights in the array as it
  // is now and PATCHes it only if nothing changed since it was read.
  constexpr int kTries = 5;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    AdminReply current = interruptible ? read("/config/") : admin_request(o_.admin, "GET", "/config/");
    if (interruptible && g_interrupted) return Applied::interrupted;
    if (current.status != 200) {
      error = "cannot read the configuration: " + current.error_message();
      return Applied::failed;
    }
    if (current.etag.empty()) {
      error = "the admin API answered no ETag, so the change could overwrite someone else's";
      return Applied::failed;
    }
    const json config = json::parse(current.body, nullptr, false);
    std::string why;
    // By address, not by SITE again: a numeric SITE would name another site
    // once one is added before it, and a host name could become ambiguous.
    auto site = find_site_by_address(config, target_.address, why);
    if (!site) {
      error = why;
      return Applied::gone;
    }
    json upstreams = *site->upstreams;
    auto stable = upstream_index(upstreams, o_.stable), canary = upstream_index(upstreams, o_.canary);
    if (!stable || !canary) {
      error = fmt::format("the {} upstream {} is no longer in site {}", stable ? "canary" : "stable",
                          stable ? o_.canary : o_.stable, site_name());
      return Applied::gone;
    }
    upstreams[*stable]["weight"] = stage.stable;
    upstreams[*canary]["weight"] = stage.canary;
    // One PATCH of the array: both weights change in one transaction.
    AdminReply r = admin_request(o_.admin, "PATCH", site->upstreams_path, upstreams.dump(), "application/json",
                                 current.etag);
    if (r.status == 412) continue;  // changed since it was read: read it again
    if (r.status < 200 || r.status > 299) {
      error = r.error_message();
      return Applied::failed;
    }
    target_ = Target{site->address, site->upstreams_path, site->index};
    applied_ = stage;
    return Applied::ok;
  }
  error = fmt::format("the configuration changed between reading and writing it {} times in a row (412)", kTries);
  return Applied::failed;
}

std::optional<json> Rollout::upstreams_state(std::string& error) {
  AdminReply r = read("/reverse_proxy/upstreams");
  if (r.status != 200) {
    error = r.error_message();
    return std::nullopt;
  }
  auto parsed = json::parse(r.body, nullptr, false);
  if (!parsed.is_array()) {
    error = "unexpected /reverse_proxy/upstreams answer";
    return std::nullopt;
  }
  return parsed;
}

Rollout::Applied Rollout::roll_back_and_report(const std::string& reason) {
  std::string error;
  const Applied applied = apply({100, 0}, error, false);
  switch (applied) {
    case Applied::ok:
      fmt::print("ROLLED BACK to {} 100 : {} 0 — {}\n", o_.stable, o_.canary, reason);
      break;
    case Applied::gone:
      // Someone removed the site, the stable or the canary: nothing to roll back to.
      fmt::print("STOPPED: {}; not rolled back: {}; weights left as they are\n", reason, error);
      break;
    case Applied::failed:
    case Applied::interrupted:  // (not interruptible)
      fmt::print("ROLLBACK FAILED: {} (could not set {} 100 / {} 0: {})\n", reason, o_.stable, o_.canary, error);
      break;
  }
  return applied;
}

void Rollout::report_unconfirmed_rollback() const {
  if (applied_)
    fmt::print("state: unknown, the rollback was not confirmed (before it: {} {} : {} {}, the last applied stage)\n",
               o_.stable, applied_->stable, o_.canary, applied_->canary);
  else
    fmt::print("state: unknown, the rollback was not confirmed (before it: weights untouched)\n");
}

std::optional<size_t> Rollout::follow_site(const json& list, std::string& why) {
  auto index = site_index_in(list, target_.address, why);
  if (index && *index != target_.site_index) {
    fmt::print("stage {}/{}: site {} is site {} now (was {}): a site was added or removed before it\n", stage_ + 1,
               o_.stages.size(), target_.address, *index, target_.site_index);
    target_.site_index = *index;
  }
  return index;
}

int Rollout::stopped(size_t stage_index, const std::string& why) {
  const Stage& stage = o_.stages[stage_index];
  fmt::print("STOPPED at stage {}/{} {}:{}: {}; weights left as they are, nothing rolled back\n", stage_index + 1,
             o_.stages.size(), stage.stable, stage.canary, why);
  return 1;
}

int Rollout::interrupted(size_t stage_index) {
  if (o_.rollback_on_abort) {
    const Applied rollback = roll_back_and_report(
        fmt::format("interrupted during stage {}/{} (--rollback-on-abort)", stage_index + 1, o_.stages.size()));
    // The state line says what heft has: 100 : 0 only when the rollback was applied.
    if (rollback == Applied::ok)
      fmt::print("state: {} 100 : {} 0 (rolled back)\n", o_.stable, o_.canary);
    else if (rollback == Applied::gone)
      fmt::print("state: not rolled back, weights left as they are\n");
    else
      report_unconfirmed_rollback();
  } else if (applied_) {
    fmt::print("INTERRUPTED during stage {}/{}: left at {} {} : {} {} (the last applied stage)\n", stage_index + 1,
               o_.stages.size(), o_.stable, applied_->stable, o_.canary, applied_->canary);
  } else {
    fmt::print("INTERRUPTED before any change: weights untouched\n");
  }
  return 130;
}

// Why the stage is no longer in effect, or "" while the stable's and canary's
// weights in /reverse_proxy/upstreams are still the stage's. A reload, a
// restart without --resume or another operator may have set others: then the
// figures judge weights the rollout did not set.
std::string Rollout::stage_lost(const json& stable, const json& canary, const Stage& stage) const {
  const uint64_t now_stable = stable.value("weight", uint64_t(1)), now_canary = canary.value("weight", uint64_t(1));
  if (now_stable == stage.stable && now_canary == stage.canary) return "";
  return fmt::format("the weights are no longer the stage's: {} {} : {} {} now (changed by a reload, a restart "
                     "without --resume or someone else)",
                     o_.stable, now_stable, o_.canary, now_canary);
}

int Rollout::run() {
  // Each line as it happens, also into a file or a pipe (a log, `| tee`),
  // where stdout would otherwise hold the stages' lines until the end.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  AdminReply cfg = admin_request(o_.admin, "GET", "/config/");
  if (cfg.status != 200) {
    fmt::print(stderr, "heft: rollout: cannot read the configuration: {}\n", cfg.error_message());
    return kBadArguments;
  }
  auto config = json::parse(cfg.body, nullptr, false);
  std::string why;
  auto target = find_target(config, o_, why);
  if (!target) {
    fmt::print(stderr, "heft: rollout: {}\n", why);
    return kBadArguments;
  }
  target_ = std::move(*target);
  fmt::print("rollout of site {} ({}{}): stable {} -> canary {}, {} stage{}, hold {}, max 5xx rate {}, min {} requests{}\n",
             o_.site, o_.site == target_.address ? "" : target_.address + ", ", target_.path, o_.stable, o_.canary,
             o_.stages.size(), o_.stages.size() == 1 ? "" : "s",
             config::format_duration(o_.hold), config::format_fraction(o_.max_error_rate), o_.min_requests,
             o_.max_p99 ? ", max p99 " + config::format_duration(*o_.max_p99) : "");
  if (o_.dry_run) {
    for (size_t i = 0; i < o_.stages.size(); ++i)
      fmt::print("  stage {}/{}: PATCH {} with {} weight {}, {} weight {}; hold {}\n", i + 1, o_.stages.size(),
                 target_.path, o_.stable, o_.stages[i].stable, o_.canary, o_.stages[i].canary,
                 config::format_duration(o_.hold));
    fmt::print("dry run: nothing changed\n");
    return 0;
  }

  // sigaction without SA_RESTART (std::signal sets it): a blocking call ends
  // with EINTR rather than going on as if nothing came.
  g_interrupted.store(false);
  struct sigaction on_signal{}, old_int{}, old_term{};
  on_signal.sa_handler = on_interrupt;
  sigemptyset(&on_signal.sa_mask);
  sigaction(SIGINT, &on_signal, &old_int);
  sigaction(SIGTERM, &on_signal, &old_term);
  struct Restore {
    const struct sigaction &i, &t;
    ~Restore() {
      sigaction(SIGINT, &i, nullptr);
      sigaction(SIGTERM, &t, nullptr);
    }
  } restore{old_int, old_term};

  for (size_t s = 0; s < o_.stages.size(); ++s) {
    const Stage& stage = o_.stages[s];
    stage_ = s;
    if (g_interrupted) return interrupted(s);
    std::string error;
    switch (apply(stage, error, true)) {
      case Applied::ok:
        break;
      case Applied::interrupted:
        return interrupted(s);
      case Applied::gone:
        // Someone removed it: there is nothing left to roll out or back.
        return stopped(s, error);
      case Applied::failed:
        fmt::print("stage {}/{} {}:{}: cannot apply weights: {}\n", s + 1, o_.stages.size(), stage.stable,
                   stage.canary, error);
        return roll_back("could not apply a stage");
    }
    fmt::print("stage {}/{}: {} {} : {} {} applied, holding {}\n", s + 1, o_.stages.size(), o_.stable, stage.stable,
               o_.canary, stage.canary, config::format_duration(o_.hold));
    std::fflush(stdout);
    auto base_list = upstreams_state(error);
    if (g_interrupted) return interrupted(s);
    if (!base_list) return roll_back("cannot read upstream counters: " + error);
    const auto base_site = follow_site(*base_list, error);
    if (!base_site) return roll_back(error);
    const json* base_stable = find_upstream(*base_list, *base_site, o_.stable);
    const json* base_canary = find_upstream(*base_list, *base_site, o_.canary);
    if (!base_stable || !base_canary) return roll_back("the upstreams are not in /reverse_proxy/upstreams");
    if (std::string lost = stage_lost(*base_stable, *base_canary, stage); !lost.empty()) return stopped(s, lost);
    Watch stable_watch(read_counters(*base_stable)), canary_watch(read_counters(*base_canary));
    const auto start = Clock::now();
    auto end = start + o_.hold;
    bool extended = false;
    Window ws, wc;
    for (;;) {
      // Sleep one poll period in small slices, so Ctrl-C is handled at once.
      const auto wake = std::min(end, Clock::now() + o_.poll);
      while (Clock::now() < wake && !g_interrupted) std::this_thread::sleep_for(milliseconds(50));
      if (g_interrupted) return interrupted(s);
      auto list = upstreams_state(error);
      // A signal during the read (which gives way to it) or since: nothing is judged after it.
      if (g_interrupted) return interrupted(s);
      if (!list) return roll_back("cannot read upstream counters: " + error);
      const auto site = follow_site(*list, error);
      if (!site) return roll_back(error);
      const json* us = find_upstream(*list, *site, o_.stable);
      const json* uc = find_upstream(*list, *site, o_.canary);
      if (!us || !uc) return roll_back("the upstreams left /reverse_proxy/upstreams");
      if (std::string lost = stage_lost(*us, *uc, stage); !lost.empty()) return stopped(s, lost);
      const auto take = [&](Watch& watch, const json& entry, const std::string& address) {
        if (watch.update(read_counters(entry)))
          fmt::print("stage {}/{}: the counters of {} went down (heft restarted?): its figures count from 0 again\n",
                     s + 1, o_.stages.size(), address);
      };
      take(stable_watch, *us, o_.stable);
      take(canary_watch, *uc, o_.canary);
      ws = stable_watch.window();
      wc = canary_watch.window();
      const bool judged = stage.canary > 0 && wc.requests >= o_.min_requests;
      std::string breach;
      if (judged && wc.error_rate() > o_.max_error_rate)
        breach = fmt::format("canary 5xx rate {:.2f}% > {} over {} requests", wc.error_rate() * 100,
                             config::format_fraction(o_.max_error_rate), wc.requests);
      else if (judged && o_.max_p99 && wc.p99_ms && *wc.p99_ms > double(o_.max_p99->count()))
        breach = fmt::format("canary p99 {} > {} over {} requests",
                             *wc.p99_ms > 1e299 ? std::string("> 30s") : fmt::format("{}ms", *wc.p99_ms),
                             config::format_duration(*o_.max_p99), wc.requests);
      if (!breach.empty()) {
        fmt::print("stage {}/{} {}:{}: stable {} | canary {} -> BREACH\n", s + 1, o_.stages.size(), stage.stable,
                   stage.canary, describe(ws), describe(wc));
        return roll_back(breach);
      }
      if (Clock::now() < end) continue;
      if (stage.canary > 0 && wc.requests < o_.min_requests) {
        if (!extended) {
          // Too little traffic to judge: hold once more before giving up.
          extended = true;
          end += o_.hold;
          fmt::print("stage {}/{}: only {} canary requests (< {}), holding another {}\n", s + 1, o_.stages.size(),
                     wc.requests, o_.min_requests, config::format_duration(o_.hold));
          std::fflush(stdout);
          continue;
        }
        fmt::print("stage {}/{} {}:{}: stable {} | canary {} -> NOT ENOUGH TRAFFIC\n", s + 1, o_.stages.size(),
                   stage.stable, stage.canary, describe(ws), describe(wc));
        return roll_back(fmt::format("only {} canary requests in {} (< --min-requests {})", wc.requests,
                                     config::format_duration(o_.hold * 2), o_.min_requests));
      }
      break;
    }
    if (g_interrupted) return interrupted(s);  // not passed: it did not run its course
    fmt::print("stage {}/{} {}:{}: stable {} | canary {} -> ok\n", s + 1, o_.stages.size(), stage.stable,
               stage.canary, describe(ws), describe(wc));
    std::fflush(stdout);
  }
  if (g_interrupted) return interrupted(o_.stages.size() - 1);
  fmt::print("rollout complete: {} {} : {} {}\n", o_.stable, o_.stages.back().stable, o_.canary,
             o_.stages.back().canary);
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<RolloutOptions>();
  CLI::App* cmd = root.add_subcommand("rollout", "Canary / blue-green rollout with automatic rollback");
  cmd->add_option("--site", options->site, "Site: a host name, :PORT, or its index")->required();
  cmd->add_option("--stable", options->stable, "Stable upstream (dial address as configured)")->required();
  cmd->add_option("--canary", options->canary, "Canary upstream (dial address as configured)")->required();
  cmd->add_option("--stages", options->stages_text, "STABLE:CANARY weights per stage (default 95:5,80:20,50:50,0:100)");
  cmd->add_option("--hold", options->hold_text, "Time each stage is watched (default 5m)");
  cmd->add_option("--max-error-rate", options->max_error_rate_text, "Largest canary 5xx rate (default 1%)");
  cmd->add_option("--min-requests", options->min_requests_text, "Canary requests needed to judge a stage (default 200)");
  cmd->add_option("--max-p99", options->max_p99_text, "Largest canary p99 time to the response head (e.g. 300ms)");
  cmd->add_option("--poll", options->poll_text, "How often counters are read (default 1s)");
  cmd->add_flag("--dry-run", options->dry_run, "Print the plan; change nothing");
  cmd->add_flag("--rollback-on-abort", options->rollback_on_abort, "On Ctrl-C, roll back to 100:0");
  add_admin_options(cmd, options->admin);
  cmd->callback([options] {
    settle_admin_options(options->admin);
    parse(*options);
    set_exit_code(Rollout(*options).run());
  });
}

const bool registered = add_command(40, &setup);

}  // namespace
}  // namespace heft::cli
