// Black-box tests of `heft validate` and `heft adapt`: the real binary on real files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class ConfigCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/heft-validate-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string& name, const std::string& text) {
    std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  // Runs `heft ARGS` from the temp dir, capturing stdout and stderr separately.
  CommandResult heft(const std::string& args) {
    std::string command = "cd '" + dir_.string() + "' && '" HEFT_BINARY "' " + args + " >'" +
                          (dir_ / "out").string() + "' 2>'" + (dir_ / "err").string() + "'";
    int status = std::system(command.c_str());
    CommandResult run;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = slurp(dir_ / "out");
    run.err = slurp(dir_ / "err");
    return run;
  }

  std::filesystem::path dir_;
};

constexpr const char* kGood = R"(# From the weighted load balancing guide
app.example.com {
    reverse_proxy {
        to backend-1:3000 weight 5
        to backend-2:3000 weight 3
        to backend-3:3000 weight 2
        lb_policy round_robin
    }
}
)";

constexpr const char* kThreeMistakes = R"(app.example.com {
	reverse_proxy {
		to backend-1:3000 wieght 5
		to backend-2:3000 weight 3000000
		to backend-3:3000 weight 2
		lb_policy hash
	}
}
)";

// `admin 127.0.0.1:P` beside a site on :P bound to 127.0.0.1 was "valid";
// heft then ran without its admin API ("Address already in use").
TEST_F(ConfigCommands, ValidateRefusesAnAdminAddressTheSitesListenOn) {
  write("Heftfile", "{\n\tadmin 127.0.0.1:46823\n\tdefault_bind 127.0.0.1\n}\n:46823 {\n\treverse_proxy 127.0.0.1:1\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err,
            "Heftfile:2:8: admin address \"127.0.0.1:46823\" is taken by the sites on port 46823, which listen on "
            "127.0.0.1: give the admin API another port (site at 5:1)\nHeftfile: 1 error\n");
}

// No admin line: the admin API's default 127.0.0.1:2019 beside a site on
// :2019 was "valid", and heft then served without its admin API.
TEST_F(ConfigCommands, ValidateRefusesASiteOnTheDefaultAdminAddress) {
  write("Heftfile", "# the admin API left at its default\nexample.test:2019 {\n\treverse_proxy 127.0.0.1:1\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err,
            "Heftfile:2:1: the sites on port 2019 listen on every address, the admin API's default 127.0.0.1:2019 "
            "among them: set admin to another address in the global options, or admin off\nHeftfile: 1 error\n");
  write("site.json", R"({"apps":{"http":{"servers":{"srv0":{"listen":[":2019"],"routes":[{"handle":[{)"
                     R"("handler":"subroute","routes":[{"handle":[{"handler":"reverse_proxy",)"
                     R"("upstreams":[{"dial":"127.0.0.1:1"}]}]}]}]}]}}}}})");
  run = heft("validate site.json");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err,
            "site.json: /admin/listen: the sites on port 2019 listen on every address, the admin API's default "
            "127.0.0.1:2019 among them: set /admin/listen to another address, or /admin/disabled to true\n"
            "site.json: 1 error\n");
  write("Heftfile", "{\n\tadmin off\n}\nexample.test:2019 {\n\treverse_proxy 127.0.0.1:1\n}\n");
  EXPECT_EQ(heft("validate").exit_code, 0);
}

TEST_F(ConfigCommands, ValidateReportsEveryMistakeAndExits1) {
  auto path = write("Broken", kThreeMistakes);
  CommandResult run = heft("validate --config Broken");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err,
            "Broken:3:21: unknown option \"wieght\" (did you mean \"weight\"?)\n"
            "Broken:4:28: weight must be an integer 0..1000000, got \"3000000\"\n"
            "Broken:6:13: lb_policy hash needs a key: client_ip, uri, header NAME or cookie NAME\n"
            "Broken: 3 errors\n");
}

