#include "cli/weight_stages.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/site_lookup.h"
#include "config/values.h"
#include "heft/balance/policy.h"

namespace heft::cli {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// Whether any counter of `now` is below `before`: heft restarted (or the
// backend left the pool and came back), and all of them count from 0 again.
bool went_down(const Counters& now, const Counters& before) {
  if (now.requests < before.requests || now.errors < before.errors) return true;
  for (size_t i = 0; i < now.buckets.size() && i < before.buckets.size(); ++i)
    if (now.buckets[i].second < before.buckets[i].second) return true;
  return false;
}

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

}  // namespace

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

bool Watch::update(Counters now) {
  const bool restarted = went_down(now, last);
  if (restarted) base = Counters{};
  last = std::move(now);
  return restarted;
}

Window Watch::window() const { return delta(last, base); }

std::string describe(const Window& w) {
  std::string p99 = !w.p99_ms ? "-" : *w.p99_ms > 1e299 ? "> 30s" : fmt::format("<= {}ms", *w.p99_ms);
  return fmt::format("{} req, {:.2f}% 5xx, p99 {}", w.requests, w.error_rate() * 100, p99);
}

std::optional<size_t> upstream_index(const json& upstreams, const std::string& dial) {
  for (size_t u = 0; u < upstreams.size(); ++u)
    if (upstreams[u].value("dial", "") == dial) return u;
  return std::nullopt;
}

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

const json* find_upstream(const json& list, size_t site, const std::string& address) {
  for (const json& u : list)
    if (u.value("site", size_t(-1)) == site && u.value("address", "") == address) return &u;
  return nullptr;
}

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

struct InterruptCatcher::Saved {
  struct sigaction old_int{}, old_term{};
};

InterruptCatcher::InterruptCatcher() : saved_(new Saved) {
  g_interrupted.store(false);
  struct sigaction on_signal{};
  on_signal.sa_handler = on_interrupt;
  sigemptyset(&on_signal.sa_mask);
  sigaction(SIGINT, &on_signal, &saved_->old_int);
  sigaction(SIGTERM, &on_signal, &saved_->old_term);
}

InterruptCatcher::~InterruptCatcher() {
  sigaction(SIGINT, &saved_->old_int, nullptr);
  sigaction(SIGTERM, &saved_->old_term, nullptr);
  delete saved_;
}

bool interrupted() { return g_interrupted.load(); }

bool sleep_unless_interrupted(Clock::time_point until) {
  while (Clock::now() < until && !g_interrupted) std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(50), until - Clock::now()));
  return !g_interrupted;
}

std::string describe_weights(const std::vector<std::string>& dials, const std::vector<uint32_t>& weights) {
  std::string out;
  for (size_t i = 0; i < dials.size() && i < weights.size(); ++i)
    out += fmt::format("{}{} {}", i ? " : " : "", dials[i], weights[i]);
  return out;
}

