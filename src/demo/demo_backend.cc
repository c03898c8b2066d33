#include "demo/demo_backend.h"

#include <array>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

namespace heft::demo {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
constexpr auto as_tuple_awaitable = asio::as_tuple(use_awaitable);

// Size of every streamed piece: request-body reads, echo chunks, /bytes chunks.
// A multiple of the 64-byte body line, so consecutive chunks continue the pattern.
constexpr std::size_t kChunkBytes = 64 * 1024;
// Request heads up to this size are served: heft passes heads of up to
// 32 KiB (proxy/request_head.h) plus its forwarding fields, so whatever heft
// accepts reaches the demo whole (Beast's default limit is 8 KiB). A longer
// one is answered 431.
constexpr std::size_t kMaxRequestHead = 64 * 1024;
constexpr uint32_t kPartsPerMillion = 1'000'000;

const std::string& pattern_chunk() {
  static const std::string chunk = make_demo_body(kChunkBytes);
  return chunk;
}

uint32_t to_parts_per_million(double fail_rate) {
  return static_cast<uint32_t>(fail_rate * kPartsPerMillion + 0.5);
}

std::string_view query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.size() > name.size() && pair.starts_with(name) && pair[name.size()] == '=') {
      return pair.substr(name.size() + 1);
    }
  }
  return {};
}

template <class Number>
bool parse_number(std::string_view text, Number& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size();
}

// A FIFO counting semaphore for the --workers limit. Waiters park on their own
// timer (on their connection's strand); release() hands the slot straight to the
// oldest waiter and wakes it by moving its timer's expiry into the past, which
// wakes it whether or not its wait has started yet.
class WorkerSlots {
 public:
  explicit WorkerSlots(std::size_t limit) : limit_(limit) {}

  // True with a slot held; false when the backend stopped.
  awaitable<bool> acquire() {
    const auto executor = co_await asio::this_coro::executor;
    std::shared_ptr<Waiter> waiter;
    {
      std::lock_guard lock(mutex_);
      if (stopped_) co_return false;
      if (limit_ == 0 || in_use_ < limit_) {
        ++in_use_;
        co_return true;
      }
      waiter = std::make_shared<Waiter>(executor);
      queue_.push_back(waiter);
    }
    co_await waiter->timer.async_wait(as_tuple_awaitable);
    std::lock_guard lock(mutex_);
    co_return waiter->granted;
  }

  void release() {
    std::lock_guard lock(mutex_);
    if (limit_ == 0) return;
    if (queue_.empty()) {
      --in_use_;
      return;
    }
    wake(std::move(queue_.front()), true);
    queue_.pop_front();
  }

  void stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    for (auto& waiter : queue_) wake(std::move(waiter), false);
    queue_.clear();
  }

 private:
  struct Waiter {
    explicit Waiter(const asio::any_io_executor& executor) : timer(executor, asio::steady_timer::time_point::max()) {}
    asio::steady_timer timer;
    bool granted = false;  // guarded by mutex_
  };

  // Called with mutex_ held.
  static void wake(std::shared_ptr<Waiter> waiter, bool granted) {
    waiter->granted = granted;
    auto executor = waiter->timer.get_executor();
    asio::post(executor, [waiter = std::move(waiter)] { waiter->timer.expires_at({}); });
  }

  std::mutex mutex_;
  const std::size_t limit_;
  std::size_t in_use_ = 0;
  bool stopped_ = false;
  std::deque<std::shared_ptr<Waiter>> queue_;
};

class SlotGuard {
 public:
  explicit SlotGuard(WorkerSlots& slots) : slots_(&slots) {}
  ~SlotGuard() { slots_->release(); }
  SlotGuard(const SlotGuard&) = delete;
  SlotGuard& operator=(const SlotGuard&) = delete;

 private:
  WorkerSlots* slots_;
};

