// One backend's capacity from a synthetic open-loop ramp (docs/calibrate.md,
// "Method"): a few sequential requests first (is it up, how long does a
// request take alone), then steps of rising rate, each judged on its p95,
// its errors and whether the answers kept pace with the rate; the rate
// doubles while steps hold, and once one does not, steps between the last
// that held and the first that did not narrow it down. Capacity is the
// highest rate that held, and no more than 98 % of the most a step that fell
// behind answered a second (the backend's throughput, seen saturated).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cli/open_loop_load.h"

namespace heft::cli {

struct RampOptions {
  std::chrono::milliseconds p95{120};  // a step holds while its p95 stays at or under this
  double max_error = 0.005;            // ... and its share of errors at or under this
  double max_rate = 5000;              // no step offers more, requests a second
  size_t max_connections = 512;        // connections to the backend at once, at most
  std::chrono::steady_clock::time_point deadline;  // the ramp ends by then, whatever it found
  std::function<void(const std::string&)> progress;  // one line per step
  std::function<bool()> stop;          // asked often: true ends the ramp (Ctrl-C)
};

// How one step went, for the report.
struct RampStep {
  StepResult result;
  bool held = false;
  std::string why;  // why it did not hold ("p95 180ms > 120ms"), empty if it held
};

struct CapacityResult {
  enum class Ending {
    distress,   // a step did not hold: capacity lies between the last that held and it
    max_rate,   // held at --max-rate: capacity is at least that
    deadline,   // the time ran out before any step failed: at least the last rate held
    down,       // the first request alone got no answer, or an error: not measured
    too_slow,   // even the lowest rate did not hold
    stopped,    // interrupted
  };
  Ending ending = Ending::distress;
  double capacity = 0;       // requests a second: the highest rate that held (0 if none)
  bool lower_bound = false;  // max_rate or deadline: it may do more
  double unloaded_ms = 0;    // median time of the sequential requests
  double p95_ms = 0;         // p95 of the step that set the capacity
  std::string summary;       // how it ended, in words ("throughput stopped rising: ...", "Connection refused")
  std::vector<RampStep> steps;
};

CapacityResult measure_capacity(const LoadTarget& target, const RampOptions& options);

}  // namespace heft::cli
