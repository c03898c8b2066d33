// Readiness of the data plane's busiest sockets, without a syscall per wait.
//
// Asio's reactor (1.81) has two ways to wait for a socket's next bytes and
// each costs a syscall per wait: a read first tries recv (EAGAIN when nothing
// came yet), and a wait for readability re-arms the descriptor with
// EPOLL_CTL_MOD. A proxy waits twice per request where the bytes are almost
// never there yet: for a backend's response right after sending the request,
// and for a keep-alive client's next request right after the response.
//
// ReadyWatch keeps those sockets in an edge-triggered epoll set of the
// worker's own (each added once, on its first wait), nested in Asio's as one
// descriptor. Like nginx's per-socket ready flag, an event that finds nobody
// waiting is remembered, and a wait on a socket with no news costs nothing
// but the record of its handler. A batch of events costs two syscalls for the
// whole batch (the nested set's epoll_wait, and Asio's EPOLL_CTL_MOD that
// re-arms it) instead of one per wait.
//
// Edge-triggered means only new arrivals are reported, so a socket may be
// waited for here only when its last read came back short (drained). A
// remembered event can be stale (the bytes it announced were read meanwhile):
// whoever waits reads without blocking and falls back to Asio's read on
// EAGAIN. A peer's close is remembered for good (as nginx's pending_eof).
//
// Thread safety: one ReadyWatch per worker, used on the worker's thread only.
#pragma once

#include <vector>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/system/error_code.hpp>

namespace heft::proxy {

class ReadyWatch {
 public:
  using Handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

  explicit ReadyWatch(boost::asio::io_context& io);
  ~ReadyWatch();
  ReadyWatch(const ReadyWatch&) = delete;
  ReadyWatch& operator=(const ReadyWatch&) = delete;

  // True if `fd` (in the set here: `watched`) was reported readable since
  // its last wait (forgotten now), or closed by the peer (for good).
  bool take_ready(int fd, bool watched) {
    if (!watched || static_cast<std::size_t>(fd) >= slots_.size()) return false;
    Slot& slot = slots_[fd];
    const bool ready = slot.ready || slot.hung_up;
    slot.ready = false;
    return ready;
  }

  // take_ready(), after taking the events the set holds if nobody waits: the
  // set is armed only while someone waits, so events that came meanwhile
  // would otherwise be reported only at the next wait. Costs an epoll_wait
  // then (a worker with nobody waiting is idle); nothing when armed, where
  // the events of the reactor's last batch may still be on their way.
  bool take_ready_now(int fd, bool watched) {
    if (watched && !armed_) on_ready();  // no waiter: only records
    return take_ready(fd, watched);
  }

  // Completes (error_code) when `fd` turns readable, closes or fails, or with
  // operation_aborted after cancel(fd). `watched` is the socket owner's flag:
  // false until the socket is added to the set here (which a failed add
  // reports as the error). Only for a drained socket (above); call
  // take_ready() first.
  template <class Token>
  auto async_wait(int fd, bool& watched, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this, fd, &watched](auto handler) { start(fd, watched, Handler(std::move(handler))); }, token);
  }

  // Ends a pending wait on `fd` with operation_aborted (posted, never run
  // inside this call). Nothing happens if none is pending.
  void cancel(int fd);
  // `fd` leaves the set while staying open (its socket is released).
  void forget(int fd, bool& watched);

 private:
  struct Slot {
    bool ready = false;
    // The peer closed (EPOLLRDHUP / EPOLLHUP / EPOLLERR): lasts, but is
    // reported once. The event may come with the last bytes, and a read that
    // takes them does not yet see the end, so the end must be remembered.
    bool hung_up = false;
    Handler waiter;
  };
  void start(int fd, bool& watched, Handler handler);
  // The slot's pending handler, taken out (the slot is left without one).
  Handler take_waiter(Slot& slot) {
    --waiting_;
    return Handler(std::move(slot.waiter));  // a moved-from handler is empty
  }
  void arm();
  void on_ready();

  boost::asio::io_context& io_;
  int epoll_fd_ = -1;
  boost::asio::posix::stream_descriptor watcher_;  // epoll_fd_ inside Asio's reactor
  bool armed_ = false;
  std::size_t waiting_ = 0;
  std::vector<Slot> slots_;  // by descriptor
};

}  // namespace heft::proxy
