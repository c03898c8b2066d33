// DemoBackend in-process, over real sockets on 127.0.0.1 with an ephemeral port.
// Every client operation runs with a deadline (tcp_stream expiry), so no test can hang.
#include "demo/demo_backend.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <gtest/gtest.h>

#include "chunked_body.h"

namespace heft::demo {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kDeadline = std::chrono::seconds(30);

// A DemoBackend and its io_context running on a background thread.
class RunningBackend {
 public:
  explicit RunningBackend(DemoBackendOptions options) : backend_(io_, std::move(options)) {
    backend_.start();
    thread_ = std::thread([this] {
      io_.run();
      ran_out_.set_value();
    });
  }
  ~RunningBackend() {
    if (thread_.joinable()) {
      EXPECT_TRUE(stop_within(kDeadline)) << "stop() left work running after " << kDeadline.count() << " s";
    }
  }
  // Stops the backend: true when its io_context then runs out of work (every
  // connection ended) within `limit`. Otherwise the io_context is stopped by
  // force, so the test fails instead of waiting for ever.
  bool stop_within(std::chrono::steady_clock::duration limit) {
    backend_.stop();
    const bool ended = ran_out_.get_future().wait_for(limit) == std::future_status::ready;
    if (!ended) io_.stop();
    thread_.join();
    return ended;
  }
  uint16_t port() const { return backend_.port(); }
  DemoBackend& backend() { return backend_; }

 private:
  asio::io_context io_;
  DemoBackend backend_;
  std::promise<void> ran_out_;
  std::thread thread_;
};

// A keep-alive HTTP client with its own io_context; every call has a deadline.
class Client {
 public:
  explicit Client(uint16_t port) : stream_(io_) {
    thread_ = std::thread([this] { io_.run(); });
    stream_.expires_after(kDeadline);
    stream_.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), asio::use_future).get();
  }
  ~Client() {
    asio::post(io_, [this] {
      boost::system::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream_.close();
    });
    work_.reset();
    thread_.join();
  }

  http::response<http::string_body> request(http::request<http::string_body> req) {
    req.prepare_payload();
    stream_.expires_after(kDeadline);
    http::async_write(stream_, req, asio::use_future).get();
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::async_read(stream_, buffer_, parser, asio::use_future).get();
    return parser.release();
  }

  http::response<http::string_body> get(std::string target) {
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    return request(std::move(req));
  }

  http::response<http::string_body> post(std::string target, std::string body = {}) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = std::move(body);
    return request(std::move(req));
  }

  beast::tcp_stream& stream() { return stream_; }
  beast::flat_buffer& buffer() { return buffer_; }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::thread thread_;
};

DemoBackendOptions options_named(std::string name) {
  DemoBackendOptions options;
  options.name = std::move(name);
  return options;
}

TEST(DemoBackendTest, AnswersWithNameBodyAndCount) {
  RunningBackend backend(options_named("alpha"));
  ASSERT_NE(backend.port(), 0);
  Client client(backend.port());
  auto res = client.get("/anything");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res["X-Backend"], "alpha");
  EXPECT_EQ(res[http::field::content_type], "text/plain");
  EXPECT_EQ(res["X-Request-Count"], "1");
  EXPECT_EQ(res.body().size(), 1024u);
  EXPECT_EQ(res.body(), make_demo_body(1024));
  EXPECT_TRUE(res.keep_alive());
  EXPECT_EQ(backend.backend().requests_served(), 1u);
}

TEST(DemoBackendTest, BodyBytesOptionSetsTheSize) {
  DemoBackendOptions options = options_named("sized");
  options.body_bytes = 10;
  RunningBackend backend(options);
  Client client(backend.port());
  EXPECT_EQ(client.get("/").body(), "0123456789");
}

TEST(DemoBackendTest, KeepAliveServesManyRequestsOnOneConnection) {
  RunningBackend backend(options_named("ka"));
  Client client(backend.port());
  for (int i = 1; i <= 5; ++i) {
    auto res = client.get("/r" + std::to_string(i));
    ASSERT_EQ(res.result_int(), 200);
    EXPECT_EQ(res["X-Request-Count"], std::to_string(i));
    EXPECT_TRUE(res.keep_alive());
  }
}

