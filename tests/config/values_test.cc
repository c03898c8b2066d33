// Durations, sizes, fractions, addresses and typo suggestions.
#include "config/values.h"

#include <gtest/gtest.h>

#include <array>

namespace heft::config {
namespace {

using namespace std::chrono_literals;

TEST(Values, Durations) {
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("5m"), 5min);
  EXPECT_EQ(parse_duration("1h"), 1h);
  EXPECT_EQ(parse_duration("1d"), 24h);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("1m30s"), 90s);
  EXPECT_EQ(parse_duration("0"), 0ms);
  for (std::string_view bad : {"", "10", "5x", "s", "-1s", "1.5ms", "1..5s", ".5s", "1s ", "1 s"})
    EXPECT_FALSE(parse_duration(bad)) << bad;
  // A year at most: 2562047h overflowed the timers' nanoseconds (every read timed out at once).
  EXPECT_EQ(parse_duration("365d"), 365 * 24h);
  for (std::string_view too_long : {"365d1ms", "366d", "2562047h", "1000000h"})
    EXPECT_FALSE(parse_duration(too_long)) << too_long;
}

// Sub-millisecond digits within 1e-6 ms of a whole number were accepted (and
// dropped): "1.0000001ms" read as 1ms, "0.0000001s" as 0, against the rule.
TEST(Values, DurationsAreWholeMillisecondsByTheirDigits) {
  for (std::string_view bad : {"1.0000001ms", "1.0000005ms", "0.0000001ms", "0.0000000001s", "1.00000000000000000001h",
                               "0.5ms", "0.0001s", "0.00000001m"})
    EXPECT_FALSE(parse_duration(bad)) << bad;
  EXPECT_EQ(parse_duration("0.001s"), 1ms);
  EXPECT_EQ(parse_duration("1.0000000000000000s"), 1s);  // trailing zeros are no precision
  EXPECT_FALSE(parse_duration("0.0000001d"));  // 8.64 ms
  EXPECT_EQ(parse_duration("0.00000125d"), 108ms);
  EXPECT_EQ(parse_duration("364d23h59m59.999s"), 365 * 24h - 1ms);
  EXPECT_EQ(parse_duration("0.000s"), 0ms);
}

TEST(Values, DurationsFormatCanonicallyAndReadBack) {
  EXPECT_EQ(format_duration(0ms), "0s");
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(90s), "1m30s");
  EXPECT_EQ(format_duration(3h + 1s), "3h1s");
  for (int64_t ms : {0, 1, 999, 1000, 1001, 1500, 59900, 60000, 61500, 3600000, 86400000, 90061001})
    EXPECT_EQ(parse_duration(format_duration(std::chrono::milliseconds{ms})), std::chrono::milliseconds{ms}) << ms;
}

