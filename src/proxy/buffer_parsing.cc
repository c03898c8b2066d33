#include "proxy/buffer_parsing.h"

#include <limits>

namespace heft::proxy {

namespace http = boost::beast::http;
using boost::system::error_code;

error_code parse_request_head(RequestParser& parser, char* head, std::size_t size, std::size_t later_minor_at,
                              std::size_t& used) {
  parser.header_limit(64 * 1024);
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (later_minor_at) head[later_minor_at] = '1';  // Beast takes 1.0 and 1.1 only
  error_code ec;
  used = parser.put(boost::asio::buffer(head, size), ec);
  if (ec) return ec;
  if (!parser.is_header_done() || used != size) return http::error::partial_message;
  parser.eager(true);
  return {};
}

void prepare_response(ResponseParser& response, bool head_request) {
  response.header_limit(kMaxResponseHead);
  response.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head_request) response.skip(true);
}

std::optional<error_code> response_head_from_buffer(BlockBuffer& buffer, ResponseParser& parser) {
  while (buffer.size() > 0) {
    error_code ec;
    std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec && ec != http::error::need_more) return ec;
    if (parser.is_header_done()) return error_code{};
    if (ec || used == 0) break;
  }
  if (buffer.size() >= kMaxResponseHead) return error_code(http::error::header_limit);
  return std::nullopt;
}

bool has_bare_lf(std::string_view bytes) {
  for (std::size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] == '\n' && bytes[i - 1] != '\r') return true;
  return false;
}

}  // namespace heft::proxy
