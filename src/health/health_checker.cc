// Active health checks and the weight ticker (see health_checker.h).
#include "health/health_checker.h"

#include <pthread.h>

#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/regex.hpp>
#include <fmt/format.h>

#include "config/values.h"
#include "observe/audit.h"
#include "observe/metrics.h"
#include "net/endpoint.h"

namespace heft::health {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;
constexpr auto as_tuple_awaitable = asio::as_tuple(asio::use_awaitable);
// A probe's response: a head up to the proxy's limit for response heads, up
// to this many interim (1xx) responses before it, and the body's first
// kHealthBodyKept bytes matched against health_body.
constexpr std::uint32_t kHealthHeadLimit = 64 * 1024;
constexpr int kMaxInterim = 8;
constexpr std::size_t kHealthBodyKept = 1 << 20;

bool status_matches(std::string_view pattern, int status) {
  if (pattern.empty()) return status >= 200 && status <= 299;
  auto dash = pattern.find('-');
  if (dash != std::string_view::npos) {
    int lo = 0, hi = 0;
    try {
      lo = std::stoi(std::string(pattern.substr(0, dash)));
      hi = std::stoi(std::string(pattern.substr(dash + 1)));
    } catch (...) {
      return false;
    }
    return status >= lo && status <= hi;
  }
  if (pattern.size() != 3) return false;
  std::string digits = std::to_string(status);
  if (digits.size() != 3) return false;
  for (size_t i = 0; i < 3; ++i) {
    char p = pattern[i];
    if (p == 'x' || p == 'X') continue;
    if (p != digits[i]) return false;
  }
  return true;
}

std::optional<bool> HealthCounter::record(bool pass, bool healthy, uint32_t need_passes, uint32_t need_fails) {
  if (pass) {
    fails = 0;
    if (passes < UINT32_MAX) ++passes;
    if (!healthy && passes >= std::max(1u, need_passes)) return true;
  } else {
    passes = 0;
    if (fails < UINT32_MAX) ++fails;
    if (healthy && fails >= std::max(1u, need_fails)) return false;
  }
  return std::nullopt;
}

// What one backend's probes are: a reload that changes none of it keeps the
// backend's probe schedule and consecutive counts; any change starts them afresh.
struct ProbeSettings {
  std::string address;  // as resolved
  std::string uri;
  uint16_t port = 0;
  std::chrono::milliseconds interval{0}, timeout{0};
  std::string status, body;
  std::vector<std::pair<std::string, std::string>> headers;
  uint32_t passes = 0, fails = 0;

  bool operator==(const ProbeSettings&) const = default;
};

ProbeSettings probe_settings(const config::PoolConfig& c, const std::string& address) {
  return {address,         c.health_uri,  c.health_port,    c.health_interval, c.health_timeout,
          c.health_status, c.health_body, c.health_headers, c.health_passes,   c.health_fails};
}

Clock::duration probe_interval(const ProbeSettings& s) {
  return std::max<Clock::duration>(s.interval, std::chrono::milliseconds(10));
}

// One backend's probe loop and what it carries across reloads.
struct Probe {
  explicit Probe(asio::io_context& io) : timer(io) {}
  std::shared_ptr<const PoolTarget> target;  // the newest configuration with these settings
  std::string name;
  ProbeSettings settings;
  HealthCounter counter;
  Clock::time_point next;  // when the next probe starts
  asio::steady_timer timer;
  bool retired = false;  // removed, or its settings changed: the loop ends, its result is dropped
};

struct HealthChecker::Impl : std::enable_shared_from_this<Impl> {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::thread thread;
  LogSink log;
  std::atomic<uint64_t> passed{0}, failed{0};
  // Below: only on the checker's thread.
  std::vector<std::shared_ptr<const PoolTarget>> pools;
  // Keyed by pool and backend name. A Probe holds its pool, so a pool's
  // address cannot be reused by another while it is a key here.
  std::map<std::pair<const upstream::Pool*, std::string>, std::shared_ptr<Probe>> probes;
  asio::steady_timer ticker{io};
  bool stopped = false;

