// Scalar value syntax: see values.h.
#include "config/values.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "config/model.h"
#include "config/placeholders.h"

namespace heft::config {

namespace {

// `text` with control characters (and DEL) written as \n, \r, \t or \xNN;
// bytes above 0x7f too unless `keep_non_ascii`.
std::string escaped(std::string_view text, bool keep_non_ascii) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (byte < 0x20 || byte == 0x7f || (byte > 0x7f && !keep_non_ascii))
      out += fmt::format("\\x{:02X}", unsigned(byte));
    else out += c;
  }
  return out;
}

// A message quotes what the file holds (UTF-8 kept), and a quoted value's
// newline or escape sequence must not start a line without a place or drive
// the terminal.
std::string one_line(std::string_view text) { return escaped(text, true); }

}  // namespace

std::string Diagnostic::to_string() const {
  const std::string text = one_line(message);
  if (!path.empty() && file.empty()) return fmt::format("{}: {}", one_line(path), text);
  if (line <= 0) return fmt::format("{}: {}", file, text);
  if (column <= 0) return fmt::format("{}:{}: {}", file, line, text);
  return fmt::format("{}:{}:{}: {}", file, line, column, text);
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

}  // namespace

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = lower(c);
  return out;
}

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  if (text == "0") return std::chrono::milliseconds{0};
  if (text.empty()) return std::nullopt;
  // Sum of <decimal><unit> terms, like Go's time.ParseDuration plus "d".
  // Computed in microseconds so that "1.5ms" is detected as sub-millisecond.
  long double total_ms = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (is_digit(text[i]) || text[i] == '.')) ++i;
    if (i == start) return std::nullopt;
    std::string number(text.substr(start, i - start));
    if (std::count(number.begin(), number.end(), '.') > 1 || number.front() == '.' ||
        number.back() == '.')
      return std::nullopt;
    size_t unit_start = i;
    while (i < text.size() && !is_digit(text[i]) && text[i] != '.') ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    long double scale;
    if (unit == "ms") scale = 1;
    else if (unit == "s") scale = 1000;
    else if (unit == "m") scale = 60'000;
    else if (unit == "h") scale = 3'600'000;
    else if (unit == "d") scale = 86'400'000;
    else return std::nullopt;
    // Whole milliseconds, decided on the digits: a tolerance on the sum let
    // "1.0000001ms" through as 1ms and "0.0000001s" as 0. A fraction of more
    // than 10 significant digits never is: 86,400,000 = 2^10 * 3^3 * 5^5.
    if (size_t dot = number.find('.'); dot != std::string::npos) {
      std::string fraction = number.substr(dot + 1);
      while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
      if (fraction.size() > 10) return std::nullopt;
      uint64_t digits = 0, power = 1;
      for (char c : fraction) digits = digits * 10 + uint64_t(c - '0'), power *= 10;
      if (digits * static_cast<uint64_t>(scale) % power != 0) return std::nullopt;
    }
    total_ms += std::strtold(number.c_str(), nullptr) * scale;
  }
  if (total_ms > static_cast<long double>(kMaxDuration.count())) return std::nullopt;
  long double whole = std::round(total_ms);
  if (std::fabs(whole - total_ms) > 1e-6L) return std::nullopt;
  return std::chrono::milliseconds{static_cast<int64_t>(whole)};
}

