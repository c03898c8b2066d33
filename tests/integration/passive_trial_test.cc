// A backend back after fail_timeout gets one request (its trial) until that
// request's outcome, as nginx's one request per fail_timeout: a backend that
// takes connections and never answers (a hung process; the kernel completes
// the handshakes) must not hold its share of every request for read_timeout
// each time its out period ends. Real heft, a real demo-backend, a listening
// socket that never accepts.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "integration/process_util.h"

namespace heft::test {
namespace {

using Clock = std::chrono::steady_clock;

// A socket on 127.0.0.1 that listens and never accepts: connections to it
// complete (up to its backlog) and wait. Counts them at the end.
class Swallower {
 public:
  Swallower() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 256) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return;
    port = ntohs(addr.sin_port);
  }
  ~Swallower() {
    if (fd_ >= 0) ::close(fd_);
  }
  Swallower(const Swallower&) = delete;
  // The connections waiting in its queue (taken and closed).
  int take_connections() {
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    int n = 0;
    for (int k = 0; k < 10000; ++k) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      ::close(c);
      ++n;
    }
    return n;
  }

  uint16_t port = 0;

 private:
  int fd_ = -1;
};

TEST(PassiveTrial, AHungBackendGetsOneRequestPerTrialNotItsShare) {
  const std::string dir = make_temp_dir();
  Backend good = start_backend(dir, "good");
  ASSERT_NE(good.port, 0);
  Swallower hung;
  ASSERT_NE(hung.port, 0);
  const uint16_t port = free_port();
  Process heft = start_heft(dir, fmt::format(R"({{
	workers 1
}}
:{} {{
	reverse_proxy {{
		to 127.0.0.1:{}
		to 127.0.0.1:{}
		read_timeout 300ms
		max_fails 1
		fail_timeout 1s
	}}
}}
)", port, good.port, hung.port), port);

  // Eight clients, each request after the last, for 3.5 s: the hung backend
  // is out (1 s), then on trial, its trial request times out (0.3 s), out
  // again... Every request is answered by the good backend, at worst after
  // one timed-out attempt.
  constexpr int kClients = 8;
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> clients;
  const auto until = Clock::now() + std::chrono::milliseconds(3500);
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&] {
      HttpClient client(port, 5s);
      for (int k = 0; k < 100000 && Clock::now() < until; ++k) {
        Response r = client.get("/");
        (r.status == 200 ? ok : bad)++;
        if (r.status != 200) client = HttpClient(port, 5s);
      }
    });
  // The first requests' connections (before the first timeout came back,
  // the policy gave it every other pick): queued by 1 s, inside the first out
  // period.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const int before_trials = hung.take_connections();
  for (auto& t : clients) t.join();
  EXPECT_EQ(bad.load(), 0) << heft.log();
  EXPECT_GT(ok.load(), 100);

  EXPECT_GE(before_trials, 1);
  // Then one trial per out period (about 1.3 s each: 2 or 3 in the 2.5 s
  // left). Before, a backend on trial took every pick the policy gave it
  // until the trial's timeout came back: each of the eight clients' requests
  // in turn.
  const int trials = hung.take_connections();
  EXPECT_GE(trials, 1);
  EXPECT_LE(trials, 4) << "requests held by the hung backend after its first out period";
}

}  // namespace
}  // namespace heft::test
