// `heft calibrate`: each backend's capacity, measured by a synthetic
// open-loop ramp (one backend at a time, drained from a running heft's
// traffic meanwhile) or estimated from an access log, turned into small
// whole-number weights, shown, and with --apply set stepwise through the
// admin API with `heft rollout`'s judge and rollback (docs/calibrate.md).
//
// Exit: 0 weights found (and applied with --apply); 1 no backend could be
// weighted, a drained backend's weight could not be restored, or --apply
// rolled back or stopped; 2 bad arguments or nothing to calibrate; 130
// interrupted (the backend under test restored first).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "admin/state_file.h"
#include "cli/admin_client.h"
#include "cli/calibrate.h"
#include "cli/capacity_log.h"
#include "cli/capacity_ramp.h"
#include "cli/command.h"
#include "cli/site_lookup.h"
#include "cli/weight_stages.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "config/values.h"

namespace heft::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct CalibrateOptions {
  std::string site, path, p95_text = "120ms", max_error_text = "0.5%", max_rate_text = "5000",
                          duration_text = "60s", connections_text = "512", max_weight_text = "10";
  std::string from_log, capacities_text;
  bool json = false, heftfile = false, patch = false;
  ApplyOptions apply;
  std::string stages_text = "3", hold_text = "30s", min_requests_text = "50", max_p99_text, poll_text = "1s";
  AdminClientOptions admin;
  // Parsed:
  milliseconds p95{120}, duration{60000};
  double max_error = 0.005, max_rate = 5000;
  size_t connections = 512;
  uint32_t max_weight = 10;
  OutputFormat format = OutputFormat::table;
};

milliseconds positive_duration(const std::string& text, const char* option, const char* example) {
  auto d = config::parse_duration(text);
  if (!d || d->count() <= 0) throw BadArguments(fmt::format("calibrate: bad {} \"{}\" (e.g. {})", option, text, example));
  return *d;
}

uint64_t whole_number(const std::string& text, const char* option, uint64_t min, uint64_t max) {
  auto n = config::parse_uint(text, max);
  if (!n || *n < min)
    throw BadArguments(fmt::format("calibrate: bad {} \"{}\" (a whole number, {} to {})", option, text, min, max));
  return *n;
}

double fraction(const std::string& text, const char* option) {
  auto f = config::parse_fraction(text);
  if (!f || *f < 0 || *f > 1)
    throw BadArguments(fmt::format("calibrate: bad {} \"{}\" (e.g. 0.5% or 0.005)", option, text));
  // "1" is 100 %: a limit that never stops anything, almost surely meant as 1 %.
  if (*f == 1 && text.back() != '%')
    throw BadArguments(fmt::format("calibrate: {} \"{}\" would be 100%: write 1% for one percent, or 100% if that "
                                   "is meant", option, text));
  return *f;
}

void parse(CalibrateOptions& o) {
  o.p95 = positive_duration(o.p95_text, "--p95", "120ms");
  o.duration = positive_duration(o.duration_text, "--duration", "60s");
  o.max_error = fraction(o.max_error_text, "--max-error");
  auto rate = config::parse_number(o.max_rate_text);
  if (!rate || *rate < 4 || *rate > 1e6)
    throw BadArguments(fmt::format("calibrate: bad --max-rate \"{}\" (requests a second, 4 to 1000000)", o.max_rate_text));
  o.max_rate = *rate;
  o.connections = whole_number(o.connections_text, "--connections", 1, 10000);
  o.max_weight = uint32_t(whole_number(o.max_weight_text, "--max-weight", 1, 1000));
  if (!o.path.empty() && (o.path.front() != '/' || !config::is_request_target_text(o.path)))
    throw BadArguments(fmt::format("calibrate: bad --path \"{}\" (a path starting with /, e.g. /api/items)", o.path));
  if (int(o.json) + int(o.heftfile) + int(o.patch) > 1)
    throw BadArguments("calibrate: give one of --json, --heftfile and --patch");
  o.format = o.json ? OutputFormat::json : o.heftfile ? OutputFormat::heftfile : o.patch ? OutputFormat::patch
                                                                                          : OutputFormat::table;
  if (!o.from_log.empty() && !o.capacities_text.empty())
    throw BadArguments("calibrate: give --from-log or --capacities, not both");
  ApplyOptions& a = o.apply;
  a.stages = whole_number(o.stages_text, "--stages", 1, 100);
  a.judge.hold = positive_duration(o.hold_text, "--hold", "30s");
  a.judge.poll = positive_duration(o.poll_text, "--poll", "1s");
  a.judge.min_requests = whole_number(o.min_requests_text, "--min-requests", 0, UINT64_MAX);
  a.judge.max_error_rate = o.max_error;
  if (!o.max_p99_text.empty()) a.judge.max_p99 = positive_duration(o.max_p99_text, "--max-p99", "300ms");
}

