// `heft calibrate`'s results and how they are shown (calibrate_report.cc):
// the command itself is calibrate.cc, the ramp capacity_ramp.h, the log
// estimate capacity_log.h, the weights small_weights.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/small_weights.h"
#include "cli/weight_stages.h"

namespace heft::cli {

struct CalibratedBackend {
  std::string dial;
  enum class Status {
    measured,      // has a capacity (maybe a lower bound) and gets a weight
    down,          // no answer, or only errors: not weighted
    not_measured,  // left out (marked down, too slow at any rate, would drain the site, ...): not weighted
  };
  Status status = Status::not_measured;
  double capacity = 0;            // requests a second
  bool lower_bound = false;       // at least this much (the ramp or the log never saw its limit)
  std::optional<uint32_t> configured_weight;  // its weight in the configuration, when there is one
  bool backup = false;
  bool marked_down = false;       // `down` in the configuration: never measured
  std::string note;               // how its measurement ended, or why it has none
  nlohmann::json detail = nlohmann::json::object();  // the ramp's steps, the log's figures
  std::optional<uint32_t> weight;  // the calibrated weight
};

struct Calibration {
  std::string method;        // "ramp", "log" or "given"
  std::string site;          // as given (or found); empty without a configuration
  std::string site_address;  // HOSTS:PORT
  std::string upstreams_path;  // /config/.../upstreams, empty without a configuration
  nlohmann::json settings = nlohmann::json::object();  // what it was asked (p95, path, ...)
  std::vector<CalibratedBackend> backends;
  std::vector<WeightSet> candidates;  // over the weighted backends, in their order
  size_t chosen = 0;

  // The backends that get a weight, in order (indices into `backends`).
  std::vector<size_t> weighted() const;
  // Sets every weighted backend's capacity-based weight (candidates, chosen).
  void choose_weights(uint32_t max_weight);
};

enum class OutputFormat { table, json, heftfile, patch };

// The whole report, as the format says, on stdout.
void print_calibration(const Calibration& c, OutputFormat format);

struct ApplyOptions {
  bool enabled = false;
  size_t stages = 3;
  StageJudge judge;  // from the option texts (parse())
  AdminClientOptions admin;
};

// --apply (calibrate_apply.cc): the calibrated weights set on the running
// heft in stages from the present ones, each judged like a rollout's; the
// present weights back on a breach. Returns the exit code.
int apply_calibration(const Calibration& c, const ApplyOptions& options, StageTarget target);

}  // namespace heft::cli
