// One request and its response, as the stages after the client connection
// see it: the request plan (request_plan.h), the attempt loop
// (attempt_loop.h), one attempt on a backend (attempt.h) and the response
// relay (response_relay.h). None of them knows the client's protocol: they
// read the request's head and body through an Exchange and answer through it.
// An HTTP/1.1 client connection (http1_session.h) is an Exchange for each of
// its requests in turn; an HTTP/2 stream is one for its request.
//
// The base holds what every protocol needs per request: the one deadline the
// worker's sweep enforces, what the access log and the metrics record, the
// head sent upstream and the parser of the backend's response. A derived
// class supplies the body source, the response sink and the client's side
// of timeouts and cancellation.
//
// Thread safety: an Exchange lives on its worker's thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/buffer.hpp>

#include "proxy/field_arena.h"
#include "proxy/head_builder.h"
#include "proxy/http_io.h"
#include "proxy/io_types.h"
#include "proxy/response_parser.h"
#include "proxy/route_program.h"
#include "proxy/upstream_connection.h"

namespace heft::config {
struct Config;
struct ProxyConfig;
}  // namespace heft::config
namespace heft::upstream {
class PoolSnapshot;
}  // namespace heft::upstream

namespace heft::proxy {

struct ClientTls;
struct Worker;
struct WorkerRoutes;
struct SiteRoute;
using Clock = std::chrono::steady_clock;

// A request waiting in a pool's PlaceQueue: its timer is the wait, and a
// freed place cancels it from whichever worker freed it (posted to the
// waiter's own executor). Shared with the posted wake-ups, which may outlive
// the wait.
struct PlaceWait {
  explicit PlaceWait(const Executor& executor) : timer(executor) {}
  Timer timer;
  bool woken = false;
};

// How an attempt on one backend ended. local_error: heft could not open a
// socket (out of descriptors, memory): nothing the backend did, so neither
// counted against it nor retried. broken: the body failed (an error, a
// timeout, a bad chunk) after the head was accepted: the client gets the
// head and a cut body, nothing is retried.
enum class Outcome { done, error, timeout, bad_status, client_gone, bad_request_body, broken, local_error };

struct AttemptResult {
  Outcome outcome = Outcome::error;
  unsigned status = 0;      // bad_status, broken: the backend's status
  bool keep_alive = false;  // done: whether the client connection continues
  bool failed = false;      // done, but with a status next_upstream counts as a failure
};

// What the access log and the request metrics say of a request.
struct RequestRecord {
  unsigned status = 0;  // of the response head that reached the client; 0: none did (yet)
  std::string upstream;
  unsigned tries = 0;
  uint64_t size = 0;   // response body bytes written to the client
  double queued = -1;  // seconds waited in the pool's queue; < 0: did not wait
  // The last attempt's time to the backend's response head and to its end; < 0: none.
  double upstream_header_time = -1, upstream_response_time = -1;
};

// What a write to the client achieved: whether the response head is out
// (whole), how many body bytes went with it, and how it ended.
struct SendResult {
  error_code ec;
  bool head_sent = false;
  std::size_t body_sent = 0;
};

class Exchange {
 public:
  Exchange(Worker& worker, uint16_t port, std::string ip);
  virtual ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  Worker& w;
  const uint16_t local_port;
  std::string client_ip;
  // What the client connection's TLS handshake settled; null over plain TCP
  // (X-Forwarded-Proto, the access log's `tls`).
  const ClientTls* client_tls = nullptr;

  // ---- The request (set while one is served).
  const RequestHead& request() const { return *request_; }
  bool serving() const { return request_ != nullptr; }
  // Ends the current request (finish_request()): its head, still valid, or
  // null when none was current.
  const RequestHead* end_request() { return std::exchange(request_, nullptr); }

