// ResponseParser (proxy/response_parser.h) against Beast's own response
// parser: heft's path for common heads must give what Beast gives, and every
// other head must go to Beast. The same bytes go through both, whole and in
// pieces; a seeded generator adds thousands of heads with corrupted octets.
// One head differs from Beast's on purpose: Transfer-Encoding beside
// Content-Length is read without the length (expected_of()).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>

#include "proxy/response_parser.h"

namespace heft::proxy {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using namespace std::string_literals;

struct Outcome {
  error_code ec;
  bool header_done = false;
  bool done = false;
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<http::field> names;  // ResponseParser only: Field::name
  bool keep_alive = false;
  std::optional<std::uint64_t> content_length;
  bool chunked = false;
  std::string body;
  bool simple = false;  // ResponseParser only: took heft's path
};

bool operator==(const Outcome& a, const Outcome& b) {
  if (a.ec != b.ec || a.header_done != b.header_done || a.done != b.done) return false;
  if (!a.header_done) return true;
  return a.status == b.status && a.reason == b.reason && a.fields == b.fields && a.keep_alive == b.keep_alive &&
         a.content_length == b.content_length && a.chunked == b.chunked && a.body == b.body;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n\n";
    else if (c < 0x20 || c >= 0x7f) out += "\\x" + std::to_string(c);
    else out += static_cast<char>(c);
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  os << "ec=" << o.ec.message() << " header_done=" << o.header_done << " done=" << o.done;
  if (o.header_done) {
    os << " status=" << o.status << " reason=[" << o.reason << "] keep_alive=" << o.keep_alive
       << " length=" << (o.content_length ? std::to_string(*o.content_length) : "none") << " chunked=" << o.chunked
       << " body=" << o.body.size() << " fields:";
    for (const auto& [n, v] : o.fields) os << " [" << n << ": " << v << "]";
  }
  return os;
}

// Drives a parser as the proxy's session does: bytes arrive `step` at a time
// (all at once for 0), put() sees everything not yet consumed, and the
// connection ends after the last byte.
template <typename Parser, typename OnBody>
error_code drive(Parser& parser, const std::string& message, std::size_t step, OnBody on_body) {
  std::string pending;
  std::size_t fed = 0;
  auto feed = [&] {
    const std::size_t n = step ? std::min(step, message.size() - fed) : message.size() - fed;
    pending.append(message, fed, n);
    fed += n;
    return n > 0;
  };
  feed();
  for (int round = 0; round < 100000; ++round) {
    if (parser.is_done()) return {};
    error_code ec;
    std::size_t used = 0;
    if (!pending.empty()) {
      used = parser.put(asio::buffer(pending), ec);
      on_body();
      pending.erase(0, used);
    }
    if (ec == http::error::need_buffer) ec = {};
    if (ec && ec != http::error::need_more) return ec;
    if (used > 0 && !ec) continue;
    if (!feed()) {
      parser.put_eof(ec);
      return ec;
    }
  }
  return http::error::partial_message;  // not reached: a bound for the loop
}

Outcome through_heft(const std::string& message, std::size_t step, bool head_request) {
  alignas(16) static unsigned char memory[FieldArena::kBytes];
  FieldArena arena;
  arena.reset(memory);
  ResponseParser parser(arena);
  parser.header_limit(64 * 1024);
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head_request) parser.skip(true);
  Outcome o;
  o.ec = drive(parser, message, step, [&] {
    o.body.append(parser.body());
    parser.clear_body();
  });
  o.header_done = parser.is_header_done();
  o.done = parser.is_done();
  o.simple = parser.took_simple_path();
  if (!o.header_done) return o;
  o.status = parser.status();
  o.reason = std::string(parser.reason());
  for (const auto& f : parser.fields()) {
    o.fields.emplace_back(parser.name(f), parser.value(f));
    o.names.push_back(f.name);
  }
  o.keep_alive = parser.keep_alive();
  if (auto n = parser.content_length()) o.content_length = *n;
  o.chunked = parser.chunked();
  return o;
}

// Beast alone, keeping what its callbacks report as they come: the status
// line's reason as sent (not Beast's default text for an empty one), the
// fields in order, the body octets.
class BeastOnly final : public http::basic_parser<false> {
 public:
  Outcome seen;

