// Speed of `heft sim`: simulated requests per second of CPU time for a
// 10-server fleet (sizes 3,1,1 repeated, 4 workers per unit, 20 ms exponential
// service, 70 % busy), one benchmark per policy. Target: >= 5 million items/s
// for weighted round robin. BM_SimulatePoolFeatures runs weighted round robin
// with the pool's features at work: adaptive weights (10 s interval), a server
// failing at 100 s and recovering at 200 s with a 30 s slow start, and a
// slowdown at 500 s.
#include <benchmark/benchmark.h>

#include <chrono>

#include "sim/simulator.h"

namespace {

heft::sim::Scenario ten_server_fleet(double duration_s) {
  heft::sim::Scenario s;
  s.name = "bench";
  s.seed = 7;
  s.duration_s = duration_s;
  double capacity = 0;
  for (int i = 0; i < 10; ++i) {
    heft::sim::ServerSpec server;
    server.units = i % 3 == 0 ? 3 : 1;
    server.size = static_cast<uint32_t>(server.units * 4);
    server.service_s = 0.020;
    server.dist = heft::sim::ServiceDist::exponential;
    capacity += server.size / server.service_s;
    s.servers.push_back(server);
  }
  s.rate = 0.7 * capacity;
  heft::sim::validate(s);
  return s;
}

void BM_Simulate(benchmark::State& state) {
  const auto policy = static_cast<heft::balance::PolicyKind>(state.range(0));
  const heft::sim::Scenario scenario = ten_server_fleet(1000);  // about 1.3 million requests
  uint64_t requests = 0;
  for (auto _ : state) {
    heft::sim::PolicyResult result = heft::sim::simulate_policy(scenario, policy);
    requests += result.arrivals;
    benchmark::DoNotOptimize(result.completed);
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
  state.SetLabel(std::string(heft::balance::policy_name(policy)));
}

void BM_SimulatePoolFeatures(benchmark::State& state) {
  heft::sim::Scenario scenario = ten_server_fleet(1000);
  scenario.slow_start_s = 30;
  scenario.adaptive.enabled = true;
  scenario.adaptive.interval = std::chrono::seconds(10);
  for (const char* event : {"100s:s2:fail", "200s:s2:recover", "500s:s4:slow=3"})
    scenario.events.push_back(heft::sim::parse_event(event));
  heft::sim::validate(scenario);
  uint64_t requests = 0;
  for (auto _ : state) {
    heft::sim::PolicyResult result =
        heft::sim::simulate_policy(scenario, heft::balance::PolicyKind::weighted_round_robin);
    requests += result.arrivals;
    benchmark::DoNotOptimize(result.completed);
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
}

BENCHMARK(BM_SimulatePoolFeatures)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Simulate)
    ->Arg(static_cast<int>(heft::balance::PolicyKind::round_robin))
    ->Arg(static_cast<int>(heft::balance::PolicyKind::weighted_round_robin))
    ->Arg(static_cast<int>(heft::balance::PolicyKind::least_conn))
    ->Arg(static_cast<int>(heft::balance::PolicyKind::p2c))
    ->Arg(static_cast<int>(heft::balance::PolicyKind::hash))
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
