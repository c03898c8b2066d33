// Idle client connections, parked: a connection that has waited a while for
// its next request leaves Asio altogether (its socket released, its session,
// coroutine frames and buffers freed) and waits as a bare descriptor in an
// epoll set of its own. When it turns readable (a request, or the client
// closing) it goes back to Asio and a new session serves it. What an idle
// connection costs is then one small record here and the kernel's socket.
//
// Why a second epoll set: a descriptor waiting inside Asio holds Asio's
// per-descriptor state and a pending wait operation (with its handler and
// executor), several hundred bytes that the allocator scatters among the
// memory of busy sessions. Parking and waking take a few syscalls, paid only
// by connections idle for longer than the parking delay.
//
// Thread safety: one Parking per worker, used on the worker's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "proxy/io_types.h"

namespace heft::proxy {

class Parking {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    uint16_t local_port = 0;
    bool v6 = false;
    std::string client_ip;
    Clock::time_point deadline;  // the idle timeout, or for a connection with no request yet the header timeout
    bool no_request_yet = false;  // its deadline is the header timeout of its first request
  };
  // Called with a socket back in Asio and its entry, when it turned readable.
  using Wake = std::function<void(Socket, Entry&)>;
  // Called with the entry of a parked connection closed here (timeout, drain).
  using Closed = std::function<void(const Entry&)>;

  Parking(boost::asio::io_context& io, Wake wake, Closed closed);
  ~Parking();  // closes what is still parked (without calling `closed`)
  Parking(const Parking&) = delete;
  Parking& operator=(const Parking&) = delete;

  // Takes the connection out of Asio and parks it. False (socket closed, entry
  // dropped) if the system refused.
  bool park(Socket socket, Entry entry);
  // Closes parked connections whose deadline passed.
  void sweep(Clock::time_point now);
  // Closes every parked connection (drain).
  void close_all();
  // Closes the parked connections that came in on `local_port` (a reload stopped serving it).
  void close_port(uint16_t local_port);
  std::size_t size() const { return parked_fds_.size(); }

 private:
  void arm();
  void wake_ready();
  void close(int fd);
  void forget(int fd);  // drops the entry of a parked descriptor

  boost::asio::io_context& io_;
  Wake wake_;
  Closed closed_;
  int epoll_fd_ = -1;
  boost::asio::posix::stream_descriptor watcher_;  // readable when a parked descriptor is
  bool armed_ = false;
  // Entries by descriptor and the parked descriptors, both contiguous: no
  // per-connection allocation that could pin a page of freed session memory.
  struct Slot {
    Entry entry;
    int32_t position = -1;  // in parked_fds_; -1: not parked
  };
  std::vector<Slot> by_fd_;
  std::vector<int> parked_fds_;
};

}  // namespace heft::proxy