 private:
  using string_view = boost::beast::string_view;
  void on_request_impl(http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int, error_code&) override {
    seen.status = static_cast<unsigned>(code);
    seen.reason = std::string(reason);
  }
  void on_field_impl(http::field, string_view name, string_view value, error_code&) override {
    seen.fields.emplace_back(std::string(name), std::string(value));
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code&) override {
    seen.body.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
    seen.body.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(error_code&) override {}
};

Outcome through_beast(const std::string& message, std::size_t step, bool head_request) {
  BeastOnly parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (head_request) parser.skip(true);
  const error_code ec = drive(parser, message, step, [] {});
  Outcome o = parser.seen;
  o.ec = ec;
  o.header_done = parser.is_header_done();
  o.done = parser.is_done();
  if (!o.header_done) return o;
  o.keep_alive = parser.keep_alive();
  if (auto n = parser.content_length()) o.content_length = *n;
  o.chunked = parser.chunked();
  return o;
}

// `message` without the Content-Length lines of its head (and their obs-fold
// continuations), if its head has both Transfer-Encoding and Content-Length.
std::optional<std::string> without_length(const std::string& message) {
  const std::size_t end = message.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  std::string kept;
  bool coding = false, length = false, dropping = false;
  for (std::size_t at = 0; at < end + 4;) {
    const std::size_t next = message.find("\r\n", at) + 2;
    const std::string line = message.substr(at, next - at);
    if (at == 0 || line.size() <= 2) {
      dropping = false;
    } else if (line[0] != ' ' && line[0] != '\t') {
      std::string name = line.substr(0, line.find(':'));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      dropping = name == "content-length";
      length = length || dropping;
      coding = coding || name == "transfer-encoding";
    }
    if (!dropping) kept += line;
    at = next;
  }
  if (!coding || !length) return std::nullopt;
  return kept + message.substr(end + 4);
}

// What heft's parser must give: Beast's outcome, except for a head Beast
// refuses for its Transfer-Encoding beside a Content-Length (RFC 9112 6.3:
// the coding wins): then Beast's outcome without the Content-Length lines,
// and the connection not kept. A refusal of a framing field is judged once
// the head is whole (a coding may come after it): a head that never ends is
// cut by the end of the message.
Outcome expected_of(const std::string& message, std::size_t step, bool head_request) {
  Outcome o = through_beast(message, step, head_request);
  if (o.ec != http::error::bad_transfer_encoding && o.ec != http::error::bad_content_length &&
      o.ec != http::error::multiple_content_length)
    return o;
  if (message.find("\r\n\r\n") == std::string::npos) o.ec = http::error::partial_message;
  const std::optional<std::string> without = without_length(message);
  if (!without) return o;
  Outcome dropped = through_beast(*without, step, head_request);
  dropped.keep_alive = false;
  return dropped;
}

// The names ResponseParser reports as an enum (Field::name); all others unknown.
http::field expected_name(const std::string& name) {
  for (http::field f : {http::field::te, http::field::trailer, http::field::upgrade, http::field::connection,
                        http::field::keep_alive, http::field::proxy_connection, http::field::transfer_encoding,
                        http::field::content_length})
    if (http::string_to_field(name) == f) return f;
  return http::field::unknown;
}

// Both parsers, whole and in pieces (1 byte, 7 bytes, half the message);
// returns heft's outcome for the whole message.
Outcome check_same(const std::string& message, bool head_request = false) {
  Outcome whole;
  for (std::size_t step : {std::size_t{0}, std::size_t{1}, std::size_t{7}, message.size() / 2 + 1}) {
    const Outcome heft = through_heft(message, step, head_request);
    if (step == 0) whole = heft;
    const Outcome beast = expected_of(message, step, head_request);
    EXPECT_EQ(heft, beast) << "step " << step << ", message:\n" << printable(message);
    for (std::size_t i = 0; i < heft.names.size(); ++i)
      EXPECT_EQ(heft.names[i], expected_name(heft.fields[i].first)) << heft.fields[i].first;
  }
  return whole;
}

const std::string kDemoHead =
    "HTTP/1.1 200 OK\r\nX-Backend: a\r\nX-Request-Count: 1590747\r\nContent-Type: text/plain\r\n"
    "Content-Length: 5\r\n\r\n";

TEST(ResponseParser, CommonHeadsTakeHeftsPathAndMatchBeast) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {kDemoHead + "hello", false},
      {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false},
      {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", false},
      {"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
      {"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye", false},
      {"HTTP/1.1 200 OK\r\nconnection: , Keep-Alive , CLOSE,\r\nConnection: x-extra\r\nContent-Length: 1\r\n\r\n!",
       false},
      {"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", false},
      {"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n", true},  // HEAD: no body
      {"HTTP/1.1 200 \r\nX-Empty:\r\nX-Spaces:   \t  \r\nX-Tab: a\tb\tc\r\nX-Trailing: v \t \r\n"
       "X-Obs-Text: caf\xc3\xa9\r\nX-Long: 0123456789abcdefghijklmnopqrstuvwxyz\tABCDEFGHIJ\r\n"
       "Keep-Alive: timeout=5\r\nTrailer: X\r\nTE: trailers\r\nContent-Length: 4\r\n\r\nbody",
       false},
      {"HTTP/1.1 500 Reason\twith tab and \xff\r\nContent-Length: 0\r\n\r\n", false},
  };
  for (const auto& [message, head] : cases) {
    const Outcome o = check_same(message, head);
    EXPECT_TRUE(o.simple) << printable(message);
    EXPECT_TRUE(o.done) << printable(message);
  }
  // A body that ends before its length: the same error from both.
  const Outcome cut = check_same("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort");
  EXPECT_TRUE(cut.simple);
  EXPECT_EQ(cut.ec, http::error::partial_message);
}

TEST(ResponseParser, EverythingElseGoesToBeast) {
  const std::vector<std::string> cases = {
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nuntil close",
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close",  // no length
      "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
      "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Bare: a\nb\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Nul: a\0b\r\nContent-Length: 0\r\n\r\n"s,
      "HTTP/1.1 200 OK\r\nX-Del: a\x7f\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-Space : a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\n: empty name\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
      "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n",
      "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
      "garbage\r\n\r\n",
  };
  for (const std::string& message : cases) {
    const Outcome o = check_same(message);
    EXPECT_FALSE(o.simple) << printable(message);
  }
}

// Transfer-Encoding beside Content-Length (which Beast refuses, as it must
// for a request): the coding frames the body, the length is dropped from the
// fields, and the connection is not kept, wherever the two stand.
TEST(ResponseParser, ContentLengthBesideTransferEncodingIsDropped) {
  const std::string body = "2\r\nok\r\n0\r\n\r\n";
  const std::vector<std::string> heads = {
      "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\ncontent-length: 100\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n",
  };
  for (const std::string& head : heads) {
    const Outcome o = check_same(head + body);
    EXPECT_EQ(o.ec, error_code{}) << printable(head);
    EXPECT_TRUE(o.done);
    EXPECT_TRUE(o.chunked);
    EXPECT_FALSE(o.content_length);
    EXPECT_FALSE(o.keep_alive);
    EXPECT_EQ(o.body, "ok");
    auto fields = o.fields;  // in the order sent, less the lengths
    std::sort(fields.begin(), fields.end());
    EXPECT_EQ(fields, (decltype(fields){{"Transfer-Encoding", "chunked"}, {"X-A", "1"}})) << printable(head);
    // A HEAD's answer: no body, and chunked is what a GET would get.
    const Outcome head_answer = check_same(head, true);
    EXPECT_TRUE(head_answer.done);
    EXPECT_TRUE(head_answer.chunked);
    EXPECT_FALSE(head_answer.content_length);
  }
  // Another coding: the length is dropped all the same (the proxy then
  // refuses the coding: 502).
  const Outcome gzip = check_same("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\nhello");
  EXPECT_TRUE(gzip.header_done);
  EXPECT_FALSE(gzip.chunked);
  EXPECT_FALSE(gzip.content_length);
  // Chunked twice is still refused.
  const Outcome twice = check_same("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n" + body);
  EXPECT_EQ(twice.ec, http::error::bad_transfer_encoding);
}

TEST(ResponseParser, AHeadThatStaysIncompleteGoesToBeastAndTheLimitHolds) {
  // A head larger than the limit is refused however it arrives. (Beast
  // alone, driven the same way, refuses it whole but let it through when it
  // came in two halves; heft's parse keeps Beast out of that case.)
  std::string big = "HTTP/1.1 200 OK\r\n";
  while (big.size() < 70 * 1024) big += "X-Filler: 0123456789012345678901234567890123456789\r\n";
  big += "Content-Length: 0\r\n\r\n";
  EXPECT_EQ(through_beast(big, 0, false).ec, http::error::header_limit);
  for (std::size_t step : {std::size_t{0}, std::size_t{1000}, big.size() / 2 + 1}) {
    const Outcome o = through_heft(big, step, false);
    EXPECT_EQ(o.ec, http::error::header_limit) << "step " << step;
    EXPECT_FALSE(o.simple);
  }

  // In single bytes, heft's parse gives up after a few incomplete tries.
  EXPECT_FALSE(through_heft(kDemoHead + "hello", 1, false).simple);
  // In two pieces it is still heft's.
  EXPECT_TRUE(through_heft(kDemoHead + "hello", kDemoHead.size() - 3, false).simple);
}

// Thousands of generated heads, a third with corrupted octets: whatever the
// bytes, heft's parser and Beast's agree, and valid common heads are heft's.
TEST(ResponseParser, GeneratedHeadsAgreeWithBeast) {
  std::mt19937 rng(20261130);
  auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  const std::vector<std::string> statuses = {"200 OK", "204 No Content", "304 Not Modified", "404 Not Found",
                                             "500 Internal Server Error", "101 Switching", "100 Continue",
                                             "199 Odd", "600 Odd", "200 ", "200"};
  const std::vector<std::string> versions = {"HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "http/1.1"};
  const std::vector<std::string> fields = {
      "Content-Type: text/plain", "X-Backend: a", "X-Request-Count: 1590747", "Connection: close",
      "Connection: keep-alive", "Connection: Upgrade", "Connection: , close ,", "connection: x, keep-alive",
      "Proxy-Connection: close", "Upgrade: websocket", "Transfer-Encoding: chunked", "Transfer-Encoding: gzip",
      "Content-Length: 5, 5", "Keep-Alive: timeout=5", "TE: trailers", "Trailer: X", "X-Empty:",
      "X-Tab: a\tb", "X-Trail: v \t", "X-Long: 0123456789abcdefghijklmnopqrstuvwxyz0123456789",
      "X-Obs: caf\xc3\xa9", "Set-Cookie: a=b; Path=/"};
  const std::string alphabet = std::string("\r\n\t :,\x7f\x80\xff" "A-0", 12) + std::string(1, '\0');
  int simple = 0, corrupted = 0, length_dropped = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string message = pick(versions) + " " + pick(statuses) + "\r\n";
    const int count = static_cast<int>(rng() % 6);
    for (int f = 0; f < count; ++f) message += pick(fields) + "\r\n";
    const unsigned length = rng() % 3 == 0 ? 0 : rng() % 40;
    const int framing = static_cast<int>(rng() % 4);  // 0, 1: Content-Length, 2: chunked, 3: none
    if (framing <= 1) message += "Content-Length: " + std::to_string(length) + "\r\n";
    if (framing == 2) message += "Transfer-Encoding: chunked\r\n";
    message += "\r\n";
    if (framing == 2) message += "5\r\nhello\r\n0\r\n\r\n";
    else message += std::string(length, 'b');
    if (rng() % 3 == 0) {
      ++corrupted;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rng() % message.size();
        const char c = alphabet[rng() % alphabet.size()];
        if (rng() % 2) message[at] = c;
        else message.insert(at, 1, c);
      }
    }
    const bool head_request = rng() % 10 == 0;
    const Outcome heft = through_heft(message, 0, head_request);
    const Outcome beast = expected_of(message, 0, head_request);
    ASSERT_EQ(heft, beast) << "message " << i << ":\n" << printable(message);
    if (without_length(message)) {
      // Both framings: also in pieces, so Beast refuses a field before the head is whole.
      if (beast.header_done) ++length_dropped;
      for (std::size_t step : {std::size_t{1}, std::size_t{7}, message.size() / 2 + 1})
        ASSERT_EQ(through_heft(message, step, head_request), expected_of(message, step, head_request))
            << "step " << step << ", message " << i << ":\n" << printable(message);
    }
    for (std::size_t f = 0; f < heft.names.size(); ++f)
      ASSERT_EQ(heft.names[f], expected_name(heft.fields[f].first)) << heft.fields[f].first;
    if (heft.simple) ++simple;
  }
  // Both kinds were exercised.
  EXPECT_GT(simple, 600);
  EXPECT_GT(corrupted, 2000);
  EXPECT_GT(length_dropped, 100);  // heads with both framings, read by the coding
}

}  // namespace
}  // namespace heft::proxy
