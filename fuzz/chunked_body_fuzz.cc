// Fuzz target: a chunked body, as heft decodes it on both sides — a client's
// request body (request_pipeline.h: Beast's request parser and the session's
// bare-LF rule) and a backend's response body (ResponseParser, fed as
// Session::forward_response feeds it) — against the reference decoder of RFC
// 9112 7.1 (rfc9112_model.h). Input: one octet for the read size, one for
// the body piece size, then the body.
//
// Checks: each side either decodes the body the model decodes, ending at the
// same octet, or (where the model finds it bad or unfinished) refuses it or
// waits; never a body the model does not see, never a different end.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "proxy/block_buffer.h"
#include "proxy/buffer_parsing.h"
#include "request_pipeline.h"
#include "rfc9112_model.h"

namespace {

using heft::fuzz::rfc9112::ChunkedBody;
namespace proxy = heft::proxy;

struct Decoded {
  bool complete = false;
  std::string body;
  std::size_t consumed = 0;  // body octets, when complete
  std::string error;
};

constexpr std::string_view kRequestHead = "POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n";
constexpr std::string_view kResponseHead = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

Decoded request_side(std::string_view body, std::size_t step, std::size_t capacity) {
  proxy::BlockPool pool;
  proxy::FieldArena arena;
  proxy::BlockBuffer in(pool, proxy::FieldArena::kBytes);
  const std::string bytes = std::string(kRequestHead) + std::string(body);
  heft::fuzz::ClientBytes client(bytes, step);
  const heft::fuzz::RequestOutcome outcome = heft::fuzz::read_request(in, client, arena, capacity);
  HEFT_FUZZ_CHECK(outcome.kind != heft::fuzz::RequestOutcome::refused && outcome.kind != heft::fuzz::RequestOutcome::closed,
                  "the fixed request head was refused: %s", outcome.reason.c_str());
  Decoded d;
  d.complete = outcome.kind == heft::fuzz::RequestOutcome::complete;
  d.body = outcome.body;
  d.consumed = d.complete ? outcome.consumed - kRequestHead.size() : 0;
  d.error = outcome.reason;
  return d;
}

// Session::forward_response's reading of a chunked body, minus the socket:
// the head, then pieces from the buffer, reading `step` octets more when
// needed, and the end of input as the backend's close.
Decoded response_side(std::string_view body, std::size_t step) {
  proxy::BlockPool pool;
  proxy::FieldArena arena;
  proxy::BlockBuffer buffer(pool);
  const std::string bytes = std::string(kResponseHead) + std::string(body);
  heft::fuzz::ClientBytes backend(bytes, step);
  proxy::ResponseParser response(arena);
  proxy::prepare_response(response, false);
  Decoded d;
  std::optional<boost::system::error_code> head;
  while (!(head = proxy::response_head_from_buffer(buffer, response)))
    HEFT_FUZZ_CHECK(backend.read_into(buffer), "the fixed response head was not read");
  HEFT_FUZZ_CHECK(!*head && response.chunked(), "the fixed response head: %s", head->message().c_str());
  while (!response.is_done()) {
    proxy::body_into(response, nullptr, 64 * 1024);
    std::optional<proxy::BodyPiece> piece = proxy::body_from_buffer(buffer, response, 64 * 1024);
    if (!piece) {
      if (backend.read_into(buffer)) continue;
      piece = proxy::body_from_buffer(buffer, response, 64 * 1024);
      if (!piece) {
        boost::system::error_code eof_ec;
        response.put_eof(eof_ec);
        piece = proxy::BodyPiece{eof_ec, response.body().size()};
        HEFT_FUZZ_CHECK(eof_ec || response.is_done() || piece->second > 0, "a response body that never ends");
      }
    }
    d.body.append(response.body().data(), piece->second);
    if (piece->first) {
      d.error = piece->first.message();
      return d;
    }
  }
  d.complete = true;
  d.consumed = backend.delivered() - buffer.size() - kResponseHead.size();
  return d;
}

void check_against_model(const char* side, const Decoded& heft, const ChunkedBody& model) {
  if (heft.complete) {
    HEFT_FUZZ_CHECK(model.status == ChunkedBody::complete, "%s: heft decoded a body the model finds %s (%s)", side,
                    model.status == ChunkedBody::bad ? "bad" : "unfinished", model.why.c_str());
    HEFT_FUZZ_CHECK(heft.body == model.body && heft.consumed == model.consumed,
                    "%s: heft decoded %zu octets ending at %zu, the model %zu ending at %zu", side, heft.body.size(),
                    heft.consumed, model.body.size(), model.consumed);
  } else {
    HEFT_FUZZ_CHECK(model.status != ChunkedBody::complete,
                    "%s: heft refused or waits (%s) for a body the model decodes (%zu octets ending at %zu)", side,
                    heft.error.c_str(), model.body.size(), model.consumed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  heft::fuzz::FuzzInput input(data, size);
  const std::size_t step = input.byte() + 1;
  static constexpr std::size_t kCapacities[] = {64 * 1024, 1, 2, 5, 16, 4096};
  const std::size_t capacity = input.pick(kCapacities);
  const std::string_view body = input.rest();

  const ChunkedBody model = heft::fuzz::rfc9112::decode_chunked(body);
  check_against_model("request", request_side(body, step, capacity), model);
  check_against_model("response", response_side(body, step), model);
  return 0;
}
