// The demo origin server behind `heft demo-backend`, `heft run`'s embedded demo,
// the tests and the benchmarks: a small, fast HTTP/1.1 keep-alive server.
//
// Every request gets 200 with `X-Backend: <name>`, `X-Request-Count: <n>`,
// `Content-Type: text/plain` and a preformatted body of body_bytes; request bodies
// of any size are read and discarded with bounded memory. Special paths:
//   /echo...            streams the request body back (chunked)
//   /bytes/N            N bytes, streamed in 64 KiB chunks
//   <health_path>       200 "ok" (or the status set by /_control/health)
//   /ws (Upgrade)       WebSocket echo
//   GET /_control/stats  {"requests":N,"connections":M} (connections accepted)
//   POST /_control/health?status=500|200, /_control/delay?ms=N,
//   POST /_control/fail_rate?value=F     change behaviour at runtime
// Workers, delay and fail rate apply to everything but the health path and
// /_control/*, so a test can always steer a busy backend.
//
// Thread-safety: the io_context may be run by any number of threads (each
// connection runs on its own strand). port(), requests_served() and stop() may
// be called from any thread; start() once, after construction.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace heft::demo {

struct DemoBackendOptions {
  std::string address = "127.0.0.1";  // IPv4 or IPv6 literal to listen on
  uint16_t port = 0;                   // 0: an ephemeral port, see DemoBackend::port()
  std::string name = "demo";           // the X-Backend header
  std::size_t body_bytes = 1024;       // size of the normal 200 body
  std::chrono::milliseconds delay{0};  // added latency per request (a timer, no thread blocks)
  std::size_t workers = 0;             // requests served at once; 0 = unlimited, more wait FIFO
  double fail_rate = 0;                // 0..1 of requests answered 503, spread evenly and exactly
  std::string health_path;             // empty: no health endpoint
  // Used by run_demo_backend() only:
  unsigned threads = 1;   // event-loop threads
  std::string port_file;  // written with the bound port after listen
};

// The deterministic body content: byte i of every body is demo_body_byte(i).
char demo_body_byte(uint64_t offset);
std::string make_demo_body(std::size_t bytes);

class DemoBackend {
 public:
  // Opens, binds and listens right away (throws std::runtime_error "cannot listen
  // on ADDR:PORT: reason" if it cannot), so port() is valid before start(). Throws std::invalid_argument on
  // bad options (fail_rate outside 0..1, health_path not starting with '/').
  DemoBackend(boost::asio::io_context& io, DemoBackendOptions options);
  ~DemoBackend();
  DemoBackend(const DemoBackend&) = delete;
  DemoBackend& operator=(const DemoBackend&) = delete;

  uint16_t port() const;
  // Starts accepting on the io_context; returns at once.
  void start();
  // Stops accepting, closes every connection and wakes queued requests; the
  // io_context's run() returns once their handlers have finished. Idempotent.
  void stop();

  // Requests received so far, all paths included (the X-Request-Count value).
  uint64_t requests_served() const;

  struct State;  // shared with connection coroutines, which may outlive a stop()

 private:
  std::shared_ptr<State> state_;
};

// Runs a DemoBackend on options.threads threads until SIGTERM or SIGINT, writing
// options.port_file first if set. Returns the process exit code (0); throws on a
// listen failure.
int run_demo_backend(const DemoBackendOptions& options);

}  // namespace heft::demo