  void apply(std::vector<PoolTarget> next);
  awaitable<void> tick_loop();
  awaitable<void> probe_loop(std::shared_ptr<Probe> p);
  // `backend` is the probe loop's snapshot's: it outlives the probe.
  awaitable<std::pair<bool, std::string>> probe(const PoolTarget& target, const upstream::BackendConfig& backend);
  void judge(Probe& p, bool pass, const std::string& why);
};

void HealthChecker::Impl::apply(std::vector<PoolTarget> next) {
  pools.clear();
  decltype(probes) kept;
  const auto now = Clock::now();
  for (PoolTarget& t : next) {
    auto target = std::make_shared<const PoolTarget>(std::move(t));
    pools.push_back(target);
    if (!target->pool) continue;
    auto snap = target->pool->snapshot();
    if (target->config.health_uri.empty()) {
      // No active checks (any more, after a reload): nothing would ever bring
      // back a backend they had marked unhealthy, and without checks every
      // backend is healthy (docs/health.md).
      for (uint32_t k = 0; k < snap->size(); ++k) {
        if (snap->state(k).healthy.load(std::memory_order_relaxed)) continue;
        snap->set_healthy(k, true, now);
        observe::record_health_change(target->server, target->site, snap->backend(k).name);
        log(observe::audit_health(target->label, target->site, snap->backend(k).name, "unhealthy", "healthy",
                                  "active checks are off", observe::LogLevel::info));
      }
      continue;
    }
    const size_t n = snap->size();
    for (uint32_t k = 0; k < n; ++k) {
      const std::string& name = snap->backend(k).name;
      auto key = std::make_pair(target->pool.get(), name);
      if (kept.count(key)) continue;  // the same name twice: one probe loop
      ProbeSettings settings = probe_settings(target->config, snap->backend(k).address);
      // Unchanged checks go on where they are: restarting them at every reload
      // (an admin weight change is one) could postpone a backend's probes forever.
      if (auto it = probes.find(key); it != probes.end() && it->second->settings == settings) {
        it->second->target = target;
        kept.emplace(key, std::move(it->second));
        probes.erase(it);
        continue;
      }
      auto p = std::make_shared<Probe>(io);
      p->target = target;
      p->name = name;
      p->settings = std::move(settings);
      p->next = now + probe_interval(p->settings) * k / n;  // spread over the interval
      kept.emplace(key, p);
      asio::co_spawn(io, probe_loop(std::move(p)), asio::detached);
    }
  }
  // Removed backends and changed checks: their loops end now.
  for (auto& [key, p] : probes) {
    p->retired = true;
    p->timer.cancel();
  }
  probes = std::move(kept);
}

awaitable<void> HealthChecker::Impl::tick_loop() {
  for (;;) {
    ticker.expires_after(kTickInterval);
    co_await ticker.async_wait(as_tuple_awaitable);
    if (stopped) co_return;
    const auto now = Clock::now();
    for (const auto& target : pools) {
      if (!target->pool) continue;
      for (const upstream::WeightEvent& e : target->pool->tick(now)) {
        observe::record_weight_decision(target->server, target->site, upstream::reason_name(e.reason));
        log(observe::audit_weight(e, target->site));
      }
    }
  }
}

awaitable<void> HealthChecker::Impl::probe_loop(std::shared_ptr<Probe> p) {
  for (;;) {
    p->timer.expires_at(p->next);
    co_await p->timer.async_wait(as_tuple_awaitable);
    if (stopped || p->retired) co_return;
    const std::shared_ptr<const PoolTarget> target = p->target;
    auto snap = target->pool->snapshot();
    // Not in the pool: removed, and the reload that retires this loop is on its way.
    if (auto index = snap->balancer().find(p->name)) {
      auto [pass, why] = co_await probe(*target, snap->backend(*index));
      if (stopped || p->retired) co_return;
      (pass ? passed : failed).fetch_add(1, std::memory_order_relaxed);
      judge(*p, pass, why);
    }
    p->next += probe_interval(p->settings);
    if (auto now = Clock::now(); p->next < now) p->next = now;  // a slow probe: no burst of catch-up probes
  }
}

awaitable<std::pair<bool, std::string>> HealthChecker::Impl::probe(const PoolTarget& target,
                                                                   const upstream::BackendConfig& backend) {
  const config::PoolConfig& c = target.config;
  const std::string& name = backend.name;
  beast::tcp_stream stream(io);
  const auto deadline = std::chrono::steady_clock::now() + c.health_timeout;
  stream.expires_at(deadline);
  // The backend's address, then its name's others if it refuses at once (as
  // the proxy connects: the probe must judge what requests would reach).
  boost::system::error_code cec = asio::error::host_not_found;
  for (std::size_t i = 0; i <= backend.other_addresses.size() && cec && cec != beast::error::timeout; ++i) {
    const std::string& address = i == 0 ? backend.address : backend.other_addresses[i - 1];
    // IP literals only: config::resolve() turned names into addresses before
    // the pool was built, and the proxy reads them with the same parser.
    std::optional<tcp::endpoint> endpoint = net::parse_backend_address(address);
    if (!endpoint) co_return std::pair{false, fmt::format("{} is not an IP address and port", address)};
    if (c.health_port) endpoint->port(c.health_port);
    if (i > 0) {
      stream.close();
      stream.expires_at(deadline);  // one health_timeout for all the addresses
    }
    std::tie(cec) = co_await stream.async_connect(*endpoint, as_tuple_awaitable);
  }
  if (cec) co_return std::pair{false, cec == beast::error::timeout ? std::string("connect timed out")
                                                                   : fmt::format("connect: {}", cec.message())};
  http::request<http::empty_body> req{http::verb::get, c.health_uri, 11};
  req.set(http::field::host, name);
  req.set(http::field::user_agent, "heft-health-check");
  for (const auto& [h, v] : c.health_headers) req.set(h, v);
  req.set(http::field::connection, "close");
  auto [wec, written] = co_await http::async_write(stream, req, as_tuple_awaitable);
  if (wec) co_return std::pair{false, fmt::format("write: {}", wec.message())};
  // The head as the proxy would take it (its limit, interim 1xx responses
  // skipped: RFC 9110 15.2), then the whole body read, its first
  // kHealthBodyKept bytes kept for health_body (docs/health.md).
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->header_limit(kHealthHeadLimit);
    parser->body_limit(boost::none);  // read to the end within health_timeout; only kHealthBodyKept is kept
    auto [rec, read] = co_await http::async_read_header(stream, buffer, *parser, as_tuple_awaitable);
    if (rec) co_return std::pair{false, rec == beast::error::timeout ? std::string("timed out")
                                                                     : fmt::format("read: {}", rec.message())};
    const unsigned code = parser->get().result_int();
    if (code < 100 || code >= 200 || code == 101 || interim == kMaxInterim) break;
  }
  std::string body;
  while (!parser->is_done()) {
    char chunk[16 * 1024];
    parser->get().body().data = chunk;
    parser->get().body().size = sizeof chunk;
    auto [rec, read] = co_await http::async_read(stream, buffer, *parser, as_tuple_awaitable);
    if (rec == http::error::need_buffer) rec = {};
    if (rec) co_return std::pair{false, rec == beast::error::timeout ? std::string("timed out")
                                                                     : fmt::format("read: {}", rec.message())};
    const std::size_t got = sizeof chunk - parser->get().body().size;
    if (body.size() < kHealthBodyKept) body.append(chunk, std::min(got, kHealthBodyKept - body.size()));
  }
  const int status = static_cast<int>(parser->get().result_int());
  if (!status_matches(c.health_status, status))
    co_return std::pair{false, fmt::format("status {} (expected {})", status,
                                           c.health_status.empty() ? "2xx" : c.health_status)};
  if (!c.health_body.empty()) {
    // Boost.Regex, not std::regex: libstdc++'s matcher recurses once per
    // character a repetition takes, and "^[^!]+" or "UP.*" over a body of a
    // few tens of KiB overflowed this thread's stack (heft died of SIGSEGV).
    // Boost's matcher keeps its own bounded stack and throws when a pattern
    // is too costly. Compiled with the flags the configuration checked the
    // pattern with (config::health_body_flags()).
    bool matched = false;
    std::string failure;
    try {
      const boost::regex pattern(c.health_body, config::health_body_flags());
      matched = boost::regex_search(body, pattern);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty())
      co_return std::pair{false, fmt::format("body not matched against /{}/: {}", c.health_body, failure)};
    if (!matched) co_return std::pair{false, fmt::format("body does not match /{}/", c.health_body)};
  }
  co_return std::pair{true, fmt::format("status {}", status)};
}

