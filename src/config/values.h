// Scalar value syntax shared by the Heftfile parser and the JSON adapter:
// durations, sizes, fractions, addresses, header names and values, and "did
// you mean" suggestions.
//
// Pure functions; each returns nullopt (or an error string) instead of throwing.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace heft::config {

// The longest duration any option takes. Timers add durations to the clock in
// nanoseconds: 2562047h overflowed them (every read timed out at once), so
// options stop far below, at a year.
inline constexpr std::chrono::milliseconds kMaxDuration{365LL * 24 * 3600 * 1000};

// "250ms", "30s", "5m", "1h", "1d", "1.5s", "1m30s", or "0". Units are required
// (except for 0), the result must be a whole number of milliseconds and at
// most kMaxDuration.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// The shortest canonical spelling parse_duration reads back: "250ms", "30s", "1m30s".
std::string format_duration(std::chrono::milliseconds duration);

// "1024", "64KiB", "1MiB", "1GiB", "64KB", "1MB" (KB = 1000, KiB = 1024; case-insensitive units).
std::optional<uint64_t> parse_size(std::string_view text);

// Unsigned decimal integer no larger than `max`.
std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max);

// A finite decimal number ("2", "0.5", "1e-2").
std::optional<double> parse_number(std::string_view text);

// "5%" -> 0.05, or a plain number ("0.05").
std::optional<double> parse_fraction(std::string_view text);

// A fraction in its canonical Heftfile spelling ("5%").
std::string format_fraction(double fraction);

// A "host:port" backend or listen address. `host` has no brackets for IPv6.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// `text` with ASCII letters in lower case (host names, header names, schemes).
std::string lowercase(std::string_view text);

// The scheme of "scheme://rest", lower-cased (RFC 3986: schemes are
// case-insensitive, "HTTP://" is "http://"); empty when `text` has none.
std::string scheme_of(std::string_view text);

// Splits "host:port", "[v6]:port", "host" (then port = default_port) or
// ":port" (host empty). Returns an error message on failure; a scheme is one
// (callers that accept "http://" remove it first).
struct HostPortResult {
  std::optional<HostPort> value;
  std::string error;
};
HostPortResult split_host_port(std::string_view text, uint16_t default_port);

// `text` as an address to listen on: an IPv4 or IPv6 literal ("127.0.0.1",
// "::1", "[::1]"), returned in canonical form without brackets; nullopt for
// anything else (host names included: a listener needs an address).
std::optional<std::string> listen_address(std::string_view text);

// The IPv4 address an IPv4-mapped IPv6 literal stands for ("::ffff:127.0.0.1"
// or "::FFFF:7f00:1", brackets or not → "127.0.0.1"); nullopt for anything
// else. heft's IPv6 listeners take IPv6 alone (IPV6_V6ONLY), so they cannot
// listen on such an address: its IPv4 form is what to write.
std::optional<std::string> ipv4_of_mapped(std::string_view text);

// The address the admin API listens on for the host of its "host:port": an IP
// literal in canonical form, 0.0.0.0 for none (":2019"), 127.0.0.1 for
// localhost in any case (host names are case-insensitive); nullopt for any
// other name (the admin API resolves none). `heft validate` and `heft run`
// both ask this, so they agree.
std::optional<std::string> admin_listen_ip(std::string_view host);
inline constexpr std::string_view kAdminHostProblem =
    "the host must be an IP address or localhost (the admin API resolves no other name)";

// "host:port" with brackets around an IPv6 host.
std::string join_host_port(std::string_view host, uint16_t port);

// A header field name heft may send: an RFC 9110 token (not empty; letters,
// digits and the characters of kHeaderNameCharacters only).
bool is_header_name(std::string_view text);

// A site's host as requests are matched against it: lower case, without a
// trailing dot ("Example.COM." is example.com, as a Host header is matched);
// nullopt for a name with an empty label ("a..b", ".", "a.b.."), which no
// request could reach.
std::optional<std::string> site_host(std::string_view host);

// An IPv6 literal written without brackets ("::1", as the JSON form writes a
// site host): more than one ':' and no '['. Such text has no port to split off.
bool is_unbracketed_ipv6(std::string_view text);

// "localhost", "::1" or 127.x.x.x: an admin API there needs no token.
bool is_loopback_host(std::string_view host);

// Why `token` cannot be the admin API's bearer token ("" if it can): what a
// client cannot send after "Bearer " (a control character, an edge space) or
// an empty one; such a token locked the API for good, saved with --resume.
std::string admin_token_problem(std::string_view token);

// The characters of a token besides letters and digits, for error messages.
inline constexpr std::string_view kHeaderNameCharacters = "!#$%&'*+-.^_`|~";

// Why `value` may not be sent as a header field value, or empty if it may.
// RFC 9110 field-value: no control character but horizontal tab. A CR or LF
// would end the header and start one the configuration did not mean to send.
// And UTF-8: the configuration's JSON form holds nothing else (utf8_problem).
// `expanded`: the value's placeholders are expanded (placeholders.h), so an
// unknown one is the problem; else any `{name}` is (it would go as written).
std::string header_value_problem(std::string_view value, bool expanded = false);

// Why `pattern` cannot be a health_body regular expression, or empty if it
// can (Boost.Regex, as the health checks match it; body_pattern.cc).
std::string health_body_problem(std::string_view pattern);
// The syntax flags health_body patterns are compiled with (boost::regex's).
unsigned health_body_flags();

// Whether `target` may be sent as written in a request line: visible ASCII
// only (RFC 9112 request-target; a space, CR or LF would end it and start
// something else, other bytes must be percent-encoded).
bool is_request_target_text(std::string_view target);

// Why `text` cannot be a string of the configuration's JSON form ("" if it
// can): JSON text is UTF-8, and nlohmann::json's dump() throws on anything
// else (`heft adapt`, the admin API, the --resume state file).
std::string utf8_problem(std::string_view text);

// `text` with control characters and bytes above 0x7e written as \n, \r,
// \t or \xNN, for quoting user input in one-line error messages.
std::string printable(std::string_view text);

// The candidate closest to `word` by edit distance, if it is close enough to
// be a likely typo; empty otherwise.
std::string closest_match(std::string_view word, std::span<const std::string_view> candidates);

// An address range as the remote_ip matcher takes it: "10.0.0.0/8",
// "2001:db8::/32", or one address ("127.0.0.1", "::1"). `bytes` holds the
// address (4 or 16 bytes used), `bits` the prefix length.
struct IpRange {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
  unsigned bits = 0;
};
std::optional<IpRange> parse_ip_range(std::string_view text);
// Whether the address `text` (an IP literal, no brackets) is in `range`.
bool in_range(const IpRange& range, std::string_view address);

}  // namespace heft::config