struct Connection {
  explicit Connection(const asio::any_io_executor& strand) : socket(strand), delay_timer(strand) {}
  tcp::socket socket;
  asio::steady_timer delay_timer;
  beast::flat_buffer buffer;
  std::unique_ptr<char[]> scratch;  // kChunkBytes, allocated on the first request body
  // The request being answered is a HEAD: its response has the head a GET
  // would get and no body (RFC 9110 9.3.2); a body would be read by a proxy
  // as the response to the next request on the connection.
  bool head_request = false;

  char* scratch_buffer() {
    if (!scratch) scratch = std::make_unique<char[]>(kChunkBytes);
    return scratch.get();
  }
};

using RequestParser = http::request_parser<http::buffer_body>;

}  // namespace

struct DemoBackend::State {
  State(asio::io_context& io_context, DemoBackendOptions opts)
      : io(io_context),
        options(std::move(opts)),
        acceptor(asio::make_strand(io_context)),
        body(make_demo_body(options.body_bytes)),
        delay_ms(options.delay.count()),
        fail_ppm(to_parts_per_million(options.fail_rate)),
        slots(options.workers) {}

  asio::io_context& io;
  const DemoBackendOptions options;
  tcp::acceptor acceptor;  // on its own strand: stop() may come from any thread
  uint16_t port = 0;
  const std::string body;  // preformatted once, sent by reference

  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> connections_accepted{0};  // GET /_control/stats: proves upstream keep-alive
  std::atomic<uint64_t> fail_sequence{0};  // requests that went through the fail-rate check
  std::atomic<int64_t> delay_ms;
  std::atomic<uint32_t> fail_ppm;
  std::atomic<unsigned> health_status{200};
  std::atomic<bool> stopped{false};
  WorkerSlots slots;

  std::mutex connections_mutex;
  std::unordered_set<std::shared_ptr<Connection>> connections;  // to close them on stop()

  // Deterministic fail rate: request n of the sequence fails when floor((n+1) x rate)
  // passes a whole number, so 0.25 fails exactly every 4th and 0.2 every 5th.
  bool next_request_fails() {
    const uint64_t ppm = fail_ppm.load(std::memory_order_relaxed);
    if (ppm == 0) return false;
    const uint64_t n = fail_sequence.fetch_add(1, std::memory_order_relaxed);
    return (n + 1) * ppm / kPartsPerMillion > n * ppm / kPartsPerMillion;
  }
};

namespace {

using State = DemoBackend::State;

// Writes a complete response with a fixed-length body: head formatted on the
// stack, body sent from where it lies (no copy).
awaitable<void> write_response(const State& s, Connection& c, unsigned status, uint64_t count, bool keep_alive,
                               unsigned version, asio::const_buffer body, uint64_t content_length) {
  fmt::basic_memory_buffer<char, 512> head;
  const std::string_view reason = http::obsolete_reason(http::int_to_status(status));
  const char* connection = !keep_alive ? "Connection: close\r\n" : version < 11 ? "Connection: keep-alive\r\n" : "";
  fmt::format_to(std::back_inserter(head),
                 "HTTP/1.1 {} {}\r\nX-Backend: {}\r\nX-Request-Count: {}\r\nContent-Type: text/plain\r\n"
                 "Content-Length: {}\r\n{}\r\n",
                 status, reason, s.options.name, count, content_length, connection);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(head.data(), head.size()),
                                                  c.head_request ? asio::const_buffer{} : body};
  co_await asio::async_write(c.socket, buffers, use_awaitable);
}

awaitable<void> write_text(const State& s, Connection& c, unsigned status, uint64_t count, bool keep_alive,
                           unsigned version, std::string_view text) {
  co_await write_response(s, c, status, count, keep_alive, version, asio::buffer(text), text.size());
}

