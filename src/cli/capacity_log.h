// Backends' capacities estimated from an access log heft wrote under real
// traffic (`heft calibrate --from-log`; the method and its limits are in
// docs/calibrate.md, "From an access log").
//
// A backend whose requests queue does as much as it can: then the requests it
// answers a second are its capacity. Per backend and per second of the log
// (by when each answer ended): the answers, the 5xx among them and their
// mean time to the response head. A second whose mean time is at least
// kQueueingFactor times the backend's time unloaded (the 2nd percentile of
// all its requests' times: its fastest, bar outliers) is a second it queued; its capacity is the median
// of the answers a second over those seconds (5xx excluded, and seconds over
// the error limit left out). A backend that never queued shows only a lower
// bound: the most it answered in a second.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace heft::cli {

inline constexpr double kQueueingFactor = 1.5;

struct LogCapacity {
  std::string upstream;         // dial address, as the log's `upstream` says it
  uint64_t requests = 0, errors = 0;  // lines for it; 5xx among them
  double unloaded_ms = 0;       // 2nd percentile of its times to the response head
  size_t seconds = 0;           // whole seconds of the log it answered in
  size_t queued_seconds = 0;    // ... of which it queued in
  double capacity = 0;          // answers a second (see above)
  bool lower_bound = false;     // it never queued: capacity is the most it answered in a second
};

struct LogEstimate {
  std::vector<LogCapacity> backends;  // in order of first appearance
  uint64_t lines = 0, skipped = 0;    // lines read; lines that were not a proxied request's entry
  double first_ts = 0, last_ts = 0;   // the span of the log (seconds since the epoch)
};

// Reads a JSON access log (one entry a line, heft's or Caddy's field names).
// Only backends in `only` count when it is not empty. `max_error`: seconds
// whose 5xx share is above it are left out. Empty `error` unless the log
// could not be used at all.
LogEstimate estimate_from_log(std::istream& log, const std::vector<std::string>& only, double max_error,
                              std::string& error);

}  // namespace heft::cli
