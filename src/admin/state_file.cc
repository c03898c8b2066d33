// Crash-safe autosave: temp file + fsync + rename + fsync(dir).
#include "admin/state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/json.h"

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

std::string default_state_path() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::string(xdg) + "/heft/autosave.json";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.local/share/heft/autosave.json";
  return "heft-autosave.json";
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
  std::string temp = path_ + ".tmp." + std::to_string(::getpid());
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
    result.errors.push_back({path, 0, 0, "", "no saved configuration"});
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
