// What a demo backend may be (model.h, DemoBackendConfig), checked by the
// validator (json_reader.cc) for both forms.
#include <fmt/format.h>

#include "config/model.h"
#include "config/values.h"

namespace heft::config {

std::string demo_backend_problem(const DemoBackendConfig& backend) {
  const std::string& name = backend.name;
  // A name shows up in X-Backend and in test and benchmark output: keep it a plain word.
  const bool plain = !name.empty() && name.size() <= 64 &&
                     name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                         std::string::npos;
  if (!plain)
    return fmt::format("demo backend name \"{}\" must be 1 to 64 letters, digits, '.', '_' or '-'",
                       printable(name));
  HostPortResult split = split_host_port(backend.listen, 0);
  if (!split.value || split.value->port == 0 || split.value->host.empty())
    return fmt::format("demo backend {} needs an address IP:PORT (e.g. 127.0.0.1:9081), got \"{}\"", name,
                       printable(backend.listen));
  std::optional<std::string> ip = listen_address(split.value->host);
  if (!ip)
    return fmt::format("demo backend {} must listen on an IP address (e.g. 127.0.0.1:9081), got \"{}\"", name,
                       printable(backend.listen));
  if (std::optional<std::string> v4 = ipv4_of_mapped(*ip))
    return fmt::format("demo backend {}: \"{}\" is an IPv4-mapped IPv6 address: write it as {}", name,
                       backend.listen, join_host_port(*v4, split.value->port));
  return "";
}

std::string demo_backend_problem(const std::vector<DemoBackendConfig>& backends, size_t index) {
  const DemoBackendConfig& backend = backends[index];
  if (std::string problem = demo_backend_problem(backend); !problem.empty()) return problem;
  const HostPort mine = *split_host_port(backend.listen, 0).value;
  for (size_t i = 0; i < index; ++i) {
    if (backends[i].name == backend.name) return fmt::format("duplicate demo backend name \"{}\"", backend.name);
    HostPortResult other = split_host_port(backends[i].listen, 0);
    if (other.value && other.value->port == mine.port &&
        listen_address(other.value->host) == listen_address(mine.host))
      return fmt::format("demo backends {} and {} both listen on {}", backends[i].name, backend.name, backend.listen);
  }
  return "";
}

}  // namespace heft::config
