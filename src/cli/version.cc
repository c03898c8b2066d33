// `heft version` (and `heft --version`): what an operator quotes in a bug
// report, as `nginx -v`, `haproxy -v` and `caddy version` print theirs.
#include <boost/version.hpp>
#include <fmt/format.h>

#include "cli/command.h"

namespace heft::cli {

std::string version_text() {
  return fmt::format("heft {} (Boost {}.{}, {} {}.{}.{}, {} build)", HEFT_VERSION, BOOST_VERSION / 100000,
                     BOOST_VERSION / 100 % 1000, "GCC", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__,
                     HEFT_BUILD_TYPE);
}

namespace {

void setup(CLI::App& root) {
  CLI::App* command = root.add_subcommand("version", "Print heft's version and how it was built");
  command->callback([] { fmt::print("{}\n", version_text()); });
}

const bool registered = add_command(90, &setup);

}  // namespace
}  // namespace heft::cli
