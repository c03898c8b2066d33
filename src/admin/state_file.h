// The autosave state file behind `heft run --resume` (Caddy's autosave.json).
//
// write_state_file() is crash-safe: it writes a temporary file beside the
// target, fsyncs it, renames it over the target and fsyncs the directory, so
// after a crash at any point the file holds either the old or the new text,
// never a torn mix. Not synchronised: one writer (the admin thread) at a time.
#pragma once

#include <string>
#include <utility>

#include "config/model.h"

namespace heft::admin {

// $XDG_DATA_HOME/heft/autosave.json, else $HOME/.local/share/heft/autosave.json,
// else ./heft-autosave.json.
std::string default_state_path();

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
// file is one diagnostic "PATH: no saved configuration".
config::Result<config::Config> load_state_file(const std::string& path);

}  // namespace heft::admin
