// Sharded counters and histograms, merged into Prometheus text at scrape time.
#include "observe/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "observe/access_log.h"
#include "upstream/weights.h"

namespace heft::observe {
namespace {

constexpr size_t kBuckets = std::size(kDurationBuckets);
constexpr char kSep = '\x1f';  // joins label values into one key; never valid in them

struct Histogram {
  std::array<uint64_t, kBuckets> buckets{};  // per bucket (not cumulative) until render
  uint64_t count = 0;
  double sum = 0;
  void observe(double seconds) {
    size_t i = 0;
    while (i < kBuckets && seconds > kDurationBuckets[i]) ++i;
    if (i < kBuckets) ++buckets[i];
    ++count;
    sum += seconds;
  }
  void merge(const Histogram& o) {
    for (size_t i = 0; i < kBuckets; ++i) buckets[i] += o.buckets[i];
    count += o.count;
    sum += o.sum;
  }
};

// Lets the maps be searched with a string_view key, without building a string.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using KeyMap = std::unordered_map<std::string, V, KeyHash, std::equal_to<>>;

template <typename V>
V& slot(KeyMap<V>& map, std::string_view key) {
  auto it = map.find(key);
  if (it == map.end()) it = map.emplace(std::string(key), V{}).first;
  return it->second;
}

struct alignas(64) Shard {
  std::mutex mu;
  KeyMap<uint64_t> requests;             // server, code
  KeyMap<Histogram> request_durations;   // server
  KeyMap<uint64_t> upstream_requests;    // server, site, upstream, code
  KeyMap<Histogram> upstream_durations;  // server, site, upstream
  KeyMap<uint64_t> failures;             // server, site, upstream, reason
};

struct Registry {
  std::array<Shard, kMetricShards> shards;
  // Rare events (a few a second at most), off the request path: one lock.
  std::mutex rare_mu;
  std::map<std::string, uint64_t> health_changes;    // server, site, upstream
  std::map<std::string, uint64_t> weight_decisions;  // server, site, reason
  // Since when a backend (server, site, upstream) or a pool (server, site)
  // with series has been missing from the live ones (forget_removed_series()).
  std::mutex retention_mu;
  std::map<std::string, std::chrono::steady_clock::time_point> upstream_absent_since;
  std::map<std::string, std::chrono::steady_clock::time_point> pool_absent_since;
  std::atomic<int64_t> connections{0};
  std::atomic<uint64_t> reloads_ok{0};
  std::atomic<uint64_t> reloads_failed{0};
};

Registry& registry() {
  static Registry r;
  return r;
}

// The key for label values a, b, ...: built in a per-thread buffer (no allocation once warm).
template <typename... Parts>
std::string_view make_key(Parts... parts) {
  thread_local std::string key;
  key.clear();
  bool first = true;
  for (std::string_view p : {std::string_view(parts)...}) {
    if (!first) key += kSep;
    key += p;
    first = false;
  }
  return key;
}

std::string code_text(int status) {
  char buf[4] = {'0', '0', '0', 0};
  if (status >= 100 && status <= 999) {
    buf[0] = char('0' + status / 100);
    buf[1] = char('0' + status / 10 % 10);
    buf[2] = char('0' + status % 10);
  }
  return buf;
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = key.find(kSep, start);
    parts.push_back(key.substr(start, end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// The first `parts` label values of `key`, still joined: a series' backend
// (server, site, upstream) or pool (server, site).
std::string_view key_prefix(std::string_view key, int parts) {
  size_t end = 0;
  for (int i = 0; i < parts; ++i) {
    end = key.find(kSep, i ? end + 1 : 0);
    if (end == std::string_view::npos) return key;
  }
  return key.substr(0, end);
}

std::string escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// {a="x",b="y"} from names and the values packed in `key`.
std::string labels(const std::vector<const char*>& names, const std::string& key, const std::string& extra = "") {
  std::vector<std::string> values = split_key(key);
  std::string out = "{";
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("{}=\"{}\"", names[i], escape(values[i]));
  }
  if (!extra.empty()) out += (out.size() > 1 ? "," : "") + extra;
  return out + "}";
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename Map>
void counters(std::string& out, const char* name, const char* help, const std::vector<const char*>& names,
              const Map& merged) {
  header(out, name, "counter", help);
  for (const auto& [key, value] : merged) out += fmt::format("{}{} {}\n", name, labels(names, key), value);
}

void histograms(std::string& out, const char* name, const char* help, const std::vector<const char*>& names,
                const std::map<std::string, Histogram>& merged) {
  header(out, name, "histogram", help);
  for (const auto& [key, h] : merged) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      cumulative += h.buckets[i];
      out += fmt::format("{}_bucket{} {}\n", name, labels(names, key, fmt::format("le=\"{}\"", kDurationBuckets[i])),
                         cumulative);
    }
    out += fmt::format("{}_bucket{} {}\n", name, labels(names, key, "le=\"+Inf\""), h.count);
    out += fmt::format("{}_sum{} {}\n", name, labels(names, key), h.sum);
    out += fmt::format("{}_count{} {}\n", name, labels(names, key), h.count);
  }
}

double process_start_time() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the parenthesised command name; starttime is field 22.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) start_ticks = std::stoull(field);
  std::ifstream proc_stat("/proc/stat");
  std::string line;
  double boot = 0;
  while (std::getline(proc_stat, line))
    if (line.rfind("btime ", 0) == 0) boot = std::stod(line.substr(6));
  return boot + double(start_ticks) / double(sysconf(_SC_CLK_TCK));
}

void process_metrics(std::string& out) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  double cpu = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
               double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  header(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  out += fmt::format("process_cpu_seconds_total {}\n", cpu);
  long pages = 0, resident = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages >> resident;
  header(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  out += fmt::format("process_resident_memory_bytes {}\n", resident * sysconf(_SC_PAGESIZE));
  static const double start = process_start_time();
  header(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  out += fmt::format("process_start_time_seconds {}\n", start);
  size_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++fds;
  header(out, "process_open_fds", "gauge", "Number of open file descriptors.");
  out += fmt::format("process_open_fds {}\n", fds);
}

}  // namespace

namespace {

// The slots a worker's recent (server, site, upstream, status) series live in, so a
// request finds them by comparing a few short strings instead of building
// and hashing two keys. Map nodes do not move; reset_metrics() and
// forget_removed_series() bump the generation under each shard's lock before
// they free nodes there, which empties every cache.
std::atomic<uint64_t> g_generation{1};

struct SeriesSlots {
  uint64_t generation = 0;
  const Shard* shard = nullptr;
  int status = 0;
  std::string server;
  std::string site;      // empty for record_request's series
  std::string upstream;  // empty for record_request's series
  uint64_t* count = nullptr;
  Histogram* durations = nullptr;
};

class SeriesCache {
 public:
  SeriesSlots* find(const Shard& shard, std::string_view server, std::string_view site, std::string_view upstream,
                    int status) {
    const uint64_t generation = g_generation.load(std::memory_order_relaxed);
    for (SeriesSlots& e : entries_)
      if (e.generation == generation && e.status == status && e.shard == &shard && e.server == server &&
          e.upstream == upstream && e.site == site)
        return &e;
    return nullptr;
  }
  SeriesSlots& replace() { return entries_[next_++ % entries_.size()]; }

 private:
  std::array<SeriesSlots, 16> entries_;
  unsigned next_ = 0;
};

thread_local SeriesCache t_request_series;
thread_local SeriesCache t_upstream_series;

}  // namespace

void record_request(unsigned worker, std::string_view server, int status, double seconds) {
  Shard& s = registry().shards[worker % kMetricShards];
  std::lock_guard lock(s.mu);
  SeriesSlots* e = t_request_series.find(s, server, {}, {}, status);
  if (!e) {
    e = &t_request_series.replace();
    *e = SeriesSlots{g_generation.load(std::memory_order_relaxed), &s, status, std::string(server), {}, {},
                     &slot(s.requests, make_key(server, code_text(status))), &slot(s.request_durations, server)};
  }
  ++*e->count;
  e->durations->observe(seconds);
}

void record_upstream(unsigned worker, std::string_view server, std::string_view site, std::string_view upstream,
                     int status, double seconds) {
  Shard& s = registry().shards[worker % kMetricShards];
  std::lock_guard lock(s.mu);
  SeriesSlots* e = t_upstream_series.find(s, server, site, upstream, status);
  if (!e) {
    e = &t_upstream_series.replace();
    uint64_t* count = &slot(s.upstream_requests, make_key(server, site, upstream, code_text(status)));
    Histogram* durations = &slot(s.upstream_durations, make_key(server, site, upstream));
    *e = SeriesSlots{g_generation.load(std::memory_order_relaxed), &s, status, std::string(server),
                     std::string(site), std::string(upstream), count, durations};
  }
  ++*e->count;
  e->durations->observe(seconds);
}


void record_failure(unsigned worker, std::string_view server, std::string_view site, std::string_view upstream,
                    std::string_view reason) {
  Shard& s = registry().shards[worker % kMetricShards];
  std::lock_guard lock(s.mu);
  ++slot(s.failures, make_key(server, site, upstream, reason));
}

void record_health_change(std::string_view server, std::string_view site, std::string_view upstream) {
  Registry& r = registry();
  std::lock_guard lock(r.rare_mu);
  ++r.health_changes[std::string(make_key(server, site, upstream))];
}

void record_weight_decision(std::string_view server, std::string_view site, std::string_view reason) {
  Registry& r = registry();
  std::lock_guard lock(r.rare_mu);
  ++r.weight_decisions[std::string(make_key(server, site, reason))];
}

void connection_opened() { registry().connections.fetch_add(1, std::memory_order_relaxed); }
void connection_closed() { registry().connections.fetch_sub(1, std::memory_order_relaxed); }

void record_reload(bool success) {
  (success ? registry().reloads_ok : registry().reloads_failed).fetch_add(1, std::memory_order_relaxed);
}

void forget_removed_series(const std::vector<UpstreamGauge>& live, std::chrono::steady_clock::time_point now) {
  std::unordered_set<std::string> live_upstreams, live_pools;
  for (const UpstreamGauge& g : live) {
    live_upstreams.emplace(make_key(g.server, g.site, g.upstream));
    live_pools.emplace(make_key(g.server, g.site));
  }
  Registry& r = registry();
  std::lock_guard retention(r.retention_mu);
  // Every backend and pool that has series now.
  std::set<std::string, std::less<>> upstreams, pools;
  for (Shard& s : r.shards) {
    std::lock_guard lock(s.mu);
    for (const auto& [k, v] : s.upstream_requests) upstreams.emplace(key_prefix(k, 3));
    for (const auto& [k, v] : s.upstream_durations) upstreams.emplace(k);
    for (const auto& [k, v] : s.failures) upstreams.emplace(key_prefix(k, 3));
  }
  {
    std::lock_guard lock(r.rare_mu);
    for (const auto& [k, v] : r.health_changes) upstreams.emplace(k);
    for (const auto& [k, v] : r.weight_decisions) pools.emplace(key_prefix(k, 2));
  }
  // Absent ones are timed from the first call that missed them; those back
  // (or without series any more) are not absent.
  const auto doomed = [&](std::map<std::string, std::chrono::steady_clock::time_point>& absent_since,
                          const std::set<std::string, std::less<>>& known,
                          const std::unordered_set<std::string>& alive) {
    std::set<std::string, std::less<>> out;
    std::erase_if(absent_since, [&](const auto& entry) { return alive.count(entry.first) || !known.count(entry.first); });
    for (const std::string& key : known) {
      if (alive.count(key)) continue;
      auto since = absent_since.try_emplace(key, now).first;
      if (now - since->second >= kRemovedSeriesKept) {
        out.insert(key);
        absent_since.erase(since);
      }
    }
    return out;
  };
  const std::set<std::string, std::less<>> gone_upstreams = doomed(r.upstream_absent_since, upstreams, live_upstreams);
  const std::set<std::string, std::less<>> gone_pools = doomed(r.pool_absent_since, pools, live_pools);
  if (gone_upstreams.empty() && gone_pools.empty()) return;
  const auto gone = [&](const std::string& key, int parts) { return gone_upstreams.count(key_prefix(key, parts)) > 0; };
  for (Shard& s : r.shards) {
    std::lock_guard lock(s.mu);
    // The workers' caches point into the maps: invalidated under this
    // shard's lock, right before its erase (a worker reads the generation
    // under it). A bump before the loop would let a worker cache a slot,
    // under the new generation, that the erase then frees.
    g_generation.fetch_add(1, std::memory_order_relaxed);
    std::erase_if(s.upstream_requests, [&](const auto& e) { return gone(e.first, 3); });
    std::erase_if(s.upstream_durations, [&](const auto& e) { return gone(e.first, 3); });
    std::erase_if(s.failures, [&](const auto& e) { return gone(e.first, 3); });
  }
  std::lock_guard lock(r.rare_mu);
  std::erase_if(r.health_changes, [&](const auto& e) { return gone(e.first, 3); });
  std::erase_if(r.weight_decisions, [&](const auto& e) { return gone_pools.count(key_prefix(e.first, 2)) > 0; });
}

std::string render_metrics(const std::vector<UpstreamGauge>& gauges, const std::vector<QueueGauge>& queues) {
  forget_removed_series(gauges, std::chrono::steady_clock::now());
  std::map<std::string, uint64_t> requests, upstream_requests, failures;
  std::map<std::string, Histogram> request_durations, upstream_durations;
  for (Shard& s : registry().shards) {
    std::lock_guard lock(s.mu);
    for (const auto& [k, v] : s.requests) requests[k] += v;
    for (const auto& [k, v] : s.upstream_requests) upstream_requests[k] += v;
    for (const auto& [k, v] : s.failures) failures[k] += v;
    for (const auto& [k, v] : s.request_durations) request_durations[k].merge(v);
    for (const auto& [k, v] : s.upstream_durations) upstream_durations[k].merge(v);
  }
  std::string out;
  out.reserve(4096);
  counters(out, "heft_requests_total", "Client requests answered, by server and status code.", {"server", "code"},
           requests);
  histograms(out, "heft_request_duration_seconds", "Time from a request's head to its response's end.", {"server"},
             request_durations);
  counters(out, "heft_upstream_requests_total", "Attempts answered by a backend, by status code.",
           {"server", "site", "upstream", "code"}, upstream_requests);
  histograms(out, "heft_upstream_response_duration_seconds", "Time for a backend to answer an attempt.",
             {"server", "site", "upstream"}, upstream_durations);
  counters(out, "heft_upstream_failures_total", "Failed attempts to a backend, by reason.",
           {"server", "site", "upstream", "reason"}, failures);

  auto gauge = [&](const char* name, const char* help, auto value_of) {
    header(out, name, "gauge", help);
    for (const UpstreamGauge& g : gauges)
      out += fmt::format("{}{{server=\"{}\",site=\"{}\",upstream=\"{}\"}} {}\n", name, escape(g.server),
                         escape(g.site), escape(g.upstream), value_of(g));
  };
  gauge("heft_upstream_active_requests", "Requests in flight to a backend.", [](const UpstreamGauge& g) { return double(g.active); });
  gauge("heft_upstream_weight", "Configured weight of a backend.", [](const UpstreamGauge& g) { return double(g.weight); });
  gauge("heft_upstream_effective_weight", "Weight the balancer uses now (after slow start and adaptation).",
        [](const UpstreamGauge& g) { return g.effective_weight; });
  gauge("heft_upstream_healthy", "1 unless passive failures or active checks keep the backend out (its weight aside), else 0.",
        [](const UpstreamGauge& g) { return g.healthy ? 1.0 : 0.0; });
  gauge("heft_upstream_weight_factor", "Slow-start x adaptive factor of a backend's weight (0..1).",
        [](const UpstreamGauge& g) { return g.weight_factor; });
  gauge("heft_upstream_max_conns", "A backend's limit on requests in flight (max_conns); 0 = none.",
        [](const UpstreamGauge& g) { return double(g.max_conns); });
  if (!queues.empty()) {
    header(out, "heft_queue_waiting_requests", "gauge",
           "Requests waiting for a place in a pool whose backends are all at max_conns (pools with a queue).");
    for (const QueueGauge& q : queues)
      out += fmt::format("heft_queue_waiting_requests{{server=\"{}\",site=\"{}\"}} {}\n", escape(q.server),
                         escape(q.site), q.waiting);
    header(out, "heft_queue_waited_total", "counter", "Requests that waited in a pool's queue for a place.");
    for (const QueueGauge& q : queues)
      out += fmt::format("heft_queue_waited_total{{server=\"{}\",site=\"{}\"}} {}\n", escape(q.server),
                         escape(q.site), q.joined);
    header(out, "heft_queue_refused_total", "counter",
           "Requests the queue answered 503: it was full (reason=\"full\") or they waited queue_timeout (\"timeout\").");
    for (const QueueGauge& q : queues)
      out += fmt::format(
          "heft_queue_refused_total{{server=\"{0}\",site=\"{1}\",reason=\"full\"}} {2}\n"
          "heft_queue_refused_total{{server=\"{0}\",site=\"{1}\",reason=\"timeout\"}} {3}\n",
          escape(q.server), escape(q.site), q.full, q.timed_out);
  }
  std::map<std::string, uint64_t> health_changes, weight_decisions;
  {
    // The current backends' series from 0 on, kept in the registry: a backend
    // or site removed later keeps its series at their last value, 0 included,
    // for kRemovedSeriesKept (docs/admin.md), instead of the zero series
    // vanishing at once.
    Registry& r = registry();
    std::lock_guard lock(r.rare_mu);
    for (const UpstreamGauge& g : gauges) {
      r.health_changes.try_emplace(std::string(make_key(g.server, g.site, g.upstream)), 0);
      for (int reason = 0; reason < upstream::kWeightReasons; ++reason)
        r.weight_decisions.try_emplace(
            std::string(make_key(g.server, g.site, upstream::reason_name(static_cast<upstream::WeightReason>(reason)))),
            0);
    }
    health_changes = r.health_changes;
    weight_decisions = r.weight_decisions;
  }
  counters(out, "heft_upstream_health_changes_total", "Active health check state changes of a backend.",
           {"server", "site", "upstream"}, health_changes);
  counters(out, "heft_upstream_weight_decisions_total", "Slow-start and adaptive weight decisions of a pool, by reason.",
           {"server", "site", "reason"}, weight_decisions);

  header(out, "heft_connections_active", "gauge", "Client connections open.");
  out += fmt::format("heft_connections_active {}\n", registry().connections.load(std::memory_order_relaxed));
  header(out, "heft_config_reloads_total", "counter", "Configuration changes, by result.");
  out += fmt::format("heft_config_reloads_total{{result=\"success\"}} {}\n", registry().reloads_ok.load());
  out += fmt::format("heft_config_reloads_total{{result=\"failure\"}} {}\n", registry().reloads_failed.load());
  header(out, "heft_access_log_dropped_total", "counter", "Access log lines dropped because the queue was full.");
  out += fmt::format("heft_access_log_dropped_total {}\n", access_log_dropped_total());
  process_metrics(out);
  return out;
}

std::string server_label(const config::SiteConfig& site) { return fmt::format(":{}", site.port); }

std::string site_label(const config::SiteConfig& site) {
  std::string hosts;
  for (const std::string& h : site.hosts)
    hosts += (hosts.empty() ? "" : ",") + (h.find(':') != std::string::npos ? "[" + h + "]" : h);  // an IPv6 literal
  return fmt::format("{}:{}", hosts, site.port);
}

void reset_metrics() {
  for (Shard& s : registry().shards) {
    std::lock_guard lock(s.mu);
    g_generation.fetch_add(1, std::memory_order_relaxed);  // as in forget_removed_series()
    s.requests.clear();
    s.upstream_requests.clear();
    s.failures.clear();
    s.request_durations.clear();
    s.upstream_durations.clear();
  }
  {
    std::lock_guard lock(registry().rare_mu);
    registry().health_changes.clear();
    registry().weight_decisions.clear();
  }
  {
    std::lock_guard lock(registry().retention_mu);
    registry().upstream_absent_since.clear();
    registry().pool_absent_since.clear();
  }
  registry().connections = 0;
  registry().reloads_ok = 0;
  registry().reloads_failed = 0;
}

}  // namespace heft::observe
