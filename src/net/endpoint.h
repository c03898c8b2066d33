// A backend's address as the data plane and the health checker dial it: one
// parser for both, so that a probe judges the address requests would reach.
// Boost.Asio alone: below both the proxy and the health checks. Names live in
// heft::net, an inline namespace of heft.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

namespace heft {
inline namespace net {

// "ip:port" or "[ipv6]:port" as an endpoint; nullopt for anything else. A
// backend's addresses are what config::resolve() wrote (IP literals, joined
// with the port), so a host name never reaches here from heft's own paths.
inline std::optional<boost::asio::ip::tcp::endpoint> parse_backend_address(std::string_view address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string_view digits = address.substr(colon + 1);
  uint16_t port = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  boost::system::error_code ec;
  const boost::asio::ip::address ip = boost::asio::ip::make_address(std::string(host), ec);
  if (ec) return std::nullopt;
  return boost::asio::ip::tcp::endpoint(ip, port);
}

// The data plane's form: port 0 when the address is none, so that connecting
// fails (502).
inline boost::asio::ip::tcp::endpoint backend_endpoint(std::string_view address) {
  return parse_backend_address(address).value_or(boost::asio::ip::tcp::endpoint());
}

}  // namespace net
}  // namespace heft
