// The epoll sets of heft's own that nest in Asio's (Parking's and
// ReadyWatch's): opening one, and taking every event it has queued.
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>

#include <boost/asio/posix/stream_descriptor.hpp>

namespace heft::proxy {

// Creates an epoll set and hands it to watcher, which then owns it (closing
// the watcher closes the set) and tells Asio's reactor when it has events.
// Returns the set's descriptor; throws, naming what, if either step fails.
inline int open_nested_epoll(boost::asio::posix::stream_descriptor& watcher, const char* what) {
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) throw std::system_error(errno, std::generic_category(), what);
  boost::system::error_code ec;
  watcher.assign(epoll_fd, ec);
  if (ec) {
    ::close(epoll_fd);
    throw boost::system::system_error(ec, what);
  }
  return epoll_fd;
}

// Calls on_event(fd, events) for each queued event, in batches of 64 until
// the set has no more.
template <class OnEvent>
void take_epoll_events(int epoll_fd, OnEvent&& on_event) {
  std::array<epoll_event, 64> batch;
  for (;;) {
    const int n = ::epoll_wait(epoll_fd, batch.data(), static_cast<int>(batch.size()), 0);
    if (n <= 0) return;
    for (int i = 0; i < n; ++i) on_event(batch[i].data.fd, batch[i].events);
    if (n < static_cast<int>(batch.size())) return;
  }
}

}  // namespace heft::proxy
