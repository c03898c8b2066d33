// An HTTP/2 client connection (see http2_connection.h).
#include "proxy/http2_connection.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/http2_stream.h"
#include "proxy/runtime.h"

namespace heft::proxy {

// nghttp2's callbacks, each a thin step into the connection or its stream.
struct Http2Callbacks {
  static Http2Connection& of(void* user) { return *static_cast<Http2Connection*>(user); }

  static int begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    Http2Connection& conn = of(user);
    auto stream = std::make_shared<Http2Stream>(conn, frame->hd.stream_id);
    Http2Stream& s = *stream;
    conn.streams_.push_back(std::move(stream));
    s.self = std::prev(conn.streams_.end());
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, &s);
    return 0;
  }

  static int header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_size,
                    const uint8_t* value, size_t value_size, uint8_t, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    Http2Stream* s = of(user).stream(frame->hd.stream_id);
    if (!s) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), name_size);
    const std::string_view v(reinterpret_cast<const char*>(value), value_size);
    const bool fits = frame->headers.cat == NGHTTP2_HCAT_REQUEST ? s->add_field(n, v) : s->add_trailer_field(n, v);
    if (fits) return 0;
    // Past SETTINGS_MAX_HEADER_LIST_SIZE (an HPACK bomb, or just too much):
    // the stream ends; nghttp2 keeps decoding the block for its HPACK state
    // but hands no more of it here.
    static observe::LogLimit too_large("HTTP/2 streams reset: header list too large", observe::LogLevel::info);
    if (too_large.admit()) observe::info("HTTP/2 from {}: header list over {} bytes: stream reset", of(user).client_ip,
                                         Http2Limits::max_header_list);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }

  static int frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    Http2Connection& conn = of(user);
    if (!conn.count_frame(frame->hd.type, frame->hd.flags, frame->hd.length)) return 0;
    const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        Http2Stream* s = conn.stream(frame->hd.stream_id);
        if (!s) break;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          s->head_complete(end);
          conn.start_stream(*s);
        } else if (end) {
          s->body_ended();  // trailers: the body is over (their fields are not forwarded)
        }
        break;
      }
      case NGHTTP2_DATA:
        if (Http2Stream* s = conn.stream(frame->hd.stream_id); s && end) s->body_ended();
        break;
      default: break;
    }
    return 0;
  }

  static int data_chunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data, size_t size,
                        void* user) {
    Http2Stream* s = of(user).stream(stream_id);
    if (!s) {
      nghttp2_session_consume_connection(session, size);
      return 0;
    }
    s->body_data(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
  }

  static int stream_close(nghttp2_session* session, int32_t stream_id, uint32_t, void* user) {
    Http2Connection& conn = of(user);
    Http2Stream* s = conn.stream(stream_id);
    if (!s) return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    s->closed();
    conn.release_if_done(*s);
    return 0;
  }

  static int frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    const bool ends = (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
                      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
    if (ends)
      if (Http2Stream* s = of(user).stream(frame->hd.stream_id)) s->response_sent();
    return 0;
  }
};

Http2Connection::Http2Connection(Worker& worker, uint16_t port, std::string ip, std::function<void()> close_transport)
    : w(worker), local_port(port), client_ip(std::move(ip)), close_transport_(std::move(close_transport)),
      output_signal_(worker.io) {
  self = w.h2_connections.insert(w.h2_connections.end(), this);
  resets_refilled_ = coarse_now();
}

Http2Connection::~Http2Connection() {
  if (session) nghttp2_session_del(session);
  streams_.clear();
  w.h2_connections.erase(self);
  parked_connection_closed(w);  // counted open since its accept
}

bool Http2Connection::start() {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) return false;
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Http2Callbacks::begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, Http2Callbacks::header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Http2Callbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Http2Callbacks::data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Http2Callbacks::stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Http2Callbacks::frame_send);
  nghttp2_option* options = nullptr;
  if (nghttp2_option_new(&options) != 0) {
    nghttp2_session_callbacks_del(callbacks);
    return false;
  }
  // Request bodies are taken from the window only as the upstream takes them.
  nghttp2_option_set_no_auto_window_update(options, 1);
  nghttp2_option_set_max_outbound_ack(options, Http2Limits::max_outbound_acks);
  nghttp2_option_set_max_settings(options, 32);
#ifdef HEFT_HAVE_NGHTTP2_RESET_RATE_LIMIT
  nghttp2_option_set_stream_reset_rate_limit(options, Http2Limits::reset_burst, Http2Limits::resets_per_second);