std::string format_duration(std::chrono::milliseconds duration) {
  int64_t ms = duration.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  if (ms % 1000 != 0 && ms >= 1000 && ms % 100 == 0 && ms < 60'000)
    return out + fmt::format("{}.{}s", ms / 1000, (ms % 1000) / 100);  // "1.5s"
  if (ms % 1000 != 0) return out + fmt::format("{}ms", ms);
  int64_t s = ms / 1000;
  int64_t h = s / 3600, m = s / 60 % 60, sec = s % 60;
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (sec) out += fmt::format("{}s", sec);
  return out;
}

std::optional<uint64_t> parse_uint(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && is_digit(text[digits])) ++digits;
  if (digits == 0) return std::nullopt;
  auto number = parse_uint(text.substr(0, digits), UINT64_MAX / 2);
  if (!number) return std::nullopt;
  std::string_view unit = text.substr(digits);
  struct Unit {
    std::string_view name;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},          {"b", 1},
      {"kb", 1000},     {"kib", 1024},
      {"mb", 1000'000}, {"mib", 1024 * 1024},
      {"gb", 1000'000'000}, {"gib", 1024ull * 1024 * 1024},
      {"tb", 1000'000'000'000}, {"tib", 1024ull * 1024 * 1024 * 1024},
  };
  for (const auto& u : kUnits) {
    if (iequals(unit, u.name)) {
      if (*number > UINT64_MAX / u.factor) return std::nullopt;
      return *number * u.factor;
    }
  }
  return std::nullopt;
}

std::optional<double> parse_number(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::string copy(text);
  char* end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  if (copy.find_first_of("xXnN") != std::string::npos) return std::nullopt;  // hex, nan, inf
  return value;
}

std::optional<double> parse_fraction(std::string_view text) {
  if (!text.empty() && text.back() == '%') {
    auto percent = parse_number(text.substr(0, text.size() - 1));
    if (!percent) return std::nullopt;
    return *percent / 100.0;
  }
  return parse_number(text);
}

std::string format_fraction(double fraction) { return fmt::format("{}%", fraction * 100.0); }

std::string scheme_of(std::string_view text) {
  size_t end = text.find("://");
  if (end == std::string_view::npos || end == 0) return {};
  std::string scheme(text.substr(0, end));
  for (char& c : scheme) {
    c = lower(c);
    bool ok = (c >= 'a' && c <= 'z') || is_digit(c) || c == '+' || c == '-' || c == '.';
    if (!ok) return {};
  }
  if (is_digit(scheme[0]) || scheme[0] == '+' || scheme[0] == '-' || scheme[0] == '.') return {};
  return scheme;
}

namespace {

// `text` (an address, in brackets or not) as inet_pton reads it for
// `family`: its bytes in `out` (room for an in6_addr).
bool parse_ip(std::string_view text, int family, void* out) {
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return false;
  const std::string copy(text);  // inet_pton wants a terminated string
  return ::inet_pton(family, copy.c_str(), out) == 1;
}

// What inet_pton(AF_INET6) reads: hex groups and "::", a dotted IPv4 tail.
bool is_ipv6_literal(std::string_view text) {
  in6_addr bytes;
  return parse_ip(text, AF_INET6, &bytes);
}

}  // namespace

HostPortResult split_host_port(std::string_view text, uint16_t default_port) {
  HostPortResult result;
  if (text.empty()) {
    result.error = "empty address";
    return result;
  }
  if (std::string scheme = scheme_of(text); !scheme.empty()) {
    result.error = fmt::format("no scheme allowed here (write host:port without \"{}\")",
                               text.substr(0, scheme.size() + 3));
    return result;
  }
  // Caddy's "unix//path", nginx's "unix:/path": read as a host, they got
  // "invalid character '/' in host".
  if (const std::string head = lowercase(text.substr(0, 6)); head.starts_with("unix/") || head == "unix:/") {
    result.error = "unix sockets are not supported (heft dials host:port over TCP)";
    return result;
  }
  std::string_view host = text;
  std::string_view port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      result.error = "missing ']' in IPv6 address";
      return result;
    }
    host = text.substr(1, close - 1);
    if (host.find(':') == std::string_view::npos) {  // "[foo.com]:80", "[]:80"
      result.error = "brackets hold an IPv6 address, e.g. [::1]:8080";
      return result;
    }
    // "[fe80::1%lo]": heft keeps addresses as text without a scope (a
    // backend's zone was dropped, dialing another interface's fe80::1), and
    // a Host field cannot carry one (RFC 3986 has no zone in an IP-literal).
    if (auto zone = host.find('%'); zone != std::string_view::npos) {
      result.error = fmt::format("IPv6 zone IDs are not supported (\"{}\")", printable(host.substr(zone)));
      return result;
    }
    // "[zz:zz]", "[::1::2]": no address. A backend there failed only at
    // --resolve or run, a site there matched no Host a request may send.
    if (!is_ipv6_literal(host)) {
      result.error = "not a valid IPv6 address";
      return result;
    }
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        result.error = "expected ':' after ']'";
        return result;
      }
      port_text = rest.substr(1);
      if (port_text.empty()) {
        result.error = "missing port after ':'";
        return result;
      }
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      if (text.find(':') != colon) {
        result.error = "IPv6 addresses must be written in brackets, e.g. [::1]:8080";
        return result;
      }
      host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
      if (port_text.empty()) {
        result.error = "missing port after ':'";
        return result;
      }
    }
  }
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' ||
              c == '.' || c == '_' || c == ':' || c == '*';
    if (!ok) {
      result.error = fmt::format("invalid character '{}' in host", printable(std::string_view(&c, 1)));
      return result;
    }
  }
  uint16_t port = default_port;
  if (!port_text.empty()) {
    auto parsed = parse_uint(port_text, 65535);
    if (!parsed || *parsed == 0) {
      result.error = fmt::format("invalid port \"{}\" (1..65535)", port_text);
      return result;
    }
    port = static_cast<uint16_t>(*parsed);
  }
  result.value = HostPort{std::string(host), port};
  return result;
}

