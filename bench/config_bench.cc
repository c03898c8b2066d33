// Reading configurations: parse and JSON conversion per site for many sites on
// as many ports, and the "did you mean" search for a huge unknown word, whose
// times must grow linearly (both were quadratic: seconds for 20,000 sites).
//
//   build/bench/config_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <string>

#include <fmt/format.h>

#include "config/heftfile.h"
#include "config/json.h"

using namespace heft::config;

namespace {

std::string sites_on_ports(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += fmt::format(":{} {{\n\treverse_proxy a:1\n}}\n", 60'000 - i);
  return text;
}

// ns per site: flat from 1,000 to 50,000 sites when the grouping by port is linear.
void ParseSitesOnManyPorts(benchmark::State& state) {
  const std::string text = sites_on_ports(int(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(parse_heftfile(text));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(ParseSitesOnManyPorts)->Arg(1'000)->Arg(10'000)->Arg(50'000)->Unit(benchmark::kMillisecond);

void ToJsonSitesOnManyPorts(benchmark::State& state) {
  const Config config = *parse_heftfile(sites_on_ports(int(state.range(0))));
  for (auto _ : state) benchmark::DoNotOptimize(to_json(config));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(ToJsonSitesOnManyPorts)->Arg(1'000)->Arg(10'000)->Arg(50'000)->Unit(benchmark::kMillisecond);

// ns per byte of an unknown option word: flat from 64 KiB to 8 MiB.
void UnknownHugeWord(benchmark::State& state) {
  const std::string text = ":80 {\n\treverse_proxy a:1 {\n\t\t" + std::string(size_t(state.range(0)), 'x') + " 1\n\t}\n}\n";
  for (auto _ : state) benchmark::DoNotOptimize(parse_heftfile(text));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(UnknownHugeWord)->Arg(64 << 10)->Arg(1 << 20)->Arg(8 << 20)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