// Reads the rest of the request body into `sink` (a kChunkBytes buffer), calling
// on_data(bytes) for each piece; memory stays bounded whatever the body size.
template <class OnData>
awaitable<void> read_body(Connection& c, RequestParser& parser, OnData on_data) {
  while (!parser.is_done()) {
    char* sink = c.scratch_buffer();
    auto& body = parser.get().body();
    body.data = sink;
    body.size = kChunkBytes;
    const auto [ec, bytes] = co_await http::async_read(c.socket, c.buffer, parser, as_tuple_awaitable);
    if (ec && ec != http::error::need_buffer) throw boost::system::system_error(ec);
    const std::size_t got = kChunkBytes - parser.get().body().size;
    if (got > 0) co_await on_data(sink, got);
  }
}

awaitable<void> discard(const char*, std::size_t) { co_return; }

awaitable<void> drain_body(Connection& c, RequestParser& parser) {
  if (!parser.is_done()) co_await read_body(c, parser, discard);
}

// POST /_control/{health,delay,fail_rate}: the runtime knobs tests turn.
awaitable<bool> serve_control(State& s, Connection& c, RequestParser& parser, std::string_view path,
                              std::string_view query, uint64_t count, bool keep_alive) {
  co_await drain_body(c, parser);
  const auto& req = parser.get();
  const unsigned version = req.version();
  const std::string_view knob = path.substr(std::string_view("/_control/").size());
  if (knob == "stats" && req.method() == http::verb::get) {
    co_await write_text(s, c, 200, count, keep_alive, version,
                        fmt::format("{{\"requests\":{},\"connections\":{}}}\n", s.requests.load(),
                                    s.connections_accepted.load()));
    co_return keep_alive;
  }
  if (req.method() != http::verb::post) {
    co_await write_text(s, c, 405, count, keep_alive, version, "use POST\n");
    co_return keep_alive;
  }
  bool ok = false;
  if (knob == "health") {
    unsigned status = 0;
    ok = parse_number(query_param(query, "status"), status) && status >= 100 && status <= 599;
    if (ok) s.health_status.store(status);
  } else if (knob == "delay") {
    int64_t ms = 0;
    ok = parse_number(query_param(query, "ms"), ms) && ms >= 0;
    if (ok) s.delay_ms.store(ms);
  } else if (knob == "fail_rate") {
    double rate = 0;
    ok = parse_number(query_param(query, "value"), rate) && rate >= 0 && rate <= 1;
    if (ok) s.fail_ppm.store(to_parts_per_million(rate));
  } else {
    co_await write_text(s, c, 404, count, keep_alive, version, "unknown control\n");
    co_return keep_alive;
  }
  co_await write_text(s, c, ok ? 200 : 400, count, keep_alive, version,
                      ok ? "ok\n" : "bad value: health?status=100..599, delay?ms=N, fail_rate?value=0..1\n");
  co_return keep_alive;
}

// The head of a 200 whose length is not known before it goes out (/echo,
// /chunked/): chunked on HTTP/1.1, else delimited by the close, so never kept
// alive then. Appended to `out`; returns whether the connection stays open.
template <typename Buffer>
bool append_streamed_head(const State& s, uint64_t count, bool chunked, bool keep_alive, Buffer& out) {
  keep_alive = keep_alive && chunked;
  fmt::format_to(std::back_inserter(out),
                 "HTTP/1.1 200 OK\r\nX-Backend: {}\r\nX-Request-Count: {}\r\nContent-Type: text/plain\r\n{}{}\r\n",
                 s.options.name, count, chunked ? "Transfer-Encoding: chunked\r\n" : "",
                 keep_alive ? "" : "Connection: close\r\n");
  return keep_alive;
}

