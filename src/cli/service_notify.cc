// systemd's notify protocol (see service_notify.h).
#include "cli/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace heft::cli {

bool notify_service_manager(std::string_view state) {
  const char* socket_name = std::getenv("NOTIFY_SOCKET");
  if (!socket_name || !*socket_name) return false;
  const std::string_view name(socket_name);
  // A path ("/run/systemd/notify") or "@name", the abstract namespace (the
  // '@' stands for the leading NUL). systemd 253 also speaks over vsock
  // ("vsock:CID:PORT"), for virtual machines: not heft's case.
  if (name[0] != '/' && name[0] != '@') return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (name.size() > sizeof(address.sun_path) - (name[0] == '/' ? 1 : 0)) return false;
  std::memcpy(address.sun_path, name.data(), name.size());
  if (name[0] == '@') address.sun_path[0] = '\0';
  // An abstract name is exactly as long as given; a path ends at its NUL.
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + (name[0] == '/' ? 1 : 0));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&address), length);
  ::close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

std::string reloading_state() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const long long usec = static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1000;
  return fmt::format("RELOADING=1\nMONOTONIC_USEC={}", usec);
}

}  // namespace heft::cli
