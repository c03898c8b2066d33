// `heft manpage` and `heft completion bash`: the manual page heft(1) and a
// bash completion script, written from the command's own definitions (every
// subcommand's description and options, as `heft help COMMAND` shows them),
// so neither can drift from the command. The build runs both (packaging/);
// Caddy has the same two commands.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"

namespace heft::cli {
namespace {

// The subcommands `heft help` lists, in its order.
std::vector<const CLI::App*> listed_commands(const CLI::App& root) {
  return root.get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); });
}

// Its options as `heft help COMMAND` lists them, less -h/--help (every command has it).
std::vector<const CLI::Option*> listed_options(const CLI::App& command) {
  return command.get_options(
      [&command](const CLI::Option* o) { return !o->get_group().empty() && o != command.get_help_ptr(); });
}

// Text as roff prints it: backslashes escaped, a '.' or '\'' that would start
// a request line defused, '-' a minus (option names are typed as written).
std::string roff(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (const char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
    line_start = c == '\n';
  }
  return out;
}

// "\fB\-c\fR, \fB\-\-config\fR \fIFILE\fR" for an option; its positional name for an argument.
std::string option_term(const CLI::Option& o) {
  std::vector<std::string> names;
  for (const std::string& s : o.get_snames()) names.push_back("\\fB" + roff("-" + s) + "\\fR");
  for (const std::string& l : o.get_lnames()) names.push_back("\\fB" + roff("--" + l) + "\\fR");
  std::string term;
  for (const std::string& n : names) term += (term.empty() ? "" : ", ") + n;
  const std::string type = o.get_type_name();
  if (!o.nonpositional()) return "\\fI" + roff(o.get_name(true)) + "\\fR";
  if (o.get_items_expected_max() > 0 && !type.empty()) term += " \\fI" + roff(type) + "\\fR";
  return term;
}

std::string manual_page(const CLI::App& root) {
  std::string page = fmt::format(".TH HEFT 1 \"\" \"heft {}\" \"User Commands\"\n", HEFT_VERSION);
  page += ".SH NAME\nheft \\- a weighted load balancer and HTTP/1.1 reverse proxy\n";
  page += ".SH SYNOPSIS\n.B heft\n.I COMMAND\n[\\fIOPTIONS\\fR]\n.br\n.B heft help\n[\\fICOMMAND\\fR]\n";
  page += ".SH DESCRIPTION\n";
  page += roff(
      "heft splits HTTP traffic among backends by weight, smoothly and exactly, serves sites described by a "
      "Heftfile (or its JSON form), and takes changes live through a JSON admin API. Each command below is one "
      "thing to do with it; heft help COMMAND prints the same as this page says of it.\n");
  page += ".SH COMMANDS\n";
  for (const CLI::App* command : listed_commands(root)) {
    page += fmt::format(".SS \"heft {}\"\n{}\n", roff(command->get_name()), roff(command->get_description()));
    for (const CLI::Option* o : listed_options(*command)) {
      page += fmt::format(".TP\n{}\n{}\n", option_term(*o), roff(o->get_description()));
    }
  }
  page += ".SH FILES\n";
  page += roff(
      ".TP\n/etc/heft/Heftfile\nThe configuration the heft service serves (heft.service).\n"
      ".TP\n/var/lib/heft\nThe service's state files (its configuration as last changed through the admin API, "
      "which heft run --resume starts from) and the tls internal CA: $STATE_DIRECTORY.\n"
      ".TP\n/var/log/heft\nAccess logs a Heftfile's log directives write there; rotated by logrotate, which "
      "sends SIGUSR1 to reopen them.\n");
  page += ".SH SIGNALS\n";
  page += roff(
      "heft run reloads its file on SIGHUP (a file that is not valid leaves the configuration in service as it "
      "was), finishes in-flight requests and exits on SIGTERM or SIGINT (a second one stops at once), and reopens "
      "its access logs on SIGUSR1.\n");
  page += ".SH EXIT STATUS\n0 on success, 1 when the command fails, 2 for bad arguments.\n";
  page += ".SH SEE ALSO\n";
  page += roff("systemctl(1), logrotate(8), and the documents in /usr/share/doc/heft.\n");
  return page;
}

// Options of `command` (and `-h`/`--help`) as bash completes them.
std::string option_words(const CLI::App& command) {
  std::string words;
  for (const CLI::Option* o : command.get_options()) {
    for (const std::string& s : o->get_snames()) words += (words.empty() ? "-" : " -") + s;
    for (const std::string& l : o->get_lnames()) words += (words.empty() ? "--" : " --") + l;
  }
  return words;
}

// Options of `command` that take a value, the file names (`files`) or the
// others: after one, bash offers file names or nothing.
std::string value_options(const CLI::App& command, bool files) {
  std::string words;
  for (const CLI::Option* o : command.get_options()) {
    if (o->get_items_expected_max() == 0 || !o->nonpositional()) continue;
    const std::string name = o->get_name();
    const bool file = name.find("config") != std::string::npos || name.find("state") != std::string::npos ||
                      name.find("file") != std::string::npos || name.find("output") != std::string::npos;
    if (file != files) continue;
    for (const std::string& s : o->get_snames()) words += (words.empty() ? "-" : "|-") + s;
    for (const std::string& l : o->get_lnames()) words += (words.empty() ? "--" : "|--") + l;
  }
  return words;
}

std::string bash_completion(const CLI::App& root) {
  std::string commands = "help";
  std::string cases;
  for (const CLI::App* command : listed_commands(root)) {
    commands += " " + command->get_name();
    cases += fmt::format("    {})\n      options=\"{}\"\n", command->get_name(), option_words(*command));
    if (const std::string files = value_options(*command, true); !files.empty())
      cases += fmt::format("      case $prev in {}) _filedir; return ;; esac\n", files);
    if (const std::string others = value_options(*command, false); !others.empty())
      cases += fmt::format("      case $prev in {}) return ;; esac\n", others);
    cases += "      ;;\n";
  }
  return fmt::format(R"(# bash completion for heft, written by `heft completion bash` (heft {version}).
_heft() {{
  local cur prev words cword options
  _init_completion || return
  if ((cword == 1)); then
    COMPREPLY=($(compgen -W "{commands} --help --version" -- "$cur"))
    return
  fi
  case ${{words[1]}} in
    help)
      ((cword == 2)) && COMPREPLY=($(compgen -W "{commands}" -- "$cur"))
      return
      ;;
{cases}    *) return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
  else
    _filedir
  fi
}} &&
  complete -F _heft heft
)",
                     fmt::arg("version", HEFT_VERSION), fmt::arg("commands", commands), fmt::arg("cases", cases));
}

void setup(CLI::App& root) {
  CLI::App* manpage = root.add_subcommand("manpage", "Print heft's manual page, heft(1), in roff (man -l - reads it)");
  manpage->callback([&root] { fmt::print("{}", manual_page(root)); });

  auto shell = std::make_shared<std::string>();
  CLI::App* completion = root.add_subcommand("completion", "Print a script that completes heft's commands and options in SHELL");
  completion->add_option("SHELL", *shell, "bash (the one shell supported)")->required()->check(CLI::IsMember({"bash"}));
  completion->callback([&root, shell] { fmt::print("{}", bash_completion(root)); });
}

const bool registered = add_command(91, &setup);

}  // namespace
}  // namespace heft::cli
