// heft's configuration model: plain values the JSON reader (from_json, json.h)
// produces, from a JSON document or from a Heftfile adapted into one, and the
// proxy consumes.
//
// Everything here is a value type: copy it, compare it with ==, hand it to
// another thread. Nothing in this header does I/O. Durations are
// std::chrono::milliseconds. Defaults below are the documented defaults
// (docs/heftfile.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "heft/balance/balancer.h"
#include "config/route_model.h"
#include "heft/balance/policy.h"
#include "upstream/weights.h"

namespace heft::config {

using std::chrono::milliseconds;

// One backend of a pool (one `to` address): its balancing fields
// (BackendSpec: `name` is the dial address "host:port" as written, then
// weight 0..balance::kMaxWeight, backup, down, max_fails, max_conns), handed
// to the run-time pool whole, and what the configuration adds.
struct UpstreamConfig : balance::BackendSpec {
  std::string host;                   // host part of name (no brackets for IPv6)
  uint16_t port = 0;                  // port part of name
  std::vector<std::string> resolved;  // "ip:port" after resolve(); empty before
  milliseconds fail_timeout{10000};   // nginx: failure window and how long it stays down
  std::optional<milliseconds> slow_start;  // per-backend override of ProxyConfig::slow_start

  bool operator==(const UpstreamConfig&) const = default;
};

// The key a hash policy hashes.
struct HashKey {
  enum Kind { none, client_ip, header, cookie, uri };
  Kind kind = none;
  std::string name;  // header or cookie name; empty otherwise

  bool operator==(const HashKey&) const = default;
};

// When a failed attempt may be retried on another backend (nginx's
// proxy_next_upstream). `off` disables retries altogether.
struct NextUpstream {
  bool error = true;
  bool timeout = true;
  bool http_500 = false;
  bool http_502 = false;
  bool http_503 = false;
  bool http_504 = false;
  bool non_idempotent = false;  // also retry POST, PATCH, ... (not only idempotent methods)
  bool off = false;

  bool operator==(const NextUpstream&) const = default;
};

// One reverse_proxy: a pool of backends and how requests are spread,
// retried and proxied. Its backends' BackendSpecs and its AdaptiveOptions are
// the run-time pool's (upstream::PoolConfig) own types, handed over whole.
struct ProxyConfig {
  std::vector<UpstreamConfig> upstreams;
  balance::PolicyKind policy = balance::PolicyKind::weighted_round_robin;
  HashKey hash_key;  // set iff policy == hash
  balance::HashStrategy hash_strategy = balance::HashStrategy::ring;
  uint32_t keepalive = 32;  // idle connections kept per backend
  // nginx: an idle pooled connection is closed after this; 0 = kept until the backend closes it.
  milliseconds keepalive_timeout{60000};
  NextUpstream next_upstream;
  uint32_t next_upstream_tries = 0;      // 0 = unlimited (every backend once)
  milliseconds next_upstream_timeout{0};  // 0 = no limit on the time spent retrying
  milliseconds connect_timeout{5000};
  milliseconds read_timeout{60000};
  milliseconds send_timeout{60000};
  size_t retry_body_limit = 65536;  // request bodies larger than this are not retried
  std::vector<HeaderOp> header_up;
  std::vector<HeaderOp> header_down;
  std::optional<milliseconds> slow_start;  // ramp a recovered backend's weight over this time
  // The pool's max_fails / fail_timeout: what a backend added without its own
  // gets (each UpstreamConfig holds its value; these are only the default).
  uint32_t max_fails = 1;
  milliseconds fail_timeout{10000};
  // nginx's proxy_ignore_client_abort: a request whose client closed (or
  // half-closed) while it waits for the backend still runs to its answer.
  bool ignore_client_abort = false;
  // nginx Plus's `queue`: when every backend is at its max_conns, up to this
  // many requests wait for a place, each at most queue_timeout; 0 = none (503).
  uint32_t queue = 0;
  milliseconds queue_timeout{60000};

  // Active health checks; off while health_uri is empty.
  std::string health_uri;
  uint16_t health_port = 0;  // 0 = the backend's own port
  milliseconds health_interval{5000};
  milliseconds health_timeout{2000};
  std::string health_status;  // "2xx", "200", ...; empty = any 2xx
  std::string health_body;    // ECMAScript regex the body must match; empty = any
  std::vector<std::pair<std::string, std::string>> health_headers;
  uint32_t health_passes = 1;  // consecutive passes to become healthy
  uint32_t health_fails = 1;   // consecutive failures to become unhealthy

