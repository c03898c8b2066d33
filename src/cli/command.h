// The `heft` command's subcommand registry.
//
// Each subcommand lives in its own file and registers a setup function with a
// static `const bool registered = heft::cli::add_command(...)`. The setup adds a
// CLI11 subcommand and a callback that stores the exit code with set_exit_code().
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace heft::cli {

using SetupFn = void (*)(CLI::App& root);

// Registers a subcommand; `order` sorts the help listing. Returns true.
bool add_command(int order, SetupFn setup);

// The process exit code a subcommand's callback chose (default 0).
void set_exit_code(int code);

// What heft pick and heft sim say of a hash strategy given for a policy that hashes nothing.
inline constexpr std::string_view kHashStrategyAppliesTo = "applies only to the hash policy (hash, or its alias ip_hash)";

// For an option whose absence has a meaning of its own (./Heftfile, the
// embedded demo, the default admin address): an empty value, as an unset
// shell variable gives (`--config "$CONF"`), is refused rather than taken for
// the option left out. `what` says what to give instead.
inline CLI::Validator not_empty(std::string what) {
  return CLI::Validator(
      [what = std::move(what)](std::string& value) { return value.empty() ? "is empty: give " + what : std::string(); },
      "", "NOT_EMPTY");
}

// "heft VERSION (Boost X.Y, GCC X.Y.Z, TYPE build)": `heft version` and `heft --version`.
std::string version_text();

// Exit code for bad arguments, for every subcommand.
inline constexpr int kBadArguments = 2;

// Thrown by a subcommand callback on a bad argument found after parsing:
// main prints "heft: <what>" on one line and exits with kBadArguments.
struct BadArguments : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace heft::cli