std::optional<std::string> listen_address(std::string_view text) {
  in6_addr bytes;
  char canonical[INET6_ADDRSTRLEN];
  for (int family : {AF_INET, AF_INET6})
    if (parse_ip(text, family, &bytes) && ::inet_ntop(family, &bytes, canonical, sizeof canonical))
      return std::string(canonical);
  return std::nullopt;
}

std::optional<std::string> ipv4_of_mapped(std::string_view text) {
  in6_addr v6{};
  char v4[INET_ADDRSTRLEN];
  if (!parse_ip(text, AF_INET6, &v6) || !IN6_IS_ADDR_V4MAPPED(&v6)) return std::nullopt;
  if (!::inet_ntop(AF_INET, &v6.s6_addr[12], v4, sizeof v4)) return std::nullopt;
  return std::string(v4);
}

std::optional<std::string> admin_listen_ip(std::string_view host) {
  if (host.empty()) return "0.0.0.0";
  if (lowercase(host) == "localhost") return "127.0.0.1";
  return listen_address(host);
}

std::string join_host_port(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool is_header_name(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    bool letter_or_digit = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c);
    if (!letter_or_digit && kHeaderNameCharacters.find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::optional<std::string> site_host(std::string_view host) {
  std::string out = lowercase(host);
  if (out.size() > 1 && out.back() == '.') out.pop_back();
  if (out.empty() || out.front() == '.' || out.back() == '.' || out.find("..") != std::string::npos) return std::nullopt;
  return out;
}

bool is_unbracketed_ipv6(std::string_view text) {
  return text.find(':') != text.rfind(':') && !text.starts_with('[');
}

bool is_loopback_host(std::string_view host) {
  const std::string h = lowercase(host);
  return h == "localhost" || h == "::1" || h.starts_with("127.");
}

std::string admin_token_missing(const AdminConfig& admin) {
  if (!admin.enabled || !admin.token.empty()) return "";
  auto split = split_host_port(admin.address, 0);
  if (!split.value || is_loopback_host(split.value->host)) return "";
  return fmt::format("required when the admin API listens on a non-loopback address ({})", admin.address);
}

std::string admin_listen_overlap(const Config& config, uint16_t& port) {
  port = 0;
  if (!config.admin.enabled) return "";
  auto split = split_host_port(config.admin.address, 0);
  if (!split.value) return "";
  std::optional<std::string> ip = admin_listen_ip(split.value->host);
  if (!ip) return "";
  if (std::none_of(config.sites.begin(), config.sites.end(),
                   [&](const SiteConfig& site) { return site.port == split.value->port; }))
    return "";
  port = split.value->port;
  // The admin socket is dual-stack: a mapped address is its IPv4 one, and
  // "::" takes every address of both families. The sites' IPv6 listeners
  // are IPv6 only.
  const std::string admin = ipv4_of_mapped(*ip).value_or(*ip);
  const bool admin_v6 = admin.find(':') != std::string::npos;
  const auto overlaps = [&](const std::string& listen) {
    if (admin == "::") return true;
    if (admin_v6 != (listen.find(':') != std::string::npos)) return false;
    return admin == listen || admin == "0.0.0.0" || listen == "0.0.0.0" || listen == "::";
  };
  const std::vector<std::string>& bind = port_bind(config, port);
  if (bind.empty()) return "every address";
  for (const std::string& listen : bind)
    if (overlaps(listen)) return listen;
  return "";
}

const std::vector<std::string>& port_bind(const Config& config, uint16_t port) {
  static const std::vector<std::string> every_address;
  for (const SiteConfig& site : config.sites)
    if (site.port == port) return site.bind;
  return every_address;
}

std::string admin_listen_conflict(const Config& config, uint16_t& port) {
  const std::string where = admin_listen_overlap(config, port);
  if (where.empty()) return "";
  return fmt::format("admin address \"{}\" is taken by the sites on port {}, which listen on {}: give the admin "
                     "API another port",
                     config.admin.address, port, where);
}

std::string admin_token_problem(std::string_view token) {
  if (token.empty()) return "must not be empty (leave it out for none)";
  if (token.front() == ' ' || token.back() == ' ')
    return "must not start or end with a space (a header value's edge spaces are not part of it)";
  for (char c : token) {
    if ((static_cast<unsigned char>(c) < 0x20) || c == 0x7f) return "must not contain control characters";
  }
  if (std::string problem = utf8_problem(token); !problem.empty()) return "is " + problem;
  return "";
}

std::string header_op_problem(std::string_view name, HeaderOp::Op op, bool request) {
  static constexpr std::string_view kFraming[] = {"content-length", "transfer-encoding", "connection", "keep-alive",
                                                   "proxy-connection", "te", "trailer", "upgrade"};
  const std::string lower = lowercase(name);
  for (std::string_view framing : kFraming)
    if (lower == framing)
      return fmt::format("\"{}\" cannot be changed: heft writes the message framing and hop-by-hop fields itself",
                         name);
  if (request && op != HeaderOp::set && lower == "host")
    return op == HeaderOp::add ? "\"+Host\" would send a second Host; set it instead (header_up Host VALUE)"
                               : "\"-Host\" would leave the request without the Host HTTP/1.1 requires; set it instead";
  return "";
}

std::string header_value_problem(std::string_view value, bool expanded) {
  for (char c : value) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) continue;  // VCHAR, SP and obs-text are fine
    if (c == '\t') continue;
    std::string_view name = c == '\r' ? "a carriage return"
                            : c == '\n' ? "a line feed"
                            : c == '\0' ? "a NUL byte"
                                        : "a control character";
    return fmt::format("contains {} (0x{:02X}); header values may hold no control character but tab", name,
                       unsigned(byte));
  }
  if (std::string problem = utf8_problem(value); !problem.empty()) return problem;
  // A Caddy placeholder ({upstream_hostport}, {http.request.host}) would be
  // sent as written: say so instead of surprising the backend.
  for (std::size_t open = value.find('{'); open != std::string_view::npos; open = value.find('{', open + 1)) {
    const std::size_t close = value.find('}', open);
    if (close == std::string_view::npos) break;
    const std::string_view inside = value.substr(open + 1, close - open - 1);
    const bool placeholder =
        !inside.empty() && std::isalpha(static_cast<unsigned char>(inside[0])) &&
        std::all_of(inside.begin(), inside.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
        });
    if (placeholder && expanded) {
      std::string problem;
      split_placeholders(value.substr(open, close - open + 1), &problem);
      if (!problem.empty()) return problem;
    } else if (placeholder) {
      return fmt::format("{{{}}} looks like a Caddy placeholder; heft expands placeholders in request header edits, "
                         "static responses and rewrites, not here, and would send it as written",
                         inside);
    }
  }
  return {};
}