TEST(DemoBackendTest, ConnectionCloseIsHonoured) {
  RunningBackend backend(options_named("close"));
  Client client(backend.port());
  http::request<http::string_body> req{http::verb::get, "/", 11};
  req.keep_alive(false);
  auto res = client.request(std::move(req));
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_FALSE(res.keep_alive());
}

// A HEAD gets the head a GET would get and no body (RFC 9110 9.3.2): the
// body went out after the head, so a proxy pooling the connection read it
// as the response to the next request (heft logged 'bad version' and
// answered 502).
TEST(DemoBackendTest, HeadResponsesHaveNoBody) {
  RunningBackend backend(options_named("head"));
  Client client(backend.port());
  const std::string requests =
      "HEAD / HTTP/1.1\r\nHost: a\r\n\r\n"
      "HEAD /bytes/100000 HTTP/1.1\r\nHost: a\r\n\r\n"
      "HEAD /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
      "GET /bytes/3 HTTP/1.1\r\nHost: a\r\n\r\n";
  client.stream().expires_after(kDeadline);
  asio::async_write(client.stream(), asio::buffer(requests), asio::use_future).get();
  std::string raw;
  std::array<char, 65536> piece;
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (raw.find("\r\n\r\n012") == std::string::npos && Clock::now() < until) {
    client.stream().expires_after(std::chrono::seconds(2));
    try {
      raw.append(piece.data(), client.stream().async_read_some(asio::buffer(piece), asio::use_future).get());
    } catch (const boost::system::system_error&) {
      break;
    }
  }
  EXPECT_NE(raw.find("Content-Length: 1024\r\n"), std::string::npos) << raw;
  EXPECT_NE(raw.find("Content-Length: 100000\r\n"), std::string::npos) << raw;
  EXPECT_NE(raw.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << raw;
  EXPECT_EQ(raw.find("abcdef"), std::string::npos) << "a HEAD's body (the demo pattern) was sent";
  EXPECT_EQ(raw.find("hello"), std::string::npos) << "a HEAD /echo's body was sent";
  EXPECT_TRUE(raw.ends_with("\r\n\r\n012")) << raw.substr(raw.size() > 300 ? raw.size() - 300 : 0);
}

// Heads up to what heft forwards (32 KiB and its own fields) are served; a
// longer one is answered 431, then the connection ends (it was closed
// without a word at Beast's 8 KiB default).
TEST(DemoBackendTest, LongHeadsAreServedUpTo64KiBThenAnswered431) {
  RunningBackend backend(options_named("long"));
  Client client(backend.port());
  http::request<http::string_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::user_agent, std::string(40 * 1024, 'a'));
  EXPECT_EQ(client.request(req).result_int(), 200);
  req.set("X-More", std::string(30 * 1024, 'b'));  // 70 KiB in all (a field value must stay under 64 KiB)
  const auto refused = client.request(req);
  EXPECT_EQ(refused.result_int(), 431);
  EXPECT_EQ(refused["X-Backend"], "long");
  EXPECT_FALSE(refused.keep_alive());
  char byte;
  boost::system::error_code end;
  try {
    client.stream().async_read_some(asio::buffer(&byte, 1), asio::use_future).get();
  } catch (const boost::system::system_error& e) {
    end = e.code();
  }
  EXPECT_EQ(end, asio::error::eof);
}

TEST(DemoBackendTest, FailRateIsExactOverTime) {
  DemoBackendOptions options = options_named("flaky");
  options.fail_rate = 0.25;
  RunningBackend backend(options);
  Client client(backend.port());
  int failures = 0;
  for (int i = 0; i < 100; ++i) {
    auto res = client.get("/");
    ASSERT_TRUE(res.result_int() == 200 || res.result_int() == 503) << res.result_int();
    if (res.result_int() == 503) {
      ++failures;
      EXPECT_EQ(res["X-Backend"], "flaky");
      EXPECT_TRUE(res.keep_alive());  // a 503 does not cost the connection
    }
  }
  EXPECT_EQ(failures, 25);
}

