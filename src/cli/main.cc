// Entry point of the `heft` command: collects the registered subcommands and runs one.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"

namespace heft::cli {
namespace {
std::vector<std::pair<int, SetupFn>>& registry() {
  static std::vector<std::pair<int, SetupFn>> commands;
  return commands;
}
int g_exit_code = 0;
}  // namespace

bool add_command(int order, SetupFn setup) {
  registry().emplace_back(order, setup);
  return true;
}

void set_exit_code(int code) { g_exit_code = code; }

}  // namespace heft::cli

int main(int argc, char** argv) {
  using namespace heft::cli;
  CLI::App app{"heft: a weighted load balancer and HTTP reverse proxy", "heft"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());
  auto commands = registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : commands) setup(app);
  // Bare `heft` and `heft help [COMMAND]` print the usage (CLI11 would say "A
  // subcommand is required", and take "help" for an unknown command).
  if (argc == 1) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  if (std::string(argv[1]) == "help") {
    if (argc == 2) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    const std::string word = argv[2];
    auto named = app.get_subcommands([&word](CLI::App* sub) { return sub->check_name(word); });
    if (named.empty() || argc > 3) {
      std::fprintf(stderr, "heft: help: %s (see heft help)\n",
                   named.empty() ? ("unknown command \"" + word + "\"").c_str() : "one command at a time");
      return kBadArguments;
    }
    std::fputs(named.front()->help("heft").c_str(), stdout);  // "Usage: heft COMMAND", as --help says
    return 0;
  }
  // A first word that names no command is that, not a missing command (CLI11 says "A
  // subcommand is required"), as `caddy nosuch` says: unknown command "nosuch".
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    auto named = app.get_subcommands([&word](CLI::App* sub) { return sub->check_name(word); });
    if (named.empty()) {
      std::fprintf(stderr, "heft: unknown command \"%s\" (see heft help)\n", word.c_str());
      return kBadArguments;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::fprintf(stderr, "heft: %s (see heft --help)\n", what.c_str());
    return kBadArguments;
  } catch (const BadArguments& e) {
    std::fprintf(stderr, "heft: %s\n", e.what());
    return kBadArguments;
  }
  return g_exit_code;
}
