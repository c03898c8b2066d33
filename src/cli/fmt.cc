// `heft fmt`: prints a Heftfile in canonical form (tabs, one directive per line).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "config/heftfile.h"

namespace heft::cli {
namespace {

struct FmtOptions {
  std::string config = "Heftfile";
  bool overwrite = false;
};

int run_fmt(const FmtOptions& options) {
  // validate, adapt and run read a .json path as JSON; formatting it as a
  // Heftfile would print (or, with -w, write) a mangled file.
  if (options.config.ends_with(".json")) {
    fmt::print(stderr, "{0}: a JSON configuration: heft fmt formats Heftfiles (`heft adapt {0}` prints it normalised)\n",
               options.config);
    return 1;
  }
  if (std::error_code ec; std::filesystem::is_directory(options.config, ec)) {
    fmt::print(stderr, "{}: is a directory, not a configuration file\n", options.config);
    return 1;
  }
  std::ifstream in(options.config, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "{}: cannot read: {}\n", options.config, std::strerror(errno));
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  config::Result<std::string> formatted = config::format_heftfile(text.str(), options.config);
  if (!formatted.ok()) {
    for (const config::Diagnostic& d : formatted.errors) fmt::print(stderr, "{}\n", d.to_string());
    return 1;
  }
  if (!options.overwrite) {
    fmt::print("{}", *formatted);
    return 0;
  }
  std::ofstream out(options.config, std::ios::binary | std::ios::trunc);
  out << *formatted;
  if (!out) {
    fmt::print(stderr, "{}: cannot write: {}\n", options.config, std::strerror(errno));
    return 1;
  }
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<FmtOptions>();
  CLI::App* command = root.add_subcommand("fmt", "Print a Heftfile normalised (tabs, one directive per line)");
  command->add_option("FILE,-c,--config", options->config, "Heftfile to format (default ./Heftfile)")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  command->add_flag("-w,--overwrite", options->overwrite, "Write the result back to the file");
  command->callback([options] { set_exit_code(run_fmt(*options)); });
}

const bool registered = add_command(32, &setup);

}  // namespace
}  // namespace heft::cli
