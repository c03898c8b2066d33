// The open-loop load generator: one io_context run by the caller's thread,
// one coroutine per connection and one that releases the requests as they
// fall due.
#include "cli/open_loop_load.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

namespace heft::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;
constexpr auto as_tuple_awaitable = asio::as_tuple(asio::use_awaitable);

namespace {

// A request to send: its place among the step's records and when it was due.
struct Job {
  uint64_t generation = 0;  // the step (or probe request) it belongs to
  size_t index = 0;
  Clock::time_point due;
};

enum class Outcome : uint8_t { pending, answered, error };

struct Record {
  Clock::time_point done;
  Outcome outcome = Outcome::pending;
};

struct Connection {
  explicit Connection(asio::io_context& io) : socket(io), wake(io, Clock::time_point::max()) {}
  tcp::socket socket;
  beast::flat_buffer buffer;
  asio::steady_timer wake;  // an idle connection waits on it; cancel() hands it a job
  std::optional<Job> job;   // the request it is to send or is sending
  bool served = false;      // answered since it connected: a failure before any answer may be a stale keep-alive
};

// Why an exchange failed, as a person reads it.
std::string reason(const boost::system::error_code& ec) {
  if (ec == http::error::end_of_stream || ec == asio::error::eof) return "the backend closed the connection";
  return ec.message();
}

}  // namespace

