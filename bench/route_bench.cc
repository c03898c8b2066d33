// Route selection at 10,000 routes: 100 hosts x 100 path prefixes, every
// tenth prefix behind a header matcher and every tenth behind a cookie
// matcher before it (Caddy's order: the more specific first), and a
// catch-all route per host. One iteration routes one request: the host to
// its site (HostRoutes, a hash table), then the site's routes
// (RouteProgram::run) to a pool. The goal (docs/routes.md): a median under
// 100 ns, and no cost that grows with the number of routes.
//
//   build/bench/route_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "proxy/host_routes.h"
#include "proxy/route_program.h"

namespace {

using namespace heft;

config::RouteHandler proxy_to(std::size_t pool) {
  config::RouteHandler h;
  h.kind = config::RouteHandler::reverse_proxy;
  h.pool = pool;
  return h;
}

config::Route path_route(const std::string& path, std::size_t pool) {
  config::Route r;
  config::MatcherSet set;
  set.paths = {path};
  r.match = {set};
  r.handle = {proxy_to(pool)};
  return r;
}

// One host's routes: a subroute of `prefixes` path routes (some doubled by a
// header or cookie route first) and a catch-all.
std::vector<config::RouteHandler> site_routes(int prefixes) {
  config::RouteHandler subroute;
  subroute.kind = config::RouteHandler::subroute;
  std::size_t pool = 0;
  for (int p = 0; p < prefixes; ++p) {
    const std::string path = fmt::format("/p{}/*", p);
    if (p % 10 == 3) {
      config::Route canary = path_route(path, ++pool);
      canary.match[0].headers = {{"X-Canary", {"1"}}};
      subroute.routes.push_back(canary);
    } else if (p % 10 == 7) {
      config::Route beta = path_route(path, ++pool);
      beta.match[0].cookies = {{"beta", {"yes"}}};
      subroute.routes.push_back(beta);
    }
    subroute.routes.push_back(path_route(path, ++pool));
  }
  config::Route rest;
  rest.handle = {proxy_to(0)};
  subroute.routes.push_back(rest);
  return {subroute};
}

struct Fixture {
  static constexpr int kHosts = 100, kPrefixes = 100, kRequests = 4096;
  proxy::HostRoutes hosts;
  std::vector<std::unique_ptr<proxy::RouteProgram>> programs;
  std::vector<std::string> host_names, targets;
  std::unique_ptr<unsigned char[]> arena_buffer{new unsigned char[proxy::FieldArena::kBytes]};
  proxy::FieldArena arena;
  std::vector<proxy::RequestHead> heads;

  explicit Fixture(int prefixes) {
    for (int h = 0; h < kHosts; ++h) {
      host_names.push_back(fmt::format("site{}.example.com", h));
      hosts.add(static_cast<std::size_t>(h), {host_names.back()}, false);
      programs.push_back(std::make_unique<proxy::RouteProgram>(site_routes(prefixes)));
    }
    hosts.finish();
    std::mt19937 random(42);
    arena.reset(nullptr);  // heads on the heap: they live for the whole run
    for (int i = 0; i < kRequests; ++i) {
      targets.push_back(fmt::format("/p{}/item/{}?q=1", random() % prefixes, i));
      proxy::RequestHead& head = heads.emplace_back(proxy::ArenaAllocator<char>(arena));
      head.set(boost::beast::http::field::host, host_names[random() % kHosts]);
      head.set(boost::beast::http::field::user_agent, "bench");
      if (i % 4 == 0) head.set(boost::beast::http::field::cookie, "session=abc; beta=yes");
      if (i % 8 == 0) head.set("X-Canary", "1");
    }
  }
};

// Routes request i of the fixture: its host to a site, the site's routes to a pool.
std::size_t route_one(const Fixture& fixture, std::size_t i, proxy::RouteState& route_state) {
  const proxy::RequestHead& head = fixture.heads[i % Fixture::kRequests];
  const std::string_view host = head[boost::beast::http::field::host];
  const std::size_t site = fixture.hosts.find(host);
  const proxy::RouteRequest request{&head, "GET", fixture.targets[i % Fixture::kRequests], host, "10.0.0.1"};
  route_state.reset();
  return fixture.programs[site]->run(request, route_state).pool;
}

void BM_RouteSelection(benchmark::State& state) {
  static const Fixture fixture(static_cast<int>(state.range(0)));
  proxy::RouteState route_state;
  std::size_t i = 0, pools = 0;
  for (auto _ : state) pools += route_one(fixture, i++, route_state);
  benchmark::DoNotOptimize(pools);
  state.counters["routes"] = double(Fixture::kHosts) * double(state.range(0));
}
BENCHMARK(BM_RouteSelection)->Arg(100)->Name("BM_RouteSelection/prefixes_per_host");

// The same requests on one route per host: the cost of the route step alone.
void BM_OneRoutePerHost(benchmark::State& state) {
  static const Fixture fixture(1);
  proxy::RouteState route_state;
  std::size_t i = 0, pools = 0;
  for (auto _ : state) pools += route_one(fixture, i++, route_state);
  benchmark::DoNotOptimize(pools);
}
BENCHMARK(BM_OneRoutePerHost);

}  // namespace

BENCHMARK_MAIN();