// The pool calibrated: the site's backends as configured, from a running
// heft or from the file.
struct Pool {
  bool running = false;  // a heft serves it: a backend is drained while it is measured
  std::string source;    // where the configuration came from, in words
  StageTarget target;    // the site, followed by its address
  json upstreams;        // its upstreams array as configured
  std::string health_uri, host;
  std::optional<std::string> ignores_weights;  // why its lb_policy ignores weights, if it does
};

// The number of sites in a JSON configuration.
size_t site_count(const json& config) {
  size_t count = 0;
  const json::json_pointer servers("/apps/http/servers");
  if (!config.contains(servers)) return 0;
  for (size_t s = 0; config[servers].contains(fmt::format("srv{}", s)); ++s)
    count += config[servers][fmt::format("srv{}", s)].value("routes", json::array()).size();
  return count;
}

Pool find_pool(const json& config, const std::string& site_given, std::string source, bool running) {
  std::string site = site_given, why;
  if (site.empty()) {
    const size_t sites = site_count(config);
    if (sites != 1) {
      std::string list;
      for (size_t i = 0; i < sites; ++i)
        if (auto s = find_site(config, std::to_string(i), why)) list += fmt::format("{}{} (site {})", i ? ", " : "", s->address, i);
      throw BadArguments(sites == 0 ? fmt::format("calibrate: {} has no site", source)
                                    : fmt::format("calibrate: {} has {} sites ({}): give --site", source, sites, list));
    }
    site = "0";
  }
  auto location = find_site(config, site, why);
  if (!location) throw BadArguments("calibrate: " + why);
  Pool pool;
  pool.running = running;
  pool.source = std::move(source);
  pool.target = StageTarget{site_given.empty() ? location->address : site_given, location->address,
                            location->upstreams_path, location->index};
  pool.upstreams = *location->upstreams;
  const json::json_pointer uri("/health_checks/active/uri");
  if (location->reverse_proxy->contains(uri) && (*location->reverse_proxy)[uri].is_string())
    pool.health_uri = (*location->reverse_proxy)[uri].get<std::string>();
  // The site's first host name, for the Host field ("a.test,b.test:80" -> a.test; ":8080" -> none).
  const std::string hosts = location->address.substr(0, location->address.rfind(':'));
  pool.host = hosts.substr(0, hosts.find(','));
  std::string policy;
  if (auto how = cli::ignores_weights(*location->reverse_proxy, policy))
    pool.ignores_weights = fmt::format("its lb_policy {} ignores weights ({})", policy, *how);
  return pool;
}