TEST_F(ConfigCommands, ValidateAcceptsAGoodFileFromTheDefaultPath) {
  write("Heftfile", kGood);
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "Heftfile: valid (1 site, 3 upstreams)\n");
  // The guide's example asks for round_robin with weights: valid, with a warning.
  EXPECT_NE(run.err.find("lb_policy round_robin ignores the weights 5:3:2"), std::string::npos) << run.err;
}

// The guide writes weights under lb_policy round_robin: valid, but heft says
// the weights are ignored there (equal weights, or the default policy, say nothing).
TEST_F(ConfigCommands, ValidateWarnsWhenRoundRobinIgnoresWeights) {
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 weight 5\n\t\tto b:1 weight 3\n"
                    "\t\tlb_policy round_robin\n\t}\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err,
            "warning: Heftfile:1: site :8080: lb_policy round_robin ignores the weights 5:3 (every backend gets an "
            "equal share); weighted_round_robin, the default, splits by them\n");
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 weight 5\n\t\tto b:1 weight 3\n\t}\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.err, "");
  // A backup listed first takes no turn: the equal weights after it say nothing.
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto z:1 backup\n\t\tto a:1 b:1 weight 5\n"
                    "\t\tlb_policy round_robin\n\t}\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
}

// hash_strategy maglev under a policy that hashes nothing: valid, but heft
// says it does nothing there (as heft pick and heft sim refuse the flag).
TEST_F(ConfigCommands, ValidateWarnsWhenAHashStrategyHasNothingToHash) {
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 b:1\n\t\tlb_policy least_conn\n"
                    "\t\thash_strategy maglev\n\t}\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "warning: Heftfile:1: site :8080: hash_strategy maglev applies only to lb_policy hash; "
                     "lb_policy is least_conn\n");
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 b:1\n\t\tlb_policy hash client_ip\n"
                    "\t\thash_strategy maglev\n\t}\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
}

// A queue in a pool where no backend has max_conns never holds a request:
// valid, with a warning.
TEST_F(ConfigCommands, ValidateWarnsWhenAQueueCanNeverFill) {
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 b:1\n\t\tqueue 20\n\t}\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "warning: Heftfile:1: site :8080: queue 20 has no effect: no backend has max_conns (requests "
                     "wait only while every backend is at its max_conns)\n");
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a:1 max_conns 10\n\t\tto b:1\n\t\tqueue 20\n\t}\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
}

