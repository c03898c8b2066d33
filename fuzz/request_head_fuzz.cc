// Fuzz target: a client's bytes, as heft reads them (request_pipeline.h):
// the strict head scan, Beast's request parser as the session sets it up,
// the request plan's target and Host checks, and the body, for up to eight
// pipelined requests. Input: one octet for the read size, one for the body
// piece size, then the client's bytes.
//
// Checks besides the sanitizers: a request read a few octets per read is
// read exactly as one read of everything (the same requests, heads refused
// alike, the same bodies, each ending at the same octet: a proxy whose
// framing depended on how the bytes arrived could be made to forward a
// second request the client did not send); a body of a known length is that
// long; a request takes at least one octet.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "proxy/block_buffer.h"
#include "request_pipeline.h"

namespace {

using heft::fuzz::RequestOutcome;

std::vector<RequestOutcome> read_all(std::string_view client_bytes, std::size_t step, std::size_t capacity) {
  heft::proxy::BlockPool pool;
  heft::proxy::FieldArena arena;
  heft::proxy::BlockBuffer in(pool, heft::proxy::FieldArena::kBytes);
  heft::fuzz::ClientBytes client(client_bytes, step);
  std::vector<RequestOutcome> outcomes;
  for (int i = 0; i < 8; ++i) {
    RequestOutcome outcome = heft::fuzz::read_request(in, client, arena, capacity);
    const bool go_on = outcome.kind == RequestOutcome::complete;
    if (go_on) {
      HEFT_FUZZ_CHECK(outcome.consumed > 0, "a request of no octets");
      if (!outcome.chunked) HEFT_FUZZ_CHECK(outcome.body.size() == outcome.length, "%zu octets of a %llu-octet body",
                                            outcome.body.size(), static_cast<unsigned long long>(outcome.length));
    }
    outcomes.push_back(std::move(outcome));
    if (!go_on) break;
  }
  return outcomes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  heft::fuzz::FuzzInput input(data, size);
  const std::size_t step = input.byte() + 1;
  static constexpr std::size_t kCapacities[] = {64 * 1024, 1, 2, 3, 7, 16, 100, 4096};
  const std::size_t capacity = input.pick(kCapacities);
  const std::string_view client_bytes = input.rest();

  const std::vector<RequestOutcome> stepwise = read_all(client_bytes, step, capacity);
  const std::vector<RequestOutcome> at_once = read_all(client_bytes, client_bytes.size() + 1, 64 * 1024);
  HEFT_FUZZ_CHECK(stepwise.size() == at_once.size(), "%zu requests read %zu octets at a time, %zu at once",
                  stepwise.size(), step, at_once.size());
  for (std::size_t i = 0; i < stepwise.size(); ++i) {
    const RequestOutcome& a = stepwise[i];
    const RequestOutcome& b = at_once[i];
    HEFT_FUZZ_CHECK(a.kind == b.kind && a.status == b.status, "request %zu: outcome %d/%u (%s) stepwise, %d/%u (%s) at once",
                    i, a.kind, a.status, a.reason.c_str(), b.kind, b.status, b.reason.c_str());
    if (a.kind == RequestOutcome::complete) {
      HEFT_FUZZ_CHECK(a.consumed == b.consumed && a.body == b.body && a.chunked == b.chunked && a.length == b.length,
                      "request %zu: framed differently by read size", i);
    }
  }
  return 0;
}
