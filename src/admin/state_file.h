// The autosave state file behind `heft run --resume` (Caddy's autosave.json).
//
// write_state_file() is crash-safe: it writes a temporary file beside the
// target, fsyncs it, renames it over the target and fsyncs the directory, so
// after a crash at any point the file holds either the old or the new text,
// never a torn mix. Not synchronised: one writer (the admin thread) at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "config/model.h"

namespace heft::admin {

// Where heft keeps its state files: $STATE_DIRECTORY (systemd's StateDirectory=;
// the first of several), else $XDG_DATA_HOME/heft, else $HOME/.local/share/heft,
// else the working directory.
std::string state_directory();

// The absolute path of a configuration file, symbolic links and "." / ".."
// resolved where the file exists: what names an instance (its state file's
// name, GET /heft/instance, and the `heft` command's check against it).
std::string config_identity(const std::string& config_path);

// The state file of an instance serving `config_path` (empty: the embedded
// demo): in state_directory(), named from the file's absolute path (symbolic
// links resolved) so that two configurations never share one:
// "Heftfile-3f9a01c2.json", the file's name and 8 hex digits of a hash of
// its path. The demo's is "embedded-demo.json".
std::string default_state_path(const std::string& config_path);

// The lock beside a state file ("STATE.lock"; the state file itself is
// replaced by rename, so it cannot hold one), held while an instance uses the
// state: flock(2), released by the kernel when the process ends, however it
// ends. The lock file holds the holder's PID.
class StateLock {
 public:
  enum class Outcome { locked, held_by_another, unavailable };
  // Tries once, without waiting. `holder` gets the PID written by the
  // instance holding it (0 if it wrote none yet); `error` what went wrong
  // when the lock file cannot be created or locked.
  static std::unique_ptr<StateLock> acquire(const std::string& state_path, Outcome& outcome, long& holder,
                                            std::string& error);
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  StateLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Removes what writes into `state_path` left behind when their process was
// killed between writing and renaming ("STATE.tmp.PID"). Only for the
// holder of its StateLock: nobody else writes there then.
void remove_stale_temporary_files(const std::string& state_path);

// Moves `state_path` aside within its directory, to a name with the time in
// UTC ("Heftfile-3f9a01c2.20250102T030405Z.json"; "-2", "-3"... when taken)
// and makes the rename durable. The new path, or nullopt with `error` set.
std::optional<std::string> keep_state_aside(const std::string& state_path, std::string& error);

// Where a whole write of `state_path` puts its text first: "STATE.tmp.PID".
std::string state_temp_path(const std::string& state_path);

// Replacing the state file in two steps, so that a change is saved exactly
// when it is applied: prepare() writes and fsyncs the text to a temporary file
// beside `path` (the old file untouched), commit() renames it over `path` and
// fsyncs the directory. Destroyed uncommitted, the temporary file is removed.
class StateFileWrite {
 public:
  explicit StateFileWrite(std::string path) : path_(std::move(path)) {}
  ~StateFileWrite();
  StateFileWrite(const StateFileWrite&) = delete;
  StateFileWrite& operator=(const StateFileWrite&) = delete;

  // Creates the directory if needed; refuses a `path` that is a directory
  // (the rename could not replace it). False with `error` set on failure.
  bool prepare(const std::string& text, std::string& error);
  // After a successful prepare(): false with `error` set if the rename or the
  // directory's fsync fails (the old file is untouched when the rename does).
  bool commit(std::string& error);

 private:
  std::string path_;
  std::string temp_;  // non-empty while a prepared file waits
};

// Durably replaces `path` with `text` (creating its directory): prepare() and
// commit() at once. False with `error` set when any step fails.
bool write_state_file(const std::string& path, const std::string& text, std::string& error);

// Reads and validates the saved configuration (JSON, Caddy's shape). A missing
// file is one diagnostic "PATH: no saved configuration"; one that cannot be
// read says why ("cannot read: Permission denied").
config::Result<config::Config> load_state_file(const std::string& path);

}  // namespace heft::admin
