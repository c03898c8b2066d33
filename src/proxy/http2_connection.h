// An HTTP/2 client connection (RFC 9113) through an nghttp2 server session:
// frames in and out, flow control, limits against floods, GOAWAY on drain
// and idle. Each request stream is an Exchange (http2_stream.h) served by the
// same stages as an HTTP/1.1 request, to the same HTTP/1.1 upstream pools.
//
// The connection does no I/O itself: serve_http2() (http2_serve.h) reads the
// client's bytes into receive() and writes what produce() gives, over any
// stream type (a plain socket for h2c, a TLS stream for h2).
//
// Thread safety: a connection and its streams live on their worker's thread
// only. Timeouts: the worker's sweep checks the connection's idle and write
// deadlines and each stream's Exchange deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/exchange.h"

struct nghttp2_session;

namespace heft::proxy {

class Http2Stream;

// The limits heft sets on every HTTP/2 connection (docs/http2.md).
struct Http2Limits {
  static constexpr uint32_t max_concurrent_streams = 100;
  // SETTINGS_MAX_HEADER_LIST_SIZE, enforced on each request's decoded fields
  // (name + value + 32 each, RFC 9113 6.5.2): the bound on an HPACK bomb.
  static constexpr uint32_t max_header_list = 64 * 1024;
  // A stream's receive window (request body bytes buffered per stream) and
  // the connection's (all streams together).
  static constexpr int32_t stream_window = 64 * 1024;
  static constexpr int32_t connection_window = 1024 * 1024;
  // CONTINUATION frames after one HEADERS (where nghttp2 can be told).
  static constexpr std::size_t max_continuations = 8;
  // Client resets (RST_STREAM): a burst, then this many per second (nghttp2's
  // limit where it has one, and heft's own); past it: GOAWAY ENHANCE_YOUR_CALM.
  static constexpr uint64_t reset_burst = 1000, resets_per_second = 100;
  // Unanswered SETTINGS and PING acknowledgements queued for a client that
  // does not read: past this the connection ends.
  static constexpr std::size_t max_outbound_acks = 1000;
  // SETTINGS, PING and PRIORITY frames in one second; past this: GOAWAY
  // ENHANCE_YOUR_CALM.
  static constexpr unsigned control_frames_per_second = 500;
  // Frames in a row that carry nothing (empty DATA without END_STREAM).
  static constexpr unsigned empty_frames_in_a_row = 100;
  // Bytes gathered from nghttp2 per socket write.
  static constexpr std::size_t write_batch = 64 * 1024;
};

class Http2Connection {
 public:
  // `close_transport` closes the client's stream (aborting its pending reads and writes).
  Http2Connection(Worker& worker, uint16_t port, std::string ip, std::function<void()> close_transport);
  ~Http2Connection();
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  Worker& w;
  const uint16_t local_port;
  const std::string client_ip;
  // What the TLS handshake settled, for each stream's log and X-Forwarded-Proto; null over plain TCP.
  const ClientTls* client_tls = nullptr;
  nghttp2_session* session = nullptr;
  std::list<Http2Connection*>::iterator self;

  // Queues the server's SETTINGS; false when nghttp2 could not start a session.
  bool start();
  // Bytes from the client; false when the connection must end (GOAWAY queued).
  bool receive(std::string_view bytes);
  // Appends what nghttp2 has to send, up to about Http2Limits::write_batch
  // bytes, to `out`; false on a fatal session error.
  bool produce(std::string& out);
  bool wants_read() const;
  // The connection has nothing left to do: no stream's request is in
  // flight, and the client is gone or the session is over.
  bool over() const;
  // The client's stream failed or ended: every stream's client has left.
  void transport_ended();
  // The reader stopped: `failed`, the client's stream ended or failed.
  void reader_finished(bool failed);
  // The writer's wait for something to send (or for over()).
  Task<void> wait_for_output();
  void notify_output();
  void write_started();
  void write_finished() { write_deadline_ = Clock::time_point::max(); }
  void close_transport();
  // The connection's sending side is shut: what the client still sends is
  // read for a while (the sweep closes it then).
  void linger();

  // ---- The worker's sweep, drain and stop.
  void sweep(Clock::time_point now);
  // GOAWAY: no new streams; those in flight finish, then the connection closes.
  void go_away();
  // The stop's grace period ended: every request in flight is recorded as it stands.
  void cut();

  // ---- For streams.
  bool transport_failed() const { return transport_failed_; }
  // A stream's request task ended (the Exchange is done with it).
  void stream_task_ended(Http2Stream& stream);
  // Lets go of `stream` once nghttp2 and its task are both done with it.
  void release_if_done(Http2Stream& stream);

 private:
  friend struct Http2Callbacks;
  Http2Stream* stream(int32_t id) const;
  void start_stream(Http2Stream& stream);
  // Counts a frame against the flood limits; false when the connection must end.
  bool count_frame(uint8_t type, uint8_t flags, std::size_t length);
  void enhance_your_calm(const char* what);

  std::function<void()> close_transport_;
  std::list<std::shared_ptr<Http2Stream>> streams_;
  unsigned tasks_ = 0;  // streams whose request is being served
  Timer output_signal_;
  bool reader_done_ = false;
  bool transport_failed_ = false;
  bool going_away_ = false;
  bool calmed_ = false;  // ended for a flood
  Clock::time_point idle_deadline_ = Clock::time_point::max();
  Clock::time_point write_deadline_ = Clock::time_point::max();
  Clock::time_point close_deadline_ = Clock::time_point::max();  // a GOAWAY the client does not take
  // Flood counters.
  Clock::time_point control_window_start_{};
  unsigned control_frames_ = 0;
  unsigned empty_frames_ = 0;
  double reset_tokens_ = Http2Limits::reset_burst;  // client resets allowed now
  Clock::time_point resets_refilled_{};
};

}  // namespace heft::proxy
