#include "cli/capacity_ramp.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include <fmt/format.h>

namespace heft::cli {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Seconds = std::chrono::duration<double>;

namespace {

// A step lasts long enough for this many requests (a p95 that is not the
// luck of a few), within the bounds below.
constexpr double kStepRequests = 200;
constexpr Seconds kShortestStep{0.5}, kLongestStep{2.0};
// Rates are known to within this: refining stops once the first rate that
// failed is at most this much above the last that held.
constexpr double kResolution = 0.05;
// Answers short of the rate by more than this share (and by at least
// kShortfallRequests over the step's last three quarters): the backend fell behind.
constexpr double kShortfall = 0.03;
constexpr double kShortfallRequests = 3;
constexpr size_t kMaxRefinements = 6;
// A candidate just under what a failed step still delivered, so it holds;
// and the most the capacity is said to be once a step fell behind: a rate
// that held just past it (by less than kShortfall) is no more.
constexpr double kUnderDelivered = 0.98;
// Requests sent one at a time first, no closer than this (40 a second).
constexpr size_t kProbeRequests = 10;
constexpr milliseconds kProbeSpacing{25};
// Idle time between steps.
constexpr milliseconds kRest{100};
// The slowest rate worth a step.
constexpr double kLowestRate = 1;
// A step that failed narrowly (no errors, and its p95 alone or answers at
// least this share of the rate) is run once more at the same rate, this many
// times a ramp at most: a stall of a busy machine is not the backend's limit.
constexpr double kNarrowShare = 0.8;
constexpr int kRepeats = 2;

std::string rate_text(double rate) { return rate >= 100 ? fmt::format("{:.0f}", rate) : fmt::format("{:.1f}", rate); }

std::string ms_text(double ms) {
  if (std::isinf(ms)) return "unanswered";
  return ms >= 10 ? fmt::format("{:.0f}ms", ms) : fmt::format("{:.1f}ms", ms);
}

class Ramp {
 public:
  Ramp(const LoadTarget& target, const RampOptions& o) : o_(o), load_(target, o.max_connections) {}
  CapacityResult run();

 private:
  // How long a step at `rate` lasts: enough requests, within what is left.
  Seconds step_length(double rate) const {
    return std::clamp(Seconds(kStepRequests / rate), kShortestStep, longest_);
  }
  // Whether a step at `rate` still fits before the deadline.
  bool fits(double rate) const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(step_length(rate)) + o_.p95 + kRest +
               milliseconds(100) <=
           o_.deadline;
  }
  RampStep step(double rate);
  // step(), run once more after a narrow failure; the second verdict stands.
  RampStep confirmed_step(double rate);
  void say(const std::string& line) const {
    if (o_.progress) o_.progress(line);
  }
  bool stopped() const { return o_.stop && o_.stop(); }

