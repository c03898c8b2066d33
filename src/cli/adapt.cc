// `heft adapt`: prints a Heftfile (or a .json configuration, normalised) as heft's
// (Caddy-shaped) JSON configuration.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "config/heftfile.h"
#include "config/json.h"

namespace heft::cli {
namespace {

struct AdaptOptions {
  std::string config = "Heftfile";
};

int run_adapt(const AdaptOptions& options) {
  config::Result<config::Config> loaded = config::load_config_file(options.config);
  if (!loaded.ok()) {
    for (const config::Diagnostic& d : loaded.errors) fmt::print(stderr, "{}\n", d.to_string());
    return 1;
  }
  fmt::print("{}\n", config::to_json(*loaded).dump(2));
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<AdaptOptions>();
  CLI::App* command = root.add_subcommand("adapt", "Print the configuration as JSON (Caddy's shape)");
  command->add_option("FILE,-c,--config", options->config,
                      "Heftfile, or a .json configuration to print normalised (default ./Heftfile)")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  command->callback([options] { set_exit_code(run_adapt(*options)); });
}

const bool registered = add_command(31, &setup);

}  // namespace
}  // namespace heft::cli