// Streams the request body back as it arrives: chunked on HTTP/1.1, until close on 1.0.
awaitable<bool> serve_echo(State& s, Connection& c, RequestParser& parser, uint64_t count, bool keep_alive) {
  const bool chunked = parser.get().version() >= 11;
  fmt::basic_memory_buffer<char, 512> head;
  keep_alive = append_streamed_head(s, count, chunked, keep_alive, head);
  co_await asio::async_write(c.socket, asio::buffer(head.data(), head.size()), use_awaitable);
  if (c.head_request) {
    co_await drain_body(c, parser);
    co_return keep_alive;
  }
  co_await read_body(c, parser, [&c, chunked](const char* data, std::size_t size) -> awaitable<void> {
    if (!chunked) {
      co_await asio::async_write(c.socket, asio::buffer(data, size), use_awaitable);
      co_return;
    }
    std::array<char, 24> size_line;
    const auto end = fmt::format_to(size_line.data(), "{:x}\r\n", size);
    const std::array<asio::const_buffer, 3> buffers{
        asio::buffer(size_line.data(), static_cast<std::size_t>(end - size_line.data())), asio::buffer(data, size),
        asio::buffer("\r\n", 2)};
    co_await asio::async_write(c.socket, buffers, use_awaitable);
  });
  if (chunked) co_await asio::async_write(c.socket, asio::buffer("0\r\n\r\n", 5), use_awaitable);
  co_return keep_alive;
}

// /bytes/N: N pattern bytes with a Content-Length, written 64 KiB at a time.
awaitable<bool> serve_bytes(State& s, Connection& c, RequestParser& parser, std::string_view path, uint64_t count,
                            bool keep_alive) {
  co_await drain_body(c, parser);
  const unsigned version = parser.get().version();
  uint64_t total = 0;
  if (!parse_number(path.substr(std::string_view("/bytes/").size()), total)) {
    co_await write_text(s, c, 400, count, keep_alive, version, "use /bytes/<number of bytes>\n");
    co_return keep_alive;
  }
  const std::string& chunk = pattern_chunk();
  const std::size_t first = std::min<uint64_t>(total, chunk.size());
  co_await write_response(s, c, 200, count, keep_alive, version, asio::buffer(chunk.data(), first), total);
  for (uint64_t sent = c.head_request ? total : first; sent < total;) {
    const std::size_t piece = std::min<uint64_t>(total - sent, chunk.size());
    co_await asio::async_write(c.socket, asio::buffer(chunk.data(), piece), use_awaitable);
    sent += piece;
  }
  co_return keep_alive;
}

// /chunked/N/C: N pattern bytes as chunks of C bytes (1..64 KiB; the last may
// be shorter), framed into writes of about 64 KiB: a backend whose framework
// sends each small piece as a chunk (the proxy benchmark's chunked scenario).
// Until close, unframed, to an HTTP/1.0 request, as /echo.
awaitable<bool> serve_chunked(State& s, Connection& c, RequestParser& parser, std::string_view path, uint64_t count,
                              bool keep_alive) {
  co_await drain_body(c, parser);
  const unsigned version = parser.get().version();
  const std::string_view sizes = path.substr(std::string_view("/chunked/").size());
  const std::size_t slash = sizes.find('/');
  uint64_t total = 0;
  std::size_t chunk_size = 0;
  if (slash == std::string_view::npos || !parse_number(sizes.substr(0, slash), total) ||
      !parse_number(sizes.substr(slash + 1), chunk_size) || chunk_size == 0 || chunk_size > kChunkBytes) {
    co_await write_text(s, c, 400, count, keep_alive, version,
                        "use /chunked/<number of bytes>/<chunk size, 1..65536>\n");
    co_return keep_alive;
  }
  const bool chunked = version >= 11;
  std::string out;
  out.reserve(2 * kChunkBytes + 32);
  keep_alive = append_streamed_head(s, count, chunked, keep_alive, out);
  const std::string& pattern = pattern_chunk();
  for (uint64_t sent = c.head_request ? total : 0; sent < total;) {
    const std::size_t piece = std::min<uint64_t>(total - sent, chunk_size);
    if (chunked) fmt::format_to(std::back_inserter(out), "{:x}\r\n", piece);
    // The pattern repeats every kChunkBytes: the body continues it across chunks.
    const std::size_t at = sent % kChunkBytes, first = std::min(piece, kChunkBytes - at);
    out.append(pattern, at, first);
    out.append(pattern, 0, piece - first);
    if (chunked) out.append("\r\n");
    sent += piece;
    if (out.size() >= kChunkBytes) {
      co_await asio::async_write(c.socket, asio::buffer(out), use_awaitable);
      out.clear();
    }
  }
  if (chunked && !c.head_request) out.append("0\r\n\r\n");
  if (!out.empty()) co_await asio::async_write(c.socket, asio::buffer(out), use_awaitable);
  co_return keep_alive;
}

