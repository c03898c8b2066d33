#include "request_pipeline.h"

#include <algorithm>
#include <cstring>

#include <boost/beast/http/error.hpp>

#include "proxy/buffer_parsing.h"
#include "proxy/request_head.h"
#include "fuzz_input.h"

namespace heft::fuzz {

namespace http = boost::beast::http;
using proxy::BlockBuffer;

bool ClientBytes::read_into(BlockBuffer& buffer) {
  if (at_ >= input_.size()) return false;
  const auto room = buffer.prepare(std::min(step_, input_.size() - at_));
  if (room.size() == 0) return false;
  std::memcpy(room.data(), input_.data() + at_, room.size());
  buffer.commit(room.size());
  at_ += room.size();
  return true;
}

RequestOutcome read_request(BlockBuffer& in, ClientBytes& client, proxy::FieldArena& arena,
                            std::size_t body_capacity) {
  RequestOutcome out;
  const std::size_t start = client.delivered() - in.size();
  const auto consumed = [&] { return client.delivered() - in.size() - start; };

  // Session::read_head
  if (in.size() == 0 && !client.read_into(in)) return out;
  proxy::HeadScan scan;
  for (;;) {
    scan = proxy::scan_request_head({in.bytes(), in.size()});
    if (scan.status == proxy::HeadScan::complete) break;
    if (scan.status != proxy::HeadScan::incomplete) {
      out.kind = RequestOutcome::refused;
      out.reason = scan.reason;
      switch (scan.status) {
        case proxy::HeadScan::uri_too_long: out.status = 414; break;
        case proxy::HeadScan::header_too_large: out.status = 431; break;
        case proxy::HeadScan::version_not_supported: out.status = 505; break;
        default: out.status = 400; break;
      }
      return out;
    }
    in.consume(scan.skip);
    if (!client.read_into(in)) return out;
  }

  // Session::run
  arena.reset(in.tail());
  proxy::RequestParser parser(std::piecewise_construct, std::make_tuple(),
                              std::make_tuple(proxy::ArenaAllocator<char>(arena)));
  std::size_t used = 0;
  const auto ec = proxy::parse_request_head(parser, in.bytes() + scan.skip, scan.head_size, scan.later_minor_at, used);
  in.consume(scan.skip + used);
  if (ec) {
    out.kind = RequestOutcome::refused;
    out.status = 400;
    out.reason = ec.message();
    return out;
  }
  const auto& req = parser.get();
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  out.version = req.version();
  for (const auto& field : req)
    if (field.name() == http::field::host && out.host.empty()) out.host = std::string(field.value());
  out.chunked = parser.chunked();
  out.length = parser.content_length().value_or(0);

  // Session::plan_request's refusals before any body is read.
  if (req.method() == http::verb::connect) {
    out.kind = RequestOutcome::refused;
    out.status = 501;
    return out;
  }
  const proxy::AbsoluteTarget absolute = proxy::split_absolute_target(req.target());
  std::string_view host = out.host;
  if (absolute.status == proxy::AbsoluteTarget::bad) {
    out.kind = RequestOutcome::refused;
    out.status = 400;
    out.reason = absolute.reason;
    return out;
  }
  if (req.target() == "*" && req.method() != http::verb::options) {
    out.kind = RequestOutcome::refused;
    out.status = 400;
    out.reason = "asterisk-form with another method than OPTIONS";
    return out;
  }
  if (absolute.status == proxy::AbsoluteTarget::absolute) host = absolute.authority;
  if (!host.empty()) {
    if (const char* problem = proxy::host_problem(host)) {
      out.kind = RequestOutcome::refused;
      out.status = 400;
      out.reason = problem;
      return out;
    }
  }
  out.host = std::string(host);

  // Session::handle and send_rest_of_body: read_body_piece until the end.
  std::string piece(body_capacity, '\0');
  while (!parser.is_done()) {
    proxy::body_into(parser, piece.data(), body_capacity);
    std::optional<proxy::BodyPiece> got = proxy::body_from_buffer(in, parser, body_capacity);
    while (!got) {
      if (!client.read_into(in)) {
        // read_body_piece at the end of the input: what the last read
        // brought, then the parser's end.
        got = proxy::body_from_buffer(in, parser, body_capacity);
        if (got) break;
        boost::system::error_code eof_ec;
        parser.put_eof(eof_ec);
        got = proxy::BodyPiece{eof_ec, proxy::body_got(parser, body_capacity)};
        // The session would read again, find the end again, and so on.
        HEFT_FUZZ_CHECK(eof_ec || parser.is_done() || got->second > 0, "a body that never ends at the input's end");
        break;
      }
      got = proxy::body_from_buffer(in, parser, body_capacity);
    }
    out.body.append(piece.data(), got->second);
    if (got->first) {
      out.kind = RequestOutcome::body_error;
      out.reason = got->first.message();
      out.consumed = consumed();
      return out;
    }
  }
  out.kind = RequestOutcome::complete;
  out.consumed = consumed();
  return out;
}

}  // namespace heft::fuzz
