#include "sim/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sim/pool_settings.h"

namespace heft::sim {
namespace {

std::string percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

// Whether the scenario has a pool queue: only then do the outputs speak of it
// (without one they stay as they were).
bool queued(const Scenario& sc) { return sc.queue > 0; }

// Times in the JSON, to the nanosecond: the simulator's arithmetic leaves
// binary noise (700 ms printed as 0.7000000000000001 s) that nobody asked for.
double seconds(double s) { return std::isfinite(s) ? std::round(s * 1e9) / 1e9 : s; }

// Shares and utilisations likewise, to nine decimals: busy time summed request
// by request made a server busy 7 ms in every 10 ms 0.7000000000000006.
double fraction(double f) { return std::isfinite(f) ? std::round(f * 1e9) / 1e9 : f; }

// A per-bucket series (utilisation, pool queue), each value as fraction() writes it.
nlohmann::ordered_json fraction_series(const std::vector<double>& values) {
  nlohmann::ordered_json series = nlohmann::ordered_json::array();
  for (double v : values) series.push_back(fraction(v));
  return series;
}

// Whether a `fail` event can make the pool take a server out: only then do
// the outputs speak of max_fails and fail_timeout.
bool fails(const Scenario& sc) {
  return std::any_of(sc.events.begin(), sc.events.end(), [](const Event& e) { return e.kind == Event::Kind::fail; });
}

// The pool's settings a run reads, for the table's `pool:` line (empty: none).
std::string pool_text(const Scenario& sc) {
  std::vector<std::string> parts;
  if (fails(sc))
    parts.push_back(fmt::format("max_fails {}, fail_timeout {}", sc.max_fails, format_latency(sc.fail_timeout_s)));
  if (sc.slow_start_s > 0) parts.push_back(fmt::format("slow_start {}", format_latency(sc.slow_start_s)));
  if (sc.adaptive.enabled) parts.push_back(fmt::format("adaptive ({})", adaptive_text(sc.adaptive)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// A server's own pool settings, where it has them: ", max_fails 3, slow_start 5.00 s".
std::string server_pool_text(const ServerSpec& s) {
  std::string out;
  if (s.max_fails) out += fmt::format(", max_fails {}", *s.max_fails);
  if (s.fail_timeout_s) out += fmt::format(", fail_timeout {}", format_latency(*s.fail_timeout_s));
  if (s.slow_start_s) out += fmt::format(", slow_start {}", format_latency(*s.slow_start_s));
  return out;
}

// The table's lines of the pool's weight decisions, at most this many per policy.
constexpr size_t kTableWeightChanges = 12;

std::string weight_change_text(const WeightChange& c) {
  return fmt::format("{} s {} {}: {:.2f} -> {:.2f}{}{}", format_seconds(c.at_s), c.server,
                     upstream::reason_name(c.reason), c.factor_before, c.factor_after, c.detail.empty() ? "" : ", ",
                     c.detail);
}

nlohmann::ordered_json latency_json(const LatencySummary& l) {
  nlohmann::ordered_json j;
  j["mean_s"] = seconds(l.mean_s);
  j["p50_s"] = seconds(l.p50_s);
  j["p95_s"] = seconds(l.p95_s);
  j["p99_s"] = seconds(l.p99_s);
  j["max_s"] = seconds(l.max_s);
  return j;
}

}  // namespace

std::string format_seconds(double s) { return fmt::format("{}", seconds(s)); }

std::string format_rate(double rps) {
  // {:.1f} alone showed 0.001 req/s as 0.0.
  return rps >= 1 ? fmt::format("{:.1f}", rps) : fmt::format("{:.3g}", rps);
}

std::string arrivals_text(const SimResult& result) {
  const Scenario& s = result.scenario;
  if (s.has_trace)
    return fmt::format("{} trace arrival{} for {} s", result.trace_arrivals, result.trace_arrivals == 1 ? "" : "s",
                       format_seconds(s.duration_s));
  return fmt::format("{} req/s Poisson for {} s", format_rate(s.rate), format_seconds(s.duration_s));
}

std::string format_latency(double s) {
  // Each unit up to where its rounding reaches the next (999.96 ms is "1.00 s", not "1000.0 ms").
  if (s < 0.9995e-3) return fmt::format("{:.0f} us", s * 1e6);
  if (s < 0.99995) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.2f} s", s);
}

std::string format_table(const std::vector<SimResult>& results) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    const SimResult& res = results[r];
    const Scenario& sc = res.scenario;
    if (r > 0) out += '\n';
    out += fmt::format("{}: {}, seed {}\n", sc.name, arrivals_text(res), sc.seed);
    out += "  servers:";
    for (size_t i = 0; i < sc.servers.size(); ++i) {
      const ServerSpec& s = sc.servers[i];
      out += fmt::format("{} {} ({} worker{} x {} {}{}{}{}{})", i ? "," : "", s.name, s.size, s.size == 1 ? "" : "s",
                         format_latency(s.service_s), service_dist_name(s.dist),
                         s.max_conns > 0 ? fmt::format(", max_conns {}", s.max_conns) : "",
                         s.backup ? ", backup" : "", s.down ? ", down" : "", server_pool_text(s));
    }
    out += '\n';
    if (const std::string pool = pool_text(sc); !pool.empty()) out += fmt::format("  pool: {}\n", pool);
    if (queued(sc))
      out += fmt::format("  pool queue: {} at most, timeout {}\n", sc.queue, format_latency(sc.queue_timeout()));
    out += "  events:";
    if (sc.events.empty()) out += " none";
    for (const Event& e : sc.events) out.append(" ").append(event_text(e));
    out += '\n';
    // The server column fits the longest name (an address: "127.0.0.1:22001").
    size_t name_w = 8;
    for (const ServerSpec& s : sc.servers) name_w = std::max(name_w, s.name.size());
    out += fmt::format(
        "  {:<21} {:<{}} {:>4} {:>6} {:>9} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6}\n",
        "policy", "server", name_w, "size", "weight", "requests", "share", "util", "mean", "p50", "p95", "p99",
        "peak q", "end q", "refused", "timeout", "failed");
    for (const PolicyResult& p : res.policies) {
      bool first = true;
      for (const ServerResult& s : p.servers) {
        out += fmt::format(
            "  {:<21} {:<{}} {:>4} {:>6} {:>9} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6}\n",
            first ? std::string(balance::policy_name(p.policy)) : "", s.name, name_w, s.size, s.weight, s.requests,
            percent(s.share), percent(s.utilisation), format_latency(s.latency.mean_s),
            format_latency(s.latency.p50_s), format_latency(s.latency.p95_s), format_latency(s.latency.p99_s),
            s.peak_queue, s.queue_at_end, s.refused, s.timed_out, s.failed);
        first = false;
      }
      // Requests no server could take get a labelled row of their own, so the
      // requests column adds up to (all).
      if (p.unrouted > 0) {
        const double share = static_cast<double>(p.unrouted) / static_cast<double>(p.arrivals);
        out += fmt::format("  {:<21} {:<{}} {:>9} {:>6}\n", "", "(unrouted)", name_w + 12, p.unrouted, percent(share));
      }
      // Requests that gave up in the pool queue were never assigned either.
      if (p.queue_timed_out > 0) {
        const double share = static_cast<double>(p.queue_timed_out) / static_cast<double>(p.arrivals);
        out += fmt::format("  {:<21} {:<{}} {:>9} {:>6}\n", "", "(queue timeout)", name_w + 12, p.queue_timed_out,
                           percent(share));
      }
      out += fmt::format(
          "  {:<21} {:<{}} {:>4} {:>6} {:>9} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6}\n", "",
          "(all)", name_w, "", "", p.arrivals, "", "",
          format_latency(p.latency.mean_s), format_latency(p.latency.p50_s), format_latency(p.latency.p95_s),
          format_latency(p.latency.p99_s), "", "", p.refused, p.timed_out, p.failed);
      if (queued(sc)) {
        const double share =
            p.arrivals ? static_cast<double>(p.queue_waited) / static_cast<double>(p.arrivals) : 0;
        out += fmt::format("  {:<21} pool queue: {} waited ({}), {} timed out, peak {}, {} at end\n", "",
                           p.queue_waited, percent(share), p.queue_timed_out, p.queue_peak, p.queue_at_end);
      }
      // The pool's weight decisions (slow start, adaptive), as the proxy logs them.
      const uint64_t changes = p.weight_changes.size() + p.weight_changes_dropped;
      for (size_t c = 0; c < p.weight_changes.size() && c < kTableWeightChanges; ++c)
        out += fmt::format("  {:<21} {} {}\n", "", c == 0 ? "weights:" : "        ",
                           weight_change_text(p.weight_changes[c]));
      if (changes > kTableWeightChanges)
        out += fmt::format("  {:<21}          ... {} more (--json lists them)\n", "", changes - kTableWeightChanges);
    }
  }
  out += "\nutil = busy worker-time / (workers x duration); latency = queue wait + service;\n"
         "end q = requests waiting when arrivals stopped (the run then drains them).\n";
  bool any_unrouted = false, any_limited = false, any_queued = false, any_down = false;
  for (const SimResult& res : results) {
    any_limited = any_limited || res.scenario.limited();
    for (const ServerSpec& s : res.scenario.servers) any_down = any_down || s.down;
    any_queued = any_queued || queued(res.scenario);
    for (const PolicyResult& p : res.policies) any_unrouted = any_unrouted || p.unrouted > 0;
  }
  if (any_unrouted)
    out += fmt::format("unrouted = requests no server could take (every weight 0{}{}).\n",
                       any_down ? " or down" : "",
                       any_limited ? ", every server failed, or every server at its max_conns"
                                   : ", or every server failed");
  if (std::any_of(results.begin(), results.end(), [](const SimResult& r) { return dynamic_weights(r.scenario); }))
    out += "weights = the pool's decisions: a server's weight factor (slow start x adaptive) changed.\n";
  if (any_queued)
    out += "pool queue = requests that waited for a place while every server was at its max_conns (latency counts\n"
           "from arrival); queue timeout = those that gave up after the queue timeout (with a full queue: unrouted).\n";
  return out;
}

nlohmann::ordered_json results_to_json(const std::vector<SimResult>& results) {
  nlohmann::ordered_json root;
  root["scenarios"] = nlohmann::ordered_json::array();
  for (const SimResult& res : results) {
    const Scenario& sc = res.scenario;
    nlohmann::ordered_json js;
    js["name"] = sc.name;
    js["seed"] = sc.seed;
    js["duration_s"] = seconds(sc.duration_s);
    if (sc.has_trace) js["arrivals"] = res.trace_arrivals;  // the count replayed (it was the word "trace")
    else js["rate"] = sc.rate;
    js["bucket_s"] = seconds(sc.bucket_s);
    if (queued(sc)) {
      js["queue"] = sc.queue;
      js["queue_timeout_s"] = seconds(sc.queue_timeout());
    }
    if (fails(sc)) {
      js["max_fails"] = sc.max_fails;
      js["fail_timeout_s"] = seconds(sc.fail_timeout_s);
    }
    if (sc.slow_start_s > 0) js["slow_start_s"] = seconds(sc.slow_start_s);
    if (sc.adaptive.enabled) js["adaptive"] = adaptive_json(sc.adaptive);
    js["servers"] = nlohmann::ordered_json::array();
    for (const ServerSpec& s : sc.servers) {
      nlohmann::ordered_json j;
      j["name"] = s.name;
      j["size"] = s.size;
      j["units"] = s.units;
      j["service_s"] = seconds(s.service_s);
      j["dist"] = service_dist_name(s.dist);
      if (s.dist == ServiceDist::lognormal) j["sigma"] = s.sigma;
      j["weight"] = initial_weight(s);
      if (s.queue_limit) j["queue_limit"] = *s.queue_limit;
      if (s.timeout_s > 0) j["timeout_s"] = seconds(s.timeout_s);
      if (s.max_conns > 0) j["max_conns"] = s.max_conns;
      if (s.backup) j["backup"] = true;
      if (s.down) j["down"] = true;
      if (s.max_fails) j["max_fails"] = *s.max_fails;
      if (s.fail_timeout_s) j["fail_timeout_s"] = seconds(*s.fail_timeout_s);
      if (s.slow_start_s) j["slow_start_s"] = seconds(*s.slow_start_s);
      js["servers"].push_back(j);
    }
    js["events"] = nlohmann::ordered_json::array();
    for (const Event& e : sc.events) js["events"].push_back(event_text(e));
    js["policies"] = nlohmann::ordered_json::array();
    for (const PolicyResult& p : res.policies) {
      nlohmann::ordered_json jp;
      jp["policy"] = balance::policy_name(p.policy);
      jp["arrivals"] = p.arrivals;
      jp["completed"] = p.completed;
      jp["refused"] = p.refused;
      jp["timed_out"] = p.timed_out;
      jp["failed"] = p.failed;
      jp["unrouted"] = p.unrouted;
      if (sc.limited()) jp["unrouted_full"] = p.unrouted_full;  // only then do the outputs speak of it
      if (queued(sc)) {
        nlohmann::ordered_json q;
        q["waited"] = p.queue_waited;
        q["timed_out"] = p.queue_timed_out;
        q["peak"] = p.queue_peak;
        q["at_end"] = p.queue_at_end;
        // Mean requests waiting per bucket (bucket_s), as the SVG's pool queue panel.
        q["series"] = fraction_series(p.queue_series);
        jp["pool_queue"] = std::move(q);
      }
      if (dynamic_weights(sc)) {
        nlohmann::ordered_json changes = nlohmann::ordered_json::array();
        for (const WeightChange& c : p.weight_changes) {
          nlohmann::ordered_json jc;
          jc["at_s"] = seconds(c.at_s);
          jc["server"] = c.server;
          jc["reason"] = upstream::reason_name(c.reason);
          jc["factor_before"] = fraction(c.factor_before);
          jc["factor_after"] = fraction(c.factor_after);
          jc["detail"] = c.detail;
          changes.push_back(std::move(jc));
        }
        jp["weight_changes"] = std::move(changes);
        if (p.weight_changes_dropped > 0) jp["weight_changes_dropped"] = p.weight_changes_dropped;
      }
      jp["latency"] = latency_json(p.latency);
      jp["servers"] = nlohmann::ordered_json::array();
      for (const ServerResult& s : p.servers) {
        nlohmann::ordered_json j;
        j["name"] = s.name;
        j["size"] = s.size;
        j["weight"] = s.weight;
        j["requests"] = s.requests;
        j["share"] = fraction(s.share);
        j["utilisation"] = fraction(s.utilisation);
        j["latency"] = latency_json(s.latency);
        j["peak_queue"] = s.peak_queue;
        j["queue_at_end"] = s.queue_at_end;
        j["completed"] = s.completed;
        j["refused"] = s.refused;
        j["timed_out"] = s.timed_out;
        j["failed"] = s.failed;
        j["utilisation_series"] = fraction_series(s.utilisation_series);
        if (dynamic_weights(sc)) {
          j["share_series"] = fraction_series(s.share_series);
          j["factor_series"] = fraction_series(s.factor_series);
        }
        jp["servers"].push_back(j);
      }
      js["policies"].push_back(jp);
    }
    root["scenarios"].push_back(js);
  }
  return root;
}

std::string format_csv(const std::vector<SimResult>& results) {
  // The pool queue's columns only when a scenario has one (filled on (all) rows).
  const bool any_queued =
      std::any_of(results.begin(), results.end(), [](const SimResult& r) { return queued(r.scenario); });
  std::string out =
      "scenario,policy,server,size,weight,requests,share,utilisation,mean_ms,p50_ms,p95_ms,p99_ms,peak_queue,"
      "queue_at_end,completed,refused,timed_out,failed,unrouted";
  out += any_queued ? ",pool_queue_waited,pool_queue_timed_out,pool_queue_peak,pool_queue_at_end\n" : "\n";
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (const SimResult& res : results) {
    for (const PolicyResult& p : res.policies) {
      for (const ServerResult& s : p.servers) {
        out += fmt::format("{},{},{},{},{},{},{:.6f},{:.6f},{:.4f},{:.4f},{:.4f},{:.4f},{},{},{},{},{},{},\n",
                           quoted(res.scenario.name), balance::policy_name(p.policy), quoted(s.name), s.size,
                           s.weight, s.requests, s.share, s.utilisation, s.latency.mean_s * 1e3,
                           s.latency.p50_s * 1e3, s.latency.p95_s * 1e3, s.latency.p99_s * 1e3, s.peak_queue,
                           s.queue_at_end, s.completed, s.refused, s.timed_out, s.failed);
        if (any_queued) out.insert(out.size() - 1, ",,,,");
      }
      out += fmt::format("{},{},{},,,{},,,{:.4f},{:.4f},{:.4f},{:.4f},,,{},{},{},{},{}\n", quoted(res.scenario.name),
                         balance::policy_name(p.policy), "(all)", p.arrivals, p.latency.mean_s * 1e3,
                         p.latency.p50_s * 1e3, p.latency.p95_s * 1e3, p.latency.p99_s * 1e3, p.completed,
                         p.refused, p.timed_out, p.failed, p.unrouted);
      if (any_queued) {
        out.pop_back();
        out += queued(res.scenario) ? fmt::format(",{},{},{},{}\n", p.queue_waited, p.queue_timed_out,
                                                  p.queue_peak, p.queue_at_end)
                                    : ",,,,\n";
      }
    }
  }
  return out;
}

}  // namespace heft::sim