// The pool from --address (a running heft), or --config (a running heft if
// one answers at the file's admin address and serves that file, else the
// file itself). nullopt when neither is given and `required` is false.
std::optional<Pool> load_pool(CalibrateOptions& o, bool required) {
  const bool address_given = !o.admin.address.empty();
  if (!address_given && o.admin.config.empty()) {
    if (!required) return std::nullopt;
    if (!std::filesystem::exists("Heftfile"))
      throw BadArguments("calibrate: give --config FILE (the pool's Heftfile) or --address ADMIN (a running heft's admin API)");
    o.admin.config = "Heftfile";
  }
  bool running = address_given;
  if (!address_given) {
    config::Result<config::AdminConfig> admin = config::load_admin_config(o.admin.config);
    if (!admin.ok()) {
      for (const config::Diagnostic& d : admin.errors) fmt::print(stderr, "{}\n", d.to_string());
      throw BadArguments(fmt::format("calibrate: --config {}: its admin settings are not valid", o.admin.config));
    }
    if (admin->enabled) {
      o.admin.address = admin->address;
      if (o.admin.token.empty()) o.admin.token = admin->token;
      AdminReply instance = admin_request(o.admin, "GET", "/heft/instance");
      if (instance.status == 404) {
        running = true;  // a heft too old to say which file it serves
      } else if (instance.status == 200) {
        const json answer = json::parse(instance.body, nullptr, false);
        const std::string wanted = admin::config_identity(o.admin.config);
        const json serving = answer.is_object() ? answer.value("config", json()) : json();
        if (!serving.is_string() || serving.get<std::string>() != wanted)
          throw BadArguments(fmt::format(
              "calibrate: the heft at {} serves {}, not {}: give --address of the heft that serves {}, or stop this one",
              o.admin.address, serving.is_string() ? serving.get<std::string>() : "the embedded demo", wanted, wanted));
        running = true;
      } else if (instance.status != 0) {
        throw BadArguments("calibrate: " + instance.error_message());
      } else {
        fmt::print(stderr, "heft: calibrate: no heft answers for {} ({}): measuring its backends as it lists them; "
                           "nothing else should send them traffic meanwhile\n",
                   o.admin.config, instance.transport_error);
      }
    }
  }
  if (running) {
    settle_admin_options(o.admin);
    AdminReply cfg = admin_request(o.admin, "GET", "/config/");
    if (cfg.status != 200) throw BadArguments("calibrate: cannot read the configuration: " + cfg.error_message());
    return find_pool(json::parse(cfg.body, nullptr, false), o.site, "the heft at " + o.admin.address, true);
  }
  config::Result<config::Config> loaded = config::load_config_file(o.admin.config);
  if (!loaded.ok()) {
    for (const config::Diagnostic& d : loaded.errors) fmt::print(stderr, "{}\n", d.to_string());
    throw BadArguments(fmt::format("calibrate: {} is not a valid configuration", o.admin.config));
  }
  return find_pool(config::to_json(*loaded), o.site, o.admin.config, false);
}

// The pool's backends as the report lists them, in configured order.
std::vector<CalibratedBackend> pool_backends(const Pool& pool) {
  std::vector<CalibratedBackend> out;
  for (const json& u : pool.upstreams) {
    CalibratedBackend b;
    b.dial = u.value("dial", "");
    b.configured_weight = u.value("weight", uint32_t(1));
    b.backup = u.value("backup", false);
    b.marked_down = u.value("down", false);
    if (b.marked_down) b.note = "marked down in the configuration";
    out.push_back(std::move(b));
  }
  return out;
}

// A backend known only by its address (no configuration was given).
CalibratedBackend unconfigured_backend(std::string dial) {
  CalibratedBackend b;
  b.dial = std::move(dial);
  return b;
}

void start_report(Calibration& c, const std::optional<Pool>& pool) {
  if (!pool) return;
  c.site = pool->target.site;
  c.site_address = pool->target.address;
  c.upstreams_path = pool->target.path;
}

// ---- the ramp, one backend at a time ----