// What heft run would refuse, or could never match, is an error of validate.
TEST_F(ConfigCommands, ValidateRefusesEmptyAndDeadSiteAddresses) {
  write("Heftfile", "\"\" {\n\treverse_proxy a:1\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("Heftfile:1:1: empty site address"), std::string::npos) << run.err;
  for (const char* empty : {"\"\" a.test {", ", {", "a.test.. {", ". {"}) {
    write("Heftfile", std::string(empty) + "\n\treverse_proxy a:1\n}\n");
    run = heft("validate");
    EXPECT_EQ(run.exit_code, 1) << empty;
    EXPECT_TRUE(run.err.find("empty site address") != std::string::npos ||
                run.err.find("no empty label") != std::string::npos)
        << empty << ": " << run.err;
  }
  // example.com. is example.com, as a Host header is matched: a duplicate site, not a dead one.
  write("Heftfile", "example.com.:8080 {\n\treverse_proxy a:1\n}\nexample.com:8080 {\n\treverse_proxy b:1\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("example.com"), std::string::npos) << run.err;
  write("Heftfile", "{\n\tadmin 0.0.0.0:2019\n}\n:8080 {\n\treverse_proxy a:1\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("it needs an admin_token"), std::string::npos) << run.err;
}

TEST_F(ConfigCommands, ValidateMissingFile) {
  CommandResult run = heft("validate --config nowhere");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("nowhere: cannot read"), std::string::npos) << run.err;
  run = heft("validate --config /tmp");  // read as empty, it said "no site blocks"
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("/tmp: is a directory, not a configuration file"), std::string::npos) << run.err;
  run = heft("fmt --config /tmp");
  EXPECT_NE(run.exit_code, 0);
}

// An empty path, as an unset variable gives (`--config "$CONF"`), is an
// error: it was taken for no path at all, so `heft run --config ''` served
// ./Heftfile or, with none, the embedded demo on :8080, and validate, adapt,
// fmt and reload read ./Heftfile.
TEST_F(ConfigCommands, AnEmptyPathIsAnErrorNotTheDefaultFile) {
  write("Heftfile", kGood);
  for (const std::string command : {"run --config ''", "run ''", "validate --config ''", "validate ''",
                                    "adapt --config ''", "fmt ''", "reload ''", "upstreams --config ''"}) {
    // `timeout`: without the check, heft run would serve until stopped.
    CommandResult run = heft("--version >/dev/null && exec timeout 10 '" HEFT_BINARY "' " + command);
    EXPECT_EQ(run.exit_code, 2) << command << ": " << run.err;
    EXPECT_NE(run.err.find("--config: is empty: give "), std::string::npos) << command << ": " << run.err;
  }
  CommandResult run = heft("--version >/dev/null && exec timeout 10 '" HEFT_BINARY "' run --state ''");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--state: is empty: give "), std::string::npos) << run.err;
  run = heft("upstreams --address ''");  // not the default 127.0.0.1:2019
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--address: is empty: give HOST:PORT"), std::string::npos) << run.err;
}

TEST_F(ConfigCommands, AdaptPrintsCaddyShapedJson) {
  write("Heftfile", kGood);
  CommandResult run = heft("adapt");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json document = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(document.is_discarded()) << run.out;
  const nlohmann::json& upstreams =
      document["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"][0]["routes"][0]["handle"][0]["upstreams"];
  ASSERT_EQ(upstreams.size(), 3u);
  EXPECT_EQ(upstreams[0]["dial"], "backend-1:3000");
  EXPECT_EQ(upstreams[0]["weight"], 5);
  EXPECT_EQ(upstreams[2]["weight"], 2);
  EXPECT_EQ(run.out.substr(0, 4), "{\n  ");  // pretty, two-space indent
  // The adapted JSON validates too.
  write("adapted.json", run.out);
  CommandResult again = heft("validate --config adapted.json");
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST_F(ConfigCommands, FmtPrintsCanonicalForm) {
  write("Heftfile", "a.com   {\n  reverse_proxy   b:1\n}\n");
  CommandResult run = heft("fmt");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "a.com {\n\treverse_proxy b:1\n}\n");
}

// A .json configuration is JSON to validate, adapt and run; fmt printed it
// mangled as a Heftfile, and -w wrote that over the file.
TEST_F(ConfigCommands, FmtRefusesJsonAndLeavesItAlone) {
  write("Heftfile", "a.com {\n\treverse_proxy b:1\n}\n");
  const std::string json = heft("adapt").out;
  const auto path = write("site.json", json);
  for (const char* args : {"fmt site.json", "fmt -w site.json"}) {
    CommandResult run = heft(args);
    EXPECT_EQ(run.exit_code, 1) << args;
    EXPECT_EQ(run.out, "") << args;
    EXPECT_NE(run.err.find("site.json: a JSON configuration"), std::string::npos) << run.err;
  }
  EXPECT_EQ(slurp(path), json);
  EXPECT_EQ(heft("validate site.json").exit_code, 0);
}

// A backend name in two sites is resolved once; the second site's error
// repeats the resolver's reason (it said only "cannot resolve backend ...").
TEST_F(ConfigCommands, ValidateResolveGivesTheReasonForEveryRepeat) {
  write("Heftfile", ":8080 {\n\treverse_proxy no-such-host.invalid:3000\n}\n"
                    ":8081 {\n\treverse_proxy no-such-host.invalid:3000\n}\n");
  CommandResult run = heft("validate Heftfile --resolve");
  EXPECT_EQ(run.exit_code, 1);
  const std::string first = "Heftfile:1: cannot resolve backend \"no-such-host.invalid:3000\": ";
  const std::string second = "Heftfile:4: cannot resolve backend \"no-such-host.invalid:3000\": ";
  ASSERT_EQ(run.err.rfind(first, 0), 0u) << run.err;
  const std::string reason = run.err.substr(first.size(), run.err.find('\n') - first.size());
  EXPECT_FALSE(reason.empty()) << run.err;
  EXPECT_EQ(run.err, first + reason + "\n" + second + reason + "\nHeftfile: 2 errors\n");
}

// JSON keeps no lines: warnings and resolve errors name the file (they had an
// empty location: "warning: site ...", ": cannot resolve ...").
TEST_F(ConfigCommands, JsonFileIsNamedInWarningsAndResolveErrors) {
  write("Heftfile", ":8080 {\n\treverse_proxy {\n\t\tto a.invalid:1 weight 5\n\t\tto b.invalid:1 weight 3\n"
                    "\t\tlb_policy round_robin\n\t}\n}\n");
  write("site.json", heft("adapt").out);
  CommandResult run = heft("validate site.json");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err.rfind("warning: site.json: site :8080: lb_policy round_robin ignores the weights 5:3", 0), 0u)
      << run.err;
  run = heft("validate site.json --resolve");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err.rfind("site.json: cannot resolve backend \"a.invalid:1\": ", 0), 0u) << run.err;
}