// --fail-above: a burst far past the rate gets the bucket's tenth of a
// second's worth (plus what refills meanwhile) and 503 for the rest, the
// health path still answering; an even stream under the rate all passes.
TEST(DemoBackendTest, FailAboveShedsTheExcessOfABurst) {
  DemoBackendOptions options = options_named("capped");
  options.fail_above = 50;  // a bucket of 5
  options.health_path = "/healthz";
  RunningBackend backend(options);
  Client client(backend.port());
  int passed = 0;
  const auto start = Clock::now();
  for (int i = 0; i < 100; ++i) {
    auto res = client.get("/");
    ASSERT_TRUE(res.result_int() == 200 || res.result_int() == 503) << res.result_int();
    passed += res.result_int() == 200;
    if (res.result_int() == 503) {
      EXPECT_TRUE(res.keep_alive());
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(passed, 5);
  EXPECT_LE(passed, 5 + int(50 * seconds) + 1) << "over " << seconds << " s";
  EXPECT_LT(passed, 100);
  EXPECT_EQ(client.get("/healthz").result_int(), 200);
}

TEST(DemoBackendTest, FailAbovePassesAnEvenStreamUnderTheRate) {
  DemoBackendOptions options = options_named("capped");
  options.fail_above = 50;
  RunningBackend backend(options);
  Client client(backend.port());
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {  // 25 a second, for 0.8 s
    std::this_thread::sleep_until(start + milliseconds(40 * i));
    EXPECT_EQ(client.get("/").result_int(), 200) << "request " << i;
  }
  // Turned off at run time, a burst passes whole.
  EXPECT_EQ(client.post("/_control/fail_above?rps=0").result_int(), 200);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(client.get("/").result_int(), 200);
  EXPECT_EQ(client.post("/_control/fail_above?rps=-1").result_int(), 400);
}

TEST(DemoBackendTest, DelayAddsAtLeastThatMuchLatency) {
  DemoBackendOptions options = options_named("slow");
  options.delay = milliseconds(100);
  RunningBackend backend(options);
  Client client(backend.port());
  const auto start = Clock::now();
  EXPECT_EQ(client.get("/").result_int(), 200);
  EXPECT_GE(Clock::now() - start, milliseconds(100));
}

TEST(DemoBackendTest, OneWorkerSerialisesDelayedRequests) {
  DemoBackendOptions options = options_named("single");
  options.delay = milliseconds(100);
  options.workers = 1;
  RunningBackend backend(options);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<Client>(backend.port()));
  const auto start = Clock::now();
  std::vector<std::future<int>> statuses;
  for (auto& client : clients) {
    statuses.push_back(
        std::async(std::launch::async, [&client] { return static_cast<int>(client->get("/").result_int()); }));
  }
  for (auto& status : statuses) EXPECT_EQ(status.get(), 200);
  // Three requests, one at a time, 100 ms each.
  EXPECT_GE(Clock::now() - start, milliseconds(300));
}

TEST(DemoBackendTest, EchoReturnsTheRequestBody) {
  RunningBackend backend(options_named("echo"));
  Client client(backend.port());
  std::string payload(300 * 1024, '\0');
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7 % 251);
  auto res = client.post("/echo", payload);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_TRUE(res.chunked());
  EXPECT_EQ(res["X-Backend"], "echo");
  EXPECT_EQ(res.body(), payload);
  // The connection survives for the next request.
  EXPECT_EQ(client.post("/echo/again", "short").body(), "short");
}

TEST(DemoBackendTest, EchoOfAChunkedUpload) {
  RunningBackend backend(options_named("echo"));
  Client client(backend.port());
  http::request<http::string_body> req{http::verb::post, "/echo", 11};
  req.body() = std::string(100'000, 'z');
  req.chunked(true);
  auto res = client.request(std::move(req));
  EXPECT_EQ(res.body(), std::string(100'000, 'z'));
}

TEST(DemoBackendTest, RequestBodiesAreDiscarded) {
  RunningBackend backend(options_named("sink"));
  Client client(backend.port());
  auto res = client.post("/upload", std::string(5 * 1024 * 1024, 'u'));
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body().size(), 1024u);
  EXPECT_EQ(client.get("/after").result_int(), 200);
}

TEST(DemoBackendTest, BytesStreamsTheRequestedSize) {
  RunningBackend backend(options_named("bytes"));
  Client client(backend.port());
  const std::size_t size = 1'000'003;  // not a multiple of the chunk size
  auto res = client.get("/bytes/" + std::to_string(size));
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), make_demo_body(size));
  EXPECT_EQ(client.get("/bytes/0").body(), "");
  EXPECT_EQ(client.get("/bytes/nope").result_int(), 400);
}