awaitable<void> serve_websocket(State& s, Connection& c, RequestParser& parser) {
  websocket::stream<tcp::socket&> ws(c.socket);
  ws.set_option(websocket::stream_base::decorator(
      [&name = s.options.name](websocket::response_type& res) { res.set("X-Backend", name); }));
  co_await ws.async_accept(parser.get(), use_awaitable);
  beast::flat_buffer message;
  for (;;) {
    const auto [ec, bytes] = co_await ws.async_read(message, as_tuple_awaitable);
    if (ec) co_return;  // closed by the peer (or by stop())
    ws.text(ws.got_text());
    co_await ws.async_write(message.data(), use_awaitable);
    message.consume(message.size());
  }
}

// One request whose header has been read; returns whether to keep the connection.
awaitable<bool> serve_request(State& s, Connection& c, RequestParser& parser) {
  const uint64_t count = s.requests.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto& req = parser.get();
  const bool keep_alive = req.keep_alive();
  const unsigned version = req.version();
  const std::string_view target = req.target();
  const std::size_t question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query = question == std::string_view::npos ? std::string_view{} : target.substr(question + 1);
  c.head_request = req.method() == http::verb::head;

  if (!parser.is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
    co_await asio::async_write(c.socket, asio::buffer("HTTP/1.1 100 Continue\r\n\r\n", 25), use_awaitable);
  }
  if (path.starts_with("/_control/")) co_return co_await serve_control(s, c, parser, path, query, count, keep_alive);
  if (!s.options.health_path.empty() && path == s.options.health_path) {
    co_await drain_body(c, parser);
    const unsigned status = s.health_status.load();
    co_await write_text(s, c, status, count, keep_alive, version, status == 200 ? "ok\n" : "unhealthy\n");
    co_return keep_alive;
  }
  if (path == "/ws" && websocket::is_upgrade(req)) {
    co_await serve_websocket(s, c, parser);
    co_return false;
  }

  // Regular traffic: wait for a worker, then the delay, then maybe fail.
  if (!co_await s.slots.acquire()) co_return false;
  SlotGuard slot(s.slots);
  if (const int64_t delay = s.delay_ms.load(std::memory_order_relaxed); delay > 0) {
    c.delay_timer.expires_after(std::chrono::milliseconds(delay));
    co_await c.delay_timer.async_wait(as_tuple_awaitable);
    if (s.stopped.load()) co_return false;
  }
  if (s.next_request_fails()) {
    co_await drain_body(c, parser);
    co_await write_text(s, c, 503, count, keep_alive, version, "failing on purpose (--fail-rate)\n");
    co_return keep_alive;
  }
  if (path.starts_with("/echo")) co_return co_await serve_echo(s, c, parser, count, keep_alive);
  if (path.starts_with("/bytes/")) co_return co_await serve_bytes(s, c, parser, path, count, keep_alive);
  if (path.starts_with("/chunked/")) co_return co_await serve_chunked(s, c, parser, path, count, keep_alive);
  co_await drain_body(c, parser);
  co_await write_response(s, c, 200, count, keep_alive, version, asio::buffer(s.body), s.body.size());
  co_return keep_alive;
}