// The backend's address to connect to ("host:port" resolved), or nullopt with `why`.
std::optional<boost::asio::ip::tcp::endpoint> resolve(const std::string& dial, std::string& why) {
  auto split = config::split_host_port(dial, 80);
  if (!split.value) {
    why = split.error;
    return std::nullopt;
  }
  try {
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(split.value->host, std::to_string(split.value->port));
    if (results.begin() != results.end()) return results.begin()->endpoint();
    why = "resolves to no address";
  } catch (const boost::system::system_error& e) {
    why = "cannot resolve it: " + e.code().message();
  }
  return std::nullopt;
}

// The backend's address, once it accepted a connection (within 1 s); nullopt
// with `why` when it did not: it is down, and takes no share of --duration.
std::optional<boost::asio::ip::tcp::endpoint> reach(const std::string& dial, std::string& why) {
  auto endpoint = resolve(dial, why);
  if (!endpoint) return endpoint;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  std::optional<boost::system::error_code> result;
  socket.async_connect(*endpoint, [&result](const boost::system::error_code& ec) { result = ec; });
  io.run_for(std::chrono::seconds(1));
  if (!result || *result) {
    why = result ? result->message() : "no connection within 1s";
    return std::nullopt;
  }
  return endpoint;
}

// Draining a backend of a running heft for its measurement, and putting its
// weight back after.
class Drain {
 public:
  Drain(const AdminClientOptions& admin, StageTarget& target, std::string dial, uint32_t weight)
      : admin_(admin), target_(target), dial_(std::move(dial)), weight_(weight) {}
  // Sets weight 0 if it is still `weight`, then waits (5 s at most) for its
  // requests in flight. False with `why` when it could not.
  bool start(std::string& why, const std::function<void(const std::string&)>& say);
  // Puts the weight back if it is still 0. False (said) when that failed.
  bool restore(const std::function<void(const std::string&)>& say);
  bool active() const { return drained_; }

 private:
  const AdminClientOptions& admin_;
  StageTarget& target_;
  std::string dial_;
  uint32_t weight_;
  bool drained_ = false;
};

bool Drain::start(std::string& why, const std::function<void(const std::string&)>& say) {
  // Draining the only primary in service would leave the site none.
  AdminReply state = admin_request(admin_, "GET", "/reverse_proxy/upstreams");
  if (state.status != 200) {
    why = "cannot read /reverse_proxy/upstreams: " + state.error_message();
    return false;
  }
  const json before = json::parse(state.body, nullptr, false);
  const json* self = find_upstream(before, target_.site_index, dial_);
  bool others = false;
  for (const json& u : before.is_array() ? before : json::array())
    others |= u.value("site", size_t(-1)) == target_.site_index && u.value("address", "") != dial_ &&
              !u.value("backup", false) && u.value("weight", 0u) > 0 && u.value("state", "") == "up";
  if (!others && self && !self->value("backup", false)) {
    why = "no other primary is in service: draining it would leave the site none";
    return false;
  }
  WeightChange change{{dial_}, {0}, std::vector<uint32_t>{weight_}, {}, {}, {}};
  if (write_weights(admin_, target_, change, why) != WeightWrite::ok) return false;
  drained_ = true;
  // Requests it had already been given finish before the ramp starts.
  const auto end = Clock::now() + std::chrono::seconds(5);
  uint64_t in_flight = 0;
  do {
    AdminReply r = admin_request(admin_, "GET", "/reverse_proxy/upstreams");
    const json list = json::parse(r.body, nullptr, false);
    const json* entry = r.status == 200 ? find_upstream(list, target_.site_index, dial_) : nullptr;
    in_flight = entry ? entry->value("num_requests", uint64_t(0)) : 0;
    if (in_flight == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  } while (Clock::now() < end && !interrupted());
  say(fmt::format("drained (weight {} -> 0){}", weight_,
                  in_flight ? fmt::format(", {} requests still in flight after 5s", in_flight) : ", nothing in flight"));
  return true;
}

bool Drain::restore(const std::function<void(const std::string&)>& say) {
  if (!drained_) return true;
  std::string error;
  WeightChange change{{dial_}, {weight_}, std::vector<uint32_t>{0}, {}, {}, {}};
  WeightWrite done = WeightWrite::failed;
  // A few tries: a heft that is busy writing its state file may answer late.
  for (int attempt = 0; attempt < 3 && done == WeightWrite::failed; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::seconds(1));
    done = write_weights(admin_, target_, change, error);
  }
  drained_ = false;
  switch (done) {
    case WeightWrite::ok: say(fmt::format("weight {} restored", weight_)); return true;
    case WeightWrite::changed: say(fmt::format("not restored: {} (someone else set it): left as it is", error)); return true;
    case WeightWrite::gone: say(fmt::format("not restored: {}", error)); return true;
    default:
      fmt::print(stderr, "RESTORE FAILED: {} left at weight 0 (was {}): {}; set it back with: heft weight {} {} {}\n",
                 dial_, weight_, error, target_.address, dial_, weight_);
      return false;
  }
}

