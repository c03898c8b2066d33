// `heft pick` as a user runs it: a real process, its output and exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace {

struct PickRun {
  int exit_code;
  std::string out;
};

// Runs heft with `args` (shell words), capturing stdout and stderr.
PickRun heft(const std::string& args) {
  // coreutils' timeout: a command still running after 120 s ends with 124.
  std::string command = std::string("timeout -k 5 120 ") + HEFT_BINARY + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 124) ADD_FAILURE() << "still running after 120 s: heft " << args;
  return {code, out};
}

TEST(HeftPick, SeedTraceFiveOneOne) {
  PickRun r = heft("pick --policy weighted_round_robin --weights 5,1,1 --count 7 --trace");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("sequence: A A B A C A A"), std::string::npos) << r.out;
  // The trace ends with every current weight back at 0.
  EXPECT_NE(r.out.find("    7  A           2->0   -1->0   -1->0"), std::string::npos) << r.out;
}

TEST(HeftPick, JsonSequenceAndNames) {
  PickRun r = heft("pick --policy weighted_round_robin --weights 5,1,1 --count 7 --names web1,web2,web3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sequence"], nlohmann::json({"web1", "web1", "web2", "web1", "web3", "web1", "web1"}));
}

// Names and keys are bytes: one that is not UTF-8 ("caf\xe9" in Latin-1, or a
// binary key from --keys-file) aborted `heft pick --json` (exit 134: the JSON
// writer threw). They are now written with U+FFFD in place of the bad byte.
TEST(HeftPick, JsonWithBytesThatAreNotUtf8) {
  PickRun r = heft("pick --weights 1,1 --names 'caf\xe9,b' --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["names"][0], "caf\xEF\xBF\xBD");
  PickRun keyed = heft("pick --policy hash --weights 1,1 --keys '\xff\xfe,bob' --json --trace");
  ASSERT_EQ(keyed.exit_code, 0) << keyed.out;
  EXPECT_EQ(nlohmann::json::parse(keyed.out)["trace"][0]["key"], "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(HeftPick, LeastConnSeedExample) {
  PickRun r = heft("pick --policy least_conn --weights 2,5 --active 10,15 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["choice"], "B");
  EXPECT_DOUBLE_EQ(j["load_ratio"][0].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["load_ratio"][1].get<double>(), 3.0);
  PickRun text = heft("pick --policy least_conn --weights 2,5 --active 10,15");
  EXPECT_NE(text.out.find("choice: B"), std::string::npos) << text.out;
}

TEST(HeftPick, BadArgumentsExitTwoWithOneLine) {
  for (const char* args : {"pick --weights 5,x", "pick --policy nope --weights 1", "pick", "pick --weights 1,2 --names a",
                           "pick --weights 1,2 --active 3", "pick --weights 2000000"}) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
}

// Each is rejected with one line that names what is wrong.
TEST(HeftPick, NamesKeysAndCountAreChecked) {
  const std::pair<const char*, const char*> cases[] = {
      {"pick --weights 5,1 --names x,x", "\"x\" is used twice"},
      {"pick --weights 5,1,1 --names a,,c", "--names: name 2 is empty"},
      {"pick --weights 5,1 --names ,", "--names: name 1 is empty"},
      {"pick --weights 5,1 --names ''", "--names: is empty: give one name per weight"},  // not the defaults
      {"pick --weights 5,1,1 --keys hello", "policy weighted_round_robin does not hash keys"},
      {"pick --policy least_conn --weights 5,1,1 --keys hello", "policy least_conn"},
      {"pick --weights 5,1,1 --count 0", "--count must be 1..1000000, got 0"},
      {"pick --weights 5,1,1 --count -1", "--count must be 1..1000000, got -1"},
      {"pick --weights 5,1,1 --count 1000001", "--count must be 1..1000000"},
      {"pick --policy random --weights 5,1,1 --seed -1", "--seed"},
  };
  for (const auto& [args, message] : cases) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
  // Still fine: keys with hash (ip_hash is its alias), and counts at the bounds.
  EXPECT_EQ(heft("pick --policy ip_hash --weights 5,1,1 --keys hello").exit_code, 0);
  PickRun one = heft("pick --weights 5,1,1 --count 1");
  EXPECT_EQ(one.exit_code, 0);
  EXPECT_NE(one.out.find("sequence: A\n"), std::string::npos) << one.out;
}

// Spaces and tabs around each comma-separated item are trimmed, as nginx and
// HAProxy read their lists: "5, 3, 2" was an invalid weight and "a, b" named
// " b". An item that is empty once trimmed is still an error.
TEST(HeftPick, ListItemsAreTrimmed) {
  PickRun spaced = heft("pick --weights ' 5, 3 ,\t2 ' --names 'a, b ,\tc' --count 10 --json");
  ASSERT_EQ(spaced.exit_code, 0) << spaced.out;
  EXPECT_EQ(spaced.out, heft("pick --weights 5,3,2 --names a,b,c --count 10 --json").out);
  PickRun active = heft("pick --policy least_conn --weights '2, 5' --active '10, 15' --json");
  ASSERT_EQ(active.exit_code, 0) << active.out;
  EXPECT_EQ(nlohmann::json::parse(active.out)["active"], nlohmann::json::array({10, 15}));
  PickRun keys = heft("pick --policy hash --weights 5,3,2 --keys 'alice, bob ,\tcarol' --json --trace");
  ASSERT_EQ(keys.exit_code, 0) << keys.out;
  EXPECT_EQ(keys.out, heft("pick --policy hash --weights 5,3,2 --keys alice,bob,carol --json --trace").out);
  const std::pair<const char*, const char*> cases[] = {
      {"pick --weights '5, ,2'", "--weights: \"\" is not an integer"},
      {"pick --weights '5,1,1' --names 'a,\t,c'", "--names: name 2 is empty"},
      {"pick --weights '5,1' --names 'a, a'", "\"a\" is used twice"},
  };
  for (const auto& [args, message] : cases) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
}

// A flag the chosen policy never reads is an error naming the policy: it was
// accepted and did nothing (--hash-strategy maglev with round_robin).
TEST(HeftPick, FlagsThePolicyDoesNotReadAreRejected) {
  const std::pair<const char*, const char*> cases[] = {
      {"pick --weights 5,1,1 --hash-strategy maglev",
       "heft: --hash-strategy applies only to the hash policy (hash, or its alias ip_hash); --policy is "
       "weighted_round_robin (the default)\n"},
      {"pick --policy round_robin --weights 5,1,1 --hash-strategy ring", "; --policy is round_robin\n"},
      {"pick --policy random --weights 5,1,1 --hash-strategy ring", "; --policy is random\n"},
      {"pick --policy least_conn --weights 5,1,1 --seed 7",
       "heft: --seed applies only to the policies that draw random bits (random, p2c, and hash for picks without "
       "a key); --policy is least_conn\n"},
      {"pick --weights 5,1,1 --seed 7", "; --policy is weighted_round_robin (the default)\n"},
      {"pick --policy round_robin --weights 5,1,1 --seed 7", "; --policy is round_robin\n"},
      {"pick --policy first --weights 5,1,1 --seed 7", "; --policy is first\n"},
  };
  for (const auto& [args, message] : cases) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
  for (const char* args : {"pick --policy hash --weights 5,1,1 --hash-strategy maglev --seed 7",
                           "pick --policy ip_hash --weights 5,1,1 --hash-strategy ring",
                           "pick --policy random --weights 5,1,1 --seed 7", "pick --policy p2c --weights 5,1,1 --seed 7"}) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.out;
  }
}

// Every heft instance maps a key to the same backend: two processes agree.
TEST(HeftPick, HashIsTheSameInSeparateProcesses) {
  std::string keys;
  for (int i = 0; i < 200; ++i) keys.append(i ? "," : "").append("user-").append(std::to_string(i));
  for (const char* strategy : {"ring", "maglev"}) {
    std::string args = std::string("pick --policy hash --hash-strategy ") + strategy +
                       " --weights 5,3,2 --names 10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 --json --keys " + keys;
    PickRun first = heft(args);
    PickRun second = heft(args);
    ASSERT_EQ(first.exit_code, 0) << first.out;
    EXPECT_EQ(first.out, second.out);
    auto seq = nlohmann::json::parse(first.out)["sequence"];
    std::map<std::string, int> counts;
    for (auto& s : seq) counts[s.get<std::string>()]++;
    EXPECT_EQ(counts.size(), 3u) << strategy;  // all three own keys
  }
}

// Without --keys, hash places picks as the proxy places requests without their
// key: at random in proportion to the weights (it sent all 100,000 to one).
TEST(HeftPick, HashWithoutKeysSplitsByWeight) {
  for (const char* strategy : {"ring", "maglev"}) {
    PickRun run = heft(std::string("pick --policy hash --hash-strategy ") + strategy +
                       " --weights 5,3,2 --names a,b,c --count 10000 --json");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const auto out = nlohmann::json::parse(run.out);
    std::map<std::string, int> counts;
    for (const auto& s : out["sequence"]) counts[s.get<std::string>()]++;
    EXPECT_NEAR(counts["a"], 5000, 300) << strategy;
    EXPECT_NEAR(counts["b"], 3000, 300) << strategy;
    EXPECT_NEAR(counts["c"], 2000, 300) << strategy;
  }
  // Only hash draws a key: random's sequence for a seed is what it was (a key
  // drawn for every policy had shifted it).
  PickRun random = heft("pick --policy random --weights 5,3,2,1 --count 30 --json");
  ASSERT_EQ(random.exit_code, 0) << random.out;
  const auto random_out = nlohmann::json::parse(random.out);
  std::string sequence;
  for (const auto& s : random_out["sequence"]) sequence += s.get<std::string>();
  EXPECT_EQ(sequence, "AAAAABAACCACDAAAABBBBCABBAAACC");
  // All weights 0: one pick, of nothing, rather than an empty sequence.
  PickRun none = heft("pick --weights 0,0 --json");
  ASSERT_EQ(none.exit_code, 0) << none.out;
  EXPECT_EQ(nlohmann::json::parse(none.out)["sequence"], nlohmann::json::array({"-"}));
}

// The header line names the hash strategy, which decides where each key goes.
TEST(HeftPick, HashHeaderNamesItsStrategy) {
  for (const char* strategy : {"ring", "maglev"}) {
    PickRun run = heft(std::string("pick --policy hash --hash-strategy ") + strategy +
                       " --weights 5,3,2 --names a,b,c --keys k1,k2");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    EXPECT_EQ(run.out.rfind(std::string("policy hash (") + strategy + "): a=5 b=3 c=2\n", 0), 0u) << run.out;
  }
  PickRun wrr = heft("pick --weights 5,1,1");
  EXPECT_EQ(wrr.out.rfind("policy weighted_round_robin: A=5 B=1 C=1\n", 0), 0u) << wrr.out;
}

// Counts of each name in a --json run's sequence.
std::map<std::string, int> sequence_counts(const std::string& json_text) {
  const auto out = nlohmann::json::parse(json_text);  // kept: the loop must not range over a temporary's member
  std::map<std::string, int> counts;
  for (const auto& s : out["sequence"]) counts[s.get<std::string>()]++;
  return counts;
}

// An empty key is placed as the proxy places a request with an empty key: at
// random in proportion to the weights (it was hashed: all on one backend).
TEST(HeftPick, EmptyKeysSplitByWeight) {
  const std::string commas(9999, ',');  // 10,000 empty keys
  PickRun run = heft("pick --policy hash --weights 5,3,2 --names a,b,c --json --keys " + commas);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  auto counts = sequence_counts(run.out);
  EXPECT_NEAR(counts["a"], 5000, 300);
  EXPECT_NEAR(counts["b"], 3000, 300);
  EXPECT_NEAR(counts["c"], 2000, 300);
  // A lone empty key is one pick, not "no keys".
  PickRun one = heft("pick --policy hash --weights 5,3,2 --keys '' --json");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  EXPECT_EQ(nlohmann::json::parse(one.out)["sequence"].size(), 1u);
}

// --active is for the policies that read active counts (least_conn, p2c); the
// others ignored it and printed an active / weight table anyway.
TEST(HeftPick, ActiveIsOnlyForPoliciesThatReadIt) {
  for (const char* policy : {"weighted_round_robin", "round_robin", "random", "first", "hash"}) {
    PickRun r = heft(std::string("pick --policy ") + policy + " --weights 2,5 --active 10,15");
    EXPECT_EQ(r.exit_code, 2) << policy << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << policy << ": " << r.out;
    EXPECT_NE(r.out.find(std::string("--active: policy ") + policy + " does not read active counts"),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(heft("pick --policy p2c --weights 2,5 --active 10,15").exit_code, 0);
  EXPECT_EQ(heft("pick --policy least_conn --weights 2,5 --active 10,15").exit_code, 0);
}

// --max-conns: each pick is the proxy's acquire() and stays in flight, so a
// full backend's turn goes to the next and, all full, the pick is "(full)";
// --active then sets the starting counts for any policy.
TEST(HeftPick, MaxConnsShowsFullBackendsPassedOver) {
  PickRun r = heft("pick --weights 5,3,2 --max-conns 2,1,1 --count 6");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("sequence: A B C A (full) (full)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in flight: A=2/2 B=1/1 C=1/1\n"), std::string::npos) << r.out;
  PickRun j = heft("pick --policy first --weights 1,1 --max-conns 1,0 --active 0,5 --count 3 --json");
  ASSERT_EQ(j.exit_code, 0) << j.out;
  auto out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["sequence"], nlohmann::json({"A", "B", "B"}));
  EXPECT_EQ(out["in_flight"], nlohmann::json({1, 7}));
  EXPECT_EQ(out["max_conns"], nlohmann::json({1, 0}));
  PickRun wrong = heft("pick --weights 5,3,2 --max-conns 2,1");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.out.find("--max-conns has 2 limits for 3 weights"), std::string::npos) << wrong.out;
  EXPECT_EQ(heft("pick --weights 5,3 --max-conns 2,x").exit_code, 2);
}

// With --max-conns the picks stay in flight, so a backend without a limit
// counts every pick it takes on top of --active: 4294967295 and one more
// wrapped its 32-bit count to "in flight: A=0" (and least_conn then saw it
// idle). A start that the picks could carry past the counter is an error;
// one they cannot (a limited backend, or room for --count) still runs.
TEST(HeftPick, ActiveWithMaxConnsNeverWrapsTheCount) {
  PickRun r = heft("pick --weights 5,3,2 --max-conns 0,1,1 --active 4294967295,0,0 --count 3");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(r.out, "heft: --active: A has 4294967295 in flight and no max_conns; 3 picks could count past "
                   "4294967295\n");
  PickRun fits = heft("pick --weights 5,3,2 --max-conns 0,1,1 --active 4294967292,0,0 --count 3 --json");
  ASSERT_EQ(fits.exit_code, 0) << fits.out;
  EXPECT_EQ(nlohmann::json::parse(fits.out)["in_flight"], nlohmann::json({4294967293u, 1, 1}));
  PickRun limited = heft("pick --weights 5,3,2 --max-conns 1,1,1 --active 4294967295,0,0 --count 3 --json");
  ASSERT_EQ(limited.exit_code, 0) << limited.out;
  EXPECT_EQ(nlohmann::json::parse(limited.out)["in_flight"], nlohmann::json({4294967295u, 1, 1}));
}

// --keys-file: one key per line (an empty line is an empty key), for more keys
// than one argument can carry; the same picks as --keys.
TEST(HeftPick, KeysFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("heft_pick_keys_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string keys, lines;
  for (int i = 0; i < 200; ++i) {
    keys.append(i ? "," : "").append("user-").append(std::to_string(i));
    lines.append("user-").append(std::to_string(i)).append("\n");
  }
  const std::string file = (dir / "keys.txt").string();
  std::ofstream(file) << lines;
  const std::string base = "pick --policy hash --weights 5,3,2 --json ";
  PickRun from_file = heft(base + "--keys-file " + file);
  PickRun from_flag = heft(base + "--keys " + keys);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.out;
  EXPECT_EQ(from_file.out, from_flag.out);
  // CRLF lines are the same keys; an empty line is an empty key (a pick of its own).
  const std::string crlf = (dir / "crlf.txt").string();
  std::ofstream(crlf) << "user-0\r\n\r\nuser-1\r\n";
  PickRun mixed = heft(base + "--keys-file " + crlf);
  ASSERT_EQ(mixed.exit_code, 0) << mixed.out;
  const auto seq = nlohmann::json::parse(mixed.out)["sequence"];
  const auto flag_seq = nlohmann::json::parse(from_flag.out)["sequence"];
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[0], flag_seq[0]);
  EXPECT_EQ(seq[2], flag_seq[1]);
  // More than a million keys: the error names the file and the line.
  const std::string many = (dir / "many.txt").string();
  std::ofstream(many) << std::string(1'000'001, '\n');
  const std::pair<std::string, std::string> cases[] = {
      {base + "--keys a --keys-file " + file, "--keys and --keys-file are exclusive"},
      {base + "--keys-file " + (dir / "none.txt").string(), "--keys-file: cannot read"},
      {base + "--keys-file " + many, many + ":1000001: "},
      {"pick --weights 5,1 --keys-file " + file, "does not hash keys"},
  };
  for (const auto& [args, message] : cases) {
    PickRun r = heft(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << ": " << r.out;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
