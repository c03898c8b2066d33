// Prometheus metrics for heft, cheap on the request path.
//
// Recording: each worker passes its index; counters and histograms live in a
// per-worker shard (a cache-line-aligned slot with its own mutex that only
// that worker and the scraper ever take, so the lock is uncontended in the
// steady state). render() merges the shards at scrape time. Labels are
// bounded: `server` is the server's port (server_label(): ":8080"), `site`
// the site's address (site_label(): sites sharing a server have a pool each),
// `upstream` the dial address as configured, `code` the
// 3-digit status, `reason` a short word from a fixed set the caller uses
// ("connect", "timeout", "status", ...).
//
// Gauges that describe pools (weights, health, active requests) are not
// recorded: the caller passes their current values to render(). Counters
// are all recorded here, never in pool state, which a reload may replace:
// they only go up while a backend is configured, and for
// kRemovedSeriesKept after it was removed (forget_removed_series()).
//
// Threads: every function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/model.h"

namespace heft::observe {

// Histogram bucket upper bounds, in seconds (+Inf is implied).
inline constexpr double kDurationBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,    1,     2.5,  5,     10,   30};
inline constexpr unsigned kMetricShards = 64;  // worker indexes wrap around this

// One client request answered by `server` (heft_requests_total, heft_request_duration_seconds).
void record_request(unsigned worker, std::string_view server, int status, double seconds);
// One attempt answered by a backend (heft_upstream_requests_total, heft_upstream_response_duration_seconds).
void record_upstream(unsigned worker, std::string_view server, std::string_view site, std::string_view upstream,
                     int status, double seconds);
// One failed attempt (heft_upstream_failures_total).
void record_failure(unsigned worker, std::string_view server, std::string_view site, std::string_view upstream,
                    std::string_view reason);
// An active health check moved a backend of site `site` between healthy and
// unhealthy (heft_upstream_health_changes_total).
void record_health_change(std::string_view server, std::string_view site, std::string_view upstream);
// A slow-start or adaptive weight decision in the pool of site `site`, by
// WeightReason name (heft_upstream_weight_decisions_total).
void record_weight_decision(std::string_view server, std::string_view site, std::string_view reason);
// A client connection opened / closed (heft_connections_active).
void connection_opened();
void connection_closed();
// A configuration change was applied or refused (heft_config_reloads_total).
void record_reload(bool success);

// The current state of one backend, for the gauges.
struct UpstreamGauge {
  std::string server;
  std::string site;  // site_label() of its site: its pool
  std::string upstream;
  uint64_t active = 0;
  uint32_t weight = 0;
  double effective_weight = 0;
  bool healthy = true;
  // Dynamic weights (health.md).
  double weight_factor = 1;  // slow start x adaptive, 0..1
  uint32_t max_conns = 0;    // limit on `active`; 0 = none
};

// The queue of a pool that has one (`queue`): requests waiting for a place,
// and the pool's counts so far of requests that joined it, found it full or
// gave up after queue_timeout.
struct QueueGauge {
  std::string server;
  std::string site;  // site_label() of its site
  uint64_t waiting = 0;
  uint64_t joined = 0, full = 0, timed_out = 0;
};

// How long the series of a backend no pool holds any more (and the weight
// decisions of a pool no site has) are kept at their last values: long
// enough for scrapes to see their final counts, and for a backend put back
// within it (a blue-green flip back) to continue them; after it they are
// forgotten, so a fleet whose addresses change with every deploy does not
// grow the registry and every scrape without bound.
inline constexpr std::chrono::seconds kRemovedSeriesKept{300};

// The backends the pools hold now are `live` (their server, site and
// upstream labels; the gauge values are not read). Series of any other
// backend, and weight decisions of any other pool, are forgotten once they
// have been absent for kRemovedSeriesKept as of `now` (from the first call
// that found them absent). Called by render_metrics() with its gauges and by
// the proxy after every configuration change, so a heft nobody scrapes
// forgets them too. Client-side series (heft_requests_total,
// heft_request_duration_seconds, by server port) are kept: ports rarely
// change.
void forget_removed_series(const std::vector<UpstreamGauge>& live, std::chrono::steady_clock::time_point now);

// The whole exposition (text format 0.0.4): recorded metrics, `gauges`, the
// access log's drop counter and process metrics. The backends and pools of
// `gauges` have their health-change and weight-decision counters shown from
// 0 before anything is recorded for them. Calls forget_removed_series()
// with `gauges` first.
std::string render_metrics(const std::vector<UpstreamGauge>& gauges, const std::vector<QueueGauge>& queues = {});

// The `server` label of a site (metrics, the upstreams view): its port,
// ":8080". Not the JSON form's "srvN": a reload that removes an earlier port
// renumbers those, and a series would then carry another port's counts on
// (as for site_label()).
std::string server_label(const config::SiteConfig& site);

// The `site` label of a site: its addresses as written, "b.test:8080",
// "a.test,b.test:8080" or ":8080" for any host. Not its index: a reload that
// removes an earlier site shifts the indexes, and a series would then carry
// another site's counts on from where the removed one stopped.
std::string site_label(const config::SiteConfig& site);

// Forgets everything recorded (tests).
void reset_metrics();

}  // namespace heft::observe
