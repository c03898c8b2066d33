// Output formats of `heft sim`: a table for people, JSON and CSV for tools, and
// a self-contained SVG report (utilisation over time per policy, latency CDFs).
// Each takes every scenario of one invocation (`--example seed` runs two).
// Pure functions: the same results give byte-identical text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/simulator.h"

namespace heft::sim {

// "20.1 ms", "2.35 s", "850 us".
std::string format_latency(double seconds);

// A duration in seconds as given, to the nanosecond: "600", "2592000", "1234.5678"
// ({:g} kept six digits: 2.592e+06, 1234.57).
std::string format_seconds(double seconds);

// "578.7", "100.0", "0.001": one decimal from 1 req/s up, else 3 significant digits.
std::string format_rate(double rps);

// "578.7 req/s Poisson for 600 s", "6000 trace arrivals for 6 s".
std::string arrivals_text(const SimResult& result);

std::string format_table(const std::vector<SimResult>& results);
nlohmann::ordered_json results_to_json(const std::vector<SimResult>& results);
std::string format_csv(const std::vector<SimResult>& results);
std::string format_svg(const std::vector<SimResult>& results);

}  // namespace heft::sim
