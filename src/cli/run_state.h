// The state file behind `heft run`: which one (one per configuration file),
// its lock (one instance per state), `--resume`, and the live changes a start
// without `--resume` keeps aside instead of overwriting (docs/admin.md,
// "Durability").
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "admin/state_file.h"
#include "config/model.h"

namespace heft::cli {

struct RunState {
  std::string path;                        // the state file
  std::string config;                      // the configuration file as given ("" for the embedded demo)
  bool explicit_path = false;              // --state chose it
  std::unique_ptr<admin::StateLock> lock;  // held while heft runs (null: it could not be taken, as said)
};

// `--state`, else the default for `config` (admin::default_state_path).
RunState choose_state(const std::string& config, const std::string& state_option);

// Takes the state's lock. False when another heft holds it, after saying so
// (the state file, the PID, what to do). A lock file that cannot be created
// is a warning only: the state cannot be written either, and admin API
// changes are refused then, as they always were.
bool lock_state(RunState& state);

enum class Resume { resumed, nothing_saved, refused };
// --resume: `config` gets the saved configuration (resolved). Nothing saved
// yet is logged and starts from the file; a state file that cannot
// be read, is not valid or does not resolve stops the start with its
// problems, its name and how to go on (`refused`).
Resume resume_from_state(const RunState& state, config::Config& config);

// A start without --resume, before the configuration it starts with replaces
// the state: a state that differs from it (live changes, or one that cannot
// be read) is moved aside under a time-stamped name, and the log says where,
// what differs and the command that resumes it. False (said why) when it
// cannot be moved: then nothing may overwrite it, and heft does not start.
bool keep_live_changes_aside(const RunState& state, const config::Config& starting);

}  // namespace heft::cli