struct OpenLoopLoad::State {
  State(LoadTarget t, size_t max) : target(std::move(t)), max_connections(std::max<size_t>(1, max)), schedule(io) {
    request = fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: heft-calibrate\r\nAccept: */*\r\n\r\n",
                          target.path, target.host);
  }

  asio::io_context io{1};
  LoadTarget target;
  std::string request;
  size_t max_connections;
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<Connection*> idle;
  std::deque<Job> queue;     // due, waiting for a connection
  size_t busy = 0;           // connections with a job
  size_t cap = 1;            // connections busy at once in this step
  bool shutting_down = false;
  asio::steady_timer schedule;
  uint64_t generation = 0;
  std::vector<Record> records;  // this generation's
  size_t recorded = 0;
  bool all_released = false;  // every request of this generation is due and queued
  std::string first_error;
  std::array<char, 64 * 1024> sink;  // bodies are read into it and dropped (one thread: shared)

  // Hands queued requests to idle connections, or to new ones while allowed.
  void dispatch() {
    while (!queue.empty() && busy < cap) {
      Connection* c = nullptr;
      if (!idle.empty()) {
        c = idle.back();
        idle.pop_back();
      } else if (connections.size() < max_connections) {
        connections.push_back(std::make_unique<Connection>(io));
        c = connections.back().get();
        asio::co_spawn(io, run_connection(*c), asio::detached);
      } else {
        break;
      }
      c->job = queue.front();
      queue.pop_front();
      ++busy;
      c->wake.cancel();
    }
  }

  void record(const Job& job, Outcome outcome, const std::string& error) {
    if (job.generation != generation || job.index >= records.size()) return;  // a request of a judged step
    Record& r = records[job.index];
    r.done = Clock::now();
    r.outcome = outcome;
    ++recorded;
    if (outcome == Outcome::error && first_error.empty()) first_error = error;
    if (all_released && recorded == records.size()) io.stop();  // every answer in: judge now
  }

  void close(Connection& c) {
    boost::system::error_code ignored;
    c.socket.close(ignored);
    c.buffer.clear();
  }

  // One request and its answer on `c`, connecting first if needed. A
  // keep-alive connection the backend closed while idle fails before any
  // answer: the request is sent again once on a new connection.
  awaitable<std::pair<Outcome, std::string>> exchange(Connection& c) {
    for (int attempt = 0;; ++attempt) {
      if (shutting_down) co_return std::pair{Outcome::error, std::string("stopped")};
      if (!c.socket.is_open()) {
        const auto [ec] = co_await c.socket.async_connect(target.endpoint, as_tuple_awaitable);
        if (ec) {
          close(c);
          co_return std::pair{Outcome::error, reason(ec)};
        }
        boost::system::error_code ignored;
        c.socket.set_option(tcp::no_delay(true), ignored);
        c.served = false;
      }
      const bool retry = c.served && attempt == 0;
      const auto [write_error, written] = co_await asio::async_write(c.socket, asio::buffer(request), as_tuple_awaitable);
      if (write_error) {
        close(c);
        if (retry && !shutting_down) continue;
        co_return std::pair{Outcome::error, reason(write_error)};
      }
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<uint64_t>::max());
      const auto [head_error, head_bytes] = co_await http::async_read_header(c.socket, c.buffer, parser, as_tuple_awaitable);
      if (head_error) {
        close(c);
        if (retry && !shutting_down && head_bytes == 0) continue;
        co_return std::pair{Outcome::error, reason(head_error)};
      }
      while (!parser.is_done()) {
        parser.get().body().data = sink.data();
        parser.get().body().size = sink.size();
        const auto [ec, n] = co_await http::async_read(c.socket, c.buffer, parser, as_tuple_awaitable);
        if (ec && ec != http::error::need_buffer) {
          close(c);
          co_return std::pair{Outcome::error, reason(ec)};
        }
      }
      c.served = true;
      const unsigned status = parser.get().result_int();
      if (!parser.get().keep_alive()) close(c);
      if (status >= 400) co_return std::pair{Outcome::error, fmt::format("HTTP {}", status)};
      co_return std::pair{Outcome::answered, std::string()};
    }
  }

  awaitable<void> run_connection(Connection& c) {
    for (;;) {
      while (!c.job) {
        if (shutting_down) co_return;
        c.wake.expires_at(Clock::time_point::max());
        co_await c.wake.async_wait(as_tuple_awaitable);
      }
      if (shutting_down) co_return;
      const Job job = *c.job;
      const auto [outcome, error] = co_await exchange(c);
      record(job, outcome, error);
      c.job.reset();
      // The next due request straight away, while the step allows this many busy.
      if (!queue.empty() && busy <= cap && !shutting_down) {
        c.job = queue.front();
        queue.pop_front();
        continue;
      }
      --busy;
      idle.push_back(&c);
    }
  }

  // Releases request i of the step at start + i / rate.
  awaitable<void> release(uint64_t step, Clock::time_point start, double rate, size_t count) {
    const auto due = [&](size_t i) {
      return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(i) / rate));
    };
    for (size_t i = 0; i < count;) {
      if (due(i) > Clock::now()) {
        schedule.expires_at(due(i));
        co_await schedule.async_wait(as_tuple_awaitable);
        if (generation != step || shutting_down) co_return;
      }
      const auto now = Clock::now();
      for (; i < count && due(i) <= now; ++i) queue.push_back(Job{step, i, due(i)});
      dispatch();
    }
    all_released = true;
    if (recorded == records.size()) io.stop();
  }

  // Runs the io_context until `until`, `done()` or `stop()`.
  template <class Done>
  void run_until(Clock::time_point until, Done done, const std::function<bool()>& stop = {}) {
    while (!done() && Clock::now() < until) {
      io.restart();
      io.run_until(std::min(until, Clock::now() + std::chrono::milliseconds(50)));
      if (stop && stop()) break;
    }
  }

  void start_generation(size_t count) {
    ++generation;
    records.assign(count, Record{});
    recorded = 0;
    all_released = false;
    first_error.clear();
    queue.clear();
  }
};

OpenLoopLoad::OpenLoopLoad(LoadTarget target, size_t max_connections)
    : state_(std::make_unique<State>(std::move(target), max_connections)) {}

OpenLoopLoad::~OpenLoopLoad() {
  State& s = *state_;
  s.shutting_down = true;
  ++s.generation;
  s.queue.clear();
  s.schedule.cancel();
  for (auto& c : s.connections) {
    s.close(*c);
    c->wake.cancel();
  }
  // Every coroutine sees shutting_down and returns; then run() has no work left.
  s.io.restart();
  s.io.run_for(std::chrono::seconds(2));
}

size_t OpenLoopLoad::connections() const {
  size_t open = 0;
  for (const auto& c : state_->connections) open += c->socket.is_open();
  return open;
}

ProbeResult OpenLoopLoad::probe(size_t count, std::chrono::milliseconds spacing, std::chrono::milliseconds limit,
                                std::chrono::milliseconds first_answer) {
  State& s = *state_;
  ProbeResult result;
  const auto start = Clock::now(), end = start + limit;
  s.cap = 1;
  for (size_t k = 0; k < count; ++k) {
    const auto next = start + spacing * long(k);
    if (next >= end) break;
    s.run_until(next, [] { return false; });
    s.start_generation(1);
    s.all_released = true;
    const auto due = Clock::now();
    s.queue.push_back(Job{s.generation, 0, due});
    s.dispatch();
    const auto wait_until = k == 0 ? due + first_answer : end;
    s.run_until(wait_until, [&s] { return s.recorded == 1; });
    if (s.recorded == 0) {
      result.error = fmt::format("no answer within {}ms", std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - due).count());
      break;
    }
    if (s.records[0].outcome == Outcome::error) {
      result.error = s.first_error;
      break;
    }
    result.ms.push_back(std::chrono::duration<double, std::milli>(s.records[0].done - due).count());
    if (Clock::now() >= end) break;
  }
  ++s.generation;
  return result;
}

StepResult OpenLoopLoad::run_step(double rate, std::chrono::duration<double> length, std::chrono::milliseconds patience,
                                  size_t connections, const std::function<bool()>& stop) {
  State& s = *state_;
  StepResult result;
  result.rate = rate;
  result.seconds = length.count();
  const size_t count = std::max<size_t>(1, size_t(std::llround(rate * length.count())));
  s.start_generation(count);
  s.cap = std::clamp<size_t>(connections, 1, s.max_connections);
  const auto start = Clock::now() + std::chrono::milliseconds(1);
  const auto length_ticks = std::chrono::duration_cast<Clock::duration>(length);
  asio::co_spawn(s.io, s.release(s.generation, start, rate, count), asio::detached);
  s.run_until(start + length_ticks + patience, [&s] { return s.all_released && s.recorded == s.records.size(); }, stop);

  // Judged now: what is still queued is dropped, what is in flight is unfinished.
  s.queue.clear();
  s.schedule.cancel();
  // Goodput over the step's last three quarters: in the first, a backend
  // past its capacity is still filling its queue.
  const auto steady = start + length_ticks / 4, end = start + length_ticks;
  std::vector<double> ms;
  ms.reserve(count);
  uint64_t steady_answers = 0;
  for (size_t i = 0; i < count; ++i) {
    const Record& r = s.records[i];
    const auto due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(i) / rate));
    if (r.outcome == Outcome::pending) {
      ++result.unfinished;
      ms.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(r.done - due).count());
    if (r.outcome == Outcome::error) {
      ++result.errors;
    } else {
      ++result.answered;
      steady_answers += r.done >= steady && r.done < end;
    }
  }
  result.scheduled = count;
  const auto quantile = [&ms](double q) {
    auto at = ms.begin() + std::min(ms.size() - 1, size_t(std::ceil(q * double(ms.size()))) - (q > 0 ? 1 : 0));
    std::nth_element(ms.begin(), at, ms.end());
    return *at;
  };
  result.p95_ms = quantile(0.95);
  result.p50_ms = quantile(0.5);
  result.goodput = double(steady_answers) / (length.count() * 0.75);
  result.first_error = s.first_error;
  ++s.generation;  // answers still coming belong to no step
  return result;
}

bool OpenLoopLoad::settle(std::chrono::milliseconds limit) {
  State& s = *state_;
  s.queue.clear();
  s.run_until(Clock::now() + limit, [&s] { return s.busy == 0; });
  if (s.busy == 0) return true;
  for (auto& c : s.connections)
    if (c->job) s.close(*c);  // their exchanges end with operation_aborted
  s.run_until(Clock::now() + std::chrono::seconds(1), [&s] { return s.busy == 0; });
  return false;
}

}  // namespace heft::cli
