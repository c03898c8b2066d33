// floor_relay: the least work any keep-alive proxy can do per request, as a
// yardstick for bench/proxy. It is not an HTTP proxy: each client connection
// is paired for its whole life with one upstream connection (chosen by smooth
// weighted round robin when the client connects) and bytes are relayed both
// ways. Per request that is exactly the kernel work of a two-hop keep-alive
// proxy — a receive and a send on each side, an epoll wait shared by whatever
// is ready — and next to no user-space work (no parsing, no headers, no
// per-request balancing). What it costs per request is what an HTTP proxy on
// this machine cannot go below, so "per CPU-second vs nginx" of this relay is
// the ceiling for any proxy's ratio.
//
//   floor_relay --listen PORT [--workers N] --to PORT:WEIGHT [--to PORT:WEIGHT ...]
//
// Listens on 127.0.0.1 only; upstreams are 127.0.0.1 ports. One thread per
// worker, each with its own SO_REUSEPORT listener and level-triggered epoll
// set. Runs until SIGTERM/SIGINT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Upstream {
  uint16_t port;
  int weight;
  int current = 0;
};

struct Pair {
  int fd[2] = {-1, -1};        // [0] client, [1] upstream
  std::string pending[2];      // bytes read from side i not yet written to the other side
};

std::atomic<bool> stopping{false};

void on_signal(int) { stopping = true; }

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// nginx's smooth weighted round robin, per worker.
uint16_t pick(std::vector<Upstream>& ups) {
  int total = 0;
  Upstream* best = nullptr;
  for (auto& u : ups) {
    u.current += u.weight;
    total += u.weight;
    if (!best || u.current > best->current) best = &u;
  }
  best->current -= total;
  return best->port;
}

int listen_on(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
  if (::listen(fd, 4096) != 0) die("listen");
  return fd;
}

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

class Worker {
 public:
  Worker(uint16_t port, std::vector<Upstream> ups) : ups_(std::move(ups)) {
    listener_ = listen_on(port);
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) die("epoll_create1");
    watch(EPOLL_CTL_ADD, listener_, EPOLLIN, kListener);
  }

  void run() {
    epoll_event events[256];
    while (!stopping) {
      int n = ::epoll_wait(epoll_, events, 256, 200);  // wakes to notice a stop signal
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kListener) {
          accept_all();
          continue;
        }
        std::size_t id = tag >> 1;
        int side = static_cast<int>(tag & 1);
        if (id >= pairs_.size() || pairs_[id].fd[side] < 0) continue;  // closed earlier in this batch
        if (events[i].events & EPOLLOUT) flush(id, 1 - side);
        if (id < pairs_.size() && pairs_[id].fd[side] >= 0 && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
          relay(id, side);
      }
    }
  }

 private:
  static constexpr uint64_t kListener = ~uint64_t{0};

  void watch(int op, int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_, op, fd, &ev);
  }

  void accept_all() {
    for (;;) {
      int c = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) return;
      int u = connect_to(pick(ups_));
      if (u < 0) {
        ::close(c);
        continue;
      }
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::size_t id;
      if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
      } else {
        id = pairs_.size();
        pairs_.emplace_back();
      }
      pairs_[id].fd[0] = c;
      pairs_[id].fd[1] = u;
      watch(EPOLL_CTL_ADD, c, EPOLLIN, id << 1);
      watch(EPOLL_CTL_ADD, u, EPOLLIN, (id << 1) | 1);
    }
  }

  // One read per readiness (level-triggered: more data means another event),
  // written straight to the other side; a short write parks the rest and
  // stops reading this side until the other side drains.
  void relay(std::size_t id, int side) {
    Pair& p = pairs_[id];
    ssize_t n = ::recv(p.fd[side], buffer_, sizeof buffer_, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_pair(id);
      return;
    }
    if (n < 0) return;
    ssize_t w = ::send(p.fd[1 - side], buffer_, static_cast<std::size_t>(n), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno != EAGAIN) {
        close_pair(id);
        return;
      }
      w = 0;
    }
    if (w < n) {
      p.pending[side].assign(buffer_ + w, buffer_ + n);
      watch(EPOLL_CTL_MOD, p.fd[side], 0, (id << 1) | side);
      watch(EPOLL_CTL_MOD, p.fd[1 - side], EPOLLIN | EPOLLOUT, (id << 1) | (1 - side));
    }
  }

  // The other side of `from` became writable: drain what `from` left pending.
  void flush(std::size_t id, int from) {
    Pair& p = pairs_[id];
    std::string& rest = p.pending[from];
    while (!rest.empty()) {
      ssize_t w = ::send(p.fd[1 - from], rest.data(), rest.size(), MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EAGAIN) return;
        close_pair(id);
        return;
      }
      rest.erase(0, static_cast<std::size_t>(w));
    }
    watch(EPOLL_CTL_MOD, p.fd[1 - from], EPOLLIN, (id << 1) | (1 - from));
    watch(EPOLL_CTL_MOD, p.fd[from], EPOLLIN, (id << 1) | from);
  }

  void close_pair(std::size_t id) {
    Pair& p = pairs_[id];
    for (int& fd : p.fd) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    p.pending[0].clear();
    p.pending[1].clear();
    free_.push_back(id);
  }

  std::vector<Upstream> ups_;
  int listener_ = -1;
  int epoll_ = -1;
  std::vector<Pair> pairs_;
  std::vector<std::size_t> free_;
  char buffer_[65536];
};

}  // namespace

int main(int argc, char** argv) {
  uint16_t port = 0;
  int workers = 1;
  std::vector<Upstream> ups;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string opt = argv[i];
    if (opt == "--listen") {
      port = static_cast<uint16_t>(std::atoi(argv[i + 1]));
    } else if (opt == "--workers") {
      workers = std::atoi(argv[i + 1]);
    } else if (opt == "--to") {
      int p = 0, w = 1;
      if (std::sscanf(argv[i + 1], "%d:%d", &p, &w) < 1) {
        std::fprintf(stderr, "floor_relay: --to wants PORT:WEIGHT, got \"%s\"\n", argv[i + 1]);
        return 2;
      }
      ups.push_back({static_cast<uint16_t>(p), w});
    } else {
      std::fprintf(stderr, "floor_relay: unknown option \"%s\"\n", opt.c_str());
      return 2;
    }
  }
  if (port == 0 || ups.empty() || workers < 1) {
    std::fprintf(stderr, "usage: floor_relay --listen PORT [--workers N] --to PORT:WEIGHT ...\n");
    return 2;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<Worker*> all;
  for (int i = 0; i < workers; ++i) all.push_back(new Worker(port, ups));
  std::vector<std::thread> threads;
  for (int i = 1; i < workers; ++i) threads.emplace_back([w = all[i]] { w->run(); });
  all[0]->run();
  for (auto& t : threads) t.join();
  for (auto* w : all) delete w;
  return 0;
}
