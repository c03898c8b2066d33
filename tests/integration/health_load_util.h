// Load generation and control helpers for the health / slow start / adaptive /
// rollout integration tests: client threads that record who answered, when,
// and how long it took.
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "process_util.h"

namespace heft::test {

using Clock = std::chrono::steady_clock;

struct Sample {
  Clock::time_point at;  // when the response ended
  std::string backend;   // X-Backend
  int status = 0;
  double ms = 0;
};

// `threads` clients sending GET / in a loop until stop().
class Load {
 public:
  Load(uint16_t port, int threads) {
    for (int t = 0; t < threads; ++t)
      threads_.emplace_back([this, port] {
        HttpClient client(port, std::chrono::seconds(5));
        while (!stop_) {
          auto start = Clock::now();
          Response r = client.get("/");
          auto end = Clock::now();
          std::lock_guard lock(mu_);
          samples_.push_back({end, r.header("x-backend"), r.status,
                              std::chrono::duration<double, std::milli>(end - start).count()});
        }
      });
  }
  ~Load() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::vector<Sample> between(Clock::time_point from, Clock::time_point to) {
    std::lock_guard lock(mu_);
    std::vector<Sample> out;
    for (const Sample& s : samples_)
      if (s.at >= from && s.at < to) out.push_back(s);
    return out;
  }
  std::vector<Sample> all() {
    std::lock_guard lock(mu_);
    return samples_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Sample> samples_;
  std::vector<std::thread> threads_;
};

inline double share_of(const std::vector<Sample>& samples, const std::string& backend) {
  if (samples.empty()) return 0;
  size_t n = 0;
  for (const Sample& s : samples) n += s.backend == backend;
  return double(n) / double(samples.size());
}

inline double p99_ms(std::vector<Sample> samples) {
  if (samples.empty()) return 0;
  std::vector<double> ms;
  for (const Sample& s : samples) ms.push_back(s.ms);
  std::sort(ms.begin(), ms.end());
  return ms[std::min(ms.size() - 1, size_t(double(ms.size()) * 0.99))];
}

inline size_t failures(const std::vector<Sample>& samples) {
  size_t n = 0;
  for (const Sample& s : samples) n += s.status != 200;
  return n;
}

// POST /_control/... to a demo backend.
inline int control(uint16_t port, const std::string& target) {
  HttpClient c(port);
  return c.request("POST " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n").status;
}

}  // namespace heft::test