// Reads a request head into `parser`, as http::async_read_header() would,
// but holds the whole head to kMaxRequestHead: Beast's header_limit bounds
// what one parse call looks at, so fields parsed by earlier calls (a second
// request on a connection whose buffer has grown) were not counted.
awaitable<boost::system::error_code> read_head(Connection& c, RequestParser& parser) {
  parser.header_limit(kMaxRequestHead);  // one line that long: Beast stops it
  std::size_t head_bytes = 0;
  for (;;) {
    if (c.buffer.size() > 0) {
      boost::system::error_code ec;
      const std::size_t used = parser.put(c.buffer.data(), ec);
      c.buffer.consume(used);
      head_bytes += used;
      if (head_bytes > kMaxRequestHead) co_return http::error::header_limit;
      if (!ec && parser.is_header_done()) co_return ec;
      if (ec && ec != http::error::need_more) co_return ec;
      if (!ec && used > 0) continue;
    }
    const auto [ec, n] = co_await c.socket.async_read_some(c.buffer.prepare(kChunkBytes), as_tuple_awaitable);
    c.buffer.commit(n);
    if (ec) co_return ec;  // closed (between requests or not), or stopped
  }
}

// 431 for a head over kMaxRequestHead, then the end of the connection. The
// rest of the head (and any body) is read and dropped until the client
// closes, at most 1 MiB of it: closing with unread input would reset the
// connection, which can destroy the answer before the client reads it.
awaitable<void> refuse_long_head(State& s, Connection& c) {
  const uint64_t count = s.requests.fetch_add(1, std::memory_order_relaxed) + 1;
  co_await write_text(s, c, 431, count, false, 11, "request header fields too large\n");
  boost::system::error_code ec;
  c.socket.shutdown(tcp::socket::shutdown_send, ec);
  for (std::size_t dropped = 0; !ec && dropped < (1u << 20);) {
    std::size_t n = 0;
    std::tie(ec, n) = co_await c.socket.async_read_some(asio::buffer(c.scratch_buffer(), kChunkBytes), as_tuple_awaitable);
    dropped += n;
  }
}

awaitable<void> serve_connection(std::shared_ptr<State> s, std::shared_ptr<Connection> c) {
  try {
    for (;;) {
      RequestParser parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // bodies are streamed, never held
      const boost::system::error_code ec = co_await read_head(*c, parser);
      if (ec == http::error::header_limit) {
        // Answered, not just closed: a proxy takes a silent close for a
        // broken backend (and marks it failed), an answer for the client's.
        co_await refuse_long_head(*s, *c);
        break;
      }
      if (ec) break;  // closed, or not HTTP: either way nothing to answer
      if (!co_await serve_request(*s, *c, parser)) break;
    }
  } catch (const std::exception&) {
    // A peer that went away mid-response; nothing is logged per request.
  }
  boost::system::error_code ignored;
  c->socket.shutdown(tcp::socket::shutdown_send, ignored);
  c->socket.close(ignored);
  std::lock_guard lock(s->connections_mutex);
  s->connections.erase(c);
}

awaitable<void> accept_loop(std::shared_ptr<State> s) {
  while (!s->stopped.load()) {
    auto c = std::make_shared<Connection>(asio::make_strand(s->io));
    const auto [ec] = co_await s->acceptor.async_accept(c->socket, as_tuple_awaitable);
    if (ec == asio::error::operation_aborted || !s->acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors or similar: back off briefly instead of spinning.
      asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
      co_await pause.async_wait(as_tuple_awaitable);
      continue;
    }
    s->connections_accepted.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(s->connections_mutex);
      if (s->stopped.load()) co_return;
      s->connections.insert(c);
    }
    boost::system::error_code ignored;
    c->socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(c->socket.get_executor(), serve_connection(s, c), asio::detached);
  }
}

}  // namespace

