// Taking every event queued in an epoll set of heft's own (the nested sets of
// Parking and ReadyWatch), without waiting.
#pragma once

#include <sys/epoll.h>

#include <array>

namespace heft::proxy {

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
