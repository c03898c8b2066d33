// heft's log lines (observe/log.h): their form, one write per record from
// many threads, and the limit on repeated lines with an injected clock.
#include "observe/log.h"

#include "observe/captured_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace heft::observe {
namespace {

using namespace std::chrono_literals;
using Clock = RepeatLimit::Clock;

// 2026-12-07T13:41:15.123Z, in milliseconds since the epoch.
constexpr int64_t kSample = 1796650875123;

TEST(Log, TextLinesHaveTheTimeAndLevel) {
  EXPECT_EQ(rfc3339_utc(kSample), "2026-12-07T13:41:15.123Z");
  EXPECT_EQ(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_log_record(config::LogFormat::text, kSample, LogLevel::warn, "backend down"),
            "2026-12-07T13:41:15.123Z warn backend down\n");
  // Every line of a message gets them; a trailing newline is no empty line.
  EXPECT_EQ(format_log_record(config::LogFormat::text, kSample, LogLevel::info, "listening on :80\n  site :80\n"),
            "2026-12-07T13:41:15.123Z info listening on :80\n2026-12-07T13:41:15.123Z info   site :80\n");
  EXPECT_EQ(format_log_record(config::LogFormat::text, kSample, LogLevel::error, "x", "\"audit\":{}"),
            "2026-12-07T13:41:15.123Z error x\n");
}

TEST(Log, JsonLinesAreOneObjectEach) {
  const std::string line = format_log_record(config::LogFormat::json, kSample, LogLevel::error,
                                             "two\nlines \"quoted\" \xff", "\"audit\":{\"seq\":3}");
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line, whatever the message holds
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["ts"], "2026-12-07T13:41:15.123Z");
  EXPECT_EQ(parsed["level"], "error");
  EXPECT_EQ(parsed["msg"], "two\nlines \"quoted\" \xef\xbf\xbd");  // invalid UTF-8 replaced
  EXPECT_EQ(parsed["audit"]["seq"], 3);
  EXPECT_EQ(line.rfind("{\"ts\":", 0), 0u);
}

TEST(Log, ThousandsAreGrouped) {
  EXPECT_EQ(with_thousands(0), "0");
  EXPECT_EQ(with_thousands(999), "999");
  EXPECT_EQ(with_thousands(4312), "4,312");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
}

// Records from many threads at once come out whole, one per line.
TEST(Log, RecordsFromManyThreadsDoNotMix) {
  CapturedLog captured;
  const config::LogFormat before = log_format();
  set_log_format(config::LogFormat::json);
  constexpr int kThreads = 8, kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < kEach; ++i) warn("thread {} record {} {}", t, i, std::string(200, 'x'));
    });
  for (std::thread& t : threads) t.join();
  set_log_format(before);
  const std::vector<std::string> lines = captured.lines();
  ASSERT_EQ(lines.size(), size_t{kThreads * kEach});
  std::vector<int> seen(kThreads, 0);
  for (const std::string& line : lines) {
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << line;
    int thread = -1, record = -1;
    ASSERT_EQ(std::sscanf(parsed["msg"].get<std::string>().c_str(), "thread %d record %d", &thread, &record), 2);
    EXPECT_EQ(record, seen[thread]++);  // each thread's records in its order
  }
}

TEST(Log, TextLinesMatchTheirForm) {
  CapturedLog captured;
  info("one");
  error("two {}", 2);
  const std::regex form(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info|warn|error) .*)");
  const std::vector<std::string> lines = captured.lines();
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) EXPECT_TRUE(std::regex_match(line, form)) << line;
  EXPECT_NE(lines[1].find("Z error two 2"), std::string::npos);
}

// The limit's logic, on a clock of our own: windows of 10 s, 3 lines in each.
TEST(RepeatLimit, LetsABurstThroughAndCountsTheRest) {
  RepeatLimit limit(3, 10s);
  const Clock::time_point t0{std::chrono::hours(1000)};  // on a window's start
  int written = 0;
  for (int i = 0; i < 100; ++i) {
    const RepeatLimit::Admission a = limit.admit(t0 + i * 10ms);
    written += a.write;
    EXPECT_EQ(a.suppressed, 0u);
  }
  EXPECT_EQ(written, 3);
  EXPECT_EQ(limit.take_ended(t0 + 9s), 0u);  // the window has not ended
  // The first line of the next window is let through and hands out the count.
  const RepeatLimit::Admission next = limit.admit(t0 + 10s);
  EXPECT_TRUE(next.write);
  EXPECT_EQ(next.suppressed, 97u);
  EXPECT_EQ(limit.take_ended(t0 + 25s), 0u);  // handed out once; that window held nothing back
}