void HealthChecker::Impl::judge(Probe& p, bool pass, const std::string& why) {
  const PoolTarget& target = *p.target;
  auto snap = target.pool->snapshot();
  auto index = snap->balancer().find(p.name);
  if (!index) return;
  const uint32_t i = *index;
  const auto now = Clock::now();
  HealthCounter& counter = p.counter;
  const bool healthy = snap->state(i).healthy.load(std::memory_order_relaxed);
  auto change = counter.record(pass, healthy, p.settings.passes, p.settings.fails);
  if (change) {
    snap->set_healthy(i, *change, now);
    observe::record_health_change(target.server, target.site, p.name);
    const auto streak = *change ? counter.passes : counter.fails;
    log(observe::audit_health(target.label, target.site, p.name, *change ? "unhealthy" : "healthy",
                              *change ? "healthy" : "unhealthy",
                              fmt::format("{}; {} consecutive {}{}", why, streak, *change ? "pass" : "failure",
                                          streak == 1 ? "" : *change ? "es" : "s"),
                              *change ? observe::LogLevel::info : observe::LogLevel::warn));
  }
  if (pass && (healthy || change) && snap->clear_passive(i, now))
    log(observe::audit_health(target.label, target.site, p.name, "out", "up",
                              fmt::format("back from passive failures: active check passed: {}", why),
                              observe::LogLevel::info));
}

HealthChecker::HealthChecker(LogSink log, bool tick_pools) : impl_(std::make_shared<Impl>()) {
  impl_->log = log ? std::move(log) : [](const std::string&) {};  // the audit trail writes the line
  if (tick_pools) asio::co_spawn(impl_->io, impl_->tick_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] {
    pthread_setname_np(pthread_self(), "heft-health");  // for top -H, perf and /proc
    impl->io.run();
  });
}

HealthChecker::~HealthChecker() { stop(); }

void HealthChecker::set_pools(std::vector<PoolTarget> pools) {
  asio::post(impl_->io, [impl = impl_.get(), pools = std::move(pools)]() mutable { impl->apply(std::move(pools)); });
}

void HealthChecker::stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->stopped = true;
    impl->ticker.cancel();
    impl->io.stop();
  });
  impl_->thread.join();
}

uint64_t HealthChecker::checks_passed() const { return impl_->passed.load(); }
uint64_t HealthChecker::checks_failed() const { return impl_->failed.load(); }

}  // namespace heft::health
