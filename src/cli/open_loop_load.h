// An open-loop HTTP/1.1 load generator for `heft calibrate`: GETs sent on a
// fixed schedule (request i of a step at its start + i / rate) whatever the
// answers, each timed from the moment it was due (not from when a connection
// was free to send it: wrk2's correction of coordinated omission), over
// keep-alive connections opened as needed and bounded in number. A request
// due while every allowed connection is busy waits its turn, and the wait
// counts in its latency; so a backend that falls behind shows it.
//
// One thread: the caller's, inside run_step(), probe() and settle(). Talks to
// the one endpoint it is given and nothing else.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

namespace heft::cli {

struct LoadTarget {
  boost::asio::ip::tcp::endpoint endpoint;
  std::string host;  // the Host field
  std::string path;  // the request target
};

// What one step of load showed.
struct StepResult {
  double rate = 0;            // offered, requests a second
  double seconds = 0;         // the step's length
  uint64_t scheduled = 0;     // requests due in the step
  uint64_t answered = 0;      // answered with a status below 400
  uint64_t errors = 0;        // answered 4xx or 5xx, or failed (refused, reset, closed)
  uint64_t unfinished = 0;    // not answered when the step was judged: slower than its patience
  double p50_ms = 0, p95_ms = 0;  // over every request due (an unfinished one counts as endless)
  double goodput = 0;         // requests answered below 400 a second, over the step's last three quarters
  std::string first_error;    // "HTTP 503", "Connection refused", ...
  double error_rate() const { return scheduled ? double(errors) / double(scheduled) : 0; }
};

// Sequential requests on one connection: the backend's time for a request
// when nothing else waits.
struct ProbeResult {
  std::vector<double> ms;   // each answered request's time
  std::string error;        // why it stopped early ("Connection refused", "HTTP 404", "no answer within 3s")
};

class OpenLoopLoad {
 public:
  // At most `max_connections` connections to `target`, ever.
  OpenLoopLoad(LoadTarget target, size_t max_connections);
  ~OpenLoopLoad();
  OpenLoopLoad(const OpenLoopLoad&) = delete;
  OpenLoopLoad& operator=(const OpenLoopLoad&) = delete;

  // Up to `count` requests one after another, each sent `spacing` after the
  // one before at the soonest (a gentle pace: one request at a time must not
  // trip a backend's rate limit), for at most `limit` (and at most
  // `first_answer` for the first: a backend that is down is told at once).
  // Stops at the first failure.
  ProbeResult probe(size_t count, std::chrono::milliseconds spacing, std::chrono::milliseconds limit,
                    std::chrono::milliseconds first_answer);

  // Offers `rate` requests a second for `length` over at most `connections`
  // connections at once, and judges the step `patience` after the last
  // request was due (or as soon as every request is answered): a request not
  // answered by then is slower than `patience` and counts as unfinished.
  // Requests still waiting for a connection are dropped then; those in
  // flight finish during the next settle(). `stop` is asked every 50 ms: true
  // ends the step at once (its result is then partial).
  StepResult run_step(double rate, std::chrono::duration<double> length, std::chrono::milliseconds patience,
                      size_t connections, const std::function<bool()>& stop = {});

  // Waits until no request is in flight, at most `limit`; then closes the
  // connections of those that still are. True when none was left.
  bool settle(std::chrono::milliseconds limit);

  // Connections open now.
  size_t connections() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace heft::cli
