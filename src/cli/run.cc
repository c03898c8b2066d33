// `heft run`: serves a Heftfile (or, with none present, an embedded demo) until
// SIGTERM/SIGINT; SIGHUP reloads the file. Signals are handled on the main
// thread's own io_context; the proxy's workers run on their own threads.
#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <fmt/format.h>

#include "admin/proxy_admin.h"
#include "admin/state_file.h"
#include "cli/command.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "proxy/demo_backend.h"
#include "observe/access_log.h"
#include "observe/audit.h"
#include "observe/log.h"
#include "observe/metrics.h"
#include "proxy/proxy.h"

namespace heft::cli {
namespace {

struct RunOptions {
  std::string config;   // empty: ./Heftfile, or the demo when there is none
  bool resume = false;  // start from the state file when it exists
  std::string state;    // empty: admin::default_state_path()
};

// Loads and resolves a configuration file; every problem goes to `errors`.
std::optional<config::Config> load(const std::string& path, std::string& errors) {
  config::Result<config::Config> loaded = config::load_config_file(path);
  if (loaded.ok()) {
    std::vector<config::Diagnostic> unresolved = config::resolve(*loaded);
    if (unresolved.empty()) return std::move(*loaded.value);
    loaded.errors = std::move(unresolved);
  }
  for (const config::Diagnostic& d : loaded.errors) errors += d.to_string() + "\n";
  if (errors.empty()) errors = path + ": invalid configuration\n";
  return std::nullopt;
}

// Proxy::reload, counted in heft_config_reloads_total and audited (when no
// admin API does, as for a change through it).
bool reload_counted(proxy::Proxy& proxy, config::Config next, const std::string& source, std::string& error) {
  const nlohmann::json before = config::to_json(proxy.snapshot_config());
  const nlohmann::json after = config::to_json(next);
  const bool ok = proxy.reload(std::move(next), error);
  observe::record_reload(ok);
  if (ok && before != after) {
    observe::ConfigChange change;
    change.source = source;
    change.before = before;
    change.after = after;
    observe::audit_config_change(change);
  }
  return ok;
}

// The embedded demo: a, b, c with weights 5, 3, 2 behind :8080.
config::Config demo_config(const std::vector<std::unique_ptr<proxy::DemoBackend>>& backends) {
  config::Config c;
  c.admin.address = "127.0.0.1:2019";
  config::SiteConfig site;
  site.port = 8080;
  site.file = "(embedded demo)";
  const uint32_t weights[] = {5, 3, 2};
  for (std::size_t i = 0; i < backends.size(); ++i) {
    config::UpstreamConfig u;
    u.host = "127.0.0.1";
    u.port = backends[i]->port();
    u.dial = fmt::format("127.0.0.1:{}", u.port);
    u.resolved = {u.dial};
    u.weight = weights[i];
    site.proxy.upstreams.push_back(u);
  }
  c.sites.push_back(site);
  return c;
}

// Once heft is stopping, SIGHUP, SIGTERM and SIGINT must not end it with
// their default action (exit 128+n after "stopped"). Destroying the
// signal_set would restore that default, so they are blocked in this thread
// (by now the only one), the set is emptied, and they are ignored until exit;
// a signal that came in between is pending, and ignoring discards it.
void ignore_stop_signals(boost::asio::signal_set& reloads, boost::asio::signal_set& stops) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&stop_signals, s);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  boost::system::error_code ignored;
  reloads.clear(ignored);
  stops.clear(ignored);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaction(s, &ignore, nullptr);
}