TEST(RepeatLimit, AnEndedWindowIsSummedUpOnceWithoutAnotherLine) {
  RepeatLimit limit(2, 10s);
  const Clock::time_point t0{std::chrono::hours(1000)};
  for (int i = 0; i < 7; ++i) limit.admit(t0 + 1s);
  EXPECT_EQ(limit.take_ended(t0 + 5s), 0u);
  EXPECT_EQ(limit.take_ended(t0 + 12s), 5u);
  EXPECT_EQ(limit.take_ended(t0 + 13s), 0u);
  // The window take_ended() moved to counts from nothing: two more lines pass.
  EXPECT_TRUE(limit.admit(t0 + 14s).write);
  EXPECT_TRUE(limit.admit(t0 + 15s).write);
  EXPECT_FALSE(limit.admit(t0 + 16s).write);
  // Lines within the burst are no news: nothing to sum up.
  RepeatLimit quiet(2, 10s);
  quiet.admit(t0);
  quiet.admit(t0 + 1s);
  EXPECT_EQ(quiet.take_ended(t0 + 30s), 0u);
  EXPECT_EQ(quiet.admit(t0 + 31s).suppressed, 0u);
}

TEST(RepeatLimit, WindowsAreCutOnTheClock) {
  RepeatLimit limit(1, 10s);
  const Clock::time_point t0{std::chrono::hours(1000)};
  EXPECT_TRUE(limit.admit(t0 + 9999ms).write);
  EXPECT_FALSE(limit.admit(t0 + 9999ms).write);
  const RepeatLimit::Admission a = limit.admit(t0 + 10s);  // a new window, a millisecond later
  EXPECT_TRUE(a.write);
  EXPECT_EQ(a.suppressed, 1u);
  // A gap of many windows: the count is the last window's.
  EXPECT_FALSE(limit.admit(t0 + 10s).write);
  EXPECT_FALSE(limit.admit(t0 + 10s).write);
  EXPECT_EQ(limit.admit(t0 + 1h).suppressed, 2u);
}

// Many threads at once in one window: exactly the burst passes, every other
// call is counted.
TEST(RepeatLimit, CountsAreExactUnderContention) {
  RepeatLimit limit(10, 10s);
  const Clock::time_point t0{std::chrono::hours(1000)};
  constexpr int kThreads = 8, kEach = 50'000;
  std::atomic<int> written{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) written += limit.admit(t0 + 1s).write;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(written.load(), 10);
  EXPECT_EQ(limit.take_ended(t0 + 10s), uint64_t{kThreads * kEach - 10});
}

// A LogLimit writes what its RepeatLimit decides: the lines let through by
// the caller, then one summary for the rest.
TEST(LogLimit, WritesOneSummaryForWhatItHeldBack) {
  CapturedLog captured;
  LogLimit limit("400 from a client", LogLevel::warn, 3, 10s);
  const Clock::time_point t0{std::chrono::hours(2000)};
  // This test's lines (another test's limit may sum itself up here too).
  const auto lines_of_this_test = [&] {
    std::vector<std::string> out;
    for (const std::string& line : captured.lines())
      if (line.find("400 from") != std::string::npos) out.push_back(line);
    return out;
  };
  for (int i = 0; i < 4315; ++i)
    if (limit.admit(t0 + std::chrono::microseconds(i))) warn("400 from 127.0.0.1: request {}", i);
  flush_log_limits(t0 + 5s);  // not yet
  EXPECT_EQ(lines_of_this_test().size(), 3u);
  flush_log_limits(t0 + 10s);  // the window has ended: found through the registry
  const std::vector<std::string> lines = lines_of_this_test();
  ASSERT_EQ(lines.size(), 4u) << captured.text();
  EXPECT_NE(lines[2].find("warn 400 from 127.0.0.1: request 2"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("Z warn 400 from a client: \u2026and 4,312 more like it in the last 10 s"), std::string::npos)
      << lines[3];
  flush_log_limits(t0 + 20s);
  EXPECT_EQ(lines_of_this_test().size(), 4u);
}

}  // namespace
}  // namespace heft::observe
