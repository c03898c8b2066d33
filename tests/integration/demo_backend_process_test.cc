// The real `heft demo-backend` process: starts it on an ephemeral port (--port-file),
// talks HTTP over raw sockets, stops it with SIGTERM by PID and checks exit 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "integration/process_util.h"

extern char** environ;

namespace {

using std::chrono::milliseconds;

// A started child process; the destructor SIGKILLs it if the test did not stop it.
class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

  // Waits (bounded) for the child to exit; its exit status, or nullopt if it did not.
  std::optional<int> wait_exit(milliseconds limit) {
    for (auto waited = milliseconds(0); waited < limit; waited += milliseconds(20)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "heft-demo-backend-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Polls (bounded) for the port file the backend writes once it listens.
int wait_for_port(const std::string& path, milliseconds limit) {
  for (auto waited = milliseconds(0); waited < limit; waited += milliseconds(20)) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return 0;
}

// A blocking TCP connection with 10 s send/receive timeouts, so reads are bounded.
class Connection {
 public:
  explicit Connection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Connection() { close(fd_); }
  bool connected() const { return connected_; }

  bool send_all(const std::string& data) {
    for (std::size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  struct Response {
    int status = 0;
    std::string head;  // status line and headers
    std::string body;
    std::string header(const std::string& name) const {
      const std::size_t at = head.find("\r\n" + name + ": ");
      if (at == std::string::npos) return {};
      const std::size_t start = at + name.size() + 4;
      return head.substr(start, head.find("\r\n", start) - start);
    }
  };

  // Reads one Content-Length response (all the demo backend sends for these paths).
  std::optional<Response> read_response() {
    std::size_t head_end;
    while ((head_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!receive_more()) return std::nullopt;
    }
    Response res;
    res.head = pending_.substr(0, head_end + 2);
    res.status = std::atoi(res.head.c_str() + 9);
    const std::size_t length = std::stoul(res.header("Content-Length").empty() ? "0" : res.header("Content-Length"));
    pending_.erase(0, head_end + 4);
    while (pending_.size() < length) {
      if (!receive_more()) return std::nullopt;
    }
    res.body = pending_.substr(0, length);
    pending_.erase(0, length);
    return res;
  }

 private:
  bool receive_more() {
    char buffer[65536];
    const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) return false;  // closed, error or the 10 s timeout
    pending_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string pending_;
};

std::string get_request(const std::string& target) {
  return "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

TEST(DemoBackendProcessTest, ServesOnAnEphemeralPortAndExitsZeroOnSigterm) {
  TempDir dir;
  const std::string port_file = dir.file("port");
  ChildProcess backend({HEFT_BINARY, "demo-backend", "--listen", "127.0.0.1:0", "--port-file", port_file, "--name",
                        "proc-1", "--body-bytes", "2048", "--health-path", "/healthz"});
  ASSERT_GT(backend.pid(), 0);
  const int port = wait_for_port(port_file, milliseconds(10'000));
  ASSERT_GT(port, 0) << "no port file from the backend";

  Connection connection(port);
  ASSERT_TRUE(connection.connected());
  for (int i = 1; i <= 3; ++i) {  // keep-alive: all on one connection
    ASSERT_TRUE(connection.send_all(get_request("/page")));
    auto res = connection.read_response();
    ASSERT_TRUE(res.has_value());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->header("X-Backend"), "proc-1");
    EXPECT_EQ(res->header("X-Request-Count"), std::to_string(i));
    EXPECT_EQ(res->body.size(), 2048u);
  }

  // An upload on the same connection is read and discarded.
  const std::string upload(1 << 20, 'x');
  ASSERT_TRUE(connection.send_all("POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                                  std::to_string(upload.size()) + "\r\n\r\n" + upload));
  auto res = connection.read_response();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body.size(), 2048u);

  ASSERT_TRUE(connection.send_all(get_request("/bytes/300000")));
  res = connection.read_response();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->body.size(), 300000u);

  ASSERT_TRUE(connection.send_all(get_request("/healthz")));
  res = connection.read_response();
  ASSERT_TRUE(res.has_value());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");

  // SIGTERM with the connection still open: a clean exit 0.
  ASSERT_EQ(kill(backend.pid(), SIGTERM), 0);
  EXPECT_EQ(backend.wait_exit(milliseconds(10'000)), std::optional<int>(0));
}

TEST(DemoBackendProcessTest, SigintAlsoExitsZero) {
  TempDir dir;
  const std::string port_file = dir.file("port");
  ChildProcess backend({HEFT_BINARY, "demo-backend", "--listen", "127.0.0.1:0", "--port-file", port_file,
                        "--threads", "2", "--fail-rate", "0.5"});
  ASSERT_GT(backend.pid(), 0);
  const int port = wait_for_port(port_file, milliseconds(10'000));
  ASSERT_GT(port, 0);
  Connection connection(port);
  ASSERT_TRUE(connection.connected());
  int failures = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(connection.send_all(get_request("/")));
    auto res = connection.read_response();
    ASSERT_TRUE(res.has_value());
    failures += res->status == 503;
  }
  EXPECT_EQ(failures, 5);
  ASSERT_EQ(kill(backend.pid(), SIGINT), 0);
  EXPECT_EQ(backend.wait_exit(milliseconds(10'000)), std::optional<int>(0));
}

// A taken port: one plain line naming the address (Boost's text carried
// "[system:98 at .../reactive_socket_service.hpp:161:5 in function ...]"), exit 1.
TEST(DemoBackendProcessTest, ListenFailureIsOneLineNamingTheAddress) {
  uint16_t port = 0;
  const int taken = heft::test::listen_on_loopback(port);
  ASSERT_GE(taken, 0);
  TempDir dir;
  heft::test::Process backend({HEFT_BINARY, "demo-backend", "--listen", "127.0.0.1:" + std::to_string(port)},
                              dir.file("backend.log"));
  EXPECT_EQ(backend.wait(milliseconds(10'000)), std::optional<int>(1));
  EXPECT_EQ(backend.log(),
            "heft: demo-backend: cannot listen on 127.0.0.1:" + std::to_string(port) + ": Address already in use\n");
  close(taken);
}

TEST(DemoBackendProcessTest, BadArgumentsExitTwo) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--fail-rate", "1.5"}, {"--listen", "127.0.0.1"}, {"--delay", "soon"}, {"--health-path", "healthz"},
           {"--workers", "-1"}, {"--body-bytes", "-1"}, {"--threads", "0"}}) {
    std::vector<std::string> args{HEFT_BINARY, "demo-backend"};
    args.insert(args.end(), extra.begin(), extra.end());
    ChildProcess backend(args);
    ASSERT_GT(backend.pid(), 0);
    EXPECT_EQ(backend.wait_exit(milliseconds(10'000)), std::optional<int>(2)) << extra[0] << " " << extra[1];
  }
}

}  // namespace
