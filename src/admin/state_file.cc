// Crash-safe autosave: temp file + fsync + rename + fsync(dir); where state files
// live, their locks, and keeping a state aside.
#include "admin/state_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "admin/state_journal.h"
#include "config/json.h"
#include "observe/log.h"

namespace heft::admin {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The directory holding `path` (the working directory for a bare file name).
std::filesystem::path directory_of(const std::string& path) {
  std::filesystem::path target(path);
  return target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
}

}  // namespace

std::string state_directory() {
  if (const char* systemd = std::getenv("STATE_DIRECTORY"); systemd && *systemd && *systemd != ':') {
    const std::string_view dirs = systemd;
    return std::string(dirs.substr(0, dirs.find(':')));  // StateDirectory= may name several
  }
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/heft";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.local/share/heft";
  return ".";
}

std::string config_identity(const std::string& config_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path absolute = fs::absolute(config_path, ec);
  if (ec) absolute = fs::path(config_path);
  // One file reached by two paths (a symbolic link, "./") is one instance's.
  if (fs::path canonical = fs::weakly_canonical(absolute, ec); !ec) absolute = canonical;
  return absolute.lexically_normal().string();
}

std::string default_state_path(const std::string& config_path) {
  namespace fs = std::filesystem;
  if (config_path.empty()) return (fs::path(state_directory()) / "embedded-demo.json").string();
  const std::string identity = config_identity(config_path);
  // FNV-1a: stable across builds and hosts, unlike std::hash.
  uint32_t hash = 2166136261u;
  for (unsigned char c : identity) hash = (hash ^ c) * 16777619u;
  // The file's name, readable in a listing, in characters any file system takes.
  std::string stem = fs::path(identity).filename().string();
  if (stem.size() > 5 && stem.ends_with(".json")) stem.resize(stem.size() - 5);
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  if (stem.empty() || stem.front() == '.') stem.insert(0, "config");
  if (stem.size() > 64) stem.resize(64);
  char name[96];
  std::snprintf(name, sizeof name, "%s-%08x.json", stem.c_str(), hash);
  return (fs::path(state_directory()) / name).string();
}

std::unique_ptr<StateLock> StateLock::acquire(const std::string& state_path, Outcome& outcome, long& holder,
                                              std::string& error) {
  holder = 0;
  const std::string path = state_path + ".lock";
  std::error_code ec;
  std::filesystem::create_directories(directory_of(state_path), ec);
  if (ec) {
    outcome = Outcome::unavailable;
    error = "cannot create " + directory_of(state_path).string() + ": " + ec.message();
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    outcome = Outcome::unavailable;
    error = errno_text("cannot open " + path);
    return nullptr;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    if (why == EWOULDBLOCK) {
      outcome = Outcome::held_by_another;
      // The holder writes its PID right after it locks: wait a moment for it.
      for (int attempt = 0; attempt < 20 && holder == 0; ++attempt) {
        char text[32] = {};
        const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
        if (n > 0) holder = std::strtol(text, nullptr, 10);
        if (holder == 0) ::usleep(10'000);
      }
    } else {
      outcome = Outcome::unavailable;
      errno = why;
      error = errno_text("cannot lock " + path);
    }
    ::close(fd);
    return nullptr;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // Still locked, which is what matters; a second instance just cannot name us.
  }
  outcome = Outcome::locked;
  return std::unique_ptr<StateLock>(new StateLock(path, fd));
}

StateLock::~StateLock() { ::close(fd_); }  // releases the lock; the file stays for the next holder

void remove_stale_temporary_files(const std::string& state_path) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(state_path).filename().string() + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory_of(state_path), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && entry.is_regular_file(ec)) fs::remove(entry.path(), ec);
  }
}

