// The autosave state file behind `heft run --resume` (Caddy's autosave.json).
//
// write_state_file() is crash-safe: it writes a temporary file beside the
// target, fsyncs it, renames it over the target and fsyncs the directory, so
// after a crash at any point the file holds either the old or the new text,
// never a torn mix. Not synchronised: one writer (the admin thread) at a time.
#pragma once

#include <string>

#include "config/model.h"

namespace heft::admin {

// $XDG_DATA_HOME/heft/autosave.json, else $HOME/.local/share/heft/autosave.json,
// else ./heft-autosave.json.
std::string default_state_path();

// Durably replaces `path` with `text` (creating its directory). False with
// `error` set when any step fails; the old file is then untouched.
bool write_state_file(const std::string& path, const std::string& text, std::string& error);

// Reads and validates the saved configuration (JSON, Caddy's shape). A missing
// file is one diagnostic "PATH: no saved configuration".
config::Result<config::Config> load_state_file(const std::string& path);

}  // namespace heft::admin
