// heft's own log (not the access log): lines on stderr, each with an RFC 3339
// time in UTC to the millisecond and a level,
//   2026-12-07T13:41:15.123Z warn pool site0 backend 10.0.0.5:80 is now unhealthy (...)
// or, with `log_format json` (docs/proxy.md), one JSON object per line,
//   {"ts":"2026-12-07T13:41:15.123Z","level":"warn","msg":"pool site0 backend ..."}
// A message of several lines is one record: in text each of its lines gets
// the time and level; in JSON its newlines are escaped in "msg". Every record
// is written with one write(2), so records from several threads never mix.
//
// Messages that can repeat once per request (a client's bad requests, a
// backend failing) go through a LogLimit, one per kind of message, which lets
// the first kLogBurst of a kind through in each kLogWindow and sums up the
// rest in one line when the window ends:
//   2026-12-07T13:41:25.000Z warn 400 from a client: ...and 4,312 more like it in the last 10 s
// The check costs an atomic add and, when the line is not written, nothing
// else: the caller formats only when admit() says yes.
//
//   static observe::LogLimit bad_heads("400 from a client");
//   if (bad_heads.admit()) observe::warn("400 from {}: {}", client_ip, reason);
//
// Threads: everything here may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "config/model.h"

namespace heft::observe {

enum class LogLevel { info, warn, error };

// "info", "warn", "error".
std::string_view level_name(LogLevel level);

// How lines are written from now on (at start and at every configuration change).
void set_log_format(config::LogFormat format);
config::LogFormat log_format();

// Where lines go: stderr (2) unless a test says otherwise. Returns the previous one.
int set_log_fd(int fd);

// Writes one record. `json_fields`, if not empty, is a JSON object's members
// ("\"audit\":{...}") added to the JSON form of the line; the text form is `message` alone.
void log(LogLevel level, std::string_view message, std::string_view json_fields = {});

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  log(LogLevel::error, fmt::format(format, std::forward<Args>(args)...));
}

// The line for one record, newline included (what log() writes): `time` is
// the record's time in milliseconds since the epoch.
std::string format_log_record(config::LogFormat format, int64_t time_ms, LogLevel level, std::string_view message,
                              std::string_view json_fields = {});

// "2026-12-07T13:41:15.123Z" for `time_ms` milliseconds since the epoch.
std::string rfc3339_utc(int64_t time_ms);

// 4312 -> "4,312".
std::string with_thousands(uint64_t n);

inline constexpr uint32_t kLogBurst = 10;
inline constexpr std::chrono::seconds kLogWindow{10};

// How many lines of one kind are written: the logic of LogLimit, without the
// writing, for any clock. Time is cut into windows of `window` (counted from
// the clock's epoch); in each, the first `burst` admit() calls say yes and
// the rest are counted. The count of a window that has ended is handed out
// once: by the first admit() of a later window, or by take_ended(), whichever
// comes first. Lock-free: one atomic word holds the window and its count.
class RepeatLimit {
 public:
  using Clock = std::chrono::steady_clock;
  struct Admission {
    bool write = false;       // this one may be written
    uint64_t suppressed = 0;  // lines held back in an ended window, to be summed up now (0: none)
  };

  explicit RepeatLimit(uint32_t burst = kLogBurst, std::chrono::nanoseconds window = kLogWindow)
      : burst_(burst), window_(window) {}

  Admission admit(Clock::time_point now);
  // The lines held back in a window that has ended by `now`, once; 0 if none.
  uint64_t take_ended(Clock::time_point now);

  std::chrono::nanoseconds window() const { return window_; }

 private:
  uint32_t window_index(Clock::time_point now) const;

  const uint32_t burst_;
  const std::chrono::nanoseconds window_;
  // High 32 bits: the window (index since the clock's epoch, plus one so that
  // 0 is "none yet"); low 32 bits: admit() calls in it (saturating).
  std::atomic<uint64_t> state_{0};
};

// A RepeatLimit that writes its summaries: one per kind of message, usually
// a function-local static at the call site. Each registers itself (a lock,
// once) so that flush_log_limits() finds it.
class LogLimit {
 public:
  // `kind` names the messages in the summary line; it must outlive the limit (a literal).
  explicit LogLimit(const char* kind, LogLevel level = LogLevel::warn, uint32_t burst = kLogBurst,
                    std::chrono::nanoseconds window = kLogWindow);
  ~LogLimit();
  LogLimit(const LogLimit&) = delete;
  LogLimit& operator=(const LogLimit&) = delete;

  // True if a line of this kind may be written now. Writes the summary of an
  // ended window first, when there is one.
  bool admit(RepeatLimit::Clock::time_point now = RepeatLimit::Clock::now());
  // Writes the summary of an ended window, if any (flush_log_limits() calls it).
  void flush(RepeatLimit::Clock::time_point now);

 private:
  void summarise(uint64_t suppressed);

  const char* kind_;
  LogLevel level_;
  RepeatLimit limit_;
};

// Writes the summary of every LogLimit whose window has ended with lines held
// back, so that a burst that stopped is still summed up. Called about every
// 250 ms by the proxy's first worker.
void flush_log_limits(RepeatLimit::Clock::time_point now = RepeatLimit::Clock::now());

}  // namespace heft::observe