std::string utf8_problem(std::string_view text) {
  // RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3
                                    : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
    bool ok = length != 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok && length > 2) {
      const auto second = static_cast<unsigned char>(text[i + 1]);
      ok = !(byte == 0xE0 && second < 0xA0) && !(byte == 0xED && second > 0x9F) &&
           !(byte == 0xF0 && second < 0x90) && !(byte == 0xF4 && second > 0x8F);
    }
    if (!ok)
      return fmt::format("not UTF-8 (byte 0x{:02X} at offset {}; the configuration's JSON form, which heft adapt "
                         "prints and the admin API serves, holds UTF-8 text only)",
                         unsigned(byte), i);
    i += length;
  }
  return {};
}

bool is_request_target_text(std::string_view target) {
  return std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string printable(std::string_view text) { return escaped(text, false); }

namespace {
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
      // Adjacent transposition ("wieght") counts as one edit.
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool is_transposition(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  size_t first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      first = i;
      break;
    }
  if (first + 1 >= a.size()) return false;
  return a[first] == b[first + 1] && a[first + 1] == b[first] &&
         a.substr(first + 2) == b.substr(first + 2);
}
}  // namespace

std::string closest_match(std::string_view word, std::span<const std::string_view> candidates) {
  // Close enough to be a typo: at most a third of the word, and at least 1 edit allowed.
  const size_t allowed = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view candidate : candidates) {
    // The distance is at least the difference in length: a word far longer
    // than every name (a 1 MB token) needs no table of its size per name.
    if (std::max(word.size(), candidate.size()) - std::min(word.size(), candidate.size()) > allowed) continue;
    size_t distance = is_transposition(word, candidate) ? 1 : edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  if (best_distance > allowed) return {};
  return best;
}

