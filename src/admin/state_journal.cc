// The state file's journal of changes (see state_journal.h).
#include "admin/state_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "admin/state_file.h"
#include "config/json.h"

namespace heft::admin {
namespace {

constexpr std::string_view kMagic = "heft-journal 1 ";

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string header_for(std::string_view snapshot_text) {
  return fmt::format("{}{:016x}\n", kMagic, fnv1a64(snapshot_text));
}

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Sets the value at `pointer` in `document`, whose parent must be there (an
// array index at most its size: the size appends). Why not, or "".
std::string set_at(nlohmann::json& document, const std::string& pointer, const nlohmann::json& value) {
  try {
    const nlohmann::json::json_pointer at(pointer);
    if (at.empty()) {
      document = value;
      return "";
    }
    const nlohmann::json::json_pointer parent = at.parent_pointer();
    if (!document.contains(parent)) return fmt::format("{}: no such place", parent.to_string());
    nlohmann::json& container = document[parent];
    const std::string& key = at.back();
    if (container.is_object()) {
      container[key] = value;
    } else if (container.is_array()) {
      size_t index = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
      if (key.empty() || ec != std::errc() || end != key.data() + key.size() || index > container.size())
        return fmt::format("{}: no such place", pointer);
      if (index == container.size()) container.push_back(value);
      else container[index] = value;
    } else {
      return fmt::format("{}: its parent is not an object or array", pointer);
    }
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("{}: {}", pointer, e.what());
  }
  return "";
}

}  // namespace

std::string journal_path(const std::string& state_path) { return state_path + ".journal"; }

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

StateJournal::StateJournal(std::string state_path)
    : state_path_(std::move(state_path)), path_(journal_path(state_path_)) {}

StateJournal::~StateJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void StateJournal::follow(std::string_view text) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  following_ = true;
  header_ = header_for(text);
  snapshot_size_ = text.size();
  size_ = 0;
}

void StateJournal::forget() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  following_ = false;
  size_ = 0;
}

bool StateJournal::ready() const { return following_ && size_ <= snapshot_size_; }

bool StateJournal::open_new(std::string& error) {
  // A journal left from before the snapshot (if its removal was lost) is replaced.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    error = errno_text("cannot create " + path_);
    return false;
  }
  const std::filesystem::path dir = std::filesystem::path(path_).has_parent_path()
                                        ? std::filesystem::path(path_).parent_path()
                                        : std::filesystem::path(".");
  bool ok = write_all(fd_, header_) && ::fdatasync(fd_) == 0;
  if (!ok) error = errno_text("cannot write " + path_);
  if (ok) {
    // The new file's name is durable only once its directory is.
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ok = dir_fd >= 0 && ::fsync(dir_fd) == 0;
    if (!ok) error = errno_text("cannot fsync " + dir.string());
    if (dir_fd >= 0) ::close(dir_fd);
  }
  if (!ok) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());  // its header names the snapshot: harmless if it stays, but it is no use
    return false;
  }
  size_ = header_.size();
  return true;
}

bool StateJournal::append(const JournalRecord& record, std::string& error) {
  if (!following_) {
    error = "no state file for the journal to follow";
    return false;
  }
  // The state file must stay writable whole (the compaction writes it so): a
  // change is refused, as a whole write would be, while something stands
  // where that write puts its text first.
  const std::string temp = state_temp_path(state_path_);
  if (struct stat st{}; ::stat(temp.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    error = "cannot create " + temp + ": Is a directory";
    return false;
  }
  if (fd_ < 0 && !open_new(error)) return false;
  const nlohmann::json entry = {
      {"method", record.method}, {"path", record.path}, {"pointer", record.pointer}, {"value", record.value}};
  const std::string text = entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string line = fmt::format("{:016x} {}\n", fnv1a64(text), text);
  if (write_all(fd_, line) && ::fdatasync(fd_) == 0) {
    size_ += line.size();
    return true;
  }
  error = errno_text("cannot append to " + path_);
  // A partial record must not stay before the next one: cut it off, or stop
  // appending to this file (the next change writes the whole state).
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0 || ::fdatasync(fd_) != 0) forget();
  return false;
}

JournalReplay replay_journal(const std::string& state_path, std::string_view snapshot_text, nlohmann::json& document) {
  JournalReplay out;
  const std::string path = journal_path(state_path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;  // no journal: the snapshot is the state
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto fail = [&](std::string message) { out.errors.push_back({path, 0, 0, "", std::move(message)}); };
  const size_t header_end = text.find('\n');
  if (header_end == std::string::npos) {
    // Cut off while it was being created: records come after a whole header, so none was saved in it.
    out.warnings.push_back(
        fmt::format("{}: ignoring a torn header at offset 0 ({} bytes): no change was saved in it", path, text.size()));
    return out;
  }
  const std::string header = text.substr(0, header_end + 1);
  if (!header.starts_with(kMagic)) {
    fail("not a heft journal (its first line is not \"heft-journal 1 HASH\")");
    return out;
  }
  if (header != header_for(snapshot_text)) {
    out.warnings.push_back(fmt::format("{}: follows an earlier state file, whose changes {} holds: ignored", path,
                                       state_path));
    return out;
  }
  size_t at = header_end + 1;
  for (size_t number = 1; at < text.size(); ++number) {
    const size_t end = text.find('\n', at);
    const bool last = end == std::string::npos || end + 1 == text.size();
    const std::string_view line =
        std::string_view(text).substr(at, (end == std::string::npos ? text.size() : end) - at);
    std::string problem;
    nlohmann::json entry;
    if (end == std::string::npos) {
      problem = "no end of line";
    } else if (line.size() < 18 || line[16] != ' ') {
      problem = "no checksum";
    } else if (fmt::format("{:016x}", fnv1a64(line.substr(17))) != line.substr(0, 16)) {
      problem = "checksum mismatch";
    } else {
      std::string syntax;
      entry = config::parse_json_text(line.substr(17), syntax, config::kJsonFileLimits);
      if (entry.is_discarded()) problem = "not JSON: " + syntax;
      else if (!entry.is_object() || !entry.contains("pointer") || !entry["pointer"].is_string() ||
               !entry.contains("value"))
        problem = "not a change record";
    }
    if (!problem.empty()) {
      if (last) {
        // A write cut off by a crash: never answered 200, so nothing acknowledged is lost.
        out.warnings.push_back(fmt::format("{}: ignoring a torn last record at offset {} ({} bytes, {}); the {} "
                                           "record{} before it are kept",
                                           path, at, text.size() - at, problem, number - 1, number == 2 ? "" : "s"));
        return out;
      }
      fail(fmt::format("record {} at offset {} is corrupt ({}), and {} bytes of records follow it", number, at,
                       problem, text.size() - end - 1));
      return out;
    }
    if (std::string why = set_at(document, entry["pointer"].get<std::string>(), entry["value"]); !why.empty()) {
      fail(fmt::format("record {} at offset {} does not fit the state file: {}", number, at, why));
      return out;
    }
    ++out.records;
    at = end + 1;
  }
  return out;
}

}  // namespace heft::admin