  // ---- The body source.
  // The body has been read to its end (or there is none).
  virtual bool body_done() const = 0;
  // The body's length is not known ahead (chunked, or an HTTP/2 stream without content-length).
  virtual bool body_unsized() const = 0;
  // The declared length of a sized body.
  virtual uint64_t body_length() const = 0;
  // The request declared a body (a length, even 0, or chunked).
  virtual bool body_declared() const = 0;
  // The next piece of the body, at most `capacity` bytes into `out`; 0 with
  // body_done() at its end.
  virtual Task<BodyPiece> read_body(char* out, std::size_t capacity) = 0;
  // Tells a client that waits for it (Expect: 100-continue) to send its body;
  // false when it is gone.
  virtual Task<bool> send_continue() = 0;

  // ---- The response sink.
  // Prepares the response head from the backend's `response` (held until
  // the first send): its status, the fields `pool` lets through, and the
  // framing this client's protocol needs. `switching`: a 101 to a requested upgrade.
  virtual void begin_response(const ResponseParser& response, const config::ProxyConfig& pool, bool switching) = 0;
  // Whether the client connection may carry another request once this
  // response is done (known after begin_response()).
  virtual bool response_keeps_connection() const = 0;
  // Sends the held head (if not sent yet) and `piece` of the body; `last`
  // ends the body. True when done without waiting (`result` says how it
  // went); false when the rest must be written by finish_send().
  virtual bool send_body(std::string_view piece, bool last, SendResult& result) = 0;
  virtual Task<void> finish_send(SendResult& result) = 0;
  // An interim (1xx) response, relayed as the client's protocol allows;
  // false when the client is gone.
  virtual Task<bool> send_interim(const ResponseParser& response) = 0;
  // A switched (101) connection: the held head is sent and the two
  // connections are joined until either ends.
  virtual Task<bool> send_switch() = 0;
  virtual Task<void> splice(UpstreamConnection& conn) = 0;

  // ---- The client's side.
  // Decides whether the client wants its connection kept after this
  // request, given the Connection semantics the plan found (HTTP/1.x), and
  // remembers it for the response.
  virtual bool client_keep_alive(std::optional<bool> from_connection_field) = 0;
  // The client connection ends after the current request (a drain, a reload
  // that stopped serving its port).
  virtual bool closing() const = 0;
  // Aborts the client side's pending operation.
  virtual void cancel_client() = 0;

  // ---- Per-request state the stages share.
  RequestRecord record_;
  std::shared_ptr<const WorkerRoutes> current_routes_;
  const SiteRoute* current_route_ = nullptr;
  const config::Config* config_ = nullptr;
  Clock::time_point request_start_{};  // when the request's head was complete
  // A reload stopped serving local_port while a request was on its way
  // (see Worker::dropped_port_routes): served, then the connection ends.
  bool port_dropped_ = false;

  // heft's own answer (an error), noted by the stages and sent by the client
  // connection once they have returned.
  struct Refusal {
    unsigned status = 0;    // 0: none
    std::string_view text;  // a literal; empty: "<status> <reason>\n"
    bool keep_alive = false;
    bool own = false;       // a route's answer: own_fields_ and own_body_ instead of `text`
  };
  Refusal refusal_;
  void refuse(unsigned status, std::string_view text, bool keep_alive) { refusal_ = {status, text, keep_alive}; }
  void refuse_status(unsigned status, bool keep_alive) { refusal_ = {status, {}, keep_alive}; }
  // A route's own answer (a static_response; Caddy's empty 200 when no
  // handler answered): its fields as "Name: value\r\n" lines and its body.
  std::string own_fields_;
  std::string own_body_;
  void respond(unsigned status, bool keep_alive) { refusal_ = {status, {}, keep_alive, true}; }
  // The site's routes for the current request (route_program.h): rewrites,
  // header edits; kept across requests for its buffers.
  RouteState route_state_;

  // The request plan's products: the head for the backend (same for every
  // attempt), an absolute-form target's origin-form, several Connection
  // lines joined, and the host the request was routed by (a view into the
  // request head, for the access log).
  HeadBuilder up_head_;
  std::string origin_form_;
  std::string connection_lines_;
  std::string_view routed_host_;
  // The start of the body, buffered so small bodies can be retried (reused).
  std::string body_prefix_;
  bool upstream_chunked_ = false;  // the body goes upstream chunked (streamed, size unknown)