json steps_json(const CapacityResult& r) {
  json steps = json::array();
  for (const RampStep& s : r.steps)
    steps.push_back({{"rate", std::round(s.result.rate * 10) / 10},
                     {"seconds", s.result.seconds},
                     {"requests", s.result.scheduled},
                     {"p50_ms", std::isinf(s.result.p50_ms) ? json(nullptr) : json(std::round(s.result.p50_ms * 10) / 10)},
                     {"p95_ms", std::isinf(s.result.p95_ms) ? json(nullptr) : json(std::round(s.result.p95_ms * 10) / 10)},
                     {"errors", s.result.errors},
                     {"unfinished", s.result.unfinished},
                     {"answered_per_s", std::round(s.result.goodput * 10) / 10},
                     {"held", s.held},
                     {"why", s.why}});
  return {{"unloaded_ms", std::round(r.unloaded_ms * 100) / 100}, {"p95_ms_at_capacity", std::round(r.p95_ms * 10) / 10},
          {"steps", steps}};
}

// Measures every backend of the pool; 0, or 1 / 130 when a drained
// backend could not be restored / on an interrupt (said).
int measure_pool(const CalibrateOptions& o, Pool& pool, Calibration& c) {
  const std::string path = !o.path.empty() ? o.path : !pool.health_uri.empty() ? pool.health_uri : "/";
  c.settings = {{"path", path},
                {"p95_ms", o.p95.count()},
                {"max_error", o.max_error},
                {"max_rate", o.max_rate},
                {"duration_s", double(o.duration.count()) / 1000}};
  std::vector<size_t> to_measure;
  for (size_t i = 0; i < c.backends.size(); ++i)
    if (!c.backends[i].marked_down) to_measure.push_back(i);
  fmt::print(stderr, "calibrating site {} ({}): {} backend{}, GET {}{}, p95 <= {}, errors <= {}, at most {} req/s, {} in all\n",
             pool.target.address, pool.source, to_measure.size(), to_measure.size() == 1 ? "" : "s", path,
             o.path.empty() && !pool.health_uri.empty() ? " (the health check's path: give --path for a request "
                                                          "that does the real work)"
                                                        : "",
             config::format_duration(o.p95), config::format_fraction(o.max_error), o.max_rate,
             config::format_duration(o.duration));
  if (pool.running)
    fmt::print(stderr, "each backend is drained (weight 0) from {}'s traffic while it is measured\n", pool.source);
  const auto deadline = Clock::now() + o.duration;
  const auto prefix = [&](size_t k) {
    return fmt::format("[{}/{}] {}: ", k + 1, to_measure.size(), c.backends[to_measure[k]].dial);
  };
  // Those that take no connection first: they are down, and the others share their time.
  std::vector<std::optional<boost::asio::ip::tcp::endpoint>> endpoints;
  size_t reachable = 0;
  for (size_t k = 0; k < to_measure.size(); ++k) {
    CalibratedBackend& b = c.backends[to_measure[k]];
    std::string why;
    endpoints.push_back(reach(b.dial, why));
    reachable += endpoints.back().has_value();
    if (endpoints.back()) continue;
    b.status = CalibratedBackend::Status::down;
    b.note = why;
    fmt::print(stderr, "{}down: {}\n", prefix(k), why);
  }
  InterruptCatcher catcher;
  for (size_t k = 0; k < to_measure.size(); ++k) {
    if (!endpoints[k]) continue;
    const long sharing = long(reachable--);  // this backend and those after it
    CalibratedBackend& b = c.backends[to_measure[k]];
    const auto say = [line_start = prefix(k)](const std::string& line) {
      fmt::print(stderr, "{}{}\n", line_start, line);
    };
    std::string why;
    const auto& endpoint = endpoints[k];
    std::optional<Drain> drain;
    if (pool.running && b.configured_weight.value_or(1) > 0) {
      drain.emplace(o.admin, pool.target, b.dial, *b.configured_weight);
      if (!drain->start(why, say)) {
        b.note = "not drained: " + why;
        say("not measured: " + b.note);
        continue;
      }
    }
    RampOptions ramp;
    ramp.p95 = o.p95;
    ramp.max_error = o.max_error;
    ramp.max_rate = o.max_rate;
    ramp.max_connections = o.connections;
    // What is left, less half an even share for each backend after it: a fast
    // backend needs more steps than a slow one, and what it leaves unused
    // goes to the next.
    const auto left = deadline - Clock::now();
    ramp.deadline = Clock::now() + left - left / (2 * sharing) * (sharing - 1);
    ramp.progress = say;
    ramp.stop = [] { return interrupted(); };
    const LoadTarget target{*endpoint, pool.host.empty() ? b.dial : pool.host, path};
    const CapacityResult r = measure_capacity(target, ramp);
    b.detail = steps_json(r);
    b.note = r.summary;
    switch (r.ending) {
      case CapacityResult::Ending::down: b.status = CalibratedBackend::Status::down; break;
      case CapacityResult::Ending::too_slow: b.status = CalibratedBackend::Status::not_measured; break;
      default:
        b.status = r.capacity > 0 ? CalibratedBackend::Status::measured : CalibratedBackend::Status::not_measured;
    }
    b.capacity = r.capacity;
    b.lower_bound = r.lower_bound;
    say(b.status == CalibratedBackend::Status::measured
            ? fmt::format("capacity {}{:.0f} req/s ({})", b.lower_bound ? ">= " : "", b.capacity, b.note)
            : fmt::format("{}: {}", b.status == CalibratedBackend::Status::down ? "down" : "not weighted", b.note));
    if (drain && !drain->restore(say)) return 1;
    if (interrupted()) {
      fmt::print(stderr, "INTERRUPTED while measuring {}: {}\n", b.dial,
                 drain ? "its weight was put back" : "nothing was changed");
      return 130;
    }
  }
  return 0;
}

