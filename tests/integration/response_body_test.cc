// A backend's response once its head has come: what a failing body does (the
// answer is committed to that backend, as nginx's next_upstream covers the
// head only) and a head whose framing says two things. Real heft processes in
// front of scripted raw-socket origins.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "integration/process_util.h"
#include "chunked_body.h"

namespace heft::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::string_literals;

// An origin on 127.0.0.1 that serves connections one after another on its own
// thread until stop() (each accept waits 200 ms at most, so it notices): for
// every request head it reads, `script` gets the connection, the head and its
// number among all requests this origin read, and returns false to close.
class Origin {
 public:
  using Script = std::function<bool(int fd, const std::string& head, int request)>;
  explicit Origin(Script script) : script_(std::move(script)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    timeval limit{0, 200000};
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_, 8) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::setsockopt(listener_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0)
      return;
    port = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Origin() { stop(); }
  Origin(const Origin&) = delete;
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) ::close(std::exchange(listener_, -1));
  }

  uint16_t port = 0;
  std::atomic<int> connections{0};
  std::atomic<int> requests{0};

 private:
  void serve() {
    // 200 ms a turn: at most a minute, whatever the test does.
    for (int turn = 0; turn < 300 && !stopping_; ++turn) {
      const int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) continue;
      ++connections;
      timeval tv{10, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::string in;
      while (read_until_head(c, in)) {
        const std::size_t end = in.find("\r\n\r\n") + 4;
        const std::string head = in.substr(0, end);
        in.erase(0, end);
        if (!script_(c, head, requests++)) break;
      }
      ::close(c);
    }
  }

  Script script_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A Heftfile: one worker, `port` proxied to the origin at `origin_port`.