WeightWrite write_weights(const AdminClientOptions& admin, StageTarget& target, const WeightChange& change,
                          std::string& error) {
  // Someone else may change the site meanwhile (mark another upstream down,
  // re-weight or remove one): each try sets the weights in the array as it is
  // now and PATCHes it only if nothing changed since it was read.
  constexpr int kTries = 5;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    AdminReply current = change.read_config ? change.read_config() : admin_request(admin, "GET", "/config/");
    if (change.gave_up && change.gave_up()) return WeightWrite::interrupted;
    if (current.status != 200) {
      error = "cannot read the configuration: " + current.error_message();
      return WeightWrite::failed;
    }
    if (current.etag.empty()) {
      error = "the admin API answered no ETag, so the change could overwrite someone else's";
      return WeightWrite::failed;
    }
    const json config = json::parse(current.body, nullptr, false);
    std::string why;
    // By address, not by SITE again: a numeric SITE would name another site
    // once one is added before it, and a host name could become ambiguous.
    auto site = find_site_by_address(config, target.address, why);
    if (!site) {
      error = why;
      return WeightWrite::gone;
    }
    const std::string site_name =
        target.site == target.address ? target.site : fmt::format("{} ({})", target.site, target.address);
    json upstreams = *site->upstreams;
    std::vector<uint32_t> now;
    for (size_t u = 0; u < change.dials.size(); ++u) {
      auto index = upstream_index(upstreams, change.dials[u]);
      if (!index) {
        const std::string role = u < change.roles.size() && !change.roles[u].empty() ? change.roles[u] + " " : "";
        error = fmt::format("the {}upstream {} is no longer in site {}", role, change.dials[u], site_name);
        return WeightWrite::gone;
      }
      now.push_back(upstreams[*index].value("weight", uint32_t(1)));
      upstreams[*index]["weight"] = change.weights[u];
    }
    if (change.only_if && now != *change.only_if) {
      error = fmt::format("the weights are {} now, not {}", describe_weights(change.dials, now),
                          describe_weights(change.dials, *change.only_if));
      return WeightWrite::changed;
    }
    // One PATCH of the array: every weight changes in one transaction.
    AdminReply r = admin_request(admin, "PATCH", site->upstreams_path, upstreams.dump(), "application/json",
                                 current.etag);
    if (r.status == 412) continue;  // changed since it was read: read it again
    if (r.status < 200 || r.status > 299) {
      error = r.error_message();
      return WeightWrite::failed;
    }
    target.path = site->upstreams_path;
    target.site_index = site->index;
    return WeightWrite::ok;
  }
  error = fmt::format("the configuration changed between reading and writing it {} times in a row (412)", kTries);
  return WeightWrite::failed;
}

namespace {

// How long a stage waits for an admin API that stopped answering (a restart
// of heft) before it counts the counters as unreadable.
constexpr std::chrono::seconds kOutageWait{30};

class WeightStages {
 public:
  WeightStages(const StagePlan& plan, StageTarget target) : p_(plan), reads_(plan.admin), target_(std::move(target)) {
    reads_.give_up = [] { return g_interrupted.load(); };
  }
  int run();

 private:
  // How setting a stage's weights ended: `gone` when the site or one of the
  // upstreams is no longer in the configuration (nothing to set);
  // `interrupted` when a signal came while it read the configuration.
  enum class Applied { ok, failed, gone, interrupted };
  Applied apply(const std::vector<uint32_t>& weights, std::string& error, bool interruptible);
  std::optional<json> upstreams_state(std::string& error);
  // GET `target` as the watch reads: while the admin API gives no answer at
  // all (heft restarting: refused, timed out), asked again every poll for up
  // to kOutageWait, saying so, instead of taking the first miss for good.
  AdminReply read(const std::string& target);
  // Sets the rollback weights and says how it went.
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
    return target_.site == target_.address ? target_.site : fmt::format("{} ({})", target_.site, target_.address);
  }
  int stopped(size_t stage_index, const std::string& why);
  int interrupted_at(size_t stage_index);
  std::string stage_lost(const std::vector<const json*>& entries, const std::vector<uint32_t>& stage) const;
  // How the lines name upstream `u`: its role, else its address.
  const std::string& label(size_t u) const { return p_.roles[u].empty() ? p_.dials[u] : p_.roles[u]; }
  // "95:5"
  std::string stage_label(size_t s) const { return fmt::format("{}", fmt::join(p_.stages[s], ":")); }
  std::string stage_counter(size_t s) const { return fmt::format("{}/{}", s + 1, p_.stages.size()); }
  std::string windows(const std::vector<Watch>& watches) const {
    std::string out;
    for (size_t u = 0; u < watches.size(); ++u)
      out += fmt::format("{}{} {}", u ? " | " : "", label(u), describe(watches[u].window()));
    return out;
  }