int run(const RunOptions& options) {
  // Signals first, so a SIGTERM right after start is not lost. Two sets: a
  // set hands out its pending signals lowest number first, so in one set a
  // SIGHUP (1) arriving during every reload kept SIGTERM (15) and SIGINT
  // from ever being delivered, and heft from stopping.
  boost::asio::io_context control(1);
  boost::asio::signal_set reload_signals(control, SIGHUP);
  boost::asio::signal_set stop_signals(control, SIGINT, SIGTERM);

  const bool demo = options.config.empty() && !std::filesystem::exists("Heftfile");
  const std::string path = options.config.empty() ? "Heftfile" : options.config;
  boost::asio::io_context demo_io(1);
  std::vector<std::unique_ptr<proxy::DemoBackend>> demo_backends;
  std::thread demo_thread;
  config::Config config;
  if (demo) {
    for (const char* name : {"a", "b", "c"}) {
      proxy::DemoBackendOptions o;
      o.name = name;
      demo_backends.push_back(std::make_unique<proxy::DemoBackend>(demo_io, o));
      demo_backends.back()->start();
    }
    config = demo_config(demo_backends);
    demo_thread = std::thread([&demo_io] {
      pthread_setname_np(pthread_self(), "heft-demo");  // for top -H, perf and /proc
      demo_io.run();
    });
  } else {
    std::string errors;
    auto loaded = load(path, errors);
    if (!loaded) {
      observe::error("{}{} is not valid, not starting", errors, path);
      return 1;
    }
    config = std::move(*loaded);
  }
  // Every change accepted by the admin API is saved here (Caddy's autosave);
  // --resume starts from it instead of the file.
  const std::string state_path = options.state.empty() ? admin::default_state_path() : options.state;
  const bool resumed = options.resume && std::filesystem::exists(state_path);
  if (resumed) {
    config::Result<config::Config> saved = admin::load_state_file(state_path);
    std::vector<config::Diagnostic> problems = saved.errors;
    if (saved.ok()) problems = config::resolve(*saved);
    if (!problems.empty()) {
      std::string errors;
      for (const config::Diagnostic& d : problems) errors += d.to_string() + "\n";
      observe::error("{}{} is not valid, not starting", errors, state_path);
      for (auto& b : demo_backends) b->stop();
      if (demo_thread.joinable()) demo_thread.join();
      return 1;
    }
    config = std::move(*saved);
    observe::info("resuming from {}", state_path);
  }

  // A site over the admin API's address (the default one, most likely: an
  // admin address written beside such a site is the file's error) left heft
  // serving without its admin API. Checked here, not by the parser: a SIGHUP
  // or `heft reload` of the same file keeps the running API's address.
  if (std::optional<config::Diagnostic> conflict = config::admin_start_conflict(config)) {
    observe::error("{}\n{} is not valid, not starting", conflict->to_string(), resumed ? state_path : path);
    for (auto& b : demo_backends) b->stop();
    if (demo_thread.joinable()) demo_thread.join();
    return 1;
  }
  // Construction opens the access logs, start() binds the ports: either may refuse.
  std::unique_ptr<proxy::Proxy> proxy_owner;
  try {
    proxy_owner = std::make_unique<proxy::Proxy>(config);
    proxy_owner->start();
  } catch (const std::exception& e) {
    observe::error("{}", e.what());
    for (auto& b : demo_backends) b->stop();
    if (demo_thread.joinable()) demo_thread.join();
    return 1;
  }
  proxy::Proxy& proxy = *proxy_owner;
  // The configuration served from the start is saved too (Caddy's autosave
  // does so): else a crash before the first change would --resume whatever
  // an earlier run saved. Not the embedded demo's, which nobody wrote. Before
  // the API listens, so no change it accepts can be overwritten by this.
  if (config.admin.enabled && !resumed && !demo) {
    std::string error;
    if (!admin::write_state_file(state_path, config::to_json(config).dump(2) + "\n", error))
      observe::warn("cannot save the configuration to {}: {} (admin API changes are refused until it can be)",
                    state_path, error);
  }
  // The admin API beside the data plane. A start failure (its port taken) is
  // reported and the proxy keeps serving: losing control beats losing traffic.
  std::unique_ptr<admin::ProxyAdmin> admin_api;
  try {
    admin_api = admin::ProxyAdmin::start(proxy, state_path);
  } catch (const std::exception& e) {
    observe::warn("admin API not started: {}", e.what());
  }
  observe::install_reopen_on_sigusr1();
  std::string banner = proxy::describe(config);
  if (demo) {
    banner += "no Heftfile here, serving the embedded demo: backends a, b, c (weights 5, 3, 2) on loopback "
              "behind :8080, admin 127.0.0.1:2019\n";
    banner += "try  curl -si localhost:8080\n";
  } else {
    banner += fmt::format("serving {} (SIGHUP reloads it)\n", path);
  }
  observe::info("{}", banner);
  for (const std::string& warning : config::config_warnings(config)) observe::warn("{}", warning);
  // The first entry of the audit trail: what heft serves from the start (revision 1).
  observe::ConfigChange start;
  start.source = demo ? std::string("start: the embedded demo") : resumed ? "start: resumed from " + state_path
                                                                          : "start: " + path;
  start.after = config::to_json(config);
  observe::audit_config_change(start);

  std::function<void(const boost::system::error_code&, int)> on_signal;
  bool stopping = false;  // a SIGTERM or SIGINT came
  on_signal = [&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal == SIGHUP && stopping) {
      // Reloading what is being torn down helps no one; a stopping heft still exits 0.
      observe::info("SIGHUP while stopping: ignored");
      reload_signals.async_wait(on_signal);
      return;
    }
    if (signal == SIGHUP) {
      if (demo) {
        observe::warn("SIGHUP: the embedded demo has no file to reload");
      } else {
        std::string errors;
        auto next = load(path, errors);
        if (!next) {
          observe::record_reload(false);
          observe::error("{}reload of {} failed, keeping the old configuration", errors, path);
        } else if (std::string error, source = "SIGHUP reload of " + path;
                   // Through the admin API when it runs (it counts and audits the
                   // change), so its config tree and ETag follow.
                   admin_api ? !admin_api->load(*next, source, error)
                             : !reload_counted(proxy, std::move(*next), source, error)) {
          observe::error("reload of {} failed ({}), keeping the old configuration", path, error);
        } else {
          const config::Config now = proxy.snapshot_config();
          observe::info("reloaded {}\n{}", path, proxy::describe(now));
          for (const std::string& warning : config::config_warnings(now)) observe::warn("{}", warning);
        }
      }
      reload_signals.async_wait(on_signal);
      return;
    }
    const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    if (stopping) {
      // A second one: the operator will not wait for the drain (Caddy does the same).
      observe::info("{} again, stopping now", name);
      proxy.shutdown(std::chrono::milliseconds(0));
      return;
    }
    stopping = true;
    // The grace period in service now: a reload may have changed it.
    const auto grace = proxy.snapshot_config().grace_period;
    observe::info("{} received, finishing in-flight requests (up to {} ms; send it again to stop now)", name,
                  grace.count());
    proxy.shutdown(grace);
    stop_signals.async_wait(on_signal);
  };
  reload_signals.async_wait(on_signal);
  stop_signals.async_wait(on_signal);
  std::thread control_thread([&control] { control.run(); });
  proxy.wait();
  // The control thread ends first: a late signal's handler must not meet the
  // admin API being destroyed.
  reload_signals.cancel();
  stop_signals.cancel();
  control.stop();
  control_thread.join();
  admin_api.reset();
  proxy_owner.reset();  // its access-log and health threads end with it
  for (auto& b : demo_backends) b->stop();
  if (demo_thread.joinable()) demo_thread.join();
  ignore_stop_signals(reload_signals, stop_signals);
  observe::info("stopped");
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = root.add_subcommand("run", "Serve a Heftfile (default ./Heftfile; a demo if there is none)");
  command->add_option("FILE,-c,--config", options->config, "Heftfile, or a .json configuration")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  command->add_flag("--resume", options->resume, "Start from the configuration last saved to --state, if there is one");
  command->add_option("--state", options->state,
                      "Autosave file: the configuration served, saved at start and at every admin API change or "
                      "SIGHUP reload; none with admin off (default $XDG_DATA_HOME/heft/autosave.json)")
      ->check(not_empty("a file's path, or leave it out for $XDG_DATA_HOME/heft/autosave.json"));
  command->callback([options] { set_exit_code(run(*options)); });
}

const bool registered = add_command(10, &setup);

}  // namespace
}  // namespace heft::cli
