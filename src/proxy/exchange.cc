// The per-request state every protocol shares (see exchange.h).
#include "proxy/exchange.h"

#include <fmt/format.h>

#include "observe/log.h"
#include "proxy/runtime.h"
#include "upstream/pool.h"

namespace heft::proxy {

Exchange::Exchange(Worker& worker, uint16_t port, std::string ip)
    : w(worker), local_port(port), client_ip(std::move(ip)) {}

Exchange::~Exchange() {
  if (scratch_) w.blocks.put(scratch_);
}

char* Exchange::scratch() {
  if (!scratch_) scratch_ = w.blocks.get();
  return scratch_;
}

AttemptResult Exchange::failure(const char* stage, error_code ec) {
  if (client_closed_) return AttemptResult{Outcome::client_gone};
  failure_stage_ = stage;
  failure_ec_ = ec;
  failure_timed_out_ = timed_out;
  return AttemptResult{timed_out ? Outcome::timeout : Outcome::error};
}

std::string Exchange::failure_reason() const {
  if (failure_timed_out_ || !failure_ec_) return failure_stage_;
  return fmt::format("{}: {}", failure_stage_, failure_ec_.message());
}

void Exchange::arm(std::chrono::milliseconds timeout) {
  deadline = coarse_now() + timeout;
  timed_out = false;
}

void Exchange::cancel_io(Socket& socket) {
  error_code ignored;
  socket.cancel(ignored);
  w.ready_watch.cancel(socket.native_handle());
}

void Exchange::expire() {
  timed_out = true;
  deadline = Clock::time_point::max();
  cancel_client();
  if (upstream) cancel_io(*upstream);
}

void Exchange::watch_client_from(Clock::time_point since) {
  if (ignore_client_abort_) return;
  head_wait_since = since;
  next_client_check = since + kClientCheckAfter;
}

void Exchange::client_left() {
  client_closed_ = true;
  unwatch_client();
  if (upstream) cancel_io(*upstream);
  if (queue_wait_) queue_wait_->timer.cancel();  // it gives up its place in the queue
}

void Exchange::check_stall(Clock::time_point now) {
  const upstream::PoolSnapshot& pool = *head_pool_;
  upstream::BackendState& state = pool.state(head_backend_);
  const std::chrono::milliseconds limit(state.stall_limit_ms.load(std::memory_order_relaxed));
  if (!stall_counted_ && limit.count() > 0 && now - head_asked_at_ >= limit) {
    stall_counted_ = true;
    state.stalls_total.fetch_add(1, std::memory_order_relaxed);
    pool.report_failure(head_backend_, now);
    static observe::LogLimit stalls("backends past their stall limit", observe::LogLevel::warn);
    if (stalls.admit())
      observe::warn("backend {} of {}: no response head after {} ms (its stall limit): counted as a failure",
                    pool.backend(head_backend_).name, pool.config().name, limit.count());
  }
  if (head_retryable_ && !pool.healthy(head_backend_)) {
    // Out of service now: this request goes to another backend (the
    // attempt ends as a timeout; the loop retries it).
    head_abandoned_ = true;
    head_wait_over();
    timed_out = true;
    deadline = Clock::time_point::max();
    if (upstream) cancel_io(*upstream);
  }
}

}  // namespace heft::proxy
