// Access log writers: bounded queue per output, one writer thread each.
#include "observe/access_log.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "observe/log.h"

namespace heft::observe {
namespace {

std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_reopen_generation{0};  // bumped by reopen_all() and SIGUSR1
volatile sig_atomic_t g_sigusr1 = 0;

class FileAccessLog final : public AccessLog {
 public:
  FileAccessLog(std::string path, int fd, size_t capacity) : path_(std::move(path)), fd_(fd), capacity_(capacity) {
    seen_generation_ = g_reopen_generation.load();
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "heft-log");  // for top -H, perf and /proc
      run();
    });
  }
  ~FileAccessLog() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    if (fd_ > 2) ::close(fd_);
  }

  bool write(AccessLogEntry entry) override {
    {
      std::lock_guard lock(mu_);
      if (queue_.size() >= capacity_) {
        g_dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      queue_.push_back(std::move(entry));
    }
    wake_.notify_one();
    return true;
  }

  void flush() override {
    std::unique_lock lock(mu_);
    drained_.wait(lock, [this] { return queue_.empty() && !writing_; });
  }

 private:
  void run() {
    std::deque<AccessLogEntry> batch;
    std::string text;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        batch.swap(queue_);
        writing_ = !batch.empty();
      }
      maybe_reopen();
      text.clear();
      for (const AccessLogEntry& e : batch) {
        text += format_access_log_line(e);
        text += '\n';
      }
      batch.clear();
      write_all(text);
      {
        std::lock_guard lock(mu_);
        writing_ = false;
      }
      drained_.notify_all();
    }
  }

  void maybe_reopen() {
    if (g_sigusr1) {
      g_sigusr1 = 0;
      g_reopen_generation.fetch_add(1);
    }
    uint64_t generation = g_reopen_generation.load();
    if (generation == seen_generation_) return;
    seen_generation_ = generation;
    if (fd_ <= 2) return;  // stderr is not reopened
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      // Keep writing to the old file rather than losing lines, and say so (nginx logs a failed reopen too).
      observe::warn("cannot reopen access log {}: {} (still writing to the old file)", path_, std::strerror(errno));
      return;
    }
    ::close(fd_);
    fd_ = fd;
  }

  void write_all(const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += size_t(n);
    }
  }

  std::string path_;
  int fd_;
  size_t capacity_;
  uint64_t seen_generation_ = 0;
  std::mutex mu_;
  std::condition_variable wake_, drained_;
  std::deque<AccessLogEntry> queue_;
  bool stopping_ = false;
  bool writing_ = false;
  std::thread thread_;
};

std::mutex g_registry_mu;
std::map<std::string, std::weak_ptr<AccessLog>>& registry() {
  static std::map<std::string, std::weak_ptr<AccessLog>> logs;
  return logs;
}

void on_sigusr1(int) { g_sigusr1 = 1; }

}  // namespace

std::string format_access_log_line(const AccessLogEntry& e) {
  nlohmann::ordered_json line;
  line["ts"] = e.ts;
  line["request"] = {{"remote_ip", e.remote_ip}, {"method", e.method}, {"host", e.host}, {"uri", e.uri},
                     {"proto", e.proto}};
  if (!e.tls.version.empty())
    line["request"]["tls"] = {{"resumed", e.tls.resumed}, {"version", e.tls.version},
                              {"cipher_suite", e.tls.cipher_suite}, {"proto", e.tls.proto},
                              {"server_name", e.tls.server_name}};
  line["upstream"] = e.upstream;
  line["status"] = e.status;
  line["duration"] = e.duration;
  line["size"] = e.size;
  line["tries"] = e.tries;
  if (e.queued >= 0) line["queued"] = e.queued;  // only a request that waited for a place
  if (e.upstream_header_time >= 0) line["upstream_header_time"] = e.upstream_header_time;
  if (e.upstream_response_time >= 0) line["upstream_response_time"] = e.upstream_response_time;
  // Invalid UTF-8 from a client (in the URI, say) is replaced, never thrown.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::shared_ptr<AccessLog> open_access_log(const std::string& output, std::string& error, size_t queue_capacity) {
  std::lock_guard lock(g_registry_mu);
  if (auto existing = registry()[output].lock()) return existing;
  int fd = 2;
  if (output != "stderr") {
    fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      error = "cannot open access log " + output + ": " + std::strerror(errno);
      return nullptr;
    }
  }
  auto log = std::make_shared<FileAccessLog>(output, fd, queue_capacity);
  registry()[output] = log;
  return log;
}

std::shared_ptr<AccessLog> open_access_log(const config::LogConfig& log, std::string& error) {
  if (!log.enabled || log.output.empty()) return nullptr;
  return open_access_log(log.output, error);
}

void reopen_all() { g_reopen_generation.fetch_add(1); }

void install_reopen_on_sigusr1() {
  struct sigaction action {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

uint64_t access_log_dropped_total() { return g_dropped.load(std::memory_order_relaxed); }

}  // namespace heft::observe