TEST(Values, Sizes) {
  EXPECT_EQ(parse_size("1024"), 1024u);
  EXPECT_EQ(parse_size("64KiB"), 65536u);
  EXPECT_EQ(parse_size("64kib"), 65536u);
  EXPECT_EQ(parse_size("1MiB"), 1048576u);
  EXPECT_EQ(parse_size("1MB"), 1000000u);
  EXPECT_EQ(parse_size("2GiB"), 2147483648u);
  EXPECT_EQ(parse_size("1TiB"), uint64_t(1) << 40);  // retry_body_limit's documented maximum
  EXPECT_EQ(parse_size("2tb"), 2000'000'000'000u);
  for (std::string_view bad : {"", "KiB", "1.5MiB", "-1", "1XB", "1 KiB"}) EXPECT_FALSE(parse_size(bad)) << bad;
}

TEST(Values, Fractions) {
  EXPECT_DOUBLE_EQ(*parse_fraction("5%"), 0.05);
  EXPECT_DOUBLE_EQ(*parse_fraction("0.25"), 0.25);
  EXPECT_FALSE(parse_fraction("abc%"));
  EXPECT_FALSE(parse_fraction("nan"));
  EXPECT_EQ(format_fraction(0.05), "5%");
}

TEST(Values, HostPort) {
  auto v4 = split_host_port("10.0.0.1:8080", 80);
  ASSERT_TRUE(v4.value);
  EXPECT_EQ(v4.value->host, "10.0.0.1");
  EXPECT_EQ(v4.value->port, 8080);
  EXPECT_EQ(split_host_port("backend", 80).value->port, 80);
  EXPECT_EQ(split_host_port(":9000", 80).value->host, "");
  EXPECT_EQ(split_host_port("[::1]:9000", 80).value->host, "::1");
  EXPECT_EQ(split_host_port("[::1]", 80).value->port, 80);
  EXPECT_FALSE(split_host_port("::1", 80).value);
  EXPECT_FALSE(split_host_port("a:0", 80).value);
  EXPECT_FALSE(split_host_port("a:65536", 80).value);
  EXPECT_FALSE(split_host_port("a:", 80).value);
  EXPECT_FALSE(split_host_port("a b:1", 80).value);
  EXPECT_EQ(join_host_port("::1", 80), "[::1]:80");
  EXPECT_EQ(join_host_port("a", 80), "a:80");
}

TEST(Values, ListenAddresses) {
  EXPECT_EQ(listen_address("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(listen_address("0.0.0.0"), "0.0.0.0");
  EXPECT_EQ(listen_address("::"), "::");
  EXPECT_EQ(listen_address("[::1]"), "::1");
  EXPECT_EQ(listen_address("0:0:0:0:0:0:0:1"), "::1");  // canonical form
  EXPECT_EQ(listen_address("2001:DB8::A"), "2001:db8::a");
  for (std::string_view bad : {"", "[]", "localhost", "127.0.0.1:80", "[::1]:80", "1.2.3", "::1]", "300.0.0.1", "::g"})
    EXPECT_EQ(listen_address(bad), std::nullopt) << bad;
}

TEST(Values, HeaderNames) {
  for (std::string_view ok : {"Host", "X-Forwarded-For", "x_1", "!#$%&'*+-.^_`|~"}) EXPECT_TRUE(is_header_name(ok)) << ok;
  for (std::string_view bad : {"", "X A", "X:", "X\tA", "X-\xc3\x89", "(X)", "X/Y", "\"X\"", "X\r\n"})
    EXPECT_FALSE(is_header_name(bad)) << printable(bad);
}

TEST(Values, HeaderValues) {
  for (std::string_view ok : {"", "text", "a b\tc", "caf\xc3\xa9", "!~"})
    EXPECT_EQ(header_value_problem(ok), "") << ok;
  EXPECT_EQ(header_value_problem("a\r\nb"),
            "contains a carriage return (0x0D); header values may hold no control character but tab");
  for (std::string_view bad : {std::string_view("\n"), std::string_view("a\x01"), std::string_view("\x7f"),
                               std::string_view("a\0", 2)})
    EXPECT_NE(header_value_problem(bad), "") << printable(bad);
  EXPECT_EQ(printable("a\r\n\t\x01\xc3\xa9\"z"), "a\\r\\n\\t\\x01\\xC3\\xA9\"z");
  // Caddy placeholders are named, other braces are text.
  EXPECT_EQ(header_value_problem("{upstream_hostport}"),
            "{upstream_hostport} looks like a Caddy placeholder; heft expands placeholders in request header edits, "
            "static responses and rewrites, not here, and would send it as written");
  EXPECT_NE(header_value_problem("x-{http.request.host}"), "");
  // Where placeholders are expanded (header_up), known ones are fine and unknown ones named.
  EXPECT_EQ(header_value_problem("x-{http.request.host}-{remote_host}", true), "");
  EXPECT_EQ(header_value_problem("{upstream_hostport}", true).substr(0, 48),
            "unknown placeholder {upstream_hostport} (heft kn");
  for (std::string_view ok : {"{}", "{\"a\":1}", "{ x }", "{1}", "a}b{"}) EXPECT_EQ(header_value_problem(ok), "") << ok;
}

TEST(Values, Schemes) {
  EXPECT_EQ(scheme_of("http://a"), "http");
  EXPECT_EQ(scheme_of("HTTPS://a"), "https");
  EXPECT_EQ(scheme_of("svn+ssh://a"), "svn+ssh");
  for (std::string_view none : {"a:1", "[::1]:80", "://a", "1a://b", "a b://c", ""}) EXPECT_EQ(scheme_of(none), "") << none;
  EXPECT_EQ(split_host_port("HTTP://a:1", 80).error, "no scheme allowed here (write host:port without \"HTTP://\")");
}

TEST(Values, ClosestMatch) {
  constexpr std::array<std::string_view, 4> options = {"weight", "max_fails", "fail_timeout", "backup"};
  EXPECT_EQ(closest_match("wieght", options), "weight");  // transposition
  EXPECT_EQ(closest_match("weigt", options), "weight");
  EXPECT_EQ(closest_match("max_fail", options), "max_fails");
  EXPECT_EQ(closest_match("completely_different", options), "");
}

}  // namespace
}  // namespace heft::config