#endif
#ifdef HEFT_HAVE_NGHTTP2_MAX_CONTINUATIONS
  nghttp2_option_set_max_continuations(options, Http2Limits::max_continuations);
#endif
  const int rv = nghttp2_session_server_new2(&session, callbacks, this, options);
  nghttp2_option_del(options);
  nghttp2_session_callbacks_del(callbacks);
  if (rv != 0) return false;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, Http2Limits::max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(Http2Limits::stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, Http2Limits::max_header_list},
  };
  if (nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, std::size(settings)) != 0) return false;
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, Http2Limits::connection_window);
  // The preface and the first request within header_timeout.
  idle_deadline_ = coarse_now() + w.current_routes()->table->config.header_timeout;
  return true;
}

Http2Stream* Http2Connection::stream(int32_t id) const {
  return static_cast<Http2Stream*>(nghttp2_session_get_stream_user_data(session, id));
}

bool Http2Connection::receive(std::string_view bytes) {
  const ssize_t rv = nghttp2_session_mem_recv(session, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  notify_output();
  if (rv < 0) {
    // A connection error: nghttp2 queued GOAWAY where it could (a bad
    // preface gets none). NGHTTP2_ERR_FLOODED: the client does not read its ACKs.
    static observe::LogLimit errors("HTTP/2 connections ended by a protocol error", observe::LogLevel::info);
    if (errors.admit())
      observe::info("HTTP/2 from {}: {}: connection ends", client_ip, nghttp2_strerror(static_cast<int>(rv)));
    if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) transport_ended();
    else nghttp2_session_terminate_session(session, NGHTTP2_PROTOCOL_ERROR);
    return false;
  }
  return true;
}

bool Http2Connection::produce(std::string& out) {
  if (transport_failed_) return true;
  while (out.size() < Http2Limits::write_batch) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session, &data);
    if (n < 0) return false;
    if (n == 0) break;
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  return true;
}

bool Http2Connection::wants_read() const { return !transport_failed_ && nghttp2_session_want_read(session); }

bool Http2Connection::over() const {
  if (tasks_ > 0) return false;
  return transport_failed_ || reader_done_ || (!nghttp2_session_want_read(session) && !nghttp2_session_want_write(session));
}

void Http2Connection::transport_ended() {
  if (std::exchange(transport_failed_, true)) return;
  for (const auto& s : streams_) {
    if (s->task_running && s->serving()) s->client_left();
    s->cancel_client();
  }
  notify_output();
}

void Http2Connection::reader_finished(bool failed) {
  reader_done_ = true;
  if (failed) transport_ended();
  notify_output();
}

Task<void> Http2Connection::wait_for_output() {
  output_signal_.expires_at(Clock::time_point::max());
  co_await output_signal_.async_wait(use_task);
}

void Http2Connection::notify_output() { output_signal_.cancel(); }

void Http2Connection::write_started() {
  write_deadline_ = coarse_now() + w.current_routes()->table->config.idle_timeout;
}

void Http2Connection::close_transport() { close_transport_(); }

void Http2Connection::linger() {
  close_deadline_ = coarse_now() + std::chrono::seconds(2);
  w.wake_sweep();
}

void Http2Connection::start_stream(Http2Stream& stream) {
  stream.task_running = true;
  ++tasks_;
  idle_deadline_ = Clock::time_point::max();
  asio::co_spawn(
      w.io,
      [](std::shared_ptr<Http2Stream> s) -> Task<void> {
        co_await s->run();
        s->conn.stream_task_ended(*s);
      }(*stream.self),
      asio::detached);
  w.wake_sweep();
}

void Http2Connection::stream_task_ended(Http2Stream& stream) {
  stream.task_running = false;
  if (--tasks_ == 0 && !going_away_) idle_deadline_ = coarse_now() + w.current_routes()->table->config.idle_timeout;
  release_if_done(stream);
  notify_output();
}

void Http2Connection::release_if_done(Http2Stream& stream) {
  if (stream.task_running || stream.nghttp2_open) return;
  streams_.erase(stream.self);
}