std::optional<std::string> keep_state_aside(const std::string& state_path, std::string& error) {
  namespace fs = std::filesystem;
  const fs::path path(state_path);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  const fs::path dir = directory_of(state_path);
  const std::string stem = path.stem().string(), extension = path.extension().string();
  // The changes in its journal go with the state kept aside: folded into it
  // first (a whole state file, which drops the journal) when they can be
  // read, else the journal is kept aside beside it.
  const std::string journal = journal_path(state_path);
  std::error_code ec;
  bool journal_left = fs::exists(journal, ec);
  if (journal_left) {
    std::ifstream in(state_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string ignored;
    nlohmann::json document = config::parse_json_text(text.str(), ignored, config::kJsonFileLimits);
    if (in && !document.is_discarded() && replay_journal(state_path, text.str(), document).errors.empty() &&
        write_state_file(state_path, document.dump(2) + "\n", ignored))
      journal_left = false;
  }
  for (int n = 1; n < 1000; ++n) {
    const std::string name = stem + "." + stamp + (n > 1 ? "-" + std::to_string(n) : "") + extension;
    const fs::path aside = dir / name;
    // link() never replaces: an aside file of the same second stays as it is.
    if (::link(state_path.c_str(), aside.c_str()) != 0) {
      if (errno == EEXIST) continue;
      error = errno_text("cannot keep " + state_path + " aside as " + aside.string());
      return std::nullopt;
    }
    if (::unlink(state_path.c_str()) != 0) {
      error = errno_text("cannot remove " + state_path + " after keeping it as " + aside.string());
      return std::nullopt;
    }
    if (journal_left && ::rename(journal.c_str(), journal_path(aside.string()).c_str()) != 0) {
      error = errno_text("cannot keep " + journal + " aside as " + journal_path(aside.string()));
      return std::nullopt;
    }
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const bool synced = dir_fd >= 0 && ::fsync(dir_fd) == 0;
    if (dir_fd >= 0) ::close(dir_fd);
    if (!synced) {
      error = errno_text("cannot fsync " + dir.string());
      return std::nullopt;
    }
    return aside.string();
  }
  error = "cannot keep " + state_path + " aside: every name for this second is taken";
  return std::nullopt;
}

std::string state_temp_path(const std::string& state_path) {
  return state_path + ".tmp." + std::to_string(::getpid());
}

StateFileWrite::~StateFileWrite() {
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

bool StateFileWrite::prepare(const std::string& text, std::string& error) {
  namespace fs = std::filesystem;
  const fs::path dir = directory_of(path_);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir.string() + ": " + ec.message();
    return false;
  }
  if (fs::is_directory(path_, ec)) {
    error = path_ + " is a directory";
    return false;
  }
  std::string temp = state_temp_path(path_);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = errno_text("cannot create " + temp);
    return false;
  }
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  if (!ok) error = errno_text("cannot write " + temp);
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno_text("cannot close " + temp);
  }
  if (!ok) {
    ::unlink(temp.c_str());
    return false;
  }
  temp_ = std::move(temp);
  return true;
}

bool StateFileWrite::commit(std::string& error) {
  if (temp_.empty()) {
    error = "nothing prepared";
    return false;
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    error = errno_text("cannot rename " + temp_ + " to " + path_);
    return false;  // the destructor removes the temporary file
  }
  temp_.clear();
  // The journal followed the state file just replaced, which holds its
  // changes: gone with it. (Should the removal be lost in a crash, its
  // header names the old state file, and it is ignored.)
  ::unlink(journal_path(path_).c_str());
  // The rename is durable only once the directory entry is.
  const std::filesystem::path dir = directory_of(path_);
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    error = errno_text("cannot fsync " + dir.string());
    if (dir_fd >= 0) ::close(dir_fd);
    return false;
  }
  ::close(dir_fd);
  return true;
}

bool write_state_file(const std::string& path, const std::string& text, std::string& error) {
  StateFileWrite write(path);
  return write.prepare(text, error) && write.commit(error);
}

config::Result<config::Config> load_state_file(const std::string& path) {
  config::Result<config::Config> result;
  std::ifstream in(path);
  if (!in) {
    result.errors.push_back(
        {path, 0, 0, "", errno == ENOENT ? "no saved configuration" : errno_text("cannot read")});
    return result;
  }
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    result.errors.push_back({path, 0, 0, "", "is a directory, not a state file"});
    return result;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string syntax;
  nlohmann::json document = config::parse_json_text(text.str(), syntax, config::kJsonFileLimits);
  if (document.is_discarded()) {
    result.errors.push_back({path, 0, 0, "", syntax});
    return result;
  }
  // Then the changes saved since, in its journal.
  JournalReplay replay = replay_journal(path, text.str(), document);
  for (const std::string& warning : replay.warnings) observe::warn("{}", warning);
  if (!replay.errors.empty()) {
    result.errors = std::move(replay.errors);
    return result;
  }
  result = config::from_json(document);
  for (config::Diagnostic& d : result.errors) {  // the file, then the JSON path in it
    d.message = d.path + ": " + d.message;
    d.file = path;
  }
  // No lines in JSON: a resumed run's warnings and resolve errors name the state file.
  if (result.value)
    for (config::SiteConfig& site : result.value->sites) site.file = path;
  return result;
}

}  // namespace heft::admin
