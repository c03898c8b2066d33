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

std::string format_table(const std::vector<SimResult>& results);
nlohmann::ordered_json results_to_json(const std::vector<SimResult>& results);
std::string format_csv(const std::vector<SimResult>& results);
std::string format_svg(const std::vector<SimResult>& results);

}  // namespace heft::sim
