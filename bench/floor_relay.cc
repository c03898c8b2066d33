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
// --per-request balances every request instead of every connection, as a
// weighted HTTP proxy does: each request goes to the origin smooth weighted
// round robin picks for it, on an idle pooled connection to that origin (LIFO,
// as nginx's and heft's keep-alive pools), which returns to the pool when the
// response's Content-Length has been relayed. Measured (BENCHMARKS.md, "What
// the kernel's share depends on"): spreading each client's requests over the
// origins makes the origins sleep and be woken twice as often as pinning a
// client to one origin (their arrivals are evenly spaced instead of bursty),
// and a wakeup is paid by the sender's CPU. So this mode is the fairer floor
// for a proxy that must balance per request. It takes a client read that ends
// a request head ("\r\n\r\n") as the end of a request (wrk sends bodiless
// GETs, each in one write).
//
//   floor_relay --listen PORT [--workers N] [--per-request] --to PORT:WEIGHT [--to PORT:WEIGHT ...]
//
// Listens on 127.0.0.1 only; upstreams are 127.0.0.1 ports. One thread per
// worker, each with its own SO_REUSEPORT listener and level-triggered epoll
// set. Runs until SIGTERM/SIGINT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
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

// --per-request: a client connection, and an upstream one of the pool.
struct Client {
  bool open = false;
  int upstream = -1;  // the connection its current request went out on
  bool at_request_start = true;
};
struct Link {
  int origin = -1;
  int client = -1;         // whose response it carries; -1 while idle
  ssize_t remaining = -1;  // response bytes still to come; -1 before its head
};

std::atomic<bool> stopping{false};
bool per_request = false;

void on_signal(int) { stopping = true; }

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// nginx's smooth weighted round robin, per worker: the chosen upstream's index.
std::size_t pick_index(std::vector<Upstream>& ups) {
  int total = 0;
  std::size_t best = 0;
  for (std::size_t i = 0; i < ups.size(); ++i) {
    ups[i].current += ups[i].weight;
    total += ups[i].weight;
    if (ups[i].current > ups[best].current) best = i;
  }
  ups[best].current -= total;
  return best;
}

// The same, for a whole connection: the chosen upstream's port.
uint16_t pick(std::vector<Upstream>& ups) { return ups[pick_index(ups)].port; }

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

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A read's result says the peer closed or the connection failed (not EAGAIN).
bool peer_gone(ssize_t n) { return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR); }

// A non-blocking, TCP_NODELAY connection to 127.0.0.1:port (the connect itself blocks), or -1.
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
  no_delay(fd);
  return fd;
}

