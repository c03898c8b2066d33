// `heft validate`: loads a configuration and reports every error (like `nginx -t`).
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "config/heftfile.h"

namespace heft::cli {
namespace {

struct ValidateOptions {
  std::string config = "Heftfile";
  bool resolve = false;
};

int run_validate(const ValidateOptions& options) {
  config::Result<config::Config> loaded = config::load_config_file(options.config);
  if (loaded.ok() && options.resolve) loaded.errors = config::resolve(*loaded);
  // As `heft run` would start it: at its admin address, the default one if it sets none.
  if (loaded.value)
    if (std::optional<config::Diagnostic> conflict = config::admin_start_conflict(*loaded))
      loaded.errors.push_back(*conflict);
  if (!loaded.ok() || !loaded.errors.empty()) {
    for (const config::Diagnostic& d : loaded.errors) fmt::print(stderr, "{}\n", d.to_string());
    fmt::print(stderr, "{}: {} error{}\n", options.config, loaded.errors.size(),
               loaded.errors.size() == 1 ? "" : "s");
    return 1;
  }
  for (const std::string& warning : config::config_warnings(*loaded)) fmt::print(stderr, "warning: {}\n", warning);
  size_t upstreams = 0;
  for (const auto& site : loaded->sites) upstreams += site.proxy.upstreams.size();
  fmt::print("{}: valid ({} site{}, {} upstream{})\n", options.config, loaded->sites.size(),
             loaded->sites.size() == 1 ? "" : "s", upstreams, upstreams == 1 ? "" : "s");
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* command = root.add_subcommand("validate", "Check a configuration; print every error, exit 1 if any");
  command->add_option("FILE,-c,--config", options->config, "Heftfile, or a .json file (default ./Heftfile)");
  command->add_flag("--resolve", options->resolve, "Also resolve backend host names (DNS)");
  command->callback([options] { set_exit_code(run_validate(*options)); });
}

const bool registered = add_command(30, &setup);

}  // namespace
}  // namespace heft::cli