  const RampOptions& o_;
  OpenLoopLoad load_;
  Seconds longest_ = kLongestStep;
  int repeats_ = 0;
  double saturated_ = 0;  // the most a step that fell behind answered a second
  CapacityResult result_;
};

RampStep Ramp::step(double rate) {
  const Seconds length = step_length(rate);
  // Enough connections for every request of the step to be in flight for the
  // whole p95 threshold, and some to spare: more would only wait longer than
  // the threshold allows anyway.
  const size_t connections = size_t(std::ceil(rate * std::chrono::duration<double>(o_.p95).count() * 1.25)) + 2;
  RampStep s;
  s.result = load_.run_step(rate, length, o_.p95, connections, o_.stop);
  const StepResult& r = s.result;
  const double expected = rate * length.count() * 0.75, answered = r.goodput * length.count() * 0.75;
  const bool fell_behind = r.goodput < rate * (1 - kShortfall) && expected - answered >= kShortfallRequests;
  if (fell_behind) saturated_ = std::max(saturated_, r.goodput);
  // The most telling sign first: errors, then answers that fell behind the
  // rate (a p95 over the threshold follows from that soon), then the p95.
  if (r.error_rate() > o_.max_error)
    s.why = fmt::format("errors {:.2f}% > {:.2f}% ({})", r.error_rate() * 100, o_.max_error * 100, r.first_error);
  else if (fell_behind)
    s.why = fmt::format("answers fell behind: {} req/s answered", rate_text(r.goodput));
  else if (r.p95_ms > double(o_.p95.count()))
    s.why = fmt::format("p95 {} > {}ms", ms_text(r.p95_ms), o_.p95.count());
  s.held = s.why.empty();
  say(fmt::format("{:>7} req/s for {:.1f}s: p95 {}, {:.2f}% errors, {} req/s answered -> {}", rate_text(rate),
                  length.count(), ms_text(r.p95_ms), r.error_rate() * 100, rate_text(r.goodput),
                  s.held ? "held" : s.why));
  // What is still in flight finishes before the next step, so a step never
  // starts on another's backlog; then a short rest, for a backend's queues
  // and rate limits to recover as they would between bursts.
  load_.settle(milliseconds(3000));
  std::this_thread::sleep_for(kRest);
  result_.steps.push_back(s);
  return s;
}

RampStep Ramp::confirmed_step(double rate) {
  RampStep s = step(rate);
  const StepResult& r = s.result;
  const bool narrow = r.errors == 0 && r.goodput >= rate * kNarrowShare;
  if (s.held || !narrow || repeats_ >= kRepeats || stopped() || !fits(rate)) return s;
  ++repeats_;
  say("a narrow miss: once more at the same rate");
  return step(rate);
}

CapacityResult Ramp::run() {
  CapacityResult& out = result_;
  // Alone: is it up, and how long does a request take when nothing waits?
  // (A failure after answers is left to the ramp's first step to judge: it
  // may be a limit of the rate, however gentle.)
  ProbeResult probe = load_.probe(kProbeRequests, kProbeSpacing, milliseconds(500), milliseconds(3000));
  if (probe.ms.empty()) {
    out.ending = CapacityResult::Ending::down;
    out.summary = probe.error.empty() ? "no answer" : probe.error;
    load_.settle(milliseconds(500));
    return out;
  }
  std::vector<double> sorted = probe.ms;
  std::sort(sorted.begin(), sorted.end());
  out.unloaded_ms = sorted[sorted.size() / 2];
  if (out.unloaded_ms > double(o_.p95.count())) {
    out.ending = CapacityResult::Ending::too_slow;
    out.summary = fmt::format("one request alone takes {} > --p95 {}ms", ms_text(out.unloaded_ms), o_.p95.count());
    return out;
  }
  // Steps share what is left with the refinement: about eight of them.
  const Seconds left = std::chrono::duration_cast<Seconds>(o_.deadline - Clock::now());
  longest_ = std::clamp(left / 8, kShortestStep, kLongestStep);
  // One client waiting for each answer gets 1 / unloaded time: the backend
  // does at least that. Start just under it.
  double rate = std::min(std::max(0.8 * 1000 / std::max(out.unloaded_ms, 0.01), kLowestRate),
                         std::max(o_.max_rate / 4, kLowestRate));
  say(fmt::format("one request at a time: {} each; ramp from {} req/s", ms_text(out.unloaded_ms), rate_text(rate)));

  double held = 0;                 // the highest rate that held
  std::optional<RampStep> failed;  // the lowest rate that did not
  // Ramp: double while steps hold.
  for (;;) {
    if (stopped()) {
      out.ending = CapacityResult::Ending::stopped;
      break;
    }
    if (!fits(rate)) {
      out.ending = CapacityResult::Ending::deadline;
      break;
    }
    RampStep s = confirmed_step(rate);
    if (stopped()) {
      out.ending = CapacityResult::Ending::stopped;
      break;
    }
    if (!s.held) {
      failed = s;
      break;
    }
    held = rate;
    out.p95_ms = s.result.p95_ms;
    if (rate >= o_.max_rate) {
      out.ending = CapacityResult::Ending::max_rate;
      break;
    }
    rate = std::min(rate * 2, o_.max_rate);
  }
  // Narrow down between the last rate that held and the first that did not.
  for (size_t refinements = 0; failed && refinements < kMaxRefinements; ++refinements) {
    const StepResult& f = failed->result;
    if (held > 0 && f.rate <= held * (1 + kResolution)) break;
    const bool fell_behind = f.goodput < f.rate * (1 - kShortfall);
    // A backend that fell behind delivered its capacity: that rate (just
    // under it) should hold. Past the last rate that held, it did not rise.
    if (fell_behind && held > 0 && f.goodput <= held * (1 + kResolution)) break;
    double candidate = fell_behind && f.goodput > held * (1 + kResolution) ? f.goodput * kUnderDelivered
                       : held > 0 ? std::sqrt(held * f.rate)
                                  : f.rate / 2;
    if (candidate < kLowestRate) break;
    if (stopped() || !fits(candidate)) break;
    RampStep s = confirmed_step(candidate);
    if (stopped()) break;
    if (s.held) {
      held = candidate;
      out.p95_ms = s.result.p95_ms;
    } else {
      failed = s;
    }
  }
  out.capacity = saturated_ > 0 ? std::min(held, saturated_ * kUnderDelivered) : held;
  if (stopped()) {
    out.ending = CapacityResult::Ending::stopped;
    out.summary = "interrupted";
    out.lower_bound = true;
  } else if (failed) {
    const StepResult& f = failed->result;
    out.ending = held > 0 ? CapacityResult::Ending::distress : CapacityResult::Ending::too_slow;
    out.summary = failed->why.starts_with("answers")
                      ? fmt::format("throughput stopped rising: {} req/s answered of {} offered", rate_text(f.goodput),
                                    rate_text(f.rate))
                      : fmt::format("{} at {} req/s", failed->why, rate_text(f.rate));
    if (held == 0) out.summary = "no rate held: " + out.summary;
  } else if (out.ending == CapacityResult::Ending::max_rate) {
    out.lower_bound = true;
    out.summary = fmt::format("held at --max-rate {} req/s", rate_text(o_.max_rate));
  } else {
    out.ending = CapacityResult::Ending::deadline;
    out.lower_bound = true;
    out.summary = held > 0 ? fmt::format("--duration ran out at {} req/s, still holding", rate_text(held))
                           : "--duration ran out before a step";
  }
  return out;
}

}  // namespace

CapacityResult measure_capacity(const LoadTarget& target, const RampOptions& options) {
  return Ramp(target, options).run();
}

}  // namespace heft::cli
