// `heft run`: serves a Heftfile (or, with none present, an embedded demo) until
// SIGTERM/SIGINT; SIGHUP reloads the file. Signals are handled on the main
// thread's own io_context; the proxy's workers run on their own threads.
//
// A start binds everything before it serves anything: the proxy's ports and
// the admin API's, each failure ending the start with its address and reason
// (exit 1). The state file is locked first (one heft per state) and replaced
// only once everything is bound (run_state.h).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

#include "admin/admin_api.h"
#include "admin/proxy_admin.h"
#include "admin/state_file.h"
#include "cli/command.h"
#include "cli/run_state.h"
#include "config/diff.h"
#include "config/heftfile.h"
#include "config/json.h"
#include "config/values.h"
#include "demo/demo_backend.h"
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
  std::string state;    // empty: admin::default_state_path(config)
  std::vector<std::string> listen;  // the demo's listen addresses (default 127.0.0.1:8080)
};

// Where the embedded demo listens.
struct DemoListen {
  uint16_t port = 8080;
  std::vector<std::string> bind{"127.0.0.1"};  // loopback unless --listen says otherwise
};

// --listen ADDR...: "IP:PORT", "[IPv6]:PORT", ":PORT" (every address) or an
// IP alone (port 8080), all on one port. Throws BadArguments.
DemoListen demo_listen(const std::vector<std::string>& listen) {
  DemoListen out;
  if (listen.empty()) return out;
  out.bind.clear();
  bool every_address = false;
  for (size_t i = 0; i < listen.size(); ++i) {
    const std::string& text = listen[i];
    // A bare IPv6 literal has colons but no port: take it whole.
    std::optional<std::string> bare = config::listen_address(text);
    config::HostPortResult split;
    if (bare) split.value = config::HostPort{text, 8080};
    else split = config::split_host_port(text, 8080);
    if (!split.value || split.value->port == 0)
      throw BadArguments(fmt::format("--listen {}: {}", text, split.value ? "port 0 cannot be served" : split.error));
    if (i > 0 && split.value->port != out.port)
      throw BadArguments(fmt::format("--listen {}: every --listen must use one port (the first uses {})", text,
                                     out.port));
    out.port = split.value->port;
    if (split.value->host.empty()) {
      every_address = true;
      continue;
    }
    std::optional<std::string> ip = config::listen_address(split.value->host);
    if (!ip)
      throw BadArguments(fmt::format("--listen {}: the address must be an IP address (e.g. 127.0.0.1:8080, "
                                     "[::1]:8080, 0.0.0.0:8080, or :8080 for every address), got \"{}\"",
                                     text, split.value->host));
    if (auto v4 = config::ipv4_of_mapped(*ip))
      throw BadArguments(fmt::format("--listen {}: an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 "
                                     "only) cannot listen on: write it as {}",
                                     text, config::join_host_port(*v4, out.port)));
    if (std::find(out.bind.begin(), out.bind.end(), *ip) == out.bind.end()) out.bind.push_back(*ip);
  }
  if (every_address && listen.size() > 1)
    throw BadArguments(":PORT (every address) must be the only --listen");
  if (every_address) out.bind.clear();
  return out;
}

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

// Proxy::reload, counted in heft_config_reloads_total, audited, and each
// change it makes logged as a warning (as the admin API does when there is one).
bool reload_logged(proxy::Proxy& proxy, config::Config next, const std::string& source, std::string& error) {
  observe::ConfigChange change;
  change.source = source;
  change.before = config::to_json(proxy.snapshot_config());
  change.after = config::to_json(next);
  const std::vector<config::JsonChange> changes = config::diff_json(change.before, change.after);
  const bool ok = proxy.reload(std::move(next), error);
  observe::record_reload(ok);
  if (ok && !changes.empty()) {
    observe::audit_config_change(change);
    admin::log_undone_changes(source, changes);
  }
  return ok;
}