  // The current attempt: its response parser (a member, so coroutine frames
  // stay small enough for Asio to recycle), the upstream socket a timeout
  // cancels, and why it failed (for the error log).
  FieldArena arena_;  // fields of the current request and response
  std::optional<ResponseParser> response_;
  Socket* upstream = nullptr;
  const char* failure_stage_ = "";
  static constexpr const char* kConnecting = "connecting";  // the stage at which nothing was sent
  error_code failure_ec_;
  bool failure_timed_out_ = false;
  // An interim response reached the client: no other backend may answer.
  bool interim_relayed_ = false;
  // When the attempt's response head came (none: not yet): the backend's
  // latency is the time to its head (nginx's $upstream_header_time).
  Clock::time_point response_head_at_{};
  // The response was complete while the request body was still coming: the
  // rest of the body is not relayed.
  bool body_abandoned_ = false;
  // Sending the streamed request body failed; a failed response read that
  // follows is no fault of the response.
  bool request_body_failed_ = false;
  // A 101 was relayed: the attempt hands its connection to the loop, which splices it.
  bool tunnel_pending_ = false;
  std::unique_ptr<UpstreamConnection> tunnel_;

  // An error or timeout (whichever the deadline says) at `stage`.
  AttemptResult failure(const char* stage, error_code ec);
  // "connecting: Connection refused", "reading the response head".
  std::string failure_reason() const;

  // ---- The deadline (one per exchange, checked by the worker's sweep).
  Clock::time_point deadline = Clock::time_point::max();
  bool timed_out = false;
  void arm(std::chrono::milliseconds timeout);
  void disarm() { deadline = Clock::time_point::max(); }
  // Aborts a socket's pending operation, in Asio or in the worker's ReadyWatch.
  void cancel_io(Socket& socket);
  // The deadline passed: aborts whatever is pending.
  void expire();

  // ---- Watching the client while the backend works: the sweep checks it
  // once the request waited kClientCheckAfter for its response head, and a
  // client that left ends the attempt (nginx's 499).
  Clock::time_point head_wait_since = Clock::time_point::max();
  Clock::time_point next_client_check{};
  bool client_closed_ = false;
  bool ignore_client_abort_ = false;  // the current request's pool says so
  PlaceWait* queue_wait_ = nullptr;   // the wait for a place in the pool's queue, if any
  void watch_client_from(Clock::time_point since);
  void unwatch_client() { head_wait_since = Clock::time_point::max(); }
  // The client is gone: the backend's connection and a queue wait are ended.
  void client_left();

  // ---- Waiting for a backend's response head, watched by the sweep for a
  // hung backend (upstream/latency.h): a wait past the backend's stall
  // limit counts once as a failure of the backend; a wait on a backend out
  // of service (passive failures, a failed health check) ends as a timeout
  // when the attempt loop would try another backend (`head_retryable_`).
  const upstream::PoolSnapshot* head_pool_ = nullptr;  // null: no such wait
  uint32_t head_backend_ = 0;
  Clock::time_point head_asked_at_{};
  bool head_retryable_ = false;
  bool stall_counted_ = false;  // the current attempt's stall was counted against its backend
  bool head_abandoned_ = false;  // the sweep ended the wait
  void wait_for_head(const upstream::PoolSnapshot& pool, uint32_t backend, bool retryable, Clock::time_point since) {
    head_pool_ = &pool;
    head_backend_ = backend;
    head_asked_at_ = since;
    head_retryable_ = retryable;
  }
  void head_wait_over() { head_pool_ = nullptr; }
  void check_stall(Clock::time_point now);

  // A block of the worker's pool (kChunk bytes), taken on first use.
  char* scratch();

 protected:
  const RequestHead* request_ = nullptr;

 private:
  char* scratch_ = nullptr;
};

// A request waiting this long for its response head has its client checked
// (and then every kClientCheckEvery) for a close.
inline constexpr auto kClientCheckAfter = std::chrono::milliseconds(250);
inline constexpr auto kClientCheckEvery = std::chrono::milliseconds(500);

}  // namespace heft::proxy