// /chunked/N/C: the pattern in chunks of C bytes, for the proxy benchmark's
// backend that writes small chunks.
TEST(DemoBackendTest, ChunkedSendsThePatternInChunksOfTheGivenSize) {
  RunningBackend backend(options_named("chunked"));
  Client client(backend.port());
  const std::size_t size = 100'003;
  client.stream().expires_after(kDeadline);
  const std::string request = "GET /chunked/" + std::to_string(size) + "/1000 HTTP/1.1\r\nHost: a\r\n\r\n";
  asio::async_write(client.stream(), asio::buffer(request), asio::use_future).get();
  std::string raw;
  std::array<char, 65536> piece;
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (!raw.ends_with("\r\n0\r\n\r\n") && Clock::now() < until) {
    client.stream().expires_after(std::chrono::seconds(2));
    try {
      raw.append(piece.data(), client.stream().async_read_some(asio::buffer(piece), asio::use_future).get());
    } catch (const boost::system::system_error&) {
      break;
    }
  }
  const std::size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw.substr(0, 300);
  EXPECT_NE(raw.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << raw.substr(0, head_end);
  const test::ChunkedBody chunks = test::decode_chunked(std::string_view(raw).substr(head_end + 4));
  EXPECT_EQ(chunks.rest, "");
  ASSERT_EQ(chunks.sizes.size(), 101u);
  EXPECT_EQ(std::count(chunks.sizes.begin(), chunks.sizes.end(), 1000u), 100);
  EXPECT_EQ(chunks.sizes.back(), 3u);
  EXPECT_TRUE(chunks.data == make_demo_body(size)) << chunks.data.size() << " bytes";

  // Read by Beast: the same body with chunks of 1 byte and of 64 KiB.
  EXPECT_EQ(client.get("/chunked/300/1").body(), make_demo_body(300));
  EXPECT_EQ(client.get("/chunked/200000/65536").body(), make_demo_body(200'000));
  EXPECT_EQ(client.get("/chunked/0/10").body(), "");
  for (const char* bad : {"/chunked/10", "/chunked/10/0", "/chunked/10/65537", "/chunked/x/1"})
    EXPECT_EQ(client.get(bad).result_int(), 400) << bad;
}

TEST(DemoBackendTest, HealthPathFollowsTheControlToggle) {
  DemoBackendOptions options = options_named("health");
  options.health_path = "/healthz";
  RunningBackend backend(options);
  Client client(backend.port());
  auto res = client.get("/healthz");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "ok\n");
  EXPECT_EQ(client.post("/_control/health?status=500").result_int(), 200);
  EXPECT_EQ(client.get("/healthz").result_int(), 500);
  EXPECT_EQ(client.get("/other").result_int(), 200);  // only the health path changes
  EXPECT_EQ(client.post("/_control/health?status=200").result_int(), 200);
  EXPECT_EQ(client.get("/healthz").result_int(), 200);
  EXPECT_EQ(client.post("/_control/health?status=abc").result_int(), 400);
  EXPECT_EQ(client.get("/_control/health?status=500").result_int(), 405);
}

TEST(DemoBackendTest, HealthPathIgnoresFailRate) {
  DemoBackendOptions options = options_named("health");
  options.health_path = "/healthz";
  options.fail_rate = 1;
  RunningBackend backend(options);
  Client client(backend.port());
  EXPECT_EQ(client.get("/").result_int(), 503);
  EXPECT_EQ(client.get("/healthz").result_int(), 200);
}

TEST(DemoBackendTest, ControlChangesFailRateAndDelay) {
  RunningBackend backend(options_named("knobs"));
  Client client(backend.port());
  EXPECT_EQ(client.get("/").result_int(), 200);
  EXPECT_EQ(client.post("/_control/fail_rate?value=1").result_int(), 200);
  EXPECT_EQ(client.get("/").result_int(), 503);
  EXPECT_EQ(client.post("/_control/fail_rate?value=0").result_int(), 200);
  EXPECT_EQ(client.get("/").result_int(), 200);
  EXPECT_EQ(client.post("/_control/fail_rate?value=1.5").result_int(), 400);

  EXPECT_EQ(client.post("/_control/delay?ms=150").result_int(), 200);
  const auto start = Clock::now();
  EXPECT_EQ(client.get("/").result_int(), 200);
  EXPECT_GE(Clock::now() - start, milliseconds(150));
  EXPECT_EQ(client.post("/_control/delay?ms=0").result_int(), 200);
}

TEST(DemoBackendTest, WebSocketEchoesMessages) {
  RunningBackend backend(options_named("ws"));
  asio::io_context io;
  websocket::stream<beast::tcp_stream> ws(io);
  beast::get_lowest_layer(ws).expires_after(kDeadline);
  beast::get_lowest_layer(ws).connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), backend.port()));
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  websocket::response_type handshake;
  ws.handshake(handshake, "127.0.0.1", "/ws");
  EXPECT_EQ(handshake["X-Backend"], "ws");

  beast::flat_buffer buffer;
  ws.text(true);
  ws.write(asio::buffer(std::string("hello")));
  ws.read(buffer);
  EXPECT_TRUE(ws.got_text());
  EXPECT_EQ(beast::buffers_to_string(buffer.data()), "hello");
  buffer.consume(buffer.size());

  const std::string binary(70'000, '\x01');
  ws.binary(true);
  ws.write(asio::buffer(binary));
  ws.read(buffer);
  EXPECT_TRUE(ws.got_binary());
  EXPECT_EQ(beast::buffers_to_string(buffer.data()), binary);
  ws.close(websocket::close_code::normal);
}

