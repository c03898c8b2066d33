// The access log: one valid compact JSON line per entry from many threads,
// Caddy's field names, reopen after logrotate's rename, drops when full.
#include "observe/access_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

namespace heft::observe {
namespace {

std::string temp_path(const char* name) {
  return "/tmp/heft-access-" + std::to_string(::getpid()) + "-" + name;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

AccessLogEntry entry(int n, int status) {
  AccessLogEntry e;
  e.ts = 1732921234.5 + n;
  e.remote_ip = "127.0.0.1";
  e.method = "GET";
  e.host = "app.example.com";
  e.uri = "/item/" + std::to_string(n) + "?q=\"x\"";
  e.proto = "HTTP/1.1";
  e.upstream = "127.0.0.1:9001";
  e.status = status;
  e.duration = 0.0125;
  e.size = 512;
  e.tries = 1;
  return e;
}

TEST(AccessLog, LineIsCompactWithCaddyFieldNames) {
  std::string line = format_access_log_line(entry(0, 503));
  EXPECT_NE(line.find("\"status\":503"), std::string::npos) << line;
  EXPECT_EQ(line.find(": "), std::string::npos) << line;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["request"]["remote_ip"], "127.0.0.1");
  EXPECT_EQ(j["request"]["uri"], "/item/0?q=\"x\"");
  EXPECT_EQ(j["request"]["proto"], "HTTP/1.1");
  EXPECT_EQ(j["upstream"], "127.0.0.1:9001");
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), 0.0125);
  EXPECT_EQ(j["size"], 512);
  EXPECT_EQ(j["tries"], 1);
  EXPECT_TRUE(j["ts"].is_number_float());
}

TEST(AccessLog, InvalidUtf8IsReplacedNotThrown) {
  AccessLogEntry e = entry(1, 200);
  e.uri = "/\xff\xfe";
  EXPECT_NO_THROW(nlohmann::json::parse(format_access_log_line(e)));
}

TEST(AccessLog, ThousandLinesFromFourThreadsAreThousandValidLines) {
  std::string path = temp_path("many.log");
  std::remove(path.c_str());
  std::string error;
  auto log = open_access_log(path, error);
  ASSERT_TRUE(log) << error;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 250; ++i) EXPECT_TRUE(log->write(entry(t * 250 + i, i % 50 == 0 ? 502 : 200)));
    });
  for (auto& t : threads) t.join();
  log->flush();
  auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1000u);
  std::set<std::string> uris;
  int fives = 0;
  for (const auto& line : lines) {
    auto j = nlohmann::json::parse(line);
    uris.insert(j["request"]["uri"].get<std::string>());
    if (line.find("\"status\":5") != std::string::npos) ++fives;
  }
  EXPECT_EQ(uris.size(), 1000u);
  EXPECT_EQ(fives, 20);
  std::remove(path.c_str());
}

TEST(AccessLog, SameOutputIsShared) {
  std::string path = temp_path("shared.log");
  std::string error;
  auto a = open_access_log(path, error);
  auto b = open_access_log(path, error);
  EXPECT_EQ(a.get(), b.get());
  std::remove(path.c_str());
}

// A log at `path` that wrote one line (request 1), then was renamed to
// `rotated` as logrotate does; null (with a failure) if a step failed.
std::shared_ptr<AccessLog> logged_one_line_then_rotated(const std::string& path, const std::string& rotated) {
  std::filesystem::remove_all(path);
  std::remove(rotated.c_str());
  std::string error;
  auto log = open_access_log(path, error);
  if (!log) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  log->write(entry(1, 200));
  log->flush();
  if (std::rename(path.c_str(), rotated.c_str()) != 0) {
    ADD_FAILURE() << "rename failed";
    return nullptr;
  }
  return log;
}

TEST(AccessLog, ReopenAfterRenameWritesToTheNewFile) {
  std::string path = temp_path("rotate.log");
  std::string rotated = path + ".1";
  auto log = logged_one_line_then_rotated(path, rotated);
  ASSERT_TRUE(log);
  reopen_all();
  log->write(entry(2, 200));
  log->flush();
  EXPECT_EQ(lines_of(rotated).size(), 1u);
  ASSERT_EQ(lines_of(path).size(), 1u);
  EXPECT_NE(lines_of(path)[0].find("/item/2"), std::string::npos);
  std::remove(path.c_str());
  std::remove(rotated.c_str());
}

// A reopen that fails (the path is now a directory) keeps the old file and says so.
TEST(AccessLog, FailedReopenKeepsTheOldFileAndSaysSo) {
  std::string path = temp_path("stuck.log");
  std::string rotated = path + ".1";
  auto log = logged_one_line_then_rotated(path, rotated);
  ASSERT_TRUE(log);
  ASSERT_TRUE(std::filesystem::create_directory(path));
  testing::internal::CaptureStderr();
  reopen_all();
  log->write(entry(2, 200));
  log->flush();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("Z warn cannot reopen access log " + path), std::string::npos) << said;
  EXPECT_EQ(lines_of(rotated).size(), 2u);
  std::filesystem::remove_all(path);
  std::remove(rotated.c_str());
}

TEST(AccessLog, Sigusr1Reopens) {
  std::string path = temp_path("signal.log");
  std::string rotated = path + ".1";
  std::remove(path.c_str());
  std::string error;
  auto log = open_access_log(path, error);
  install_reopen_on_sigusr1();
  log->write(entry(1, 200));
  log->flush();
  ASSERT_EQ(std::rename(path.c_str(), rotated.c_str()), 0);
  ::raise(SIGUSR1);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the writer notices within 100 ms
  log->write(entry(2, 200));
  log->flush();
  EXPECT_EQ(lines_of(path).size(), 1u);
  std::remove(path.c_str());
  std::remove(rotated.c_str());
}

TEST(AccessLog, FullQueueDropsAndCountsInsteadOfBlocking) {
  std::string path = temp_path("full.log");
  std::remove(path.c_str());
  std::string error;
  auto log = open_access_log(path + "-small", error, 4);
  uint64_t before = access_log_dropped_total();
  int accepted = 0;
  for (int i = 0; i < 10000; ++i) accepted += log->write(entry(i, 200));
  log->flush();
  EXPECT_EQ(access_log_dropped_total() - before, uint64_t(10000 - accepted));
  EXPECT_EQ(lines_of(path + "-small").size(), size_t(accepted));
  std::remove((path + "-small").c_str());
}

}  // namespace
}  // namespace heft::observe
