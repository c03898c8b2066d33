// The journal beside a state file: the changes made since the state file
// (the snapshot) was last written whole, one record a change, so that a
// change inside one site is saved by appending a few hundred bytes instead of
// rewriting the whole configuration.
//
// "STATE.journal" is text: a header line naming the snapshot it follows (a
// hash of the snapshot's text), then one line per change:
//   heft-journal 1 3f9a01c2d4e5f607
//   0123456789abcdef {"method":"PATCH","path":"/config/apps/…/weight","pointer":"/apps/…/weight","value":7}
// Each record is its checksum (FNV-1a 64 of the JSON, in hex) and the JSON:
// the value now at `pointer` of the configuration's JSON form (in its
// canonical form, as GET /config/ answers it) and, for a reader, the request
// that made it. Replaying sets each value in turn. The journal is fsynced
// after each record, before the change is answered 200.
//
// A journal whose header names another snapshot is from before that snapshot
// was written (a crash between writing the snapshot and removing the
// journal): the snapshot holds its changes, and it is ignored. Writing a
// whole snapshot (StateFileWrite::commit) removes the journal.
//
// Not synchronised: one writer (the admin thread) at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model.h"

namespace heft::admin {

// "STATE.journal", beside the state file.
std::string journal_path(const std::string& state_path);

// FNV-1a 64 of `text`: a snapshot's identity in its journal's header, and a record's checksum.
uint64_t fnv1a64(std::string_view text);

// One change: the value now at `pointer` (RFC 6901) of the JSON form; `method`
// and `path` say which request made it.
struct JournalRecord {
  std::string method;
  std::string path;
  std::string pointer;
  nlohmann::json value;
};

class StateJournal {
 public:
  explicit StateJournal(std::string state_path);
  ~StateJournal();
  StateJournal(const StateJournal&) = delete;
  StateJournal& operator=(const StateJournal&) = delete;

  // The snapshot `text` has just been written whole (and the old journal
  // removed): records follow it from here. The file is created at the first
  // append.
  void follow(std::string_view text);
  // No snapshot is known to follow (none written by this process yet, or the
  // journal could not be repaired after a failed append): the next change must
  // write the whole configuration.
  void forget();
  // Whether a change may be appended: a snapshot is known and the journal has
  // not outgrown it (then writing the whole configuration again is cheaper to
  // replay than the journal: the compaction).
  bool ready() const;

  // Appends `record` and makes it durable (fdatasync; a new file's directory
  // entry is fsynced too). False with `error` set when it cannot be: the
  // journal is then cut back to where it was, or, if that fails, forgotten.
  bool append(const JournalRecord& record, std::string& error);

  // Bytes in the journal file (0 before the first append).
  uint64_t size() const { return size_; }

 private:
  bool open_new(std::string& error);

  std::string state_path_;
  std::string path_;
  int fd_ = -1;
  bool following_ = false;
  std::string header_;        // the header line for the snapshot followed
  uint64_t snapshot_size_ = 0;
  uint64_t size_ = 0;
};

// What replaying a journal found.
struct JournalReplay {
  size_t records = 0;                     // applied
  std::vector<config::Diagnostic> errors;  // a corrupt record before the last, a record that does not fit
  std::vector<std::string> warnings;     // a torn last record, a journal of an earlier snapshot
};

// Applies the journal of the state file at `state_path` (if there is one) to
// `document`, the snapshot read from `snapshot_text`. A torn last record (a
// write cut off by a crash, never answered 200) is ignored with a warning
// naming the file and its offset, and the records before it are kept; any
// other damage is an error naming the file, the record and its offset, and
// `document` must then not be used.
JournalReplay replay_journal(const std::string& state_path, std::string_view snapshot_text, nlohmann::json& document);

}  // namespace heft::admin
