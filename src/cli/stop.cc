// `heft stop`: asks a running heft to finish in-flight requests and exit (POST /stop).
#include <memory>

#include <fmt/format.h>

#include "cli/admin_client.h"
#include "cli/command.h"

namespace heft::cli {
namespace {

int run_stop(const AdminClientOptions& options) {
  AdminReply reply = admin_request(options, "POST", "/stop");
  if (reply.status != 200) {
    fmt::print(stderr, "heft: stop failed: {}\n", reply.error_message());
    return 1;
  }
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<AdminClientOptions>();
  CLI::App* command = root.add_subcommand("stop", "Stop a running heft gracefully (POST /stop)");
  add_admin_options(command, *options);
  command->callback([options] {
    settle_admin_options(*options);
    if (!check_instance(*options, options->config, "not stopping it")) return set_exit_code(1);
    set_exit_code(run_stop(*options));
  });
}

const bool registered = add_command(13, &setup);

}  // namespace
}  // namespace heft::cli
