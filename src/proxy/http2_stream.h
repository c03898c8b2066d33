// One HTTP/2 request stream as an Exchange: its body source is the stream's
// DATA frames (taken from the client's flow-control window only as the
// upstream takes them), its response sink the stream's HEADERS and DATA
// through nghttp2 (a piece of body pulled into frames only as the client's
// window allows). The request head is mapped to the one an HTTP/1.1 request
// would have (:authority as Host, cookie crumbs joined).
//
// Thread safety: lives on its worker's thread only.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/exchange.h"

namespace heft::proxy {

class Http2Connection;

class Http2Stream final : public Exchange {
 public:
  Http2Stream(Http2Connection& connection, int32_t stream_id);
  ~Http2Stream() override;

  Http2Connection& conn;
  const int32_t id;
  std::list<std::shared_ptr<Http2Stream>>::iterator self;

  // ---- Filled by the connection's callbacks while the request's HEADERS come.
  // False when the field list passed Http2Limits::max_header_list.
  bool add_field(std::string_view name, std::string_view value);
  // A trailer field: counted against the same limit, not forwarded.
  bool add_trailer_field(std::string_view name, std::string_view value);
  // The head is complete: builds the RequestHead. `ended`: END_STREAM came with it.
  void head_complete(bool ended);
  // DATA for the body; END_STREAM.
  void body_data(std::string_view bytes);
  void body_ended();
  // nghttp2 closed the stream (done, or reset by either side).
  void closed();
  // A DATA frame's bytes for the response: nghttp2's read callback.
  std::size_t pull(uint8_t* out, std::size_t length, bool& end, bool& deferred);
  // The response's last frame (END_STREAM) went out.
  void response_sent();

  bool task_running = false;
  bool nghttp2_open = true;
  bool head_too_large = false;

  // Serves the request (the task spawned once its head is complete).
  Task<void> run();
  void cut();

  // ---- Exchange.
  bool body_done() const override { return body_end_ && body_taken_ == body_.size(); }
  bool body_unsized() const override { return !content_length_; }
  uint64_t body_length() const override { return content_length_.value_or(0); }
  bool body_declared() const override { return content_length_.has_value() || !end_with_head_; }
  Task<BodyPiece> read_body(char* out, std::size_t capacity) override;
  Task<bool> send_continue() override;
  void begin_response(const ResponseParser& response, const config::ProxyConfig& pool, bool switching) override;
  bool response_keeps_connection() const override { return true; }
  bool send_body(std::string_view piece, bool last, SendResult& result) override;
  Task<void> finish_send(SendResult& result) override;
  Task<bool> send_interim(const ResponseParser& response) override;
  Task<bool> send_switch() override { co_return false; }  // never planned: HTTP/2 has no Upgrade
  Task<void> splice(UpstreamConnection&) override { co_return; }
  bool client_keep_alive(std::optional<bool>) override { return true; }
  bool closing() const override { return false; }
  void cancel_client() override { wake(); }

 private:
  void wake() { signal_.cancel(); }
  Task<void> wait();
  // Response fields for nghttp2 (lowercase names), ":status" first.
  void add_response_field(std::string_view name, std::string_view value);
  // Submits the held response head (with a body to pull unless `no_body`).
  bool submit_head();
  // heft's own answer (a refusal), written whole.
  Task<void> send_refusal(const Refusal& refusal);
  Task<void> send_own(unsigned status);
  // The stream ends with nothing more to say: a response not sent whole is reset.
  void end_stream_state();

  Timer signal_;
  alignas(16) std::array<unsigned char, FieldArena::kBytes> arena_bytes_;
  std::optional<RequestHead> head_;
  std::size_t header_bytes_ = 0;
  std::string authority_, cookies_;
  std::optional<uint64_t> content_length_;
  bool end_with_head_ = false;
  // The request body as received, not yet taken (bounded by the stream window).
  std::string body_;
  std::size_t body_taken_ = 0;
  bool body_end_ = false;
  bool reset_ = false;  // closed before its response was sent whole

  // The response: fields as NUL-free text and their spans, then the body piece pulled from.
  std::string response_text_;
  std::vector<std::array<uint32_t, 4>> response_spans_;  // name at, name size, value at, value size
  bool no_body_ = false;
  bool head_submitted_ = false;
  bool head_out_ = false;
  std::string_view out_;
  std::size_t out_done_ = 0;
  bool out_last_ = false;
  bool eof_given_ = false;
  bool deferred_ = false;
  std::string refusal_body_;
};

}  // namespace heft::proxy
