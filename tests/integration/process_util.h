// Helpers for heft's integration tests: spawn and kill real processes by PID,
// find free ports, wait for listeners, and a tiny blocking HTTP/1.1 client.
//
// Everything is bounded in time. Talks to 127.0.0.1 (and ::1 where a test asks) only. Not thread-safe per
// object; separate HttpClient objects may be used from separate threads.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace heft::test {

using namespace std::chrono_literals;

// The directories made by make_temp_dir(), removed when the test program exits
// (a full run makes hundreds). HEFT_KEEP_TEST_DIRS=1 keeps them for a look at
// a failed run's logs.
class TempDirRegistry {
 public:
  static TempDirRegistry& instance() {
    static TempDirRegistry registry;
    return registry;
  }
  void add(const std::string& path) { paths_.push_back(path); }
  ~TempDirRegistry() {
    const char* keep = std::getenv("HEFT_KEEP_TEST_DIRS");
    if (keep && *keep && std::string(keep) != "0") return;
    for (const auto& path : paths_) {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  }

 private:
  std::vector<std::string> paths_;
};

inline std::string make_temp_dir() {
  std::string pattern = "/tmp/heft-it-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  TempDirRegistry::instance().add(pattern);
  return pattern;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child process; killed (SIGKILL) and reaped on destruction if still running.
class Process {
 public:
  Process() = default;
  Process(const std::vector<std::string>& args, const std::string& log_path) {
    const pid_t parent = ::getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Dies with the test if the test dies before its destructor runs (a
      // crash, ctest's timeout): no process outlives the run that started it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        ::close(fd);
      }
      // Nothing of the test's own (listeners, backends it runs in-process) is
      // passed on: the child starts with its standard descriptors only.
      ::close_range(3, ~0U, 0);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    log_ = log_path;
  }
  Process(Process&& o) noexcept : pid_(o.pid_), log_(std::move(o.log_)) { o.pid_ = -1; }
  Process& operator=(Process&& o) noexcept {
    if (this != &o) {
      kill_now();
      pid_ = o.pid_;
      log_ = std::move(o.log_);
      o.pid_ = -1;
    }
    return *this;
  }
  ~Process() { kill_now(); }

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  std::string log() const { return read_file(log_); }
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // The exit status (WEXITSTATUS, or 128+signal) once it exited within `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (std::chrono::steady_clock::now() > end) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

// A port that was free a moment ago (bind 127.0.0.1:0, read it, close).
// Whether `port` can also be bound on IPv6 (heft listens there too, where the
// host has IPv6): a host without IPv6 counts as yes.
inline bool free_on_ipv6(uint16_t port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return true;
  int one = 1;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  a.sin6_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

inline uint16_t free_port() {
  for (int attempt = 0;; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    const uint16_t port = ntohs(a.sin_port);
    if (attempt == 20 || free_on_ipv6(port)) return port;
  }
}

// A connected TCP socket to `address` (an IPv4 or IPv6 literal) and `port`, or -1.
inline int connect_to(const std::string& address, uint16_t port, std::chrono::milliseconds io_timeout = 10s) {
  sockaddr_storage storage{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    size = sizeof *v4;
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    size = sizeof *v6;
  } else {
    return -1;
  }
  int fd = ::socket(storage.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(io_timeout.count() / 1000), static_cast<suseconds_t>(io_timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&storage), size) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int connect_to(uint16_t port, std::chrono::milliseconds io_timeout = 10s) {
  return connect_to("127.0.0.1", port, io_timeout);
}

inline bool wait_for_port(uint16_t port, std::chrono::milliseconds timeout = 10s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    int fd = connect_to(port, 1s);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// Waits until `text` appears in the process's log.
inline bool wait_for_log(const Process& p, const std::string& text, std::chrono::milliseconds timeout = 10s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (p.log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// Waits for `heft demo-backend --port-file` to write its port.
inline uint16_t read_port_file(const std::string& path, std::chrono::milliseconds timeout = 10s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    std::string text = read_file(path);
    if (!text.empty() && text.back() == '\n') return static_cast<uint16_t>(std::stoi(text));
    std::this_thread::sleep_for(10ms);
  }
  throw std::runtime_error("no port file " + path);
}

// A memory figure of a process from /proc/PID/status ("VmHWM:", "VmRSS:"), in KiB; 0 if unknown.
inline long vm_status_kib(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + key.size());
  return 0;
}
// Peak resident memory of a process (VmHWM), in KiB; 0 if unknown.
inline long vm_hwm_kib(pid_t pid) { return vm_status_kib(pid, "VmHWM:"); }
// Resident memory of a process now (VmRSS), in KiB; 0 if unknown.
inline long vm_rss_kib(pid_t pid) { return vm_status_kib(pid, "VmRSS:"); }

// heft's log with the time taken off each line that has one
// ("2026-12-07T13:41:15.123Z warn x" -> "warn x"), to compare with a text.
inline std::string untimed(const std::string& log) {
  constexpr std::size_t kTime = 25;  // "2026-12-07T13:41:15.123Z "
  std::string out;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const bool timed = line.size() > kTime && line[4] == '-' && line[10] == 'T' && line[kTime - 2] == 'Z';
    out += (timed ? line.substr(kTime) : line) + "\n";
  }
  return out;
}

struct Response {
  int status = 0;  // 0: no (complete) response
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::vector<int> interim;  // statuses of 1xx responses before this one (request() skips them, as clients do)
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A blocking HTTP/1.1 client on one keep-alive connection (reconnects when needed).
class HttpClient {
 public:
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = 10s) : port_(port), timeout_(timeout) {}
  // To `address` (an IPv4 or IPv6 literal) instead of 127.0.0.1.
  HttpClient(std::string address, uint16_t port, std::chrono::milliseconds timeout = 10s)
      : address_(std::move(address)), port_(port), timeout_(timeout) {}
  ~HttpClient() { close(); }
  HttpClient(const HttpClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buffer_.clear();
  }
  bool connect() {
    close();
    fd_ = connect_to(address_, port_, timeout_);
    return fd_ >= 0;
  }
  bool send_raw(const std::string& bytes) {
    if (fd_ < 0 && !connect()) return false;
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // GET `path` with Host: localhost; status 0 on a transport error.
  Response get(const std::string& path, const std::string& extra_headers = "") {
    Response r = request("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "\r\n");
    return r;
  }
  Response request(const std::string& raw, bool head = false) {
    if (fd_ < 0 && !connect()) return {};
    if (!send_raw(raw)) {
      close();
      return {};
    }
    Response r = read_response(head);
    std::vector<int> interim;
    while (r.status >= 100 && r.status < 200 && r.status != 101) {
      interim.push_back(r.status);
      r = read_response(head);
    }
    r.interim = std::move(interim);
    if (r.status == 0 || r.header("connection") == "close") close();
    return r;
  }
  // Reads one response from the connection (after send_raw).
  Response read_response(bool head = false) {
    Response r;
    std::size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return {};
    std::string head_text = buffer_.substr(0, end + 2);
    buffer_.erase(0, end + 4);
    std::istringstream lines(head_text);
    std::string line;
    std::getline(lines, line);
    if (line.size() < 12) return {};
    r.status = std::atoi(line.c_str() + 9);
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    if (head || r.status == 204 || r.status == 304 || r.status / 100 == 1) return r;
    if (r.header("transfer-encoding") == "chunked") {
      for (;;) {
        std::size_t eol;
        while ((eol = buffer_.find("\r\n")) == std::string::npos)
          if (!fill()) return {};
        std::size_t size = std::stoul(buffer_.substr(0, eol), nullptr, 16);
        buffer_.erase(0, eol + 2);
        while (buffer_.size() < size + 2)
          if (!fill()) return {};
        r.body.append(buffer_, 0, size);
        buffer_.erase(0, size + 2);
        if (size == 0) break;
      }
    } else if (!r.header("content-length").empty()) {
      std::size_t size = std::stoul(r.header("content-length"));
      while (buffer_.size() < size)
        if (!fill()) return {};
      r.body = buffer_.substr(0, size);
      buffer_.erase(0, size);
    } else {
      while (fill()) {
      }
      r.body = std::move(buffer_);
      buffer_.clear();
    }
    return r;
  }
  // Reads until the peer closes (or timeout); returns everything received.
  std::string read_all() {
    while (fill()) {
    }
    std::string out = std::move(buffer_);
    buffer_.clear();
    return out;
  }
  int fd() const { return fd_; }

 private:
  bool fill() {
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  std::string address_ = "127.0.0.1";
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::string buffer_;
};

// What a shell command printed (stdout and stderr) and its exit code.
struct CommandRun {
  int exit_code = -1;
  std::string out;
};

// Runs `command` through sh, ended after `timeout` (coreutils' timeout: exit
// code 124 then, reported as a failure of the calling test by the caller).
inline CommandRun run_shell(const std::string& command, std::chrono::seconds timeout = 60s) {
  const std::string bounded =
      "timeout -k 5 " + std::to_string(timeout.count()) + " sh -c '" + [&] {
        std::string quoted;
        for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return quoted;
      }() + "' 2>&1";
  FILE* pipe = ::popen(bounded.c_str(), "r");
  CommandRun run;
  if (!pipe) return run;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) run.out.append(buf, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// One call to heft's admin API on 127.0.0.1:`admin_port`, a JSON body (or none).
inline Response admin_call(uint16_t admin_port, const std::string& method, const std::string& path,
                           const std::string& body = "") {
  HttpClient client(admin_port);
  const std::string host = "127.0.0.1:" + std::to_string(admin_port);
  return client.request(method + " " + path + " HTTP/1.1\r\nHost: " + host +
                        "\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
}

// A listening socket on 127.0.0.1 and an ephemeral port (written to `port`),
// for origins a test scripts byte by byte; -1 on failure.
inline int listen_on_loopback(uint16_t& port, std::chrono::seconds accept_timeout = std::chrono::seconds(0)) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 8) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    return -1;
  }
  port = ntohs(addr.sin_port);
  if (accept_timeout.count() > 0) {  // accept() gives up then, if heft never connects (again)
    timeval limit{static_cast<time_t>(accept_timeout.count()), 0};
    ::setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  return listener;
}

// For scripted origins: the next connection on `listener`, its reads bounded
// by a 10 s timeout; -1 on failure.
inline int accept_scripted(int listener) {
  const int c = ::accept(listener, nullptr, nullptr);
  if (c < 0) return -1;
  timeval tv{10, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return c;
}

// Reads from `fd` onto `in` until `in` holds a whole head (up to its blank
// line); false if the peer closed or the read timed out first.
inline bool read_until_head(int fd, std::string& in) {
  char buf[4096];
  while (in.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

// The value of the sample `series` (metric name and labels as written) in a
// /metrics text, or -1 if there is none.
inline double sample_value(const std::string& metrics, const std::string& series) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return -1;
}

// A demo-backend process on an ephemeral port.
struct Backend {
  Process process;
  uint16_t port = 0;
  std::string name;
};

inline Backend start_backend(const std::string& dir, const std::string& name,
                             const std::vector<std::string>& extra = {}) {
  std::string port_file = dir + "/" + name + ".port";
  std::vector<std::string> args{HEFT_BINARY, "demo-backend", "--listen", "127.0.0.1:0", "--port-file", port_file,
                                "--name", name};
  args.insert(args.end(), extra.begin(), extra.end());
  Backend b{Process(args, dir + "/" + name + ".log"), 0, name};
  b.port = read_port_file(port_file);
  return b;
}

// A Heftfile with two workers, the admin API on `admin_port` and one site on
// `port` whose reverse_proxy block holds `pool` (its lines, "\t\t...\n").
inline std::string two_worker_pool(uint16_t admin_port, uint16_t port, const std::string& pool) {
  return "{\n\tworkers 2\n\tadmin 127.0.0.1:" + std::to_string(admin_port) + "\n}\n:" + std::to_string(port) +
         " {\n\treverse_proxy {\n" + pool + "\t}\n}\n";
}

// `heft run --config FILE` on a config whose sites listen on `port`. A config
// that does not mention the admin API gets `admin off`: heft's default admin
// address is the fixed 127.0.0.1:2019, which tests running in parallel would
// race for (and EmbeddedDefault, which needs it, would find taken).
inline Process start_heft(const std::string& dir, std::string heftfile, uint16_t port,
                          const std::string& log_name = "heft.log") {
  if (heftfile.find("admin") == std::string::npos) {
    if (heftfile.starts_with("{\n"))
      heftfile.insert(2, "\tadmin off\n");  // into the global block
    else
      heftfile.insert(0, "{\n\tadmin off\n}\n");
  }
  std::string path = dir + "/Heftfile";
  write_file(path, heftfile);
  // The state file in `dir`: a heft with an admin API saves its configuration there at start.
  Process p({HEFT_BINARY, "run", "--config", path, "--state", dir + "/autosave.json"}, dir + "/" + log_name);
  if (!wait_for_port(port, 10s)) throw std::runtime_error("heft did not listen; log:\n" + p.log());
  // The admin API listens after the proxy (once the configuration is saved):
  // wait for it too, or a test's first admin request can be refused under load.
  const std::string admin_at = "\tadmin 127.0.0.1:";
  if (const auto at = heftfile.find(admin_at); at != std::string::npos) {
    const int admin_port = std::atoi(heftfile.c_str() + at + admin_at.size());
    if (admin_port > 0 && !wait_for_port(static_cast<uint16_t>(admin_port), 10s))
      throw std::runtime_error("heft's admin API did not listen; log:\n" + p.log());
  }
  return p;
}

}  // namespace heft::test