bool Http2Connection::count_frame(uint8_t type, uint8_t flags, std::size_t length) {
  const bool control = type == NGHTTP2_SETTINGS || type == NGHTTP2_PING || type == NGHTTP2_PRIORITY;
  if (control) {
    const Clock::time_point now = coarse_now();
    if (now - control_window_start_ >= std::chrono::seconds(1)) {
      control_window_start_ = now;
      control_frames_ = 0;
    }
    if (++control_frames_ > Http2Limits::control_frames_per_second) {
      enhance_your_calm("SETTINGS, PING or PRIORITY flood");
      return false;
    }
  }
  if (type == NGHTTP2_RST_STREAM) {
    // heft's own bucket besides nghttp2's (which not every build has, and
    // which let some floods through): a burst, then a rate.
    const Clock::time_point now = coarse_now();
    const double seconds = std::chrono::duration<double>(now - resets_refilled_).count();
    reset_tokens_ = std::min<double>(Http2Limits::reset_burst, reset_tokens_ + seconds * Http2Limits::resets_per_second);
    resets_refilled_ = now;
    if (reset_tokens_ < 1) {
      enhance_your_calm("rapid reset");
      return false;
    }
    reset_tokens_ -= 1;
  }
  const bool empty = (type == NGHTTP2_DATA || type == NGHTTP2_HEADERS || type == NGHTTP2_CONTINUATION) &&
                     length == 0 && !(flags & NGHTTP2_FLAG_END_STREAM);
  if (!empty) {
    if (type == NGHTTP2_DATA || type == NGHTTP2_HEADERS) empty_frames_ = 0;
  } else if (++empty_frames_ > Http2Limits::empty_frames_in_a_row) {
    enhance_your_calm("empty frames");
    return false;
  }
  return true;
}

void Http2Connection::enhance_your_calm(const char* what) {
  if (std::exchange(calmed_, true)) return;
  static observe::LogLimit floods("HTTP/2 connections ended for floods", observe::LogLevel::warn);
  if (floods.admit()) observe::warn("HTTP/2 from {}: {}: GOAWAY ENHANCE_YOUR_CALM", client_ip, what);
  going_away_ = true;
  nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
  close_deadline_ = coarse_now() + std::chrono::seconds(1);
  notify_output();
}

void Http2Connection::go_away() {
  if (std::exchange(going_away_, true) || transport_failed_) return;
  // Streams up to the last one received are served; later ones are refused
  // (the client may retry them elsewhere). Closed once they are done.
  nghttp2_submit_goaway(session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  if (tasks_ == 0) nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR);
  else idle_deadline_ = Clock::time_point::max();
  close_deadline_ = Clock::time_point::max();
  notify_output();
}

void Http2Connection::sweep(Clock::time_point now) {
  if (now >= write_deadline_ || now >= close_deadline_) {
    // The client does not read (or does not take its GOAWAY): the connection ends.
    write_deadline_ = close_deadline_ = Clock::time_point::max();
    transport_ended();
    close_transport();
    return;
  }
  if (tasks_ == 0 && now >= idle_deadline_) {
    idle_deadline_ = Clock::time_point::max();
    going_away_ = true;
    nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR);
    close_deadline_ = now + std::chrono::seconds(1);
    notify_output();
    return;
  }
  if (going_away_ && tasks_ == 0 && close_deadline_ == Clock::time_point::max()) {
    nghttp2_session_terminate_session(session, NGHTTP2_NO_ERROR);
    close_deadline_ = now + std::chrono::seconds(1);
    notify_output();
  }
  for (const auto& s : streams_) {
    if (!s->task_running) continue;
    if (now >= s->deadline) {
      s->expire();
      continue;
    }
    if (s->head_pool_) s->check_stall(now);
  }
}

void Http2Connection::cut() {
  for (const auto& s : streams_)
    if (s->task_running) s->cut();
}

// ---- The worker's view of its HTTP/2 connections (runtime.h).

void sweep_http2(Worker& worker, Clock::time_point now) {
  // sweep() may end a connection's transport, never the connection itself
  // (its serve_http2() frame does, later): the list stays as it is.
  for (Http2Connection* c : worker.h2_connections) c->sweep(now);
}

void go_away_http2(Worker& worker) {
  for (Http2Connection* c : worker.h2_connections) c->go_away();
}

void go_away_http2(Worker& worker, uint16_t port) {
  for (Http2Connection* c : worker.h2_connections)
    if (c->local_port == port) c->go_away();
}

void cut_http2(Worker& worker) {
  for (Http2Connection* c : worker.h2_connections) c->cut();
}

bool http2_on_port(const Worker& worker, uint16_t port) {
  return std::any_of(worker.h2_connections.begin(), worker.h2_connections.end(),
                     [port](const Http2Connection* c) { return c->local_port == port; });
}

}  // namespace heft::proxy
