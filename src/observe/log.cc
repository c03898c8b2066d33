// heft's log lines (log.h): one write(2) per record, times in RFC 3339 UTC.
#include "observe/log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <limits>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

namespace heft::observe {
namespace {

std::atomic<config::LogFormat> g_format{config::LogFormat::text};
std::atomic<int> g_fd{2};

// The registry of LogLimits, for flush_log_limits(). Never destroyed: limits
// with static storage unregister at exit, in any order.
std::mutex& limits_mutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
std::vector<LogLimit*>& limits() {
  static auto* all = new std::vector<LogLimit*>;
  return *all;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to complain to
    text.remove_prefix(static_cast<size_t>(n));
  }
}

std::string json_string(std::string_view text) {
  // Invalid UTF-8 (a client's bytes in a message) is replaced, never thrown.
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
  }
  return "info";
}

void set_log_format(config::LogFormat format) { g_format.store(format, std::memory_order_relaxed); }
config::LogFormat log_format() { return g_format.load(std::memory_order_relaxed); }
int set_log_fd(int fd) { return g_fd.exchange(fd); }

std::string rfc3339_utc(int64_t time_ms) {
  const time_t seconds = static_cast<time_t>(time_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, time_ms % 1000);
}

std::string with_thousands(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_log_record(config::LogFormat format, int64_t time_ms, LogLevel level, std::string_view message,
                              std::string_view json_fields) {
  if (message.ends_with('\n')) message.remove_suffix(1);
  const std::string time = rfc3339_utc(time_ms);
  std::string out;
  if (format == config::LogFormat::json) {
    out = fmt::format("{{\"ts\":\"{}\",\"level\":\"{}\",\"msg\":{}", time, level_name(level), json_string(message));
    if (!json_fields.empty()) out += fmt::format(",{}", json_fields);
    out += "}\n";
    return out;
  }
  // Each line of the message with the time and level, so that every line of the log starts with them.
  size_t start = 0;
  do {
    const size_t end = std::min(message.find('\n', start), message.size());
    out += fmt::format("{} {} {}\n", time, level_name(level), message.substr(start, end - start));
    start = end + 1;
  } while (start <= message.size());
  return out;
}

void log(LogLevel level, std::string_view message, std::string_view json_fields) {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  write_all(g_fd.load(std::memory_order_relaxed), format_log_record(log_format(), now_ms, level, message, json_fields));
}

// ---- RepeatLimit ----------------------------------------------------------------

uint32_t RepeatLimit::window_index(Clock::time_point now) const {
  return static_cast<uint32_t>(now.time_since_epoch() / window_) + 1;
}

RepeatLimit::Admission RepeatLimit::admit(Clock::time_point now) {
  const uint64_t window = window_index(now);
  uint64_t current = state_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t current_window = current >> 32;
    const uint32_t count = static_cast<uint32_t>(current);
    if (current_window == window) {
      if (count >= burst_) {
        // Held back: counted (short of the 32 bits' end) with a plain add,
        // the common case of a flood.
        if (count < std::numeric_limits<uint32_t>::max() - 1) state_.fetch_add(1, std::memory_order_relaxed);
        return {};
      }
      if (state_.compare_exchange_weak(current, current + 1, std::memory_order_relaxed)) return {true, 0};
      continue;
    }
    // The first line of a new window; the old one's held-back lines are this caller's to sum up.
    if (state_.compare_exchange_weak(current, (window << 32) | 1, std::memory_order_relaxed))
      return {burst_ > 0, current_window != 0 && count > burst_ ? count - burst_ : 0};
  }
}

uint64_t RepeatLimit::take_ended(Clock::time_point now) {
  const uint64_t window = window_index(now);
  uint64_t current = state_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t current_window = current >> 32;
    const uint32_t count = static_cast<uint32_t>(current);
    if (current_window == window || current_window == 0 || count <= burst_) return 0;
    if (state_.compare_exchange_weak(current, window << 32, std::memory_order_relaxed)) return count - burst_;
  }
}

// ---- LogLimit ---------------------------------------------------------------------

LogLimit::LogLimit(const char* kind, LogLevel level, uint32_t burst, std::chrono::nanoseconds window)
    : kind_(kind), level_(level), limit_(burst, window) {
  std::lock_guard lock(limits_mutex());
  limits().push_back(this);
}

LogLimit::~LogLimit() {
  std::lock_guard lock(limits_mutex());
  std::erase(limits(), this);
}

bool LogLimit::admit(RepeatLimit::Clock::time_point now) {
  const RepeatLimit::Admission admission = limit_.admit(now);
  if (admission.suppressed) [[unlikely]]
    summarise(admission.suppressed);
  return admission.write;
}

void LogLimit::flush(RepeatLimit::Clock::time_point now) {
  if (const uint64_t suppressed = limit_.take_ended(now)) summarise(suppressed);
}

void LogLimit::summarise(uint64_t suppressed) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limit_.window()).count();
  log(level_, fmt::format("{}: \u2026and {} more like it in the last {} s", kind_, with_thousands(suppressed), seconds),
      fmt::format("\"kind\":{},\"suppressed\":{}", json_string(kind_), suppressed));
}

void flush_log_limits(RepeatLimit::Clock::time_point now) {
  std::lock_guard lock(limits_mutex());
  for (LogLimit* limit : limits()) limit->flush(now);
}

}  // namespace heft::observe