// `heft fmt` keeps a comment written after a block's `{` on that line (it
// became the block's first line).
TEST_F(ConfigCommands, FmtKeepsACommentAfterAnOpeningBrace) {
  write("Heftfile", ":8080 {   # site\n\treverse_proxy {  # pool\n\t\tto b:1 # backend\n\t} # end\n}\n");
  CommandResult run = heft("fmt");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const std::string formatted = ":8080 { # site\n\treverse_proxy { # pool\n\t\tto b:1 # backend\n\t} # end\n}\n";
  EXPECT_EQ(run.out, formatted);
  write("Heftfile", formatted);
  EXPECT_EQ(heft("fmt").out, formatted);  // idempotent
  EXPECT_EQ(heft("validate").exit_code, 0);
}

// The help texts say what the options do: --server takes units=, and --state
// holds the configuration from the start, not only the API's changes.
TEST_F(ConfigCommands, HelpTextsNameWhatOptionsDo) {
  CommandResult sim = heft("sim --help");
  EXPECT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find("timeout=1s,units=3"), std::string::npos) << sim.out;
  CommandResult run = heft("run --help");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("the configuration served, saved at start"), std::string::npos) << run.out;
  // adapt reads a .json configuration too (docs/heftfile.md; heft fmt points there for one).
  CommandResult adapt = heft("adapt --help");
  EXPECT_EQ(adapt.exit_code, 0) << adapt.err;
  EXPECT_NE(adapt.out.find("Heftfile, or a .json configuration"), std::string::npos) << adapt.out;
}

TEST_F(ConfigCommands, FileMayBeGivenWithoutConfigFlag) {
  // `heft validate FILE` (as `caddy fmt FILE`, `nginx -t -c FILE`): the file named, not ./Heftfile.
  write("Heftfile", "a.com {\n\treverse_proxy b:1\n}\n");
  write("other", "a.com {\n\treverse_proxy b:1\n\tlb_polcy first\n}\n");
  CommandResult validate = heft("validate other");
  EXPECT_EQ(validate.exit_code, 1);
  EXPECT_NE(validate.err.find("other:3:2:"), std::string::npos) << validate.err;
  EXPECT_EQ(heft("fmt other").out, "a.com {\n\treverse_proxy b:1\n\tlb_polcy first\n}\n");
  write("good", "b.com   {\n  reverse_proxy   c:1\n}\n");
  EXPECT_EQ(heft("fmt good").out, "b.com {\n\treverse_proxy c:1\n}\n");
  EXPECT_NE(heft("adapt good").out.find("\"c:1\""), std::string::npos);
  // Both at once is an error, not a silent choice.
  EXPECT_EQ(heft("validate good --config other").exit_code, 2);
}