std::string one_origin(uint16_t port, uint16_t origin_port) {
  return fmt::format("{{\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, origin_port);
}

bool send_all(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Waits (10 s at most) until the peer closes `fd`; true if it did.
bool wait_for_close(int fd) {
  char buffer[4096];
  for (int reads = 0; reads < 1000; ++reads) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return true;
    if (n < 0) return false;  // the 10 s receive timeout
  }
  return false;
}

std::string admin_get(uint16_t admin_port, const std::string& path) {
  return HttpClient(admin_port)
      .request(fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", path, admin_port))
      .body;
}

// Sum of a metric's samples whose labels contain `filter`.
double metric_sum(const std::string& text, const std::string& name, const std::string& filter) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0 || line.find(filter) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// A backend that sends its head at once and then nothing within read_timeout
// (an event stream's first event, a slow body): nginx's next_upstream covers
// connecting, sending and reading the head, so the answer is that backend's.
// The client gets the head heft held for the first piece, then the
// connection closes (a chunked body without its last chunk: a visible cut);
// the request reaches one backend only, neither is counted failed (nginx ends
// the request without NGX_PEER_FAILED), and the next requests are served. heft
// answered 504 after retrying on the other backend, which stalled the same
// way, and both were out for fail_timeout: the next request got 503.
TEST(ResponseBody, ATimeoutAfterTheHeadCutsTheResponseWithoutRetryOrFailure) {
  const std::string heads[] = {
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",  // delimited by the close
  };
  for (const std::string& stalled_head : heads) {
    SCOPED_TRACE(stalled_head);
    std::atomic<int> stalled{0};
    const Origin::Script script = [&](int fd, const std::string& head, int) {
      if (head.rfind("GET /sse ", 0) == 0) {
        ++stalled;
        send_all(fd, stalled_head);
        wait_for_close(fd);  // heft gives up on it
        return false;
      }
      return send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    };
    Origin a(script), b(script);
    ASSERT_NE(a.port, 0);
    ASSERT_NE(b.port, 0);
    const std::string dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    const uint16_t port = free_port(), admin_port = free_port();
    Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
}}
:{} {{
	reverse_proxy {{
		to 127.0.0.1:{}
		to 127.0.0.1:{}
		read_timeout 2s
		max_fails 1
		fail_timeout 30s
	}}
	log {{
		output file {}
	}}
}}
)", admin_port, port, a.port, b.port, log_path), port);

    HttpClient client(port, 10s);
    ASSERT_TRUE(client.send_raw("GET /sse HTTP/1.1\r\nHost: example.test\r\n\r\n"));
    const auto sent = Clock::now();
    const std::string got = client.read_all();  // until heft closes
    const auto took = Clock::now() - sent;
    EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
    EXPECT_NE(got.find("Content-Type: "), std::string::npos) << got;  // the backend's head
    EXPECT_NE(got.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos) << got;
    EXPECT_FALSE(got.ends_with("0\r\n\r\n")) << "a cut response must not look complete: " << got;
    // At the read timeout, not after a second attempt's.
    EXPECT_GE(took, 1500ms);
    EXPECT_LT(took, 3500ms);
    EXPECT_EQ(stalled.load(), 1);

    // Both backends stay available: four requests, two each (round robin).
    for (int i = 0; i < 4; ++i) {
      Response r = HttpClient(port).get("/next");
      EXPECT_EQ(r.status, 200) << heft.log();
      EXPECT_EQ(r.body, "ok");
    }
    EXPECT_EQ(a.requests.load() + b.requests.load(), 5);
    const auto upstreams = nlohmann::json::parse(admin_get(admin_port, "/reverse_proxy/upstreams"), nullptr, false);
    ASSERT_TRUE(upstreams.is_array()) << upstreams;
    for (const auto& u : upstreams) EXPECT_EQ(u["fails"], 0) << u;

    EXPECT_TRUE(wait_for_log(heft, "timed out mid-response (reading the response body)")) << heft.log();
    // A request is counted once its response is written: the last may lag its client (bounded).
    std::string metrics;
    for (int wait = 0; wait < 100; ++wait) {
      if (wait > 0) std::this_thread::sleep_for(50ms);
      metrics = admin_get(admin_port, "/metrics");
      if (metric_sum(metrics, "heft_requests_total", "code=") >= 5) break;
    }
    EXPECT_EQ(metric_sum(metrics, "heft_upstream_failures_total", "reason=\"broken\""), 1) << metrics;
    EXPECT_EQ(metric_sum(metrics, "heft_upstream_failures_total", "reason=\"timeout\""), 0) << metrics;
    EXPECT_EQ(metric_sum(metrics, "heft_upstream_requests_total", "code=\"200\""), 5) << metrics;

    // Logged with the status the client got, after one try.
    nlohmann::json line;
    for (int wait = 0; wait < 100 && line.is_null(); ++wait) {
      if (wait > 0) std::this_thread::sleep_for(50ms);
      std::ifstream in(log_path);
      for (std::string text; std::getline(in, text);) {
        const auto j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_object() && j["request"]["uri"] == "/sse") line = j;
      }
    }
    EXPECT_EQ(line["status"], 200) << line;
    EXPECT_EQ(line["tries"], 1) << line;
  }
}