  const StagePlan& p_;
  // For reads, which give way to a signal at once (a stopped heft would hold
  // one for the whole request timeout). The weight changes are waited for, so
  // the state reported after an interrupt is the one heft has.
  AdminClientOptions reads_;
  StageTarget target_;
  std::optional<std::vector<uint32_t>> applied_;
  size_t stage_ = 0;  // the stage under way (for read()'s lines)
};

AdminReply WeightStages::read(const std::string& target) {
  std::optional<Clock::time_point> since;
  for (;;) {
    AdminReply r = admin_request(reads_, "GET", target);
    if (g_interrupted) return r;
    const auto now = Clock::now();
    if (r.status != 0) {
      if (since)
        fmt::print("stage {}: the admin API answers again after {:.1f}s\n", stage_counter(stage_),
                   std::chrono::duration<double>(now - *since).count());
      return r;
    }
    if (!since) {
      since = now;
      fmt::print("stage {}: no answer from the admin API ({}); waiting up to {} for it\n", stage_counter(stage_),
                 r.transport_error, config::format_duration(kOutageWait));
    } else if (now - *since >= kOutageWait) {
      return r;
    }
    if (!sleep_unless_interrupted(std::min(*since + kOutageWait, Clock::now() + p_.judge.poll))) return r;
  }
}

WeightStages::Applied WeightStages::apply(const std::vector<uint32_t>& weights, std::string& error,
                                          bool interruptible) {
  WeightChange change;
  change.dials = p_.dials;
  change.roles = p_.roles;
  change.weights = weights;
  if (interruptible) {
    change.read_config = [this] { return read("/config/"); };
    change.gave_up = [] { return g_interrupted.load(); };
  }
  switch (write_weights(p_.admin, target_, change, error)) {
    case WeightWrite::ok:
      applied_ = weights;
      return Applied::ok;
    case WeightWrite::gone: return Applied::gone;
    case WeightWrite::interrupted: return Applied::interrupted;
    case WeightWrite::failed:
    case WeightWrite::changed: return Applied::failed;  // (no only_if here)
  }
  return Applied::failed;
}