  // Weight adaptation from observed latency and errors (upstream/weights.h).
  upstream::AdaptiveOptions adaptive;

  bool operator==(const ProxyConfig&) const = default;
};

// One certificate with its key (apps.tls.certificates: load_files or
// load_pem), as the validator read and checked them: PEM text, so that what
// was checked is what is served (a file changed later is read again by the
// next reload, not behind the validator's back).
struct TlsCertificate {
  std::string certificate_file;  // where it was read; empty for load_pem
  std::string key_file;
  std::string certificate_pem;  // the leaf first, then its chain
  std::string key_pem;
  std::vector<std::string> tags;   // Caddy's tags: a connection policy selects by them
  std::vector<std::string> names;  // the DNS names it is valid for (SAN, else CN), lower case

  bool operator==(const TlsCertificate&) const = default;
};

// One of a server's tls_connection_policies (Caddy's shape): the first whose
// `sni` names the client's server name (or that has no `sni`) picks the
// certificates a handshake may use: those with one of `any_tag` (every
// certificate when empty), by name: exact, then wildcard, then the first.
struct TlsPolicy {
  std::vector<std::string> sni;      // lower case; empty = any
  std::vector<std::string> any_tag;  // certificate_selection.any_tag
  std::string default_sni;           // the name assumed when the client sends none

  bool operator==(const TlsPolicy&) const = default;
};

struct LogConfig {
  bool enabled = false;
  std::string output;  // file path, or "stderr"

  bool operator==(const LogConfig&) const = default;
};

// One site block: the hosts and port it answers, the addresses it listens
// on, and its proxy.
// The protocols a server speaks (Caddy's `protocols`: "h1", "h2", "h2c").
// h2 is HTTP/2 over TLS (chosen by ALPN); h2c is cleartext HTTP/2 with prior
// knowledge on a plain listener, told from HTTP/1.1 by its first bytes.
struct Protocols {
  bool h1 = true;
  bool h2 = true;
  bool h2c = false;

  bool operator==(const Protocols&) const = default;
};

struct SiteConfig {
  std::vector<std::string> hosts;  // empty = any host
  uint16_t port = 80;
  // The addresses its port is listened on: IP literals in canonical form,
  // IPv6 without brackets (Caddy's `bind`; the Heftfile also takes them from
  // IP-literal site addresses and default_bind). Empty = every IPv4 address
  // and, where the host has IPv6, every IPv6 address. Every site of a port
  // has the same addresses (one JSON server per port: its `listen`).
  std::vector<std::string> bind;
  bool is_default = false;  // answers requests no other site on its port matches
  Protocols protocols;      // its server's (the same for every site of a port)
  // The site's first reverse_proxy pool (its only one unless it has routes).
  ProxyConfig proxy;
  // Its handlers in Caddy's shape (route_model.h); empty: `proxy` answers
  // every request (a site of one reverse_proxy, the fast path). Pools beyond
  // `proxy`, in the order their reverse_proxy handlers are written.
  std::vector<RouteHandler> handle;
  std::vector<ProxyConfig> pools;
  // Pool n of the site (RouteHandler::pool), and how many it has.
  const ProxyConfig& pool(std::size_t n) const { return n == 0 ? proxy : pools[n - 1]; }
  std::size_t pool_count() const { return 1 + pools.size(); }
  LogConfig log;
  // The server's tls_connection_policies: its port terminates TLS iff
  // `tls` (every site of a port has the same, like `bind`).
  bool tls = false;
  std::vector<TlsPolicy> tls_policies;
  std::string file;  // where the site was declared (diagnostics); not in JSON
  int line = 0;
  int column = 0;

  // Compares what the site means, not where it was written.
  bool operator==(const SiteConfig& other) const {
    return hosts == other.hosts && port == other.port && bind == other.bind && is_default == other.is_default &&
           protocols == other.protocols && proxy == other.proxy && handle == other.handle && pools == other.pools &&
           log == other.log && tls == other.tls && tls_policies == other.tls_policies;
  }
};

struct AdminConfig {
  bool enabled = true;
  std::string address = "127.0.0.1:2019";
  std::string token;  // bearer token required by the admin API; empty = none

