// `heft validate`: loads a configuration and reports every error (like `nginx -t`).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
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

// Why `heft run` could not open the access log file `path` (it opens each
// with O_CREAT | O_APPEND and refuses the configuration otherwise), or "".
// Asked without creating it, as validating must leave the disk alone: an
// existing file must open for appending, a missing one needs a directory
// heft may write in.
std::string log_file_problem(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd >= 0) {
    ::close(fd);
    return "";
  }
  if (errno == ENXIO) return "";  // a FIFO without a reader yet: run waits for one
  if (errno != ENOENT) return std::strerror(errno);
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  if (::access(directory.c_str(), W_OK | X_OK) == 0) return "";
  return std::strerror(errno);
}

int run_validate(const ValidateOptions& options) {
  config::Result<config::Config> loaded = config::load_config_file(options.config);
  if (loaded.ok() && options.resolve) loaded.errors = config::resolve(*loaded);
  // As `heft run` would start it: at its admin address, the default one if it sets none.
  if (loaded.value)
    if (std::optional<config::Diagnostic> conflict = config::admin_start_conflict(*loaded))
      loaded.errors.push_back(*conflict);
  // As `heft run` would open them (nginx -t checks its log files too).
  if (loaded.value) {
    std::set<std::string> checked;
    for (const config::SiteConfig& site : loaded->sites) {
      if (!site.log.enabled || site.log.output == "stderr" || !checked.insert(site.log.output).second) continue;
      if (std::string problem = log_file_problem(site.log.output); !problem.empty())
        loaded.errors.push_back({site.file, site.line, 0, "",
                                 fmt::format("cannot open access log {}: {}", site.log.output, problem)});
    }
  }
  if (!loaded.ok() || !loaded.errors.empty()) {
    for (const config::Diagnostic& d : loaded.errors) fmt::print(stderr, "{}\n", d.to_string());
    fmt::print(stderr, "{}: {} error{}\n", options.config, loaded.errors.size(),
               loaded.errors.size() == 1 ? "" : "s");
    return 1;
  }
  for (const std::string& warning : config::config_warnings(*loaded)) fmt::print(stderr, "warning: {}\n", warning);
  size_t upstreams = 0;
  for (const auto& site : loaded->sites)
    for (std::size_t n = 0; n < site.pool_count(); ++n) upstreams += site.pool(n).upstreams.size();
  fmt::print("{}: valid ({} site{}, {} upstream{})\n", options.config, loaded->sites.size(),
             loaded->sites.size() == 1 ? "" : "s", upstreams, upstreams == 1 ? "" : "s");
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* command = root.add_subcommand("validate", "Check a configuration; print every error, exit 1 if any");
  command->add_option("FILE,-c,--config", options->config, "Heftfile, or a .json file (default ./Heftfile)")
      ->check(not_empty("a file's path, or leave it out for ./Heftfile"));
  command->add_flag("--resolve", options->resolve, "Also resolve backend host names (DNS)");
  command->callback([options] { set_exit_code(run_validate(*options)); });
}

const bool registered = add_command(30, &setup);

}  // namespace
}  // namespace heft::cli
