// `heft reload`: adapts a configuration file to JSON and POSTs it to a running
// heft's /load; on refusal prints the API's reason and exits 1.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "config/heftfile.h"
#include "config/json.h"

namespace heft::cli {
namespace {

struct ReloadOptions {
  std::string config = "Heftfile";
  AdminClientOptions admin;
};

int run_reload(ReloadOptions& options) {
  config::Result<config::Config> loaded = config::load_config_file(options.config);
  if (!loaded.ok()) {
    for (const config::Diagnostic& d : loaded.errors) fmt::print(stderr, "{}\n", d.to_string());
    fmt::print(stderr, "heft: {} is not valid, not reloading\n", options.config);
    return 1;
  }
  settle_admin_options(options.admin, &loaded->admin);  // --address, else the file's own admin address
  AdminReply reply = admin_request(options.admin, "POST", "/load", config::to_json(*loaded).dump());
  if (reply.status != 200) {
    fmt::print(stderr, "heft: reload refused: {}\n", reply.error_message());
    return 1;
  }
  fmt::print(stderr, "heft: reloaded {}\n", options.config);
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<ReloadOptions>();
  CLI::App* command = root.add_subcommand("reload", "Load a configuration file into a running heft (POST /load)");
  command->add_option("FILE,-c,--config", options->config, "Heftfile, or a .json configuration (default ./Heftfile)")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  add_admin_options(command, options->admin, /*config_option=*/false);
  command->callback([options] { set_exit_code(run_reload(*options)); });
}

const bool registered = add_command(12, &setup);

}  // namespace
}  // namespace heft::cli