// ---- the other sources of capacities ----

// `--from-log`: the log's estimate for the pool's backends (or every backend the log names).
void estimate_pool(const CalibrateOptions& o, const std::optional<Pool>& pool, Calibration& c) {
  std::ifstream in(o.from_log);
  if (!in) throw BadArguments(fmt::format("calibrate: cannot read --from-log {}", o.from_log));
  std::vector<std::string> only;
  for (const CalibratedBackend& b : c.backends) only.push_back(b.dial);
  std::string error;
  const LogEstimate estimate = estimate_from_log(in, only, o.max_error, error);
  if (!error.empty()) throw BadArguments(fmt::format("calibrate: --from-log {}: {}", o.from_log, error));
  c.settings = {{"log", o.from_log},
                {"lines", estimate.lines},
                {"skipped", estimate.skipped},
                {"seconds", std::round((estimate.last_ts - estimate.first_ts) * 10) / 10},
                {"queueing_factor", kQueueingFactor},
                {"max_error", o.max_error}};
  fmt::print(stderr, "estimating from {}: {} lines ({} not a proxied request's), {:.0f}s of traffic\n", o.from_log,
             estimate.lines, estimate.skipped, estimate.last_ts - estimate.first_ts);
  if (!pool)
    for (const LogCapacity& l : estimate.backends) c.backends.push_back(unconfigured_backend(l.upstream));
  for (CalibratedBackend& b : c.backends) {
    auto found = std::find_if(estimate.backends.begin(), estimate.backends.end(),
                              [&b](const LogCapacity& l) { return l.upstream == b.dial; });
    if (found == estimate.backends.end()) {
      if (b.note.empty()) b.note = "no request to it in the log";
      continue;
    }
    const LogCapacity& l = *found;
    b.status = CalibratedBackend::Status::measured;
    b.capacity = l.capacity;
    b.lower_bound = l.lower_bound;
    b.note = l.lower_bound
                 ? fmt::format("never queued long (in {} of {}s): the most it answered in a second", l.queued_seconds, l.seconds)
                 : fmt::format("queued in {} of {}s: median answers a second then", l.queued_seconds, l.seconds);
    if (l.capacity == 0) b.note = fmt::format("{} 5xx of {} requests: no second within --max-error", l.errors, l.requests);
    b.detail = {{"requests", l.requests}, {"errors", l.errors}, {"unloaded_ms", std::round(l.unloaded_ms * 100) / 100},
                {"seconds", l.seconds}, {"queued_seconds", l.queued_seconds}};
  }
}