char demo_body_byte(uint64_t offset) {
  // 63 printable characters and a newline per line: readable in a terminal and
  // checkable at any offset.
  static constexpr std::string_view line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.";
  static_assert(line.size() == 63);
  const uint64_t column = offset % 64;
  return column == 63 ? '\n' : line[column];
}

std::string make_demo_body(std::size_t bytes) {
  std::string body(bytes, '\0');
  for (std::size_t i = 0; i < bytes; ++i) body[i] = demo_body_byte(i);
  return body;
}

DemoBackend::DemoBackend(asio::io_context& io, DemoBackendOptions options) {
  if (!(options.fail_rate >= 0 && options.fail_rate <= 1)) {
    throw std::invalid_argument(fmt::format("fail rate must be between 0 and 1, got {}", options.fail_rate));
  }
  if (!options.health_path.empty() && options.health_path.front() != '/') {
    throw std::invalid_argument(fmt::format("health path must start with '/', got '{}'", options.health_path));
  }
  if (options.delay.count() < 0) throw std::invalid_argument("delay must not be negative");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) throw std::invalid_argument(fmt::format("'{}' is not an IP address", options.address));
  const tcp::endpoint endpoint(address, options.port);

  state_ = std::make_shared<State>(io, std::move(options));
  tcp::acceptor& acceptor = state_->acceptor;
  // error_code overloads: Boost's system_error text carries a source location
  // ("[system:98 at .../reactive_socket_service.hpp:161:5 in function ...]").
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string at = address.is_v6() ? fmt::format("[{}]:{}", address.to_string(), endpoint.port())
                                           : fmt::format("{}:{}", address.to_string(), endpoint.port());
    throw std::runtime_error(fmt::format("cannot listen on {}: {}", at, ec.message()));
  }
  state_->port = acceptor.local_endpoint().port();
}

DemoBackend::~DemoBackend() { stop(); }

uint16_t DemoBackend::port() const { return state_->port; }

uint64_t DemoBackend::requests_served() const { return state_->requests.load(); }

void DemoBackend::start() {
  asio::co_spawn(state_->acceptor.get_executor(), accept_loop(state_), asio::detached);
}

void DemoBackend::stop() {
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(state_->connections_mutex);
    if (state_->stopped.exchange(true)) return;
    open.assign(state_->connections.begin(), state_->connections.end());
  }
  asio::post(state_->acceptor.get_executor(), [s = state_] {
    boost::system::error_code ignored;
    s->acceptor.close(ignored);
  });
  for (auto& c : open) {
    asio::post(c->socket.get_executor(), [c] {
      boost::system::error_code ignored;
      c->socket.shutdown(tcp::socket::shutdown_both, ignored);
      c->socket.close(ignored);
      c->delay_timer.cancel();
    });
  }
  state_->slots.stop();
}

int run_demo_backend(const DemoBackendOptions& options) {
  const unsigned threads = std::max(1u, options.threads);
  asio::io_context io(static_cast<int>(threads));
  // Signals first: a test may send SIGTERM the moment the port file appears.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  DemoBackend backend(io, options);
  signals.async_wait([&backend](const boost::system::error_code& ec, int) {
    if (!ec) backend.stop();
  });
  if (!options.port_file.empty()) {
    // Write then rename, so a reader never sees a half-written number.
    const std::string temporary = options.port_file + ".tmp";
    std::FILE* file = std::fopen(temporary.c_str(), "w");
    bool written = file != nullptr && std::fprintf(file, "%u\n", static_cast<unsigned>(backend.port())) > 0;
    written = file != nullptr && std::fclose(file) == 0 && written;
    if (!written || std::rename(temporary.c_str(), options.port_file.c_str()) != 0) {
      throw std::runtime_error(fmt::format("cannot write the port file {}", options.port_file));
    }
  }
  backend.start();
  std::vector<std::thread> extra;
  for (unsigned i = 1; i < threads; ++i) extra.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& thread : extra) thread.join();
  return 0;
}

}  // namespace heft::demo