std::optional<json> WeightStages::upstreams_state(std::string& error) {
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

WeightStages::Applied WeightStages::roll_back_and_report(const std::string& reason) {
  std::string error;
  const Applied applied = apply(p_.rollback, error, false);
  switch (applied) {
    case Applied::ok:
      fmt::print("ROLLED BACK to {} — {}\n", describe_weights(p_.dials, p_.rollback), reason);
      break;
    case Applied::gone:
      // Someone removed the site or an upstream: nothing to roll back to.
      fmt::print("STOPPED: {}; not rolled back: {}; weights left as they are\n", reason, error);
      break;
    case Applied::failed:
    case Applied::interrupted: {  // (not interruptible)
      std::string wanted;
      for (size_t u = 0; u < p_.dials.size(); ++u)
        wanted += fmt::format("{}{} {}", u ? " / " : "", p_.dials[u], p_.rollback[u]);
      fmt::print("ROLLBACK FAILED: {} (could not set {}: {})\n", reason, wanted, error);
      break;
    }
  }
  return applied;
}

void WeightStages::report_unconfirmed_rollback() const {
  if (applied_)
    fmt::print("state: unknown, the rollback was not confirmed (before it: {}, the last applied stage)\n",
               describe_weights(p_.dials, *applied_));
  else
    fmt::print("state: unknown, the rollback was not confirmed (before it: weights untouched)\n");
}

std::optional<size_t> WeightStages::follow_site(const json& list, std::string& why) {
  auto index = site_index_in(list, target_.address, why);
  if (index && *index != target_.site_index) {
    fmt::print("stage {}: site {} is site {} now (was {}): a site was added or removed before it\n",
               stage_counter(stage_), target_.address, *index, target_.site_index);
    target_.site_index = *index;
  }
  return index;
}

int WeightStages::stopped(size_t s, const std::string& why) {
  fmt::print("STOPPED at stage {} {}: {}; weights left as they are, nothing rolled back\n", stage_counter(s),
             stage_label(s), why);
  return 1;
}

int WeightStages::interrupted_at(size_t s) {
  if (p_.judge.rollback_on_abort) {
    const Applied rollback = roll_back_and_report(
        fmt::format("interrupted during stage {} (--rollback-on-abort)", stage_counter(s)));
    // The state line says what heft has: the rollback weights only when they were applied.
    if (rollback == Applied::ok)
      fmt::print("state: {} (rolled back)\n", describe_weights(p_.dials, p_.rollback));
    else if (rollback == Applied::gone)
      fmt::print("state: not rolled back, weights left as they are\n");
    else
      report_unconfirmed_rollback();
  } else if (applied_) {
    fmt::print("INTERRUPTED during stage {}: left at {} (the last applied stage)\n", stage_counter(s),
               describe_weights(p_.dials, *applied_));
  } else {
    fmt::print("INTERRUPTED before any change: weights untouched\n");
  }
  return 130;
}

// Why the stage is no longer in effect, or "" while the weights in
// /reverse_proxy/upstreams are still the stage's. A reload, a restart without
// --resume or another operator may have set others: then the figures judge
// weights the stages did not set.
std::string WeightStages::stage_lost(const std::vector<const json*>& entries, const std::vector<uint32_t>& stage) const {
  std::vector<uint32_t> now;
  for (const json* entry : entries) now.push_back(entry->value("weight", uint32_t(1)));
  if (now == stage) return "";
  return fmt::format("the weights are no longer the stage's: {} now (changed by a reload, a restart "
                     "without --resume or someone else)",
                     describe_weights(p_.dials, now));
}

int WeightStages::run() {
  InterruptCatcher catcher;
  const size_t n = p_.dials.size();
  for (size_t s = 0; s < p_.stages.size(); ++s) {
    const std::vector<uint32_t>& stage = p_.stages[s];
    stage_ = s;
    if (g_interrupted) return interrupted_at(s);
    std::string error;
    switch (apply(stage, error, true)) {
      case Applied::ok:
        break;
      case Applied::interrupted:
        return interrupted_at(s);
      case Applied::gone:
        // Someone removed it: there is nothing left to change or roll back.
        return stopped(s, error);
      case Applied::failed:
        fmt::print("stage {} {}: cannot apply weights: {}\n", stage_counter(s), stage_label(s), error);
        return roll_back("could not apply a stage");
    }
    fmt::print("stage {}: {} applied, holding {}\n", stage_counter(s), describe_weights(p_.dials, stage),
               config::format_duration(p_.judge.hold));
    std::fflush(stdout);
    // The entries of the stage's upstreams in a /reverse_proxy/upstreams
    // answer, or empty with `error` set (the site or one of them left).
    const auto entries_in = [&](const json& list, std::string& error) {
      std::vector<const json*> entries;
      const auto site = follow_site(list, error);
      if (!site) return entries;
      for (const std::string& dial : p_.dials) entries.push_back(find_upstream(list, *site, dial));
      if (std::find(entries.begin(), entries.end(), nullptr) != entries.end()) entries.clear();
      return entries;
    };
    auto base_list = upstreams_state(error);
    if (g_interrupted) return interrupted_at(s);
    if (!base_list) return roll_back("cannot read upstream counters: " + error);
    error.clear();
    const auto base = entries_in(*base_list, error);
    if (base.empty()) return roll_back(error.empty() ? "the upstreams are not in /reverse_proxy/upstreams" : error);
    if (std::string lost = stage_lost(base, stage); !lost.empty()) return stopped(s, lost);
    std::vector<Watch> watches;
    for (const json* entry : base) watches.emplace_back(read_counters(*entry));
    auto end = Clock::now() + p_.judge.hold;
    bool extended = false;
    for (;;) {
      // Sleep one poll period in small slices, so Ctrl-C is handled at once.
      if (!sleep_unless_interrupted(std::min(end, Clock::now() + p_.judge.poll))) return interrupted_at(s);
      auto list = upstreams_state(error);
      // A signal during the read (which gives way to it) or since: nothing is judged after it.
      if (g_interrupted) return interrupted_at(s);
      if (!list) return roll_back("cannot read upstream counters: " + error);
      error.clear();
      const auto entries = entries_in(*list, error);
      if (entries.empty()) return roll_back(error.empty() ? "the upstreams left /reverse_proxy/upstreams" : error);
      if (std::string lost = stage_lost(entries, stage); !lost.empty()) return stopped(s, lost);
      for (size_t u = 0; u < n; ++u)
        if (watches[u].update(read_counters(*entries[u])))
          fmt::print("stage {}: the counters of {} went down (heft restarted?): its figures count from 0 again\n",
                     stage_counter(s), p_.dials[u]);
      std::string breach;
      for (size_t u = 0; u < n && breach.empty(); ++u) {
        const Window w = watches[u].window();
        if (!p_.judged(s, u) || w.requests < p_.judge.min_requests) continue;
        if (w.error_rate() > p_.judge.max_error_rate)
          breach = fmt::format("{} 5xx rate {:.2f}% > {} over {} requests", label(u), w.error_rate() * 100,
                               config::format_fraction(p_.judge.max_error_rate), w.requests);
        else if (p_.judge.max_p99 && w.p99_ms && *w.p99_ms > double(p_.judge.max_p99->count()))
          breach = fmt::format("{} p99 {} > {} over {} requests", label(u),
                               *w.p99_ms > 1e299 ? std::string("> 30s") : fmt::format("{}ms", *w.p99_ms),
                               config::format_duration(*p_.judge.max_p99), w.requests);
      }
      if (!breach.empty()) {
        fmt::print("stage {} {}: {} -> BREACH\n", stage_counter(s), stage_label(s), windows(watches));
        return roll_back(breach);
      }
      if (Clock::now() < end) continue;
      std::optional<size_t> short_of_traffic;
      for (size_t u = 0; u < n && !short_of_traffic; ++u)
        if (p_.judged(s, u) && watches[u].window().requests < p_.judge.min_requests) short_of_traffic = u;
      if (short_of_traffic) {
        const size_t u = *short_of_traffic;
        const uint64_t requests = watches[u].window().requests;
        if (!extended) {
          // Too little traffic to judge: hold once more before giving up.
          extended = true;
          end += p_.judge.hold;
          fmt::print("stage {}: only {} {} requests (< {}), holding another {}\n", stage_counter(s), requests, label(u),
                     p_.judge.min_requests, config::format_duration(p_.judge.hold));
          std::fflush(stdout);
          continue;
        }
        fmt::print("stage {} {}: {} -> NOT ENOUGH TRAFFIC\n", stage_counter(s), stage_label(s), windows(watches));
        return roll_back(fmt::format("only {} {} requests in {} (< --min-requests {})", requests, label(u),
                                     config::format_duration(p_.judge.hold * 2), p_.judge.min_requests));
      }
      break;
    }
    if (g_interrupted) return interrupted_at(s);  // not passed: it did not run its course
    fmt::print("stage {} {}: {} -> ok\n", stage_counter(s), stage_label(s), windows(watches));
    std::fflush(stdout);
  }
  if (g_interrupted) return interrupted_at(p_.stages.size() - 1);
  fmt::print("{}: {}\n", p_.complete, describe_weights(p_.dials, p_.stages.back()));
  return 0;
}

}  // namespace

int run_weight_stages(const StagePlan& plan, StageTarget target) {
  return WeightStages(plan, std::move(target)).run();
}

}  // namespace heft::cli