TEST(DemoBackendTest, StopEndsIdleKeepAliveConnections) {
  // ~RunningBackend joins the io_context thread: it must return with a client
  // still connected and idle.
  auto backend = std::make_unique<RunningBackend>(options_named("stop"));
  Client client(backend->port());
  EXPECT_EQ(client.get("/").result_int(), 200);
  backend.reset();
  SUCCEED();
}

TEST(DemoBackendTest, StopWakesRequestsQueuedForAWorker) {
  DemoBackendOptions options = options_named("queued");
  options.workers = 1;
  options.delay = milliseconds(200);
  auto backend = std::make_unique<RunningBackend>(options);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<Client>(backend->port()));
  std::vector<std::future<void>> pending;
  for (auto& client : clients) {
    pending.push_back(std::async(std::launch::async, [&client] {
      try {
        client->get("/");
      } catch (const std::exception&) {
        // Cut off by stop(): expected for the queued ones.
      }
    }));
  }
  // Let the requests arrive and queue, then stop while they wait.
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(backend->stop_within(std::chrono::seconds(10)))
      << "stop() did not end the connections whose requests wait for the one worker within 10 s";
  backend.reset();
  // Each client gives up after kDeadline at the latest (tcp_stream expiry).
  for (auto& p : pending)
    ASSERT_EQ(p.wait_for(kDeadline + std::chrono::seconds(5)), std::future_status::ready)
        << "a client still waits for its answer after the backend stopped";
}

TEST(DemoBackendTest, BadOptionsThrow) {
  asio::io_context io;
  DemoBackendOptions options;
  options.fail_rate = 2;
  EXPECT_THROW(DemoBackend(io, options), std::invalid_argument);
  options.fail_rate = 0;
  options.health_path = "healthz";
  EXPECT_THROW(DemoBackend(io, options), std::invalid_argument);
  options.health_path.clear();
  options.fail_above = -1;
  EXPECT_THROW(DemoBackend(io, options), std::invalid_argument);
  options.fail_above = 0;
  options.address = "not-an-ip";
  EXPECT_THROW(DemoBackend(io, options), std::invalid_argument);
}

TEST(DemoBackendTest, BodyPatternIsLinesOf64) {
  const std::string body = make_demo_body(130);
  EXPECT_EQ(body[63], '\n');
  EXPECT_EQ(body[127], '\n');
  EXPECT_EQ(body.substr(0, 63), body.substr(64, 63));
  EXPECT_EQ(demo_body_byte(64 * 1000 + 10), 'a');
}

}  // namespace
}  // namespace heft::demo