// `--capacities`: "A=561,B=187" or, for the pool's backends in order, "561,187".
void given_capacities(const CalibrateOptions& o, const std::optional<Pool>& pool, Calibration& c) {
  std::vector<std::pair<std::string, double>> given;
  size_t start = 0;
  for (;;) {
    const size_t comma = o.capacities_text.find(',', start);
    const std::string item = o.capacities_text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.rfind('=');
    auto value = config::parse_number(eq == std::string::npos ? item : item.substr(eq + 1));
    if (!value || *value < 0)
      throw BadArguments(fmt::format("calibrate: bad capacity \"{}\" in --capacities (want ADDRESS=REQ_PER_S or a "
                                     "number, e.g. 10.0.0.1:3000=560)", item));
    given.emplace_back(eq == std::string::npos ? "" : item.substr(0, eq), *value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const bool named = !given.front().first.empty();
  for (const auto& g : given)
    if (g.first.empty() == named) throw BadArguments("calibrate: --capacities: name every backend, or none");
  c.settings = {{"capacities", o.capacities_text}};
  if (!pool) {
    for (size_t i = 0; i < given.size(); ++i)
      c.backends.push_back(unconfigured_backend(named ? given[i].first : fmt::format("backend {}", i + 1)));
  } else if (!named && given.size() != c.backends.size()) {
    throw BadArguments(fmt::format("calibrate: --capacities gives {} numbers for the {} backends of site {}",
                                   given.size(), c.backends.size(), pool->target.address));
  }
  for (size_t i = 0; i < given.size(); ++i) {
    auto b = named ? std::find_if(c.backends.begin(), c.backends.end(),
                                  [&](const CalibratedBackend& x) { return x.dial == given[i].first; })
                   : c.backends.begin() + long(i);
    if (b == c.backends.end())
      throw BadArguments(fmt::format("calibrate: --capacities names {}, not a backend of site {}", given[i].first,
                                     pool->target.address));
    b->status = CalibratedBackend::Status::measured;
    b->capacity = given[i].second;
    b->note = "given";
  }
}

int run_calibrate(CalibrateOptions& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool ramp = o.from_log.empty() && o.capacities_text.empty();
  std::optional<Pool> pool = load_pool(o, ramp || o.apply.enabled);
  if (o.apply.enabled) {
    if (!pool || !pool->running)
      throw BadArguments("calibrate: --apply needs a running heft (--address ADMIN, or --config FILE of a heft serving it)");
    if (pool->ignores_weights)
      throw BadArguments(fmt::format("calibrate: --apply: site {}: {}, so no weight would split its traffic; switch "
                                     "it to a weighted policy first", pool->target.address, *pool->ignores_weights));
  }
  Calibration c;
  c.method = ramp ? "ramp" : !o.from_log.empty() ? "log" : "given";
  start_report(c, pool);
  if (pool) c.backends = pool_backends(*pool);
  if (ramp) {
    if (int code = measure_pool(o, *pool, c); code != 0) return code;
  } else if (!o.from_log.empty()) {
    estimate_pool(o, pool, c);
  } else {
    given_capacities(o, pool, c);
  }
  c.choose_weights(o.max_weight);
  print_calibration(c, o.format);
  if (c.weighted().empty()) {
    fmt::print(stderr, "heft: calibrate: no backend could be weighted\n");
    return 1;
  }
  if (!o.apply.enabled) return 0;
  o.apply.admin = o.admin;
  return apply_calibration(c, o.apply, pool->target);
}

void setup(CLI::App& root) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = root.add_subcommand("calibrate", "Measure each backend's capacity and set weights from it");
  cmd->add_option("--site", o->site, "The site: a host name, HOST:PORT, :PORT or its index (default: the only one)");
  cmd->add_option("--path", o->path, "Request path of the synthetic load (default: the health check's, else /)");
  cmd->add_option("--p95", o->p95_text, "A rate holds while its p95 stays at or under this (default 120ms)");
  cmd->add_option("--max-error", o->max_error_text, "... and its errors at or under this share (default 0.5%)");
  cmd->add_option("--max-rate", o->max_rate_text, "Highest rate offered a backend, requests a second (default 5000)");
  cmd->add_option("--duration", o->duration_text, "Time for the whole pool's measurement (default 60s)");
  cmd->add_option("--connections", o->connections_text, "Connections to a backend at once, at most (default 512)");
  cmd->add_option("--max-weight", o->max_weight_text, "Largest weight given (default 10)");
  cmd->add_option("--from-log", o->from_log, "Estimate capacities from this access log instead of measuring")
      ->check(not_empty("the access log's path"));
  cmd->add_option("--capacities", o->capacities_text, "Capacities already known: ADDRESS=N,... or N,... in pool order");
  cmd->add_flag("--json", o->json, "Print the report as JSON");
  cmd->add_flag("--heftfile", o->heftfile, "Print only the Heftfile `to` lines");
  cmd->add_flag("--patch", o->patch, "Print only a JSON Patch (RFC 6902) of the weights");
  cmd->add_flag("--apply", o->apply.enabled, "Set the weights on the running heft, stepwise, judged, rolled back on a breach");
  cmd->add_option("--stages", o->stages_text, "--apply: steps from the present weights to the new (default 3)");
  cmd->add_option("--hold", o->hold_text, "--apply: time each stage is watched (default 30s)");
  cmd->add_option("--min-requests", o->min_requests_text, "--apply: requests a judged backend needs per stage (default 50)");
  cmd->add_option("--max-p99", o->max_p99_text, "--apply: largest p99 time to the response head of a judged backend");
  cmd->add_option("--poll", o->poll_text, "--apply: how often counters are read (default 1s)");
  cmd->add_flag("--rollback-on-abort", o->apply.judge.rollback_on_abort, "--apply: on Ctrl-C, put the old weights back");
  add_admin_options(cmd, o->admin);
  cmd->callback([o] {
    parse(*o);
    set_exit_code(run_calibrate(*o));
  });
}

const bool registered = add_command(41, &setup);

}  // namespace
}  // namespace heft::cli
