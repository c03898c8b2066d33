// The per-test deadline of test_deadline.h: a gtest listener arms a watchdog
// thread at each test's start. Default 300 s (below ctest's 600 s per test);
// HEFT_TEST_DEADLINE_SECONDS sets another (the sanitizer builds run slower).
#include "test_deadline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

namespace heft::test {
namespace {

std::atomic<const char*> waiting_for{nullptr};

// SIGKILL to every process whose parent is this one (heft and demo backends
// a test started; most are started with PR_SET_PDEATHSIG, not all).
void kill_children() {
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
      ::kill(static_cast<pid_t>(std::stol(name)), SIGKILL);
  }
}

// The watchdog's state, never destroyed: its thread waits on it until the
// process exits (gtest deletes its listeners at exit, the thread goes on).
struct Watch {
  int seconds = 300;
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;
  std::string test;
  std::chrono::steady_clock::time_point deadline;

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      if (!armed) {
        cv.wait(lock);
        continue;
      }
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && armed &&
          std::chrono::steady_clock::now() >= deadline) {
        const char* what = waiting_for.load();
        std::fprintf(stderr, "\n%s: still running after its deadline of %d s%s%s; ended here\n", test.c_str(),
                     seconds, what ? ", waiting for " : "", what ? what : "");
        std::fflush(stderr);
        kill_children();  // the processes the test started end with it
        std::abort();
      }
    }
  }
};
Watch* const watch = new Watch;

class Watchdog : public testing::EmptyTestEventListener {
 public:
  Watchdog() {
    if (const char* env = std::getenv("HEFT_TEST_DEADLINE_SECONDS")) watch->seconds = std::max(1, std::atoi(env));
    std::thread([] { watch->run(); }).detach();
  }
  void OnTestStart(const testing::TestInfo& info) override {
    std::lock_guard lock(watch->mu);
    watch->test = std::string(info.test_suite_name()) + "." + info.name();
    watch->deadline = std::chrono::steady_clock::now() + std::chrono::seconds(watch->seconds);
    watch->armed = true;
    watch->cv.notify_all();
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard lock(watch->mu);
    watch->armed = false;
    watch->cv.notify_all();
  }
};

const bool registered = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  return true;
}();

}  // namespace

WaitingFor::WaitingFor(const char* what) : outer_(waiting_for.exchange(what)) {}
WaitingFor::~WaitingFor() { waiting_for.store(outer_); }

}  // namespace heft::test
