// The state file behind `heft run` (see run_state.h).
#include "cli/run_state.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "config/diff.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "observe/log.h"

namespace heft::cli {
namespace {

// How many differences a kept-aside state lists before "... and N more".
constexpr size_t kListedChanges = 20;

// `text` as one shell word: bare when it is plainly safe, else single-quoted.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789_./-:@%+=,") == std::string::npos;
  if (plain) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// This very program, so that a printed command runs the heft that printed it.
std::string program_path() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("heft") : self.string();
}

// The command that starts this configuration again from its state file.
std::string resume_command(const RunState& state) {
  std::string command = shell_word(program_path()) + " run";
  if (!state.config.empty()) command += " --config " + shell_word(admin::config_identity(state.config));
  if (state.explicit_path) command += " --state " + shell_word(state.path);
  return command + " --resume";
}

std::string what_starts(const RunState& state) {
  return state.config.empty() ? std::string("the embedded demo") : state.config;
}

}  // namespace

RunState choose_state(const std::string& config, const std::string& state_option) {
  RunState state;
  state.config = config;
  state.explicit_path = !state_option.empty();
  state.path = state.explicit_path ? state_option : admin::default_state_path(config);
  return state;
}

bool lock_state(RunState& state) {
  admin::StateLock::Outcome outcome;
  long holder = 0;
  std::string error;
  state.lock = admin::StateLock::acquire(state.path, outcome, holder, error);
  if (outcome == admin::StateLock::Outcome::held_by_another) {
    const std::string who = holder > 0 ? fmt::format("PID {}", holder) : std::string("its PID not written yet");
    observe::error("the state file {} is in use by another heft ({}): not starting. Each running heft needs a "
                   "state file of its own: give this one another (--state FILE), or stop the other first.",
                   state.path, who);
    return false;
  }
  if (outcome == admin::StateLock::Outcome::unavailable)
    observe::warn("cannot lock the state file {}: {}", state.path, error);
  else
    admin::remove_stale_temporary_files(state.path);  // left by a heft killed mid-write; ours to clear now
  return true;
}

Resume resume_from_state(const RunState& state, config::Config& config) {
  std::error_code ec;
  if (!std::filesystem::exists(state.path, ec) && !ec) {
    observe::warn("--resume: no saved state in {} yet, starting from {}", state.path, what_starts(state));
    return Resume::nothing_saved;
  }
  config::Result<config::Config> saved = admin::load_state_file(state.path);
  std::vector<config::Diagnostic> problems = saved.errors;
  if (saved.ok()) problems = config::resolve(*saved);
  if (!problems.empty()) {
    std::string errors;
    for (const config::Diagnostic& d : problems) errors += d.to_string() + "\n";
    observe::error("{}cannot resume from the state file {} (above); not starting, and it is left as it is. Repair "
                   "it and run with --resume again, or start from {} without --resume (the state file is then kept "
                   "aside under a time-stamped name, not lost).",
                   errors, state.path, what_starts(state));
    return Resume::refused;
  }
  config = std::move(*saved);
  observe::info("resuming from {}", state.path);
  return Resume::resumed;
}

bool keep_live_changes_aside(const RunState& state, const config::Config& starting) {
  std::error_code ec;
  if (!std::filesystem::exists(state.path, ec) && !ec) return true;  // nothing saved: nothing to lose
  // What the state holds against what this start serves.
  std::string why;
  std::vector<config::JsonChange> changes;
  config::Result<config::Config> saved = admin::load_state_file(state.path);
  if (!saved.ok()) {
    for (const config::Diagnostic& d : saved.errors) why += (why.empty() ? "" : "; ") + d.to_string();
  } else {
    changes = config::diff_json(config::to_json(*saved), config::to_json(starting));
    if (changes.empty()) return true;  // the same configuration: simply replaced
  }
  std::string error;
  std::optional<std::string> aside = admin::keep_state_aside(state.path, error);
  if (!aside) {
    observe::error("{}; not starting, so as not to overwrite it. Run with --resume to continue from it, or move it "
                   "away yourself.",
                   error);
    return false;
  }
  std::string report;
  if (!why.empty()) {
    report = fmt::format("the state file {} could not be read ({}); kept it as {}\n", state.path, why, *aside);
  } else {
    report = fmt::format("the state file {} held {} live change{} that {} does not have; kept it as {}, not "
                         "lost (saved value → {}'s):\n",
                         state.path, changes.size(), changes.size() == 1 ? "" : "s", what_starts(state), *aside,
                         state.config.empty() ? "the demo" : "the file");
    for (size_t i = 0; i < changes.size() && i < kListedChanges; ++i)
      report += fmt::format("  {}\n", config::describe(changes[i]));
    if (changes.size() > kListedChanges)
      report += fmt::format("  ... and {} more\n", changes.size() - kListedChanges);
  }
  report += fmt::format("to resume from it, stop this heft, then run: mv {} {} && {}\n", shell_word(*aside),
                        shell_word(state.path), resume_command(state));
  observe::warn("{}", report);  // one record: its lines stay together
  return true;
}

}  // namespace heft::cli
