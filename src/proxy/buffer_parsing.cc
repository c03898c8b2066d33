#include "proxy/buffer_parsing.h"

#include <limits>

#include "net/http_chars.h"

namespace heft::proxy {

namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

// The request parser's on_chunk_header callback (Beast keeps a reference:
// one stateless object for all parsers).
struct ChunkExtensionCheck {
  void operator()(std::uint64_t, boost::beast::string_view extensions, error_code& ec) const {
    if (!chunk_extensions_are_text({extensions.data(), extensions.size()})) ec = http::error::bad_chunk_extension;
  }
};
ChunkExtensionCheck chunk_extension_check;

}  // namespace

bool chunk_extensions_are_text(std::string_view extensions) {
  for (char c : extensions)
    if (!is_field_text(c)) return false;
  return true;
}

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
  if (parser.chunked()) parser.on_chunk_header(chunk_extension_check);
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