std::optional<IpRange> parse_ip_range(std::string_view text) {
  IpRange range;
  const std::size_t slash = text.find('/');
  const std::string address(text.substr(0, slash));
  if (::inet_pton(AF_INET, address.c_str(), range.bytes.data()) == 1) {
    range.bits = 32;
  } else if (::inet_pton(AF_INET6, address.c_str(), range.bytes.data()) == 1) {
    range.v6 = true;
    range.bits = 128;
  } else {
    return std::nullopt;
  }
  if (slash != std::string_view::npos) {
    const auto bits = parse_uint(text.substr(slash + 1), range.bits);
    if (!bits || text.size() == slash + 1) return std::nullopt;
    range.bits = static_cast<unsigned>(*bits);
  }
  return range;
}

bool in_range(const IpRange& range, std::string_view address) {
  std::array<uint8_t, 16> bytes{};
  char text[64];
  if (address.size() >= sizeof text) return false;
  address.copy(text, address.size());
  text[address.size()] = '\0';
  if (::inet_pton(range.v6 ? AF_INET6 : AF_INET, text, bytes.data()) != 1) return false;
  const unsigned whole = range.bits / 8, rest = range.bits % 8;
  if (!std::equal(bytes.begin(), bytes.begin() + whole, range.bytes.begin())) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (bytes[whole] & mask) == (range.bytes[whole] & mask);
}

}  // namespace heft::config
