// `heft upstreams`: the running heft's backends as a table (GET /reverse_proxy/upstreams).
#include <memory>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"

namespace heft::cli {
namespace {

struct UpstreamsOptions {
  AdminClientOptions admin;
  bool json = false;
};

int run_upstreams(const UpstreamsOptions& options) {
  AdminReply reply = admin_request(options.admin, "GET", "/reverse_proxy/upstreams");
  if (reply.status != 200) {
    fmt::print(stderr, "heft: {}\n", reply.error_message());
    return 1;
  }
  auto list = nlohmann::json::parse(reply.body, nullptr, false);
  if (!list.is_array()) {
    // admin_request() already refused answers that are not heft's.
    fmt::print(stderr, "heft: unexpected answer from the admin API: {}\n", reply.body_excerpt());
    return 1;
  }
  if (options.json) {
    fmt::print("{}\n", list.dump(2));
    return 0;
  }
  // FACTOR: slow start x adaptive weight factor (docs/health.md); EFFECTIVE = weight x factor.
  // SITE: the site's index (heft weight and heft rollout take it), telling apart sites of one server.
  // ROLE: primary, or backup (traffic only when no primary can take it), as HAProxy's stats mark them.
  // ACTIVE: requests in flight, "/ max_conns" after it when the backend has a limit.
  fmt::print("{:<6} {:>4} {:<28} {:<7} {:>7} {:>9} {:>6} {:>11} {:>9} {:>14} {:>6} {:>7}\n", "SERVER", "SITE",
             "ADDRESS", "ROLE", "WEIGHT", "EFFECTIVE", "FACTOR", "ACTIVE", "STATE", "REQUESTS", "FAILS", "SHARE");
  for (const auto& u : list) {
    const char* role = !u.contains("backup") ? "-" : u.value("backup", false) ? "backup" : "primary";
    const unsigned limit = u.value("max_conns", 0u);
    const std::string active = limit ? fmt::format("{}/{}", u.value("active", 0u), limit)
                                     : fmt::format("{}", u.value("active", 0u));
    fmt::print("{:<6} {:>4} {:<28} {:<7} {:>7} {:>9.2f} {:>6.2f} {:>11} {:>9} {:>14} {:>6} {:>6.1f}%\n",
               u.value("server", ""), u.value("site", 0u), u.value("address", ""),
               role, u.value("weight", 0u), u.value("effective_weight", 0.0),
               u.value("weight_factor", 1.0), active, u.value("state", "?"),
               u.value("requests_total", uint64_t(0)), u.value("fails", 0u), 100.0 * u.value("share", 0.0));
  }
  // Each pool with a queue (nginx Plus's `queue`), once, under the table.
  std::set<unsigned> shown;
  for (const auto& u : list) {
    const unsigned queue = u.value("queue", 0u);
    if (queue == 0 || !shown.insert(u.value("site", 0u)).second) continue;
    fmt::print("queue of site {} ({}): {} waiting, at most {}\n", u.value("site", 0u), u.value("site_address", ""),
               u.value("queued", 0u), queue);
  }
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<UpstreamsOptions>();
  CLI::App* command = root.add_subcommand("upstreams", "Show a running heft's backends: weights, load, health, share");
  add_admin_options(command, options->admin);
  command->add_flag("--json", options->json, "Print the API's JSON instead of a table");
  command->callback([options] {
    settle_admin_options(options->admin);
    if (!check_instance(options->admin, options->admin.config, "not reading it")) return set_exit_code(1);
    set_exit_code(run_upstreams(*options));
  });
}

const bool registered = add_command(14, &setup);

}  // namespace
}  // namespace heft::cli
