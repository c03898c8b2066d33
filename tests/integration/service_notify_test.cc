// heft run under a Type=notify service manager: the datagrams it sends to
// $NOTIFY_SOCKET (sd_notify's protocol), received on a real socket, a path one
// and an abstract one, from a real heft in front of a real demo backend.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "process_util.h"

namespace heft::test {
namespace {

// A datagram socket a service manager would listen on, named `name` ("/path"
// or "@abstract"), exported as NOTIFY_SOCKET to the processes started while it lives.
class NotifySocket {
 public:
  explicit NotifySocket(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket(AF_UNIX) failed");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') address.sun_path[0] = '\0';
    const socklen_t length =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size() + (name_[0] == '@' ? 0 : 1));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0)
      throw std::runtime_error("bind " + name_ + ": " + std::strerror(errno));
    ::setenv("NOTIFY_SOCKET", name_.c_str(), 1);
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }

  // The next datagram, or "" after `timeout` without one.
  std::string next(std::chrono::milliseconds timeout = 10s) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  }

 private:
  std::string name_;
  int fd_ = -1;
};

std::string pool_file(uint16_t port, uint16_t backend_port) {
  return fmt::format("{{\n\tadmin off\n\tgrace_period 2s\n}}\n:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n",
                     port, backend_port);
}

std::string unique_suffix() {
  return fmt::format("{}-{}", ::getpid(), std::random_device{}() % 1000000);
}

TEST(ServiceNotify, ReadyOnceServingReloadingAroundSighupStoppingOnSigterm) {
  const std::string dir = make_temp_dir();
  Backend backend = start_backend(dir, "a");
  const uint16_t port = free_port();
  const std::string heftfile = dir + "/Heftfile";
  write_file(heftfile, pool_file(port, backend.port));
  NotifySocket manager("@heft-notify-test-" + unique_suffix());

  Process heft({HEFT_BINARY, "run", "--config", heftfile, "--state", dir + "/state.json"}, dir + "/heft.log");
  const std::string ready = manager.next();
  ASSERT_TRUE(ready.starts_with("READY=1\n")) << "first notification: \"" << ready << "\"; log:\n" << heft.log();
  EXPECT_NE(ready.find("STATUS=serving " + heftfile), std::string::npos) << ready;
  // READY=1 comes once every listener is up: a request right now is served.
  {
    HttpClient client(port);
    Response r = client.get("/");
    EXPECT_EQ(r.status, 200) << heft.log();
    EXPECT_EQ(r.header("x-backend"), "a");
  }

  // A broken file on SIGHUP: RELOADING=1 then READY=1 telling of the failure; the old configuration serves.
  write_file(heftfile, fmt::format(":{} {{\n\treverse_proxy {{\n", port));
  heft.signal(SIGHUP);
  const std::string reloading = manager.next();
  EXPECT_TRUE(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC=")) << "\"" << reloading << "\"";
  const std::string after = manager.next();
  EXPECT_TRUE(after.starts_with("READY=1\n")) << "\"" << after << "\"";
  EXPECT_NE(after.find("last reload failed"), std::string::npos) << after;
  {
    HttpClient client(port);
    EXPECT_EQ(client.get("/").status, 200) << heft.log();
  }

  // A good file: RELOADING=1, READY=1 serving it.
  write_file(heftfile, pool_file(port, backend.port));
  heft.signal(SIGHUP);
  EXPECT_TRUE(manager.next().starts_with("RELOADING=1\n"));
  const std::string reloaded = manager.next();
  EXPECT_EQ(reloaded, "READY=1\nSTATUS=serving " + heftfile) << heft.log();

  heft.signal(SIGTERM);
  const std::string stopping = manager.next();
  EXPECT_TRUE(stopping.starts_with("STOPPING=1\n")) << "\"" << stopping << "\"";
  EXPECT_EQ(heft.wait(10s), 0) << heft.log();
}

TEST(ServiceNotify, PathSocket) {
  // The embedded demo is left out: its admin API has the fixed port 2019, which tests share.
  const std::string dir = make_temp_dir();
  Backend backend = start_backend(dir, "a");
  const uint16_t port = free_port();
  write_file(dir + "/Heftfile", pool_file(port, backend.port));
  NotifySocket manager(dir + "/notify.sock");
  Process heft({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", dir + "/state.json"}, dir + "/heft.log");
  const std::string ready = manager.next();
  EXPECT_EQ(ready, "READY=1\nSTATUS=serving " + dir + "/Heftfile") << heft.log();
  HttpClient client(port);
  EXPECT_EQ(client.get("/").status, 200) << heft.log();
  heft.signal(SIGTERM);
  EXPECT_TRUE(manager.next().starts_with("STOPPING=1\n"));
  EXPECT_EQ(heft.wait(10s), 0) << heft.log();
}

TEST(ServiceNotify, NothingSentWithoutNotifySocket) {
  // Unset (as outside a Type=notify unit) heft serves alike; an unreachable
  // socket is no error either.
  const std::string dir = make_temp_dir();
  Backend backend = start_backend(dir, "a");
  const uint16_t port = free_port();
  write_file(dir + "/Heftfile", pool_file(port, backend.port));
  ::setenv("NOTIFY_SOCKET", (dir + "/nobody-listens.sock").c_str(), 1);
  Process heft({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", dir + "/state.json"}, dir + "/heft.log");
  ::unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(wait_for_port(port, 10s)) << heft.log();
  HttpClient client(port);
  EXPECT_EQ(client.get("/").status, 200) << heft.log();
  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(10s), 0) << heft.log();
}

}  // namespace
}  // namespace heft::test