  bool operator==(const AdminConfig&) const = default;
};

// "required when the admin API listens on a non-loopback address (ADDR)" when
// `admin` is on, has no token and listens beyond loopback; "" otherwise (an
// address that does not parse is another error's).
// Why a header_up (`request`) or header_down op `op` on field `name` cannot
// be ("" if it can). heft writes a message's framing (Content-Length,
// Transfer-Encoding) and its hop-by-hop fields itself: an op on them made
// invalid or ambiguous messages (two differing Content-Lengths,
// Content-Length beside chunked). A request keeps exactly one Host: it may be
// set, not added or removed.
std::string header_op_problem(std::string_view name, HeaderOp::Op op, bool request);

std::string admin_token_missing(const AdminConfig& admin);

// How heft writes its own log lines on stderr (`log_format`): text, or JSON lines.
enum class LogFormat { text, json };

// One of heft's demo origin servers (`demo_backends a=127.0.0.1:9081 ...`,
// JSON apps.demo.backends): `heft run` serves it in-process, as `heft
// demo-backend --name NAME --listen LISTEN` would, so a configuration can show
// a split with nothing else installed (the packaged default does). Started
// when heft starts, from the configuration it starts with; a reload does not
// start or stop any.
struct DemoBackendConfig {
  std::string name;    // sent in every response's X-Backend field
  std::string listen;  // "IP:PORT" (an IPv6 IP in brackets), as written

  bool operator==(const DemoBackendConfig&) const = default;
};

// Why `backend` cannot be a demo backend ("" if it can): a name of letters,
// digits, '.', '_' and '-' (at most 64), an IP literal and a port other than 0.
std::string demo_backend_problem(const DemoBackendConfig& backend);
// demo_backend_problem() of backends[index], or that an earlier one has its
// name or address ("" if neither).
std::string demo_backend_problem(const std::vector<DemoBackendConfig>& backends, size_t index);

struct Config {
  AdminConfig admin;
  LogFormat log_format = LogFormat::text;
  unsigned workers = 0;  // 0 = one per hardware core
  milliseconds grace_period{10000};
  milliseconds idle_timeout{60000};
  milliseconds header_timeout{10000};
  uint32_t max_connections = 10000;
  std::vector<SiteConfig> sites;
  std::vector<DemoBackendConfig> demo_backends;  // none unless asked for
  std::vector<TlsCertificate> certificates;      // apps.tls.certificates, load_files then load_pem

  bool operator==(const Config&) const = default;
};

// Why the admin API could not listen beside the sites ("" if it can): its
// address is, or overlaps (a wildcard of the same family, or every address when
// they have no `bind`), one the sites on its port listen on, e.g.
// "admin address \"127.0.0.1:8080\" is taken by the sites on port 8080, which
// listen on 127.0.0.1: give the admin API another port". heft ran without its
// admin API then ("Address already in use"). `port` gets the admin's port.
std::string admin_listen_conflict(const Config& config, uint16_t& port);

// Where the sites on the admin API's port listen over its address: "every
// address" (no `bind`) or the bind address that overlaps it;
// "" when none does (another port or address, admin off, or an address that
// does not parse, another error's). `port` gets the admin's port.
std::string admin_listen_overlap(const Config& config, uint16_t& port);

// The addresses the sites on `port` listen on (their common `bind`; empty =
// every address, also when no site uses the port).
const std::vector<std::string>& port_bind(const Config& config, uint16_t port);

// A problem found in a configuration. For a Heftfile, file/line/column name
// the token the value came from (and `path` the value's JSON pointer, when
// the validator found it); for JSON, `path` names the value (file empty, line 0).
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string path;  // RFC 6901 JSON pointer, e.g. "/apps/http/servers/srv0/listen/0"
  std::string message;

  // "FILE:LINE:COL: message" or "PATH: message".
  std::string to_string() const;

  bool operator==(const Diagnostic&) const = default;
};

// A value or every problem found while producing it (never both).
template <typename T>
struct Result {
  std::optional<T> value;
  std::vector<Diagnostic> errors;

  bool ok() const { return value.has_value() && errors.empty(); }
  explicit operator bool() const { return ok(); }
  T& operator*() { return *value; }
  const T& operator*() const { return *value; }
  T* operator->() { return &*value; }
  const T* operator->() const { return &*value; }
};

}  // namespace heft::config