// A response with both Content-Length and Transfer-Encoding: chunked. RFC 9112
// 6.3: the coding wins, and an intermediary forwarding it removes the length
// first; nginx 1.22 and HAProxy 2.6 forward the chunked body. Such a message
// "ought to be handled as an error", so the connection is not used again:
// the next request goes out on a new one (the origin would answer it on the
// first). heft answered 502 (Beast refuses the pair), counted as a failure.
TEST(ResponseBody, ContentLengthBesideChunkedIsDroppedAndTheConnectionNotReused) {
  for (const std::string& head : {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"s,
                                  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n"s}) {
    SCOPED_TRACE(head);
    Origin origin([&](int fd, const std::string&, int request) {
      if (request == 0) return send_all(fd, head + "2\r\nok\r\n0\r\n\r\n");
      // On the first connection this answer would say the connection was reused.
      const std::string body = origin.connections.load() == 1 ? "same" : "fresh";
      return send_all(fd, fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
    });
    ASSERT_NE(origin.port, 0);
    const std::string dir = make_temp_dir();
    const uint16_t port = free_port();
    Process heft = start_heft(dir, one_origin(port, origin.port), port);
    HttpClient client(port, 8s);
    ASSERT_TRUE(client.send_raw("GET /both HTTP/1.1\r\nHost: example.test\r\n\r\n"));
    const Response first = client.read_response();
    EXPECT_EQ(first.status, 200) << heft.log();
    EXPECT_EQ(first.body, "ok");
    EXPECT_EQ(first.header("transfer-encoding"), "chunked");
    EXPECT_EQ(first.header("content-length"), "");
    const Response second = client.get("/next");  // the same client connection
    EXPECT_EQ(second.status, 200) << heft.log();
    EXPECT_EQ(second.body, "fresh");
    EXPECT_EQ(origin.connections.load(), 2);
    EXPECT_EQ(heft.log().find("backend"), std::string::npos) << heft.log();
  }

  // A coding other than chunked stays a 502, with a length or without.
  Origin gzip([](int fd, const std::string&, int) {
    return send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\nhello");
  });
  ASSERT_NE(gzip.port, 0);
  const uint16_t port = free_port();
  Process heft = start_heft(make_temp_dir(), one_origin(port, gzip.port), port);
  EXPECT_EQ(HttpClient(port, 8s).get("/gzip").status, 502);
  EXPECT_NE(heft.log().find("failed (reading the response head: bad Transfer-Encoding)"), std::string::npos)
      << heft.log();
}

// A 204 has no body (RFC 9110 15.3.5), and heft reads none whatever its head
// says; but a backend that announces one (Content-Length: 5, chunked) may
// send it a moment later, and the connection pooled after the 204 handed
// those bytes to the next request as its response: a 502 here, another
// client's answer if they had been a whole response. Such a connection is
// closed; a 204 with `Content-Length: 0` keeps it.
TEST(ResponseBody, A204ThatAnnouncesABodyDoesNotLeaveItsConnectionPooled) {
  for (const auto& [head, late, reused] :
       {std::tuple{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"s, "hello"s, false},
        std::tuple{"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"s, "0\r\n\r\n"s, false},
        std::tuple{"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"s, ""s, true}}) {
    SCOPED_TRACE(head);
    Origin origin([&](int fd, const std::string&, int request) {
      if (request == 0) {
        if (!send_all(fd, head)) return false;
        // The body comes after the client's next request has reached heft.
        std::this_thread::sleep_for(300ms);
        return late.empty() || send_all(fd, late);
      }
      const std::string body = origin.connections.load() == 1 ? "same" : "fresh";
      return send_all(fd, fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
    });
    ASSERT_NE(origin.port, 0);
    const uint16_t port = free_port();
    Process heft = start_heft(make_temp_dir(), one_origin(port, origin.port), port);
    HttpClient client(port, 8s);
    ASSERT_TRUE(client.send_raw("GET /nothing HTTP/1.1\r\nHost: example.test\r\n\r\n"));
    const Response first = client.read_response();
    EXPECT_EQ(first.status, 204) << heft.log();
    EXPECT_EQ(first.header("content-length"), "");
    const Response second = client.get("/next");  // the same client connection, at once
    EXPECT_EQ(second.status, 200) << heft.log();
    EXPECT_EQ(second.body, reused ? "same" : "fresh");
    EXPECT_EQ(origin.connections.load(), reused ? 1 : 2);
  }
}

// An HTTP/1.0 backend saying "Connection: keep-alive, close" will close
// (RFC 9112 9.3: close wins); heft pooled the connection all the same (Beast
// lets an HTTP/1.0 keep-alive win), and the next request on it met the close
// or, from a backend that had not closed yet, an answer on a connection it
// had given up. The connection is closed instead; keep-alive alone keeps it.
TEST(ResponseBody, AnHttp10BackendsCloseWinsOverItsKeepAlive) {
  for (const auto& [connection, reused] : {std::pair{"Connection: keep-alive, close\r\n"s, false},
                                           std::pair{"Connection: close\r\nConnection: keep-alive\r\n"s, false},
                                           std::pair{"Connection: keep-alive\r\n"s, true}}) {
    SCOPED_TRACE(connection);
    Origin origin([&](int fd, const std::string&, int) {
      // It keeps the connection open either way: reuse shows in the body.
      const std::string body = origin.connections.load() == 1 && origin.requests.load() > 1 ? "same" : "fresh";
      return send_all(fd, fmt::format("HTTP/1.0 200 OK\r\n{}Content-Length: {}\r\n\r\n{}", connection, body.size(), body));
    });
    ASSERT_NE(origin.port, 0);
    const uint16_t port = free_port();
    Process heft = start_heft(make_temp_dir(), one_origin(port, origin.port), port);
    HttpClient client(port, 8s);
    EXPECT_EQ(client.get("/first").body, "fresh") << heft.log();
    EXPECT_EQ(client.get("/second").body, reused ? "same" : "fresh") << heft.log();
  }
}

// A backend's latency (the input of adaptive weights, and the per-backend
// histogram `heft rollout` judges p99 from) is the time to its response
// head, nginx's $upstream_header_time: a body relayed slowly (a large
// download to a slow client, an event stream open for minutes) is not a slow
// backend. It counted the whole relay, so a pool serving event streams cut
// those backends' weights. The metrics' response-duration histogram keeps
// the whole attempt, as nginx's $upstream_response_time.
TEST(ResponseBody, ABackendsLatencyIsTheTimeToItsHeadNotTheBodysRelay) {
  const Origin::Script script = [&](int fd, const std::string& head, int) {
    if (head.rfind("GET /stream ", 0) == 0) {
      if (!send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      return send_all(fd, "cd");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a slow head: counted
    return send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  };
  Origin origin(script);
  ASSERT_NE(origin.port, 0);
  const std::string dir = make_temp_dir();
  const uint16_t port = free_port(), admin_port = free_port();
  Process heft = start_heft(dir, fmt::format(R"({{
	admin 127.0.0.1:{}
	workers 1
}}
:{} {{
	reverse_proxy 127.0.0.1:{}
}}
)", admin_port, port, origin.port), port);
  HttpClient client(port, 10s);
  const auto sent = Clock::now();
  Response streamed = client.get("/stream");
  EXPECT_EQ(streamed.body, "abcd");
  EXPECT_GE(Clock::now() - sent, std::chrono::milliseconds(600));
  EXPECT_EQ(client.get("/slow-head").body, "ok");

  // The last response is counted once written, which may be just after the
  // client has read it: read the buckets until both are there (bounded).
  nlohmann::json upstreams;
  int fast = 0, slow = 0;  // responses within 100 ms; from 250 ms on
  for (int wait = 0; wait < 100 && fast + slow < 2; ++wait) {
    if (wait > 0) std::this_thread::sleep_for(50ms);
    upstreams = nlohmann::json::parse(admin_get(admin_port, "/reverse_proxy/upstreams"), nullptr, false);
    ASSERT_TRUE(upstreams.is_array() && upstreams.size() == 1) << upstreams;
    fast = slow = 0;
    for (const auto& bucket : upstreams[0]["latency_ms_buckets"]) {
      const bool bounded = bucket[0].is_number();
      if (bounded && bucket[0].get<double>() <= 100) fast += bucket[1].get<int>();
      if (!bounded || bucket[0].get<double>() > 250) slow += bucket[1].get<int>();
    }
  }
  EXPECT_EQ(fast, 1) << upstreams[0]["latency_ms_buckets"];  // the stream's head came at once
  EXPECT_EQ(slow, 1) << upstreams[0]["latency_ms_buckets"];  // the slow head
  std::string metrics;
  for (int wait = 0; wait < 100; ++wait) {  // the last request is counted once written (bounded)
    if (wait > 0) std::this_thread::sleep_for(50ms);
    metrics = admin_get(admin_port, "/metrics");
    if (metric_sum(metrics, "heft_upstream_response_duration_seconds_count", "upstream=") >= 2) break;
  }
  EXPECT_GE(metric_sum(metrics, "heft_upstream_response_duration_seconds_sum", "upstream="), 0.9) << metrics;
}

// A backend's chunks that reach heft together go out together, re-chunked
// (as nginx does): one send and one chunk for what one read brought.
// Relayed chunk by chunk, a backend writing 1 KiB chunks got a
// sixth of nginx's throughput, a send per chunk (BENCHMARKS.md, "Other
// shapes of traffic"). The body
// arrives whole and in order, to an HTTP/1.1 client chunked and to an
// HTTP/1.0 one delimited by the close.
TEST(ResponseBody, ChunksThatArriveTogetherGoOutAsOne) {
  std::string body, chunked;
  for (int i = 0; i < 1000; ++i) {
    const std::string piece = fmt::format("{:04}", i) + std::string(96, static_cast<char>('a' + i % 26));
    body += piece;
    chunked += fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
  }
  Origin origin([&](int fd, const std::string&, int) {
    return send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + "0\r\n\r\n");
  });
  ASSERT_NE(origin.port, 0);
  const uint16_t port = free_port();
  Process heft = start_heft(make_temp_dir(), one_origin(port, origin.port), port);

  HttpClient client(port, 8s);
  ASSERT_TRUE(client.send_raw("GET /many HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n"));
  const std::string raw = client.read_all();
  const std::size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw.substr(0, 200);
  EXPECT_NE(raw.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos) << raw.substr(0, head_end);
  const ChunkedBody chunks = decode_chunked(std::string_view(raw).substr(head_end + 4));
  ASSERT_TRUE(chunks.framed) << "a chunk's data not followed by CRLF";
  EXPECT_EQ(chunks.rest, "");
  EXPECT_TRUE(chunks.data == body) << chunks.data.size() << " of " << body.size() << " bytes, or out of order";
  // 1,000 chunks relayed one by one would be 1,000; a read brings hundreds.
  EXPECT_LE(chunks.sizes.size(), 100u);

  HttpClient old(port, 8s);
  ASSERT_TRUE(old.send_raw("GET /many HTTP/1.0\r\nHost: example.test\r\n\r\n"));
  const std::string raw10 = old.read_all();
  const std::size_t end10 = raw10.find("\r\n\r\n");
  ASSERT_NE(end10, std::string::npos);
  EXPECT_EQ(raw10.find("Transfer-Encoding"), std::string::npos) << raw10.substr(0, end10);
  EXPECT_TRUE(raw10.substr(end10 + 4) == body) << raw10.size() - end10 - 4 << " of " << body.size() << " bytes";
}

// A bad chunk after good ones in the same read: the good ones reach the
// client (re-chunked as one), then the connection closes without the last
// chunk, a visible cut, as for any body that fails once its head went out.
TEST(ResponseBody, ABadChunkAfterGoodOnesCutsTheResponseAfterThem) {
  Origin origin([](int fd, const std::string&, int) {
    send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\nZZ\r\n");
    std::this_thread::sleep_for(300ms);  // not a close: the cut is heft's
    return false;
  });
  ASSERT_NE(origin.port, 0);
  const uint16_t port = free_port();
  Process heft = start_heft(make_temp_dir(), one_origin(port, origin.port), port);
  HttpClient client(port, 8s);
  ASSERT_TRUE(client.send_raw("GET /cut HTTP/1.1\r\nHost: example.test\r\n\r\n"));
  const std::string raw = client.read_all();  // until heft closes
  const std::size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw;
  EXPECT_EQ(raw.rfind("HTTP/1.1 200 ", 0), 0u) << raw;
  const ChunkedBody chunks = decode_chunked(std::string_view(raw).substr(head_end + 4));
  ASSERT_FALSE(chunks.ended) << "the last chunk was sent: " << raw;
  EXPECT_EQ(chunks.data, "hello world") << raw;
  EXPECT_NE(heft.log().find("mid-response"), std::string::npos) << heft.log();
}

}  // namespace
}  // namespace heft::test