class Worker {
 public:
  Worker(uint16_t port, std::vector<Upstream> ups) : ups_(std::move(ups)), idle_(ups_.size()) {
    listener_ = listen_on(port);
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) die("epoll_create1");
    watch(EPOLL_CTL_ADD, listener_, EPOLLIN, kListener);
  }

  void run() {
    if (per_request) return run_per_request();
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
      no_delay(c);
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
    if (peer_gone(n)) {
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

  // --per-request: tags are (kind << 32) | fd; state is indexed by fd.
  static constexpr uint64_t kClientKind = 1, kOriginKind = 2;

  void run_per_request() {
    epoll_event events[256];
    while (!stopping) {
      int n = ::epoll_wait(epoll_, events, 256, 200);
      for (int i = 0; i < n; ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kListener) {
          accept_clients();
          continue;
        }
        int fd = static_cast<int>(tag & 0xFFFFFFFF);
        if (tag >> 32 == kClientKind) {
          if (fd < static_cast<int>(clients_.size()) && clients_[fd].open) from_client(fd);
        } else if (fd < static_cast<int>(links_.size()) && links_[fd].origin >= 0) {
          from_origin(fd);
        }
      }
    }
  }

  template <class T>
  static T& at(std::vector<T>& v, int fd) {
    if (fd >= static_cast<int>(v.size())) v.resize(static_cast<std::size_t>(fd) + 1);
    return v[static_cast<std::size_t>(fd)];
  }

  void accept_clients() {
    for (;;) {
      int c = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) return;
      no_delay(c);
      at(clients_, c) = Client{true, -1, true};
      watch(EPOLL_CTL_ADD, c, EPOLLIN, kClientKind << 32 | static_cast<uint32_t>(c));
    }
  }

  // A request starts: an idle connection to the origin SWRR picks, or a new one.
  void from_client(int c) {
    ssize_t n = ::recv(c, buffer_, sizeof buffer_, 0);
    if (peer_gone(n)) return close_client(c);
    if (n < 0) return;
    Client& client = clients_[static_cast<std::size_t>(c)];
    if (client.at_request_start || client.upstream < 0) {
      std::size_t o = pick_index(ups_);
      int u = -1;
      if (!idle_[o].empty()) {
        u = idle_[o].back();
        idle_[o].pop_back();
      } else {
        u = connect_to(ups_[o].port);
        if (u < 0) return close_client(c);
        watch(EPOLL_CTL_ADD, u, EPOLLIN, kOriginKind << 32 | static_cast<uint32_t>(u));
      }
      at(links_, u) = Link{static_cast<int>(o), c, -1};
      client.upstream = u;
    }
    client.at_request_start = n >= 4 && std::memcmp(buffer_ + n - 4, "\r\n\r\n", 4) == 0;
    if (!send_all(client.upstream, buffer_, static_cast<std::size_t>(n))) close_client(c);
  }

  // Response bytes go to the client; once Content-Length is complete the
  // connection goes back to its origin's idle list (LIFO, as nginx and heft).
  void from_origin(int u) {
    Link& link = links_[static_cast<std::size_t>(u)];
    ssize_t n = ::recv(u, buffer_, sizeof buffer_, 0);
    if (peer_gone(n)) return close_origin(u);
    if (n < 0) return;
    if (link.client < 0) return close_origin(u);  // bytes nobody asked for
    int c = link.client;
    if (!send_all(c, buffer_, static_cast<std::size_t>(n))) return close_client(c);
    if (link.remaining < 0) link.remaining = response_size(buffer_, static_cast<std::size_t>(n));
    link.remaining -= n;
    if (link.remaining > 0) return;
    link.client = -1;
    link.remaining = -1;
    if (clients_[static_cast<std::size_t>(c)].upstream == u) clients_[static_cast<std::size_t>(c)].upstream = -1;
    idle_[static_cast<std::size_t>(link.origin)].push_back(u);
  }

  // Head plus Content-Length of the response starting at `data` (the head
  // arrives in one read on loopback); without a Content-Length, what was read.
  static ssize_t response_size(const char* data, std::size_t size) {
    std::string_view text(data, size);
    std::size_t end = text.find("\r\n\r\n");
    if (end == std::string_view::npos) return static_cast<ssize_t>(size);
    std::string_view head = text.substr(0, end + 4);
    for (std::string_view name : {"\r\nContent-Length:", "\r\ncontent-length:"}) {
      std::size_t at = head.find(name);
      if (at != std::string_view::npos)
        return static_cast<ssize_t>(end + 4) + std::atoll(std::string(head.substr(at + name.size(), 24)).c_str());
    }
    return static_cast<ssize_t>(size);
  }

  // Small messages on loopback go out whole; should one not, wait for the
  // socket (a measurement tool, not a server: this blocks the worker).
  static bool send_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      ssize_t w = ::send(fd, data, size, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno != EAGAIN) return false;
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      data += w;
      size -= static_cast<std::size_t>(w);
    }
    return true;
  }

  void close_client(int c) {
    const Client client = clients_[static_cast<std::size_t>(c)];
    clients_[static_cast<std::size_t>(c)] = Client{};
    ::close(c);
    // Mid-exchange, its upstream connection is not reusable.
    if (client.upstream >= 0 && links_[static_cast<std::size_t>(client.upstream)].client == c)
      close_origin(client.upstream);
  }

  void close_origin(int u) {
    const Link link = links_[static_cast<std::size_t>(u)];
    links_[static_cast<std::size_t>(u)] = Link{};
    auto& idle = idle_[static_cast<std::size_t>(link.origin)];
    idle.erase(std::remove(idle.begin(), idle.end(), u), idle.end());
    ::close(u);
    if (link.client >= 0 && clients_[static_cast<std::size_t>(link.client)].open) close_client(link.client);
  }

  std::vector<Upstream> ups_;
  std::vector<Client> clients_;          // --per-request, by client fd
  std::vector<Link> links_;              // --per-request, by upstream fd
  std::vector<std::vector<int>> idle_;   // --per-request: idle upstream fds by origin
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
  for (int i = 1; i < argc; i += 2) {
    std::string opt = argv[i];
    if (opt == "--per-request") {
      per_request = true;
      --i;  // a flag: no value
      continue;
    }
    if (opt != "--listen" && opt != "--workers" && opt != "--to") {
      std::fprintf(stderr, "floor_relay: unknown option \"%s\"\n", opt.c_str());
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "floor_relay: %s wants a value\n", opt.c_str());
      return 2;
    }
    if (opt == "--listen") {
      port = static_cast<uint16_t>(std::atoi(argv[i + 1]));
    } else if (opt == "--workers") {
      workers = std::atoi(argv[i + 1]);
    } else {  // --to
      int p = 0, w = 1;
      if (std::sscanf(argv[i + 1], "%d:%d", &p, &w) < 1) {
        std::fprintf(stderr, "floor_relay: --to wants PORT:WEIGHT, got \"%s\"\n", argv[i + 1]);
        return 2;
      }
      ups.push_back({static_cast<uint16_t>(p), w});
    }
  }
  if (port == 0 || ups.empty() || workers < 1) {
    std::fprintf(stderr, "usage: floor_relay --listen PORT [--workers N] [--per-request] --to PORT:WEIGHT ...\n");
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
