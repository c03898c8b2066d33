// Idle upstream connections across many backends stay within the worker's
// share of the descriptor limit, and no request fails for a descriptor an
// idle connection holds (docs/proxy.md, idle upstream connections).
#include <dirent.h>

#include <csignal>

#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "demo/demo_backend.h"
#include "process_util.h"

namespace heft::test {
namespace {

std::size_t open_descriptors(pid_t pid) {
  std::size_t count = 0;
  if (DIR* dir = ::opendir(fmt::format("/proc/{}/fd", pid).c_str())) {
    while (const dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++count;
    ::closedir(dir);
  }
  return count;
}

// Many backends in this process: one io_context thread serves them all.
class ManyBackends {
 public:
  explicit ManyBackends(std::size_t count) : guard_(io_.get_executor()) {
    for (std::size_t i = 0; i < count; ++i) {
      demo::DemoBackendOptions options;
      options.name = fmt::format("b{}", i);
      options.body_bytes = 16;
      backends_.push_back(std::make_unique<demo::DemoBackend>(io_, options));
      backends_.back()->start();
    }
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ManyBackends() {
    boost::asio::post(io_, [this] {
      for (auto& b : backends_) b->stop();
    });
    guard_.reset();
    thread_.join();
  }
  const std::vector<std::unique_ptr<demo::DemoBackend>>& backends() const { return backends_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::vector<std::unique_ptr<demo::DemoBackend>> backends_;
  std::thread thread_;
};

TEST(IdleUpstreamConnections, StayUnderTheDescriptorLimitAndNeverCostARequest) {
  // 300 backends under a limit of 200 descriptors: one idle connection per
  // backend would need more descriptors than heft has.
  constexpr std::size_t kBackends = 300;
  constexpr unsigned kLimit = 200;
  ManyBackends many(kBackends);
  std::string pool;
  for (const auto& b : many.backends()) pool += fmt::format("\t\tto 127.0.0.1:{}\n", b->port());
  const std::string dir = make_temp_dir();
  const uint16_t port = free_port();
  const std::string heftfile = fmt::format("{{\n\tadmin off\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {{\n{}"
                                           "\t\tlb_policy round_robin\n\t}}\n}}\n",
                                           port, pool);
  write_file(dir + "/Heftfile", heftfile);
  Process heft({"/usr/bin/prlimit", fmt::format("--nofile={}:{}", kLimit, kLimit), HEFT_BINARY, "run", "--config",
                dir + "/Heftfile", "--state", dir + "/autosave.json"},
               dir + "/heft.log");
  ASSERT_TRUE(wait_for_port(port, 10s)) << "heft did not listen; log:\n" << heft.log();

  // Two rounds over every backend, on four keep-alive client connections.
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<HttpClient>(port));
  std::size_t failed = 0, peak = 0;
  std::string first_failure;
  for (std::size_t i = 0; i < 2 * kBackends; ++i) {
    const Response r = clients[i % clients.size()]->get("/");
    if (r.status != 200) {
      if (failed++ == 0) first_failure = fmt::format("request {}: status {} body {}", i, r.status, r.body);
    }
    if (i % 50 == 49) peak = std::max(peak, open_descriptors(heft.pid()));
  }
  EXPECT_EQ(failed, 0u) << first_failure << "\nheft log:\n" << heft.log();
  // Idle connections may hold half the limit; the rest is heft's own
  // descriptors (listeners, epoll, logs) and the four clients.
  EXPECT_LE(peak, kLimit / 2 + 40) << "open descriptors";
  EXPECT_GE(peak, kLimit / 2) << "idle connections were not kept up to the cap";
  for (std::size_t i = 0; i < kBackends; ++i)
    EXPECT_EQ(many.backends()[i]->requests_served(), 2u) << "backend " << i;
  heft.signal(SIGTERM);
  EXPECT_TRUE(heft.wait(20s).has_value()) << "heft did not stop on SIGTERM";
}

}  // namespace
}  // namespace heft::test
