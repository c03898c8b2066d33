#include "proxy/parking.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <system_error>

#include "proxy/epoll_events.h"

namespace heft::proxy {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Parking::Parking(asio::io_context& io, Wake wake, Closed closed)
    : io_(io), wake_(std::move(wake)), closed_(std::move(closed)), watcher_(io) {
  epoll_fd_ = open_nested_epoll(watcher_, "parking epoll");
  // Room for every descriptor the process may open (up to 65,536), reserved
  // now: a large block of its own that is never moved, instead of copies
  // grown in the middle of a burst of connections, which would sit on top of
  // the worker's heap and keep the sessions' freed memory from going back.
  // Untouched pages cost nothing.
  rlimit limit{};
  std::size_t slots = 4096;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    slots = std::max<std::size_t>(slots, static_cast<std::size_t>(limit.rlim_cur));
  by_fd_.reserve(std::min<std::size_t>(slots, 65536));
  parked_fds_.reserve(std::min<std::size_t>(slots, 65536));
}

Parking::~Parking() {
  for (int fd : parked_fds_) ::close(fd);
  boost::system::error_code ignored;
  watcher_.close(ignored);  // closes epoll_fd_
}

bool Parking::park(Socket socket, Entry entry) {
  boost::system::error_code ec;
  const int fd = socket.release(ec);  // leaves Asio's reactor; the descriptor stays open
  if (ec) {
    socket.close(ec);
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return false;
  }
  if (static_cast<std::size_t>(fd) >= by_fd_.size()) by_fd_.resize(static_cast<std::size_t>(fd) + 1);
  by_fd_[fd] = Slot{std::move(entry), static_cast<int32_t>(parked_fds_.size())};
  parked_fds_.push_back(fd);
  arm();
  return true;
}

void Parking::arm() {
  if (armed_ || parked_fds_.empty()) return;
  armed_ = true;
  watcher_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    armed_ = false;
    if (ec) return;  // closed (worker shutting down)
    wake_ready();
    arm();
  });
}

void Parking::wake_ready() {
  take_epoll_events(epoll_fd_, [this](int fd, uint32_t) {
    if (fd < 0 || static_cast<std::size_t>(fd) >= by_fd_.size() || by_fd_[fd].position < 0) return;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    Entry entry = std::move(by_fd_[fd].entry);
    forget(fd);
    Socket socket(io_);
    boost::system::error_code ec;
    socket.assign(entry.v6 ? tcp::v6() : tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      if (closed_) closed_(entry);
      return;
    }
    wake_(std::move(socket), entry);
  });
}

void Parking::close(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
}

void Parking::forget(int fd) {
  // Swap-remove from the dense list.
  const int32_t position = by_fd_[fd].position;
  const int last = parked_fds_.back();
  parked_fds_[position] = last;
  by_fd_[last].position = position;
  parked_fds_.pop_back();
  by_fd_[fd].position = -1;
  by_fd_[fd].entry = Entry{};
}

void Parking::sweep(Clock::time_point now) {
  for (std::size_t i = 0; i < parked_fds_.size();) {
    const int fd = parked_fds_[i];
    if (now < by_fd_[fd].entry.deadline) {
      ++i;
      continue;
    }
    close(fd);
    if (closed_) closed_(by_fd_[fd].entry);
    forget(fd);  // moves the last descriptor to i: look at i again
  }
}

void Parking::close_port(uint16_t local_port) {
  for (std::size_t i = 0; i < parked_fds_.size();) {
    const int fd = parked_fds_[i];
    if (by_fd_[fd].entry.local_port != local_port) {
      ++i;
      continue;
    }
    close(fd);
    if (closed_) closed_(by_fd_[fd].entry);
    forget(fd);  // moves the last descriptor to i: look at i again
  }
}

void Parking::close_all() {
  for (int fd : parked_fds_) {
    close(fd);
    if (closed_) closed_(by_fd_[fd].entry);
    by_fd_[fd].position = -1;
    by_fd_[fd].entry = Entry{};
  }
  parked_fds_.clear();
  // A pending wait would keep the worker's io_context running after a drain.
  boost::system::error_code ignored;
  watcher_.cancel(ignored);
}

}  // namespace heft::proxy
