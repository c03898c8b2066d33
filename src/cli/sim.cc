// `heft sim`: the discrete-event simulator (src/sim/simulator.h) on the command
// line. Builds a Scenario from flags, a JSON file, a built-in example or the
// pool of a site in a heft configuration, runs it, and prints a table, JSON
// or CSV (plus an SVG report on request).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "cli/site_lookup.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "observe/metrics.h"
#include "proxy/proxy.h"
#include "sim/pool_settings.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/simulator.h"

namespace heft::cli {
namespace {

struct SimFlags {
  std::string example;
  std::string scenario_file;
  std::string servers;  // "3x,1x,1x"
  uint32_t unit_workers = 1;
  std::string service = "5ms";
  std::string dist = "exp";
  double sigma = 0.5;
  std::vector<std::string> server;  // --server key=value,...
  double rate = 0;
  std::string duration;
  std::string trace;
  std::string policies;
  std::string weights;
  std::vector<std::string> events;
  std::string seed = "1";  // parsed by sim::parse_seed: CLI11 wraps "-1" into a uint64
  std::string bucket;
  std::string hash_strategy;
  std::string queue;          // parsed by sim::parse_pool_queue: CLI11 wraps "-1" into a uint64
  std::string queue_timeout;
  std::string max_fails;  // parsed by sim::parse_max_fails: CLI11 wraps "-1" into a uint32
  std::string fail_timeout;
  std::string slow_start;
  std::string adaptive;  // "on" (also bare --adaptive), "off", or the adaptive options as key=value
  bool json = false;
  bool csv = false;
  std::string svg;
  std::string config_file;  // --config: a Heftfile or JSON configuration
  bool running = false;     // --running: the running heft's configuration, through its admin API
  AdminClientOptions admin;  // --address, --token for --running
  std::string site;         // --site: which of its sites' pool, an index (checked once the sites are known)
  size_t pool = 1;          // --pool: which of the site's reverse_proxy pools (1: its first)
  // Whether a flag was given: an empty value ("--policies ''") is an error
  // for its parser, not a silent "not given".
  CLI::App* command = nullptr;
  bool given(const char* flag) const { return command->count(flag) > 0; }
};

std::string read_file(const std::string& path, const char* what) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw BadArguments(std::string(what) + ": '" + path + "' is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadArguments(std::string(what) + ": cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A trace's errors name its file: "--trace 'a.txt': trace line 2: ...".
void load_trace_file(const std::string& path, const char* what, sim::Scenario& s) {
  const std::string text = read_file(path, what);
  try {
    sim::load_trace(text, s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} '{}': {}", what, path, e.what()));
  }
}

// The members a scenario file gave, for errors about a setting its run does not read.
struct FileMembers {
  bool hash_strategy = false;
  bool policies = false;
  bool queue = false;
  bool queue_timeout = false;
  bool pool_queue = false;  // the queue and its timeout came from --config's pool
};

// "round_robin,least_conn"
std::string policy_list(const std::vector<balance::PolicyKind>& policies) {
  std::string out;
  for (balance::PolicyKind kind : policies) out.append(out.empty() ? "" : ",").append(balance::policy_name(kind));
  return out;
}

// A hash strategy (--hash-strategy or the file's "hash_strategy") for a run
// without the hash policy did nothing; whoever gave it expected an effect.
void check_hash_strategy_applies(const SimFlags& f, const FileMembers& file, const sim::Scenario& s) {
  if (!f.given("--hash-strategy") && !file.hash_strategy) return;
  if (std::any_of(s.policies.begin(), s.policies.end(),
                  [](balance::PolicyKind kind) { return balance::policy_traits(kind).uses_hash_strategy; }))
    return;
  const std::string setting = f.given("--hash-strategy") ? "--hash-strategy" : "scenario: hash_strategy:";
  const std::string policies = f.given("--policies") ? "--policies is " + policy_list(s.policies)
                               : file.policies       ? "the scenario's policies are " + policy_list(s.policies)
                                                     : "the policies are the default " + policy_list(s.policies);
  throw std::invalid_argument(
      fmt::format("{} {}; {}", setting, kHashStrategyAppliesTo, policies));
}

// A pool queue (--queue or the file's "queue") holds a request only when every
// server is at its max_conns: with no max_conns anywhere it did nothing (the
// proxy warns of such a queue; sim refuses settings its run would not read).
// Likewise a queue timeout (--queue-timeout or "queue_timeout") without a queue.
void check_queue_applies(const SimFlags& f, const FileMembers& file, const sim::Scenario& s) {
  if (s.queue > 0 && !s.limited())
    throw std::invalid_argument(
        fmt::format("{} has no effect: no server has max_conns (a request waits in the pool queue only when every "
                    "server is at its max_conns; give a server max_conns=N)",
                    f.given("--queue") ? "--queue " + f.queue : std::string("scenario: queue:")));
  if ((f.given("--queue-timeout") || file.queue_timeout) && s.queue == 0)
    throw std::invalid_argument(fmt::format(
        "{} applies only to a pool queue; {}", f.given("--queue-timeout") ? "--queue-timeout" : "scenario: queue_timeout:",
        f.given("--queue") ? "--queue is 0" : file.queue ? "the scenario's queue is 0" : "give --queue N"));
}

// The servers --servers makes (sizes in units, each with --service, --dist,
// --sigma and --unit-workers).
std::vector<sim::ServerSpec> servers_from_flags(const SimFlags& f) {
  auto dist = sim::parse_service_dist(f.dist);
  if (!dist) throw std::invalid_argument("--dist is fixed, exp or lognormal");
  if (f.unit_workers == 0) throw std::invalid_argument("--unit-workers must be at least 1");
  // Only the lognormal has a sigma: given with another, it did nothing.
  if (f.given("--sigma") && *dist != sim::ServiceDist::lognormal)
    throw std::invalid_argument(fmt::format("--sigma applies only to --dist lognormal; --dist is {}{}",
                                            sim::service_dist_name(*dist), f.given("--dist") ? "" : " (the default)"));
  if (!(f.sigma >= 0 && f.sigma <= sim::kMaxSigma))
    throw std::invalid_argument(fmt::format(
        "--sigma must be 0..{} (beyond, the lognormal cannot keep its mean), got {}", sim::kMaxSigma, f.sigma));
  const double service = sim::parse_duration(f.service, "--service");
  std::vector<sim::ServerSpec> servers;
  for (double units : sim::parse_units(f.servers)) {
    sim::ServerSpec server;
    server.units = units;
    // Checked before narrowing: 1e9x must neither wrap nor reserve room for 1e9 workers.
    const double workers = std::max(1.0, std::round(units * f.unit_workers));
    if (workers > static_cast<double>(sim::kMaxWorkers))
      throw std::invalid_argument(fmt::format("--servers {}x with --unit-workers {} is {:.0f} workers; at most {} are "
                                              "simulated in all",
                                              units, f.unit_workers, workers, sim::kMaxWorkers));
    server.size = static_cast<uint32_t>(workers);
    server.service_s = service;
    server.dist = *dist;
    server.sigma = f.sigma;
    servers.push_back(server);
  }
  return servers;
}

// "0 a.test:8080, 1 c.test:8080, 2 b.test:9090": the sites as --site numbers
// them, which is heft's numbering (heft weight, /reverse_proxy/upstreams'
// `site`): grouped by port in order of each port's first appearance, so not
// the file's order when a port's sites are apart in it. The first 10.
std::string numbered_sites(const std::vector<config::SiteConfig>& sites) {
  constexpr size_t kListed = 10;
  std::string out;
  for (size_t i = 0; i < sites.size() && i < kListed; ++i)
    out += fmt::format("{}{} {}", i ? ", " : "", i, observe::site_label(sites[i]));
  if (sites.size() > kListed) out += ", ...";
  return out;
}

// The pool of site --site in --config (or the running heft's, --running), as
// the proxy would run it: its backends (named by address, in order) with
// their weights, max_conns, backup and down flags, its policy (unless
// --policies), hash strategy and queue; their sizes and service times from
// --servers and its companions, one size per backend.
sim::Scenario scenario_from_config(const SimFlags& f, FileMembers& from) {
  const char* flag = f.running ? "--running" : "--config";
  if (!f.given("--servers"))
    throw std::invalid_argument(fmt::format(
        "{} needs --servers: the size of each backend in units, in the pool's order (e.g. --servers 3x,1x,1x)", flag));
  if (f.given("--server"))
    throw std::invalid_argument(
        fmt::format("--server does not go with {}: the backends are the pool's (size them with --servers)", flag));
  config::Result<config::Config> loaded;
  std::string source = f.config_file;  // named in errors and the scenario's name
  if (f.running) {
    // What the running heft serves now, admin API changes included (GET /config/).
    AdminClientOptions admin = f.admin;
    settle_admin_options(admin);
    const AdminReply reply = admin_request(admin, "GET", "/config/");
    if (reply.status != 200) throw std::invalid_argument("--running: " + reply.error_message());
    source = "heft at " + admin.address;
    std::string error;
    const nlohmann::json document = config::parse_json_text(reply.body, error, config::kJsonFileLimits);
    if (!error.empty()) throw std::invalid_argument(fmt::format("--running: {}: {}", source, error));
    loaded = config::from_json(document);
  } else {
    loaded = config::load_config_file(f.config_file);
  }
  if (!loaded.ok()) {
    std::string errors;
    for (const config::Diagnostic& d : loaded.errors) errors += "\n" + d.to_string();
    throw std::invalid_argument(fmt::format("{} is not valid:{}",
                                            f.running ? "--running: " + source : "--config '" + f.config_file + "'",
                                            errors));
  }
  const std::vector<config::SiteConfig>& sites = loaded->sites;
  const std::string numbered = numbered_sites(sites);
  if (!f.given("--site") && sites.size() != 1)
    throw std::invalid_argument(fmt::format("'{}' has {} sites: choose one with --site N (0..{}: {})", source,
                                            sites.size(), sites.size() - 1, numbered));
  // SITE as heft weight and heft rollout read it (a host name, HOST:PORT,
  // :PORT or the index), not by CLI11 into a size_t: that wrapped "-1" into
  // 18446744073709551615, which the error then named, and took "" for site 0.
  size_t index = 0;
  if (f.given("--site")) {
    std::string why;
    const std::optional<SiteLocation> found = find_site(config::to_json(*loaded), f.site, why);
    if (!found)
      throw std::invalid_argument(fmt::format("--site '{}': {}; '{}' has {} site{} (0..{}: {})", f.site, why, source,
                                              sites.size(), sites.size() == 1 ? "" : "s", sites.size() - 1,
                                              numbered));
    index = found->index;
  }
  // The warnings heft run and heft validate give for this site (a queue
  // without max_conns, weights round_robin ignores): the sim leaves out what
  // they say has no effect, so it says so too. Other sites' stay unsaid.
  // A site with routes has a pool per reverse_proxy: --pool N is simulated as any pool.
  if (f.pool < 1 || f.pool > sites[index].pool_count())
    throw std::invalid_argument(fmt::format("--pool {}: site {} has {} pool{} (1..{}, in the order written)", f.pool,
                                            index, sites[index].pool_count(),
                                            sites[index].pool_count() == 1 ? "" : "s", sites[index].pool_count()));
  config::SiteConfig site = sites[index];
  site.proxy = sites[index].pool(f.pool - 1);
  site.handle.clear();
  site.pools.clear();
  config::Config chosen = *loaded;
  chosen.sites = {site};
  for (const std::string& warning : config::config_warnings(chosen)) fmt::print(stderr, "warning: {}\n", warning);
  const config::ProxyConfig& pool = site.proxy;
  const std::vector<config::UpstreamConfig>& backends = pool.upstreams;
  sim::Scenario s;
  s.name = f.pool > 1 ? fmt::format("{} site {} pool {}", source, index, f.pool) : fmt::format("{} site {}", source, index);
  s.servers = servers_from_flags(f);
  if (s.servers.size() != backends.size())
    throw std::invalid_argument(fmt::format("--servers: {} size{} for the {} backend{} of site {} ({})",
                                            s.servers.size(), s.servers.size() == 1 ? "" : "s", backends.size(),
                                            backends.size() == 1 ? "" : "s", index,
                                            backends.size() == 1 ? backends[0].name : "in the pool's order"));
  for (size_t i = 0; i < s.servers.size(); ++i) {
    s.servers[i].name = backends[i].name;
    s.servers[i].weight = backends[i].weight;
    s.servers[i].down = backends[i].down;
    s.servers[i].max_conns = backends[i].max_conns;
    s.servers[i].backup = backends[i].backup;
  }
  // Passive failures, slow start and adaptive weights as heft run's pool
  // takes them (each backend's own values, or the pool's).
  const upstream::PoolConfig runtime = proxy::make_pool_config(site, index);
  const auto seconds = [](std::chrono::milliseconds ms) { return std::chrono::duration<double>(ms).count(); };
  s.max_fails = pool.max_fails;
  s.fail_timeout_s = seconds(pool.fail_timeout);
  s.slow_start_s = seconds(pool.slow_start.value_or(std::chrono::milliseconds(0)));
  s.adaptive = runtime.adaptive;
  for (size_t i = 0; i < s.servers.size(); ++i) {
    const upstream::BackendConfig& b = runtime.backends[i];
    if (b.max_fails != s.max_fails) s.servers[i].max_fails = b.max_fails;
    if (seconds(b.fail_timeout) != s.fail_timeout_s) s.servers[i].fail_timeout_s = seconds(b.fail_timeout);
    if (seconds(b.slow_start) != s.slow_start_s) s.servers[i].slow_start_s = seconds(b.slow_start);
  }
  s.policies = {pool.policy};
  s.hash_strategy = pool.hash_strategy;
  // A queue no request can enter (no max_conns) the proxy only warns of: nothing to model.
  if (pool.queue > 0 && s.limited()) {
    s.queue = pool.queue;
    s.queue_timeout_s = std::chrono::duration<double>(pool.queue_timeout).count();
  }
  // The pool's settings are defaults the flags may change: --policies
  // without hash leaves its hash strategy unread, --queue 0 its queue timeout.
  from.policies = true;
  from.queue = s.queue > 0;
  from.pool_queue = s.queue > 0;
  return s;
}

// --max-fails, --fail-timeout, --slow-start and --adaptive: the pool's
// settings, as the Heftfile's (a server's own, from --server, a scenario
// file or --config, stay). The first three act only when a server fails
// (and comes back), so without a `fail` event they are errors, as every
// setting the run would not read is.
void apply_pool_flags(const SimFlags& f, sim::Scenario& s) {
  if (f.given("--max-fails")) s.max_fails = sim::parse_max_fails(f.max_fails);
  if (f.given("--fail-timeout")) {
    s.fail_timeout_s = sim::parse_duration(f.fail_timeout, "--fail-timeout");
    sim::pool_duration(s.fail_timeout_s, "--fail-timeout");
  }
  if (f.given("--slow-start")) {
    s.slow_start_s = sim::parse_duration(f.slow_start, "--slow-start");
    sim::pool_duration(s.slow_start_s, "--slow-start");
  }
  if (f.given("--adaptive")) s.adaptive = sim::parse_adaptive(f.adaptive, s.adaptive);
  const bool fails = std::any_of(s.events.begin(), s.events.end(),
                                 [](const sim::Event& e) { return e.kind == sim::Event::Kind::fail; });
  for (const char* flag : {"--max-fails", "--fail-timeout", "--slow-start"}) {
    if (f.given(flag) && !fails)
      throw std::invalid_argument(fmt::format(
          "{} applies only when a server fails: give a fail event (--event TIME:SERVER:fail, and :recover to see "
          "it come back)",
          flag));
  }
}

// Flags that refine any scenario (from flags, a file or an example).
void apply_overrides(const SimFlags& f, const FileMembers& file, sim::Scenario& s) {
  if (f.given("--seed")) s.seed = sim::parse_seed(f.seed);
  if (f.given("--rate")) s.rate = f.rate;
  if (f.given("--duration")) {
    s.duration_s = sim::parse_duration(f.duration, "--duration");
    // Not left to validate(): there 0 means "not given" (a trace's span, or 60 s).
    if (!(s.duration_s > 0)) throw std::invalid_argument("--duration must be positive");
  }
  if (f.given("--bucket")) {
    s.bucket_s = sim::parse_duration(f.bucket, "--bucket");
    // Not left to validate(): there 0 means "not given" (duration / 60).
    if (!(s.bucket_s > 0)) throw std::invalid_argument("--bucket must be positive");
  }
  if (f.given("--policies")) s.policies = sim::parse_policies(f.policies);
  if (f.given("--hash-strategy")) {
    auto h = balance::parse_hash_strategy(f.hash_strategy);
    if (!h) throw std::invalid_argument("--hash-strategy is ring or maglev");
    s.hash_strategy = *h;
  }
  check_hash_strategy_applies(f, file, s);
  if (f.given("--queue")) {
    s.queue = sim::parse_pool_queue(f.queue);
    if (s.queue == 0 && file.pool_queue) s.queue_timeout_s.reset();  // --config's pool's, not asked for
  }
  if (f.given("--queue-timeout")) {
    s.queue_timeout_s = sim::parse_duration(f.queue_timeout, "--queue-timeout");
    if (!(*s.queue_timeout_s > 0)) throw std::invalid_argument("--queue-timeout must be positive");
  }
  check_queue_applies(f, file, s);
  if (f.given("--weights")) {
    auto w = sim::parse_weights(f.weights);
    if (w.size() != s.servers.size())
      throw std::invalid_argument("--weights: " + std::to_string(w.size()) + " weights for " +
                                  std::to_string(s.servers.size()) + " servers");
    for (size_t i = 0; i < w.size(); ++i) s.servers[i].weight = w[i];
  }
  for (const std::string& e : f.events) s.events.push_back(sim::parse_event(e));
  apply_pool_flags(f, s);
  if (f.given("--trace")) load_trace_file(f.trace, "--trace", s);
  if (f.given("--rate") && s.has_trace)
    throw std::invalid_argument("--rate does not apply to a trace: its arrivals are replayed as they are");
  sim::validate(s);
}

std::vector<sim::Scenario> build_scenarios(const SimFlags& f) {
  std::vector<sim::Scenario> out;
  FileMembers file;
  const bool from_config = f.given("--config") || f.running;
  int sources = f.given("--example") + f.given("--scenario") + f.given("--config") + f.running +
                ((f.given("--servers") || f.given("--server")) && !from_config);
  if (sources != 1)
    throw std::invalid_argument(
        "give exactly one of --example, --scenario, --config or --running (with --servers), or --servers/--server");
  if (f.given("--site") && !from_config) throw std::invalid_argument("--site needs --config or --running");
  if (f.given("--pool") && !from_config) throw std::invalid_argument("--pool needs --config or --running");
  if ((f.given("--address") || f.given("--token")) && !f.running)
    throw std::invalid_argument(fmt::format("{} needs --running", f.given("--address") ? "--address" : "--token"));
  // They shape the servers --servers makes; anywhere else they did nothing.
  for (const char* flag : {"--service", "--dist", "--sigma", "--unit-workers"}) {
    if (f.given(flag) && !f.given("--servers"))
      throw std::invalid_argument(fmt::format(
          "{} needs --servers (a --server takes service=, dist=, sigma= and size=; a scenario file, its members)",
          flag));
  }
  if (from_config) {
    out.push_back(scenario_from_config(f, file));
  } else if (f.given("--example")) {
    if (f.example != "seed") throw std::invalid_argument("--example: the only example is 'seed'");
    out.push_back(sim::seed_example(false));
    out.push_back(sim::seed_example(true));
  } else if (f.given("--scenario")) {
    nlohmann::json j;
    // Any of the parser's errors: a syntax error, or a number beyond a double (1e400).
    try {
      j = sim::parse_scenario_text(read_file(f.scenario_file, "--scenario"));
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(fmt::format("--scenario '{}': {}", f.scenario_file, e.what()));
    }
    std::string trace_path;
    sim::Scenario s = sim::scenario_from_json(j, &trace_path);
    file.hash_strategy = j.contains("hash_strategy");
    file.policies = j.contains("policies");
    file.queue = j.contains("queue");
    file.queue_timeout = j.contains("queue_timeout");
    if (!trace_path.empty() && !f.given("--trace")) {
      std::filesystem::path p(trace_path);
      if (p.is_relative()) p = std::filesystem::path(f.scenario_file).parent_path() / p;
      load_trace_file(p.string(), "scenario trace", s);
    }
    out.push_back(std::move(s));
  } else {
    sim::Scenario s;
    s.name = "heft sim";
    if (f.given("--servers")) s.servers = servers_from_flags(f);
    for (const std::string& text : f.server) s.servers.push_back(sim::parse_server(text));
    out.push_back(std::move(s));
  }
  for (sim::Scenario& s : out) apply_overrides(f, file, s);
  return out;
}

void run_sim(const SimFlags& f) {
  if (f.json && f.csv) throw BadArguments("--json and --csv are exclusive");
  std::vector<sim::Scenario> scenarios;
  try {
    scenarios = build_scenarios(f);
  } catch (const std::invalid_argument& e) {
    throw BadArguments(e.what());
  }
  // A trace's arrivals beyond a given duration are not replayed: say how many.
  for (const sim::Scenario& s : scenarios) {
    const uint64_t cut = s.has_trace ? sim::trace_arrivals_after_duration(s) : 0;
    if (cut == 0) continue;
    const std::string duration =
        f.given("--duration") ? "--duration " + f.duration : fmt::format("the scenario's duration {}s", sim::format_seconds(s.duration_s));
    const std::string scenario = scenarios.size() > 1 ? s.name + ": " : "";  // --example runs two
    fmt::print(stderr, "heft sim: {}{} trace arrival{} at or after {} {} not replayed\n", scenario, cut,
               cut == 1 ? "" : "s", duration, cut == 1 ? "was" : "were");
  }
  // Opened before the runs, which may take a minute: a path that cannot be
  // written is a bad argument, found at once.
  std::ofstream svg;
  if (f.given("--svg")) {
    svg.open(f.svg, std::ios::binary | std::ios::trunc);
    if (!svg) throw BadArguments("--svg: cannot write '" + f.svg + "'");
  }
  std::vector<sim::SimResult> results;
  for (const sim::Scenario& s : scenarios) results.push_back(sim::simulate(s));
  if (svg.is_open()) {
    svg << sim::format_svg(results);
    svg.close();
    if (!svg) {
      std::fprintf(stderr, "heft: --svg: writing '%s' failed\n", f.svg.c_str());
      set_exit_code(1);
      return;
    }
  }
  // A name that is not UTF-8 (--server name= from a Latin-1 terminal) is written
  // with U+FFFD: the default handler threw, and heft sim aborted.
  std::string text = f.json ? sim::results_to_json(results).dump(2, ' ', false,
                                                                 nlohmann::json::error_handler_t::replace) +
                                  "\n"
                     : f.csv ? sim::format_csv(results)
                             : sim::format_table(results);
  std::fputs(text.c_str(), stdout);
}

void setup(CLI::App& root) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = root.add_subcommand(
      "sim", "Simulate a fleet under several balancing policies with heft's own balancer (docs/sim.md)");
  cmd->add_option("--example", f->example, "Run a built-in scenario: seed (one 3x and two 1x servers, 579 req/s)");
  cmd->add_option("--scenario", f->scenario_file, "JSON scenario file (format in docs/sim.md)");
  cmd->add_option("--config", f->config_file,
                  "Simulate a site's pool from a Heftfile or JSON configuration: its backends, weights, max_conns, "
                  "policy and queue (sizes from --servers, one per backend)")
      ->check(not_empty("a Heftfile's or .json configuration's path"));
  cmd->add_flag("--running", f->running,
                "Simulate a site's pool as the running heft serves it now (GET /config/ of its admin API at --address, "
                "default 127.0.0.1:2019, with --token): live weight changes included");
  add_admin_options(cmd, f->admin, false);
  cmd->add_option("--site", f->site,
                  "With --config or --running: the site, as heft weight takes it: a host name, HOST:PORT, :PORT or "
                  "its index (heft upstreams' SITE); needed when there are several");
  cmd->add_option("--pool", f->pool,
                  "With --config or --running: which of the site's reverse_proxy pools, 1 (its first) to N in the "
                  "order written (a site with routes has one per reverse_proxy)")
      ->capture_default_str();
  cmd->add_option("--servers", f->servers, "Server sizes in units, e.g. 3x,1x,1x");
  cmd->add_option("--unit-workers", f->unit_workers, "Workers per unit of --servers")->capture_default_str();
  cmd->add_option("--service", f->service, "Mean service time for --servers, e.g. 20ms")->capture_default_str();
  cmd->add_option("--dist", f->dist, "Service time distribution for --servers: fixed, exp, lognormal")
      ->capture_default_str();
  // CLI11 reads "" as 0 for a double: --sigma '' ran with sigma 0, neither an error nor the default.
  cmd->add_option("--sigma", f->sigma, "Lognormal sigma for --servers (with --dist lognormal only)")
      ->check(not_empty(fmt::format("a number 0..{}", sim::kMaxSigma)))
      ->capture_default_str();
  cmd->add_option("--server", f->server,
                  "A server: name=big,size=12,service=20ms,dist=lognormal,sigma=0.5,weight=3,queue=100,timeout=1s,"
                  "units=3,max_conns=16,backup=true (repeatable; sigma= with dist=lognormal only; max_conns= caps its "
                  "queued + in-service requests, 0 = no limit; a backup takes requests only when no primary can)");
  f->command = cmd;
  cmd->add_option("--rate", f->rate, "Poisson arrivals per second");
  cmd->add_option("--duration", f->duration, "Arrivals stop after this, e.g. 600s (default: a trace's span, else 60s)");
  cmd->add_option("--trace", f->trace, "Replay arrivals: one time in seconds per line, optional key");
  cmd->add_option("--policies", f->policies, "Policies to compare (default round_robin,weighted_round_robin,least_conn)");
  cmd->add_option("--weights", f->weights, "Weights in server order (default: sizes in units)");
  cmd->add_option("--event", f->events, "TIME:SERVER:slow=F|fail|recover|weight=N, or TIME:weights=A,B,.. (repeatable)");
  cmd->add_option("--seed", f->seed, "Random seed: same seed, same output")->capture_default_str();
  cmd->add_option("--bucket", f->bucket, "Utilisation time-series bucket (default duration / 60)");
  cmd->add_option("--hash-strategy", f->hash_strategy, "For the hash policy: ring or maglev (an error without hash)");
  cmd->add_option("--queue", f->queue,
                  "Pool queue: when every server is at its max_conns, up to N requests (0..1000000) wait for a "
                  "place, first come first served (default 0: none, they are unrouted)");
  cmd->add_option("--queue-timeout", f->queue_timeout,
                  "The longest a request waits in the pool queue (default 60s; with --queue only)");
  cmd->add_option("--max-fails", f->max_fails,
                  "Failed attempts within --fail-timeout that take a server out, as the Heftfile's max_fails "
                  "(default 1; 0 = never; with a fail event)");
  cmd->add_option("--fail-timeout", f->fail_timeout,
                  "How long a failed server stays out, and the window its failures count in (default 10s; with a "
                  "fail event)");
  cmd->add_option("--slow-start", f->slow_start,
                  "Ramp a server's weight from 10% over this time when it comes back (default 0: none; with a fail "
                  "event)");
  cmd->add_option("--adaptive", f->adaptive,
                  "Adaptive weights: bare or 'on' with the defaults, 'off', or options "
                  "interval=30s,latency_threshold=0s,median_factor=2,error_threshold=5%,cut=25%,min_weight_ratio=0.1")
      ->expected(0, 1);
  cmd->add_flag("--json", f->json, "Print the results as JSON");
  cmd->add_flag("--csv", f->csv, "Print one CSV row per policy and server");
  cmd->add_option("--svg", f->svg, "Also write an SVG report to this file");
  cmd->callback([f] { run_sim(*f); });
}

const bool registered = add_command(61, &setup);

}  // namespace
}  // namespace heft::cli
