// `heft reload`: adapts a configuration file to JSON and POSTs it to a running
// heft's /load; on refusal prints the API's reason and exits 1. Prints each
// setting the reload changed in the running configuration (live changes made
// through the admin API are undone by it); `--dry-run` lists them and changes
// nothing (POST /load?dry_run=1). Refuses a heft that serves another file.
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "config/heftfile.h"
#include "config/json.h"

namespace heft::cli {
namespace {

struct ReloadOptions {
  std::string config = "Heftfile";
  bool dry_run = false;
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
  if (!check_instance(options.admin, options.config, options.dry_run ? "not asking it" : "not reloading",
                      options.dry_run))
    return 1;
  AdminReply reply = admin_request(options.admin, "POST", options.dry_run ? "/load?dry_run=1" : "/load",
                                   config::to_json(*loaded).dump());
  if (reply.status != 200) {
    fmt::print(stderr, "heft: reload {}: {}\n", options.dry_run ? "would be refused" : "refused", reply.error_message());
    return 1;
  }
  // [{"pointer", "before", "after", "text"}]: the running value → the file's.
  const auto answer = nlohmann::json::parse(reply.body, nullptr, false);
  const nlohmann::json changes =
      answer.is_object() && answer.contains("changes") && answer["changes"].is_array() ? answer["changes"]
                                                                                       : nlohmann::json::array();
  const size_t n = changes.size();
  const std::string settings = fmt::format("{} setting{}", n, n == 1 ? "" : "s");
  if (options.dry_run && n > 0)
    fmt::print(stderr, "heft: reloading {} would change {} of the running configuration (running → file), undoing "
                       "any live change among them; nothing changed:\n",
               options.config, settings);
  else if (options.dry_run)
    fmt::print(stderr, "heft: reloading {} would change nothing\n", options.config);
  else if (n > 0)
    fmt::print(stderr, "heft: reloaded {}, changing {} of the running configuration (running → file):\n",
               options.config, settings);
  else
    fmt::print(stderr, "heft: reloaded {}\n", options.config);
  std::string lines;
  for (const nlohmann::json& change : changes) lines += change.value("text", change.value("pointer", "?")) + "\n";
  std::fputs(lines.c_str(), stdout);
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<ReloadOptions>();
  CLI::App* command = root.add_subcommand(
      "reload", "Load a configuration file into a running heft (POST /load); prints the settings it changes");
  command->add_option("FILE,-c,--config", options->config, "Heftfile, or a .json configuration (default ./Heftfile)")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  command->add_flag("--dry-run", options->dry_run,
                    "List the settings the reload would change (live changes it would undo among them); change nothing");
  add_admin_options(command, options->admin, /*config_option=*/false);
  command->callback([options] { set_exit_code(run_reload(*options)); });
}

const bool registered = add_command(12, &setup);

}  // namespace
}  // namespace heft::cli
