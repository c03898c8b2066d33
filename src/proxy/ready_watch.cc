#include "proxy/ready_watch.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include "proxy/epoll_events.h"

namespace heft::proxy {

namespace asio = boost::asio;
using boost::system::error_code;

ReadyWatch::ReadyWatch(asio::io_context& io) : io_(io), watcher_(io) {
  epoll_fd_ = open_nested_epoll(watcher_, "ready watch epoll");
  slots_.reserve(1024);
}

ReadyWatch::~ReadyWatch() {
  // Pending waits belong to coroutines that are being torn down with the
  // worker: their handlers are destroyed, not run.
  std::vector<Handler> pending;
  for (Slot& slot : slots_)
    if (slot.waiter) pending.push_back(std::move(slot.waiter));
  slots_.clear();
  pending.clear();
  error_code ignored;
  watcher_.close(ignored);  // closes epoll_fd_
}

void ReadyWatch::start(int fd, bool& watched, Handler handler) {
  if (static_cast<std::size_t>(fd) >= slots_.size()) slots_.resize(static_cast<std::size_t>(fd) + 1);
  if (!watched) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    // EEXIST: still in the set from before a release that skipped forget()
    // (closing a descriptor removes it from the set, so it is this socket).
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
      const error_code ec(errno, asio::error::get_system_category());
      asio::post(io_, [h = std::move(handler), ec]() mutable { std::move(h)(ec); });
      return;
    }
    watched = true;
    slots_[fd].ready = slots_[fd].hung_up = false;  // the add reports readiness already present
  }
  // swap, not move assignment: Boost 1.81's operator=(any_completion_handler&&)
  // wraps the handler in itself (fixed in 1.82).
  slots_[fd].waiter.swap(handler);
  ++waiting_;
  arm();
}

void ReadyWatch::cancel(int fd) {
  if (static_cast<std::size_t>(fd) >= slots_.size() || !slots_[fd].waiter) return;
  asio::post(io_, [h = take_waiter(slots_[fd])]() mutable { std::move(h)(asio::error::operation_aborted); });
  // Nobody waits: an armed watcher would keep the worker's io_context busy
  // (a drained worker stops when it runs out of work).
  if (waiting_ == 0 && armed_) {
    error_code ignored;
    watcher_.cancel(ignored);
  }
}

void ReadyWatch::forget(int fd, bool& watched) {
  cancel(fd);
  if (!watched) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  watched = false;
  if (static_cast<std::size_t>(fd) < slots_.size()) slots_[fd].ready = slots_[fd].hung_up = false;
}

// Armed only while someone waits: events that come meanwhile stay queued in
// the nested set, and arming reports them at once.
void ReadyWatch::arm() {
  if (armed_ || waiting_ == 0) return;
  armed_ = true;
  watcher_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const error_code& ec) {
    // Never run after the destructor: the worker's io_context has stopped for good by then.
    armed_ = false;
    if (!ec) on_ready();
    else if (ec != asio::error::operation_aborted) return;
    arm();  // also after cancel() disarmed, if a wait started meanwhile
  });
}

void ReadyWatch::on_ready() {
  take_epoll_events(epoll_fd_, [this](int fd, uint32_t events) {
    if (fd < 0 || static_cast<std::size_t>(fd) >= slots_.size()) return;
    Slot& slot = slots_[fd];
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) slot.hung_up = true;
    if (!slot.waiter) {
      slot.ready = true;
      return;
    }
    // Run here: the waiter reads at once (it may start new waits, which
    // only touch slots by index, so nothing held here goes stale).
    take_waiter(slot)(error_code{});
  });
}

}  // namespace heft::proxy