// `heft version` and `heft --version` say which heft this is, as `nginx -v`,
// `haproxy -v` and `caddy version` do; neither existed (exit 2, "A subcommand
// is required").
TEST_F(ConfigCommands, VersionNamesTheProjectVersionAndTheBuild) {
  CommandResult command = heft("version");
  EXPECT_EQ(command.exit_code, 0) << command.err;
  EXPECT_TRUE(command.out.starts_with("heft " HEFT_VERSION " (Boost 1.")) << command.out;
  EXPECT_NE(command.out.find(" build)\n"), std::string::npos) << command.out;
  CommandResult flag = heft("--version");
  EXPECT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(flag.out, command.out);
}

// A header value in Latin-1 passed `heft validate`, then `heft adapt` aborted
// (nlohmann::json's dump() throws on bytes that are not UTF-8; exit 134).
TEST_F(ConfigCommands, ValueThatIsNotUtf8IsAnErrorNotACrash) {
  write("Heftfile", ":8080 {\n\treverse_proxy 127.0.0.1:9 {\n\t\theader_up X-A caf\xe9\n\t}\n}\n");
  for (const char* command : {"validate", "adapt"}) {
    CommandResult run = heft(command);
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.err;
    EXPECT_NE(run.err.find("Heftfile:3:17: invalid value for header \"X-A\": not UTF-8 (byte 0xE9 at offset 3;"),
              std::string::npos)
        << command << ": " << run.err;
  }
}

// `heft run` opens every access log file and exits 1 when one cannot be
// opened; `heft validate` said such a file was valid (nginx -t checks logs).
TEST_F(ConfigCommands, ValidateRefusesALogFileRunCouldNotOpen) {
  const std::string missing = (dir_ / "no-such-dir" / "access.log").string();
  write("Heftfile", ":8080 {\n\tlog {\n\t\toutput file " + missing + "\n\t}\n\treverse_proxy 127.0.0.1:9\n}\n");
  CommandResult run = heft("validate");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("Heftfile:1: cannot open access log " + missing + ": No such file or directory"),
            std::string::npos)
      << run.err;
  // A file that may be created is fine, and validating does not create it.
  const std::string fresh = (dir_ / "access.log").string();
  write("Heftfile", ":8080 {\n\tlog {\n\t\toutput file " + fresh + "\n\t}\n\treverse_proxy 127.0.0.1:9\n}\n");
  run = heft("validate");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

// Bare `heft` and `heft help [COMMAND]` print the usage; `heft help` of a
// command that does not exist says so.
TEST_F(ConfigCommands, BareHeftAndHelpPrintTheUsage) {
  for (const std::string args : {"", "help"}) {
    CommandResult usage = heft(args);
    EXPECT_EQ(usage.exit_code, 0) << args;
    EXPECT_NE(usage.out.find("Usage: heft [OPTIONS] SUBCOMMAND"), std::string::npos) << usage.out;
    EXPECT_NE(usage.out.find("reload"), std::string::npos) << usage.out;
    EXPECT_EQ(usage.err, "");
  }
  CommandResult reload = heft("help reload");
  EXPECT_EQ(reload.exit_code, 0);
  EXPECT_NE(reload.out.find("Usage: heft reload [OPTIONS] [FILE]"), std::string::npos) << reload.out;
  EXPECT_NE(reload.out.find("--dry-run"), std::string::npos) << reload.out;
  EXPECT_EQ(heft("help run").out.find("--listen") != std::string::npos, true);
  CommandResult unknown = heft("help nosuch");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "heft: help: unknown command \"nosuch\" (see heft help)\n");
}

// A misspelt command is named as unknown (as `caddy nosuch` does), not reported as a
// missing one ("A subcommand is required", which is what a bare `heft` gets).
TEST_F(ConfigCommands, UnknownCommandIsNamed) {
  CommandResult command = heft("valdate");
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_NE(command.err.find("unknown command \"valdate\""), std::string::npos) << command.err;
  EXPECT_EQ(heft("validate --help").exit_code, 0);
}

}  // namespace
