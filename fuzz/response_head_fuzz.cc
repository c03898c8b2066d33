// Fuzz target: a backend's response, as heft reads it (ResponseParser behind
// prepare_response() and response_head_from_buffer(), then the body pieces
// as Session::forward_response takes them, the end of input as the
// backend's close). Input: one octet for the read size, one for flags (a
// response to HEAD), then the backend's bytes.
//
// Checks besides the sanitizers: the bytes read a few octets per read give
// the same head (status, reason, fields, framing, keep-alive) and the same
// body, ending at the same octet, as one read of everything: heft's own
// head parser and Beast's, which it hands unusual heads to, must agree
// whatever the split.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "proxy/block_buffer.h"
#include "proxy/buffer_parsing.h"
#include "request_pipeline.h"

namespace {

namespace proxy = heft::proxy;

struct Read {
  std::string head_error;  // "" when the head was read
  bool head_done = false;
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;
  bool chunked = false, keep_alive = false, length_dropped = false;
  std::optional<std::uint64_t> length;
  std::string body;
  std::string body_error;
  bool complete = false;
  std::size_t consumed = 0;
};

Read read_response(std::string_view bytes, std::size_t step, bool head_request) {
  proxy::BlockPool pool;
  proxy::FieldArena arena;
  std::vector<unsigned char> arena_memory(proxy::FieldArena::kBytes);
  arena.reset(arena_memory.data());
  proxy::BlockBuffer buffer(pool);
  heft::fuzz::ClientBytes backend(bytes, step);
  proxy::ResponseParser response(arena);
  proxy::prepare_response(response, head_request);
  Read r;
  std::optional<boost::system::error_code> head;
  while (!(head = proxy::response_head_from_buffer(buffer, response))) {
    if (backend.read_into(buffer)) continue;
    // read_header at the backend's close: the parser's end, when something came.
    if (backend.delivered() == 0) return r;
    boost::system::error_code eof_ec;
    response.put_eof(eof_ec);
    if (eof_ec || !response.is_header_done()) {
      r.head_error = eof_ec ? eof_ec.message() : "closed before the head's end";
      return r;
    }
    head = boost::system::error_code{};
  }
  if (*head) {
    r.head_error = head->message();
    return r;
  }
  r.head_done = true;
  r.status = response.status();
  r.reason = std::string(response.reason());
  for (const auto& f : response.fields())
    r.fields.emplace_back(std::string(response.name(f)), std::string(response.value(f)));
  r.chunked = response.chunked();
  r.keep_alive = response.keep_alive();
  r.length_dropped = response.length_dropped();
  if (auto length = response.content_length()) r.length = *length;
  // A 1xx is followed by another head (the session starts a new parser): not read here.
  if (r.status >= 100 && r.status < 200) return r;
  std::size_t pieces = 0;
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
        if (!eof_ec && !response.is_done() && piece->second == 0) {
          // A body delimited by the close: it ended here.
          break;
        }
      }
    }
    r.body.append(response.body().data(), piece->second);
    if (piece->first) {
      r.body_error = piece->first.message();
      return r;
    }
    HEFT_FUZZ_CHECK(++pieces < 1'000'000, "a body that never ends");
  }
  r.complete = true;
  r.consumed = backend.delivered() - buffer.size();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  heft::fuzz::FuzzInput input(data, size);
  const std::size_t step = input.byte() + 1;
  const bool head_request = input.flag();
  const std::string_view bytes = input.rest();

  const Read stepwise = read_response(bytes, step, head_request);
  const Read at_once = read_response(bytes, bytes.size() + 1, head_request);
  HEFT_FUZZ_CHECK(stepwise.head_done == at_once.head_done, "head read %d stepwise (%s), %d at once (%s)",
                  stepwise.head_done, stepwise.head_error.c_str(), at_once.head_done, at_once.head_error.c_str());
  if (!stepwise.head_done) return 0;
  HEFT_FUZZ_CHECK(stepwise.status == at_once.status && stepwise.reason == at_once.reason, "status line differs");
  HEFT_FUZZ_CHECK(stepwise.fields == at_once.fields, "fields differ");
  HEFT_FUZZ_CHECK(stepwise.chunked == at_once.chunked && stepwise.length == at_once.length &&
                      stepwise.keep_alive == at_once.keep_alive && stepwise.length_dropped == at_once.length_dropped,
                  "framing differs: chunked %d/%d, keep-alive %d/%d", stepwise.chunked, at_once.chunked,
                  stepwise.keep_alive, at_once.keep_alive);
  HEFT_FUZZ_CHECK(stepwise.complete == at_once.complete && stepwise.body == at_once.body &&
                      stepwise.consumed == at_once.consumed,
                  "body differs: complete %d/%d, %zu/%zu octets, ending at %zu/%zu (%s / %s)", stepwise.complete,
                  at_once.complete, stepwise.body.size(), at_once.body.size(), stepwise.consumed, at_once.consumed,
                  stepwise.body_error.c_str(), at_once.body_error.c_str());
  return 0;
}
