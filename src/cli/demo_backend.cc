// `heft demo-backend`: runs the demo origin server (src/demo/demo_backend.h)
// until SIGTERM or SIGINT.
#include <charconv>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cli/command.h"
#include "demo/demo_backend.h"

namespace heft::cli {
namespace {

struct DemoBackendFlags {
  std::string listen = "127.0.0.1:8081";
  std::string delay = "0";
  demo::DemoBackendOptions options;
};

// "127.0.0.1:8081", "[::1]:8081", "localhost:8081".
void parse_listen(std::string_view listen, demo::DemoBackendOptions& options) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    throw BadArguments(fmt::format("--listen wants HOST:PORT, got '{}'", listen));
  }
  std::string_view host = listen.substr(0, colon);
  const std::string_view port_text = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc{} || end != port_text.data() + port_text.size() || port > 65535) {
    throw BadArguments(fmt::format("--listen port must be 0 to 65535, got '{}'", port_text));
  }
  options.address = std::string(host);
  options.port = static_cast<uint16_t>(port);
}

// "200ms", "1.5s", "0"; a bare number is milliseconds.
std::chrono::milliseconds parse_delay(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  double scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "us") scale = 0.001;
  if (text.empty() || ec != std::errc{} || scale == 0 || !(value >= 0) || value * scale > 1e9) {
    throw BadArguments(fmt::format("--delay wants a duration like 200ms or 1.5s, got '{}'", text));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * scale + 0.5));
}

void run(DemoBackendFlags& flags) {
  demo::DemoBackendOptions& options = flags.options;
  parse_listen(flags.listen, options);
  options.delay = parse_delay(flags.delay);
  if (!(options.fail_rate >= 0 && options.fail_rate <= 1)) {
    throw BadArguments(fmt::format("--fail-rate must be between 0 and 1, got {}", options.fail_rate));
  }
  if (!options.health_path.empty() && options.health_path.front() != '/') {
    throw BadArguments(fmt::format("--health-path must start with '/', got '{}'", options.health_path));
  }
  if (options.threads == 0) throw BadArguments("--threads must be at least 1");
  if (options.name.empty()) throw BadArguments("--name must not be empty");
  try {
    set_exit_code(demo::run_demo_backend(options));
  } catch (const std::invalid_argument& e) {
    throw BadArguments(e.what());
  } catch (const std::exception& e) {
    // Typically the address is in use ("cannot listen on ADDR: reason"): a
    // runtime failure, not a usage error.
    std::fprintf(stderr, "heft: demo-backend: %s\n", e.what());
    set_exit_code(1);
  }
}

void setup(CLI::App& root) {
  auto flags = std::make_shared<DemoBackendFlags>();
  demo::DemoBackendOptions& o = flags->options;
  CLI::App* cmd = root.add_subcommand("demo-backend", "Run a small, fast demo origin server (for demos, tests, benchmarks)");
  cmd->add_option("--listen", flags->listen, "HOST:PORT to listen on (port 0: any free port)")->capture_default_str();
  cmd->add_option("--name", o.name, "Sent back in the X-Backend header")->capture_default_str();
  // Ranges are checked: CLI11 reads "-1" into an unsigned option as a huge number.
  cmd->add_option("--body-bytes", o.body_bytes, "Size of the response body")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--delay", flags->delay, "Added latency per request, e.g. 200ms or 1s")->capture_default_str();
  cmd->add_option("--workers", o.workers, "Requests served at once (0: unlimited; more wait in FIFO order)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1'000'000}))
      ->capture_default_str();
  cmd->add_option("--fail-rate", o.fail_rate, "Fraction 0..1 of requests answered 503, evenly spread")
      ->capture_default_str();
  cmd->add_option("--health-path", o.health_path, "Path answering 200 ok (e.g. /healthz); none by default");
  cmd->add_option("--threads", o.threads, "Event-loop threads")->check(CLI::Range(1u, 256u))->capture_default_str();
  cmd->add_option("--port-file", o.port_file, "Write the bound port to this file once listening");
  cmd->callback([flags] { run(*flags); });
}

static const bool registered = add_command(50, &setup);

}  // namespace
}  // namespace heft::cli