// The embedded demo: a, b, c with weights 5, 3, 2 behind 127.0.0.1:8080 (or --listen).
config::Config demo_config(const std::vector<std::unique_ptr<demo::DemoBackend>>& backends, const DemoListen& listen) {
  config::Config c;
  c.admin.address = "127.0.0.1:2019";
  config::SiteConfig site;
  site.port = listen.port;
  site.bind = listen.bind;
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
  if (!demo && !options.listen.empty())
    throw BadArguments(fmt::format("--listen is for the embedded demo only: {} says where its sites listen (their "
                                   "addresses, bind, default_bind)",
                                   path));
  const DemoListen listen = demo_listen(options.listen);
  boost::asio::io_context demo_io(1);
  std::vector<std::unique_ptr<demo::DemoBackend>> demo_backends;
  std::thread demo_thread;
  // Every early return stops the demo's backends first.
  struct DemoStop {
    std::vector<std::unique_ptr<demo::DemoBackend>>& backends;
    std::thread& thread;
    ~DemoStop() {
      for (auto& b : backends) b->stop();
      if (thread.joinable()) thread.join();
    }
  } demo_stop{demo_backends, demo_thread};
  config::Config config;
  if (demo) {
    for (const char* name : {"a", "b", "c"}) {
      demo::DemoBackendOptions o;
      o.name = name;
      demo_backends.push_back(std::make_unique<demo::DemoBackend>(demo_io, o));
      demo_backends.back()->start();
    }
    config = demo_config(demo_backends, listen);
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
  observe::set_log_format(config.log_format);  // the file's from here on (the proxy follows reloads)
  // Every change accepted by the admin API is saved to the state file
  // (Caddy's autosave), one per configuration file, locked while in use;
  // --resume starts from it instead of the file. Without an admin API
  // nothing is saved, and only --resume reads it.
  RunState state = choose_state(demo ? "" : path, options.state);
  const bool uses_state = config.admin.enabled || options.resume;
  if (uses_state && !lock_state(state)) return 1;
  bool resumed = false;
  if (options.resume) {
    const Resume outcome = resume_from_state(state, config);
    if (outcome == Resume::refused) return 1;
    resumed = outcome == Resume::resumed;
    observe::set_log_format(config.log_format);
  }

  // A site over the admin API's address (the default one, most likely: an
  // admin address written beside such a site is the file's error) left heft
  // serving without its admin API. Checked here, not by the parser: a SIGHUP
  // or `heft reload` of the same file keeps the running API's address.
  if (std::optional<config::Diagnostic> conflict = config::admin_start_conflict(config)) {
    if (demo && !resumed)
      throw BadArguments(fmt::format("--listen: port {} is the embedded demo's admin API's ({}): give another port",
                                     config.sites[0].port, config.admin.address));
    observe::error("{}\n{} is not valid, not starting", conflict->to_string(), resumed ? state.path : path);
    return 1;
  }
  // Construction opens the access logs; the admin API and then the proxy
  // bind their ports: any may refuse, and then nothing has been served.
  // Nothing is served until the state is saved either (below).
  std::unique_ptr<proxy::Proxy> proxy_owner;
  std::unique_ptr<admin::ProxyAdmin> admin_api;
  try {
    proxy_owner = std::make_unique<proxy::Proxy>(config);
    // What the `heft` command checks it talks to (GET /heft/instance).
    const nlohmann::json instance = {
        {"config", demo ? nlohmann::json(nullptr) : nlohmann::json(admin::config_identity(path))},
        {"state", admin::config_identity(state.path)},
        {"resumed", resumed},
        {"pid", ::getpid()}};
    admin_api = admin::ProxyAdmin::listen(*proxy_owner, uses_state && config.admin.enabled ? state.path : "", instance);
    proxy_owner->bind();
  } catch (const std::exception& e) {
    observe::error("{}\nnot starting", e.what());
    return 1;
  }
  proxy::Proxy& proxy = *proxy_owner;
  // The configuration served from the start is saved too (Caddy's autosave
  // does so): else a crash before the first change would --resume whatever
  // an earlier run saved. What an earlier run saved and this one does not
  // serve (its live changes) is kept aside first, never overwritten. Not the
  // embedded demo's, which nobody wrote. Before anything is served: a crash
  // after a request was served resumes what served it, and no change the
  // API accepts can be overwritten by this.
  if (config.admin.enabled && !resumed) {
    if (!keep_live_changes_aside(state, config)) return 1;
    std::string error;
    if (!demo && !admin::write_state_file(state.path, config::to_json(config).dump(2) + "\n", error))
      observe::warn("cannot save the configuration to {}: {} (admin API changes are refused until it can be)",
                    state.path, error);
  }
  // Everything is bound and saved: serve. (Connections made meanwhile waited in the backlogs.)
  proxy.start();
  if (admin_api) admin_api->serve();
  observe::install_reopen_on_sigusr1();
  std::string banner = proxy::describe(config);
  if (demo) {
    const config::SiteConfig& site = config.sites[0];
    std::string where;
    for (const std::string& address : site.bind) where += (where.empty() ? "" : " ") + config::join_host_port(address, site.port);
    if (where.empty()) where = fmt::format(":{} (every address)", site.port);
    // localhost reaches a loopback or wildcard listener; else the first address.
    const bool local = site.bind.empty() || std::any_of(site.bind.begin(), site.bind.end(), [](const std::string& a) {
      return a == "127.0.0.1" || a == "0.0.0.0" || a == "::1" || a == "::";
    });
    const std::string try_at = local ? fmt::format("localhost:{}", site.port) : config::join_host_port(site.bind[0], site.port);
    banner += fmt::format("no Heftfile here, serving the embedded demo: backends a, b, c (weights 5, 3, 2) on "
                          "loopback, behind {}; admin 127.0.0.1:2019 (--listen ADDR listens elsewhere)\n",
                          where);
    banner += fmt::format("try  curl -si {}\n", try_at);
  } else {
    banner += fmt::format("serving {} (SIGHUP reloads it)\n", path);
  }
  if (uses_state && config.admin.enabled) banner += fmt::format("state file {}\n", state.path);
  observe::info("{}", banner);
  for (const std::string& warning : config::config_warnings(config)) observe::warn("{}", warning);
  // The first entry of the audit trail: what heft serves from the start (revision 1).
  observe::ConfigChange start;
  start.source = demo ? std::string("start: the embedded demo") : resumed ? "start: resumed from " + state.path
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
        } else if (std::string error;
                   // Through the admin API when it runs (it counts and audits the change,
                   // and logs each one as a warning), so its config tree and ETag follow.
                   admin_api ? !admin_api->load(*next, error, "SIGHUP reload of " + path)
                             : !reload_logged(proxy, std::move(*next), "SIGHUP reload of " + path, error)) {
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
                      "State file: the configuration served, saved at start and at every admin API change or SIGHUP "
                      "reload; none with admin off; locked while heft runs (default: one per configuration file in "
                      "$STATE_DIRECTORY, else $XDG_DATA_HOME/heft, else ~/.local/share/heft)")
      ->check(not_empty("a file's path, or leave it out for the configuration file's own"));
  command->add_option("--listen", options->listen,
                      "Where the embedded demo listens: IP:PORT, [IPv6]:PORT or :PORT (every address); may be "
                      "repeated, one port (default 127.0.0.1:8080)")
      ->check(not_empty("an address such as 127.0.0.1:8080 or :8080, or leave it out for 127.0.0.1:8080"));
  command->callback([options] { set_exit_code(run(*options)); });
}

const bool registered = add_command(10, &setup);

}  // namespace
}  // namespace heft::cli
