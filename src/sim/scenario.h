// A simulation scenario for `heft sim`: the fleet (servers with a size, a mean
// service time and its distribution), the arrivals (Poisson or a trace), the
// policies to compare, and the events (slow down, fail, recover, reweigh).
//
// Parsing helpers turn flag and JSON text into a Scenario; they throw
// std::invalid_argument with a one-line message on bad input. No I/O here: the
// caller reads files and passes their text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "heft/balance/policy.h"
#include "sim/pool_settings.h"
#include "upstream/weights.h"

namespace heft::sim {

// A weight's range, as everywhere in heft (heftfile weights, heft pick).
inline constexpr uint32_t kMaxWeight = 1'000'000;
// A server's max_conns range, as the Heftfile's (`to ADDR max_conns N`).
inline constexpr uint32_t kMaxConns = 1'000'000;
// Simulated workers in all servers together: the event heap reserves room for
// one pending completion per worker up front (docs/sim.md, "Limits").
inline constexpr uint64_t kMaxWorkers = 1'000'000;
// Arrivals per run (rate x duration, or a trace's): at 2.5-6 million simulated
// requests per second, 10-20 s per policy (docs/sim.md, "Speed").
inline constexpr double kMaxArrivals = 50'000'000;
// Lognormal sigma: the normal draws come from 32-bit uniforms (|z| <= 6.76),
// so above 4 the tail that carries the mean is out of reach (sigma 4 keeps
// 99.6 % of the mean, 5 keeps 95 %, 50 none: every draw underflows to 0).
inline constexpr double kMaxSigma = 4;
// Utilisation points (servers x buckets) per policy: each is kept and printed.
inline constexpr uint64_t kMaxSeriesPoints = 10'000'000;
// The longest duration, in shortest service times: simulated time (a double of
// seconds) then still resolves a millionth of a service time (2^52 x 1e-6).
inline constexpr double kMaxDurationInServiceTimes = 4.5e9;
// A trace whose first arrival is this late (about 3 years) was most likely
// written with absolute (Unix) timestamps; the precision error says so.
inline constexpr double kAbsoluteTraceTimeS = 1e8;
// A slow event's factor. 1e300 ran latencies far past what the latency
// histogram holds (2^64 ns, 585 years: p99 showed 18374686479.67 s); a million
// times a 5 ms service is 83 minutes, and a millionth is a speed-up nobody models.
inline constexpr double kMinSlowFactor = 1e-6;
inline constexpr double kMaxSlowFactor = 1e6;
// The duration when none is given and no trace has a span to offer.
inline constexpr double kDefaultDurationS = 60;
// The pool queue's length range and default timeout, as the Heftfile's
// `queue N` (0..1000000) and `queue_timeout DUR` (60s).
inline constexpr uint64_t kMaxPoolQueue = 1'000'000;
inline constexpr double kDefaultQueueTimeoutS = 60;

enum class ServiceDist { fixed, exponential, lognormal };

std::optional<ServiceDist> parse_service_dist(std::string_view name);  // fixed | exp | exponential | lognormal
std::string_view service_dist_name(ServiceDist dist);

struct ServerSpec {
  std::string name;
  uint32_t size = 1;                  // workers serving at once; more wait in the FIFO queue
  double service_s = 0.005;           // mean service time at normal speed
  ServiceDist dist = ServiceDist::exponential;
  double sigma = 0.5;                 // lognormal: sigma of the underlying normal
  std::optional<uint32_t> weight;     // default: the server's size in units (see validate())
  std::optional<uint64_t> queue_limit;  // waiting requests beyond this are refused
  double timeout_s = 0;               // > 0: a request waiting longer leaves the queue (timed out)
  uint32_t max_conns = 0;             // > 0: at most this many assigned at once (queued + in service)
  bool backup = false;                // takes requests only when no primary can (the Heftfile's `backup`)
  // Never picked, whatever its weight becomes (the Heftfile's `down`, from
  // --config): as the proxy's, and not weight 0, which a weight event would
  // undo and which takes a backend off a hash ring where `down` keeps its place.
  bool down = false;
  double units = 1;                   // its size in "x" (3x = 3): the default weight
  // Passive failures and slow start, as the Heftfile's options of one
  // backend; not given: the scenario's (Scenario::max_fails, ...).
  std::optional<uint32_t> max_fails;
  std::optional<double> fail_timeout_s;
  std::optional<double> slow_start_s;
};

struct Event {
  enum class Kind { slow, fail, recover, weight, weights };
  double at_s = 0;
  Kind kind = Kind::slow;
  std::string server;             // slow, fail, recover, weight
  double factor = 1;              // slow: service times x factor (absolute, 1 = normal speed; kMin/kMaxSlowFactor)
  uint32_t weight = 0;            // weight: the server's new weight
  std::vector<uint32_t> weights;  // weights: every server's new weight, in order
};

struct Scenario {
  std::string name = "scenario";
  uint64_t seed = 1;
  // Arrivals in [0, duration); utilisation is measured over it. 0: not given,
  // and validate() makes it the trace's span (trace_span()), else 60 s.
  double duration_s = 0;
  double rate = 100;       // Poisson arrivals per second (when there is no trace)
  bool has_trace = false;
  std::vector<double> trace_times;     // sorted arrival times, seconds
  std::vector<uint64_t> trace_keys;    // hash_key() of each arrival's key (empty: no line has one)
  std::vector<bool> trace_keyed;       // beside trace_keys: whether the line gave a key (else it is 0)
  std::vector<ServerSpec> servers;
  std::vector<balance::PolicyKind> policies = {balance::PolicyKind::round_robin,
                                               balance::PolicyKind::weighted_round_robin,
                                               balance::PolicyKind::least_conn};
  balance::HashStrategy hash_strategy = balance::HashStrategy::ring;
  // The pool queue (the Heftfile's `queue N` / `queue_timeout DUR`): when every
  // server that could take a request is at its max_conns, up to `queue`
  // requests wait for a place, first come first served; 0: none (unrouted).
  uint64_t queue = 0;
  std::optional<double> queue_timeout_s;  // > 0; not given: kDefaultQueueTimeoutS
  double queue_timeout() const { return queue_timeout_s.value_or(kDefaultQueueTimeoutS); }
  // Whether some server has max_conns (only then can a pool queue hold anyone).
  bool limited() const;
  // The pool's settings, as the Heftfile's (docs/heftfile.md): a server's
  // failed attempts (a `fail` event makes its requests fail) take it out for
  // fail_timeout once max_fails fall within fail_timeout; a server back in
  // service ramps its weight over slow_start (0: none); adaptive weights cut
  // servers slower or failing more than their peers. The per-server values
  // in ServerSpec override the first three.
  uint32_t max_fails = kDefaultMaxFails;
  double fail_timeout_s = kDefaultFailTimeoutS;
  double slow_start_s = 0;
  upstream::AdaptiveOptions adaptive;
  std::vector<Event> events;  // sorted by time (stable) by validate()
  double bucket_s = 0;        // utilisation time-series bucket; 0: not given, validate() makes it duration / 60
};

// "1": a seed, 0..18446744073709551615 (a sign is an error, not a wrap).
// The items of a `separator`-separated list, each trimmed of the blanks
// around it (" \t\r\n"; "5, 3,\t2" is 5,3,2, as nginx and HAProxy read their
// lists); an empty item stays, for the caller to refuse or take. heft sim's,
// heft plan's and heft pick's lists read alike through it.
std::vector<std::string_view> split_trimmed(std::string_view text, char separator);

uint64_t parse_seed(std::string_view text);

// "100": a pool queue length for --queue, 0..kMaxPoolQueue.
uint64_t parse_pool_queue(std::string_view text);

// "3": max_fails for --max-fails, 0..kMaxFails.
uint32_t parse_max_fails(std::string_view text);

// "600s", "20ms", "250us", "2m", "1h", "1d", sums as the Heftfile writes them
// ("1m30s", "1.5s"), or a bare number of seconds (the Heftfile wants a unit);
// `what` names the flag or key in errors ("--bucket: '-1s' is negative").
double parse_duration(std::string_view text, std::string_view what = "duration");

// "3x,1x,1x" (or "3,1,1"): units per server.
std::vector<double> parse_units(std::string_view text);

// "name=big,size=12,service=20ms,dist=exp,sigma=0.5,weight=3,queue=100,timeout=1s,units=3,max_conns=16,
// backup=true,max_fails=3,fail_timeout=30s,slow_start=10s"
ServerSpec parse_server(std::string_view text);

// "300s:big:slow=2", "300s:big:fail", "400s:big:recover", "300s:big:weight=5",
// "300s:weights=1,1,1". Split at the first and the last ':', so the server's
// name may hold colons: "300s:127.0.0.1:22001:fail".
Event parse_event(std::string_view text);

// "300s:big:slow=2" and friends: the event as the flag syntax writes it.
std::string event_text(const Event& event);

// "round_robin,weighted_round_robin,least_conn"
std::vector<balance::PolicyKind> parse_policies(std::string_view text);

// "3,1,1": weights 0..kMaxWeight; `what` names the flag in errors.
std::vector<uint32_t> parse_weights(std::string_view text, std::string_view what = "--weights");

// Trace text: one arrival per line, "<seconds> [key]"; a '#' starts a comment
// anywhere on a line, and blank or comment-only lines are skipped. Sorts the arrivals by time (stable). A line
// without a key is placed as a keyless request is, even among keyed lines. A
// trace with no arrivals (empty, or only blank and comment lines) is an error.
void load_trace(std::string_view text, Scenario& scenario);

// The duration a trace covers: its last arrival plus the mean gap between its
// arrivals, so n arrivals g apart from 0 span n x g (1,000 at 1 ms: 1 s). With
// no gap to measure (one arrival, or all at one time), the last arrival + 1 ms.
// 0 for an empty trace.
double trace_span(const Scenario& scenario);

// "2 weights for 1 server": a weights= event's count against the fleet's.
std::string weights_for_servers(size_t weights, size_t servers);

// How many of the trace's arrivals are at or after the duration: never replayed.
uint64_t trace_arrivals_after_duration(const Scenario& scenario);

// A scenario file's text as JSON. A member given twice in one object is an
// error naming its path ("scenario: servers[0].size: is given twice"), where
// the JSON parser alone keeps the last. Syntax errors throw
// nlohmann::json::exception, as nlohmann::json::parse() does.
nlohmann::json parse_scenario_text(std::string_view text);

// A scenario from its JSON form (docs/sim.md). A "trace" member names a file:
// returned in `trace_path` for the caller to read with load_trace().
Scenario scenario_from_json(const nlohmann::json& j, std::string* trace_path);

// Checks and normalises: names unique and non-empty, sizes > 0, events naming
// known servers, sorted events, default duration and bucket, and default weights: every
// server without a weight gets its units, all scaled by the smallest whole
// number that makes them whole (1.5x,1x -> 3,2; 3x,1x,1x -> 3,1,1). Throws
// std::invalid_argument.
void validate(Scenario& scenario);

// The utilisation series' bucket count: duration / bucket, rounded up, with a
// hair of tolerance so 60 s / 1.2 ms is 50,000 and not 50,001; at least 1.
size_t bucket_count(const Scenario& scenario);

// The weight each server starts with: its weight (set for every server by
// validate()), else its units rounded, at least 1.
uint32_t initial_weight(const ServerSpec& server);

// The seed page's fleet: one group of one 3x and two 1x servers (12 and 4
// workers, 20 ms mean exponential service: a 1x server handles 200 req/s) at
// one group's share of `heft plan`'s peak (1,157 req/s / 2 groups = 579 req/s),
// for 600 s, weights 3,1,1. `big_half_speed`: the big server runs at half speed
// from the start (service times x 2).
Scenario seed_example(bool big_half_speed);

}  // namespace heft::sim
