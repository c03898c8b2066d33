// `heft pick`: explains a policy by running the balancing core on a model pool.
//
//   heft pick --policy weighted_round_robin --weights 5,1,1 --count 7 --trace
//   heft pick --policy least_conn --weights 2,5 --active 10,15
//   heft pick --policy hash --weights 5,3,2 --keys alice,bob --json
//   heft pick --policy hash --weights 5,3,2 --keys-file keys.txt
#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <random>
#include <set>

#include "cli/command.h"
#include "sim/scenario.h"
#include "heft/balance/balancer.h"
#include "heft/balance/hash.h"

namespace heft::cli {
namespace {

struct PickOptions {
  std::string policy = "weighted_round_robin";
  CLI::Option* policy_option = nullptr;  // given or not: errors say when the policy is the default
  std::string hash_strategy = "ring";
  CLI::Option* hash_strategy_option = nullptr;  // given or not: only hash reads it
  std::string weights;
  std::string names;
  std::string active;
  CLI::Option* active_option = nullptr;
  std::string max_conns;  // per backend: the picks are acquire()s that stay in flight
  CLI::Option* max_conns_option = nullptr;
  std::string keys;
  CLI::Option* keys_option = nullptr;  // given or not: --keys '' is one empty key
  std::string keys_file;               // one key per line: more keys than an argument holds
  CLI::Option* keys_file_option = nullptr;
  int count = 0;
  CLI::Option* count_option = nullptr;  // given or not: 0 and -1 are errors, not "the default"
  std::string seed = "1";  // parsed here: CLI11 wraps "-1" into a uint64
  CLI::Option* seed_option = nullptr;  // given or not: only the policies that draw random bits read it
  bool trace = false;
  bool json = false;
};

// Comma-separated items, each trimmed of the spaces and tabs around it
// ("5, 3, 2" is 5,3,2, as nginx and HAProxy read their lists): a blank had
// made a weight invalid and become part of a name or key.
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view item : sim::split_trimmed(text, ',')) out.emplace_back(item);
  return out;
}

std::vector<uint32_t> parse_numbers(const std::string& text, const char* what, uint32_t max) {
  std::vector<uint32_t> out;
  for (const std::string& item : split(text)) {
    uint32_t value = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value > max)
      throw BadArguments(fmt::format("--{}: \"{}\" is not an integer 0..{}", what, item, max));
    out.push_back(value);
  }
  return out;
}

constexpr size_t kMaxKeys = 1'000'000;

// One key per line; an empty line is an empty key, a final newline ends the
// last line, and a CR before the newline is not part of the key.
std::vector<std::string> read_keys_file(const std::string& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw BadArguments(fmt::format("--keys-file: '{}' is a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadArguments(fmt::format("--keys-file: cannot read '{}'", path));
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    if (keys.size() == kMaxKeys)
      throw BadArguments(fmt::format("{}:{}: more than {} keys", path, kMaxKeys + 1, kMaxKeys));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    keys.push_back(std::move(line));
  }
  if (in.bad()) throw BadArguments(fmt::format("--keys-file: reading '{}' failed", path));
  if (keys.empty())
    throw BadArguments(fmt::format("--keys-file: '{}' has no keys (an empty line is an empty key)", path));
  return keys;
}

std::string default_name(size_t i) {
  std::string name;
  for (size_t n = i + 1; n > 0; n = (n - 1) / 26) name.insert(name.begin(), char('A' + (n - 1) % 26));
  return name;
}

int run_pick(const PickOptions& o) {
  using namespace heft::balance;
  auto kind = parse_policy(o.policy);
  if (!kind) throw BadArguments(fmt::format("--policy: unknown policy \"{}\"", o.policy));
  auto strategy = parse_hash_strategy(o.hash_strategy);
  if (!strategy) throw BadArguments(fmt::format("--hash-strategy: \"{}\" is not ring or maglev", o.hash_strategy));
  // Flags the chosen policy never reads are errors: whoever typed them expects an effect.
  const PolicyTraits traits = policy_traits(*kind);
  const std::string policy_given =
      fmt::format("--policy is {}{}", policy_name(*kind), o.policy_option->count() > 0 ? "" : " (the default)");
  if (o.hash_strategy_option->count() > 0 && !traits.uses_hash_strategy)
    throw BadArguments(fmt::format("--hash-strategy {}; {}", kHashStrategyAppliesTo, policy_given));
  // A policy that hashes keys draws them for picks without a key (none given, or an empty one).
  const bool draws_random = traits.uses_random || traits.needs_key;
  if (o.seed_option->count() > 0 && !draws_random)
    throw BadArguments(fmt::format(
        "--seed applies only to the policies that draw random bits (random, p2c, and hash for picks without a key); {}",
        policy_given));
  if (o.weights.empty()) throw BadArguments("--weights is required, e.g. --weights 5,1,1");
  std::vector<uint32_t> weights = parse_numbers(o.weights, "weights", kMaxWeight);
  std::vector<std::string> names;
  if (!o.names.empty()) {
    names = split(o.names);
    if (names.size() != weights.size())
      throw BadArguments(fmt::format("--names has {} names for {} weights", names.size(), weights.size()));
    // Counts and traces are keyed by name, so each must be there and distinct.
    std::set<std::string> seen;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].empty()) throw BadArguments(fmt::format("--names: name {} is empty", i + 1));
      if (!seen.insert(names[i]).second) throw BadArguments(fmt::format("--names: \"{}\" is used twice", names[i]));
    }
  } else {
    for (size_t i = 0; i < weights.size(); ++i) names.push_back(default_name(i));
  }
  // --max-conns: each pick is the proxy's acquire() (the pick and its count in
  // one step) and stays in flight, so the picks show backends filling up and
  // being passed over once full, as a burst of requests none of which ends.
  const bool limited = o.max_conns_option->count() > 0;
  std::vector<uint32_t> max_conns;
  if (limited) {
    max_conns = parse_numbers(o.max_conns, "max-conns", 1'000'000);
    if (max_conns.size() != weights.size())
      throw BadArguments(fmt::format("--max-conns has {} limits for {} weights", max_conns.size(), weights.size()));
  }
  std::vector<BackendSpec> specs;
  for (size_t i = 0; i < weights.size(); ++i)
    specs.push_back({.name = names[i], .weight = weights[i], .max_conns = limited ? max_conns[i] : 0});
  Balancer balancer({*kind, *strategy}, specs);

  std::vector<uint32_t> active;
  // Only least_conn and p2c read active counts (and any policy's max_conns);
  // for the others --active printed a table of load ratios the pick never looked at.
  const bool reads_active = traits.uses_active_counts || limited;
  if (o.active_option->count() > 0 && !reads_active)
    throw BadArguments(fmt::format(
        "--active: policy {} does not read active counts (least_conn and p2c do, and every policy with --max-conns)",
        policy_name(*kind)));
  if (o.active_option->count() > 0) {
    active = parse_numbers(o.active, "active", UINT32_MAX);
    if (active.size() != weights.size())
      throw BadArguments(fmt::format("--active has {} counts for {} weights", active.size(), weights.size()));
    for (size_t i = 0; i < active.size(); ++i) balancer.live(i).active = active[i];
  }
  const bool keys_given = o.keys_option->count() > 0, keys_file_given = o.keys_file_option->count() > 0;
  if (keys_given && keys_file_given) throw BadArguments("--keys and --keys-file are exclusive");
  const char* keys_flag = keys_file_given ? "--keys-file" : "--keys";
  // Only hash reads the key; elsewhere --keys would silently set the count.
  if ((keys_given || keys_file_given) && !traits.needs_key)
    throw BadArguments(fmt::format("{}: policy {} does not hash keys (only hash does)", keys_flag, policy_name(*kind)));
  std::vector<std::string> keys = keys_file_given ? read_keys_file(o.keys_file)
                                  : keys_given    ? split(o.keys)
                                                  : std::vector<std::string>{};
  uint64_t total = 0;
  for (uint32_t w : weights) total += w;
  int count = o.count;
  if (o.count_option && o.count_option->count() > 0) {
    if (count < 1 || count > 1'000'000) throw BadArguments(fmt::format("--count must be 1..1000000, got {}", count));
  } else {
    if (keys.size() > kMaxKeys) throw BadArguments(fmt::format("{}: at most {} keys", keys_flag, kMaxKeys));
    count = !keys.empty() ? static_cast<int>(keys.size())
                          : (!active.empty() ? 1 : static_cast<int>(std::clamp<uint64_t>(total, 1, 100)));
  }
  // With --max-conns every pick stays in flight: a backend without a limit
  // could take all of them, and its 32-bit count wrapped (4294967295 and one
  // more showed "in flight: A=0", which least_conn then read as idle).
  for (size_t i = 0; limited && i < active.size(); ++i)
    if (max_conns[i] == 0 && active[i] > UINT32_MAX - static_cast<uint32_t>(count))
      throw BadArguments(fmt::format("--active: {} has {} in flight and no max_conns; {} pick{} could count past {}",
                                     names[i], active[i], count, count == 1 ? "" : "s", UINT32_MAX));

  auto current_weights = [&] {
    std::vector<int64_t> cw(names.size(), 0);
    CarriedState state = balancer.carried_state();
    for (size_t i = 0; i < names.size(); ++i)
      if (const auto* e = state.find(i)) cw[i] = e->current_weight;
    return cw;
  };
  bool has_current = traits.keeps_current_weights;
  uint64_t seed = 0;
  auto [seed_end, seed_ec] = std::from_chars(o.seed.data(), o.seed.data() + o.seed.size(), seed);
  if (o.seed.empty() || seed_ec != std::errc() || seed_end != o.seed.data() + o.seed.size())
    throw BadArguments(fmt::format("--seed: \"{}\" is not a whole number", o.seed));
  std::mt19937_64 rng(seed);
  nlohmann::json sequence = nlohmann::json::array();
  nlohmann::json trace = nlohmann::json::array();
  std::vector<std::string> table;
  for (int step = 0; step < count; ++step) {
    PickContext ctx;
    ctx.random = rng();
    // Without a key (no --keys, or an empty one), hash places the pick as the
    // proxy places a request without its key: at random in proportion to the
    // weights (docs/hashing.md, "Keys and identities").
    if (traits.needs_key) {
      const bool keyed = !keys.empty() && !keys[step % keys.size()].empty();
      ctx.key_hash = keyed ? hash_key(keys[step % keys.size()]) : rng();
    }
    std::vector<int64_t> before = o.trace && has_current ? current_weights() : std::vector<int64_t>{};
    bool full = false;
    auto choice = limited ? balancer.acquire(ctx, &full) : balancer.pick(ctx);
    std::string chosen = choice ? names[*choice] : full ? "(full)" : "-";
    sequence.push_back(chosen);
    if (o.trace) {
      nlohmann::json row = {{"pick", step + 1}, {"chosen", chosen}};
      if (has_current) {
        std::vector<int64_t> after = current_weights();
        row["before"] = before;
        row["after"] = after;
      }
      if (!keys.empty()) row["key"] = keys[step % keys.size()];
      trace.push_back(row);
    }
  }

  nlohmann::json out = {{"policy", policy_name(*kind)}, {"names", names}, {"weights", weights},
                        {"sequence", sequence}};
  if (traits.uses_hash_strategy) out["hash_strategy"] = hash_strategy_name(*strategy);
  if (!active.empty()) {
    nlohmann::json ratios = nlohmann::json::array();
    for (size_t i = 0; i < names.size(); ++i)
      ratios.push_back(weights[i] ? nlohmann::json(double(active[i]) / weights[i]) : nlohmann::json(nullptr));
    out["active"] = active;
    out["load_ratio"] = ratios;
    out["choice"] = sequence.front();
  }
  std::vector<uint32_t> in_flight;
  if (limited) {
    for (size_t i = 0; i < names.size(); ++i) in_flight.push_back(balancer.live(i).active.load());
    out["max_conns"] = max_conns;
    out["in_flight"] = in_flight;
  }
  if (o.trace) out["trace"] = trace;
  if (o.json) {
    // Names and keys are bytes: one that is not UTF-8 is written with U+FFFD
    // (the default handler threw, and heft pick aborted).
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }

  // hash names its strategy: ring and maglev place the same keys differently.
  const std::string strategy_note =
      traits.uses_hash_strategy ? fmt::format(" ({})", hash_strategy_name(*strategy)) : std::string();
  fmt::print("policy {}{}: {}\n", policy_name(*kind), strategy_note, [&] {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) s += fmt::format("{}{}={}", i ? " " : "", names[i], weights[i]);
    return s;
  }());
  if (!active.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (weights[i] == 0)
        fmt::print("  {:<8} active {:>6} / weight {:>4} = drained\n", names[i], active[i], weights[i]);
      else
        fmt::print("  {:<8} active {:>6} / weight {:>4} = {:.2f}\n", names[i], active[i], weights[i],
                   double(active[i]) / weights[i]);
    }
    fmt::print("choice: {}\n", sequence.front().get<std::string>());
    if (count == 1) return 0;
  }
  if (o.trace) {
    size_t width = 8;
    for (const auto& n : names) width = std::max(width, n.size() + 2);
    if (has_current) {
      std::string header = fmt::format("{:>5}  {:<{}}", "pick", "chosen", width);
      for (const auto& n : names) header += fmt::format("{:>{}}", n, width);
      fmt::print("current weights before -> after each pick\n{}\n", header);
      for (const auto& row : trace) {
        std::string line = fmt::format("{:>5}  {:<{}}", row["pick"].get<int>(), row["chosen"].get<std::string>(), width);
        for (size_t i = 0; i < names.size(); ++i)
          line += fmt::format("{:>{}}", fmt::format("{}->{}", row["before"][i].get<int64_t>(), row["after"][i].get<int64_t>()), width);
        fmt::print("{}\n", line);
      }
    } else {
      for (const auto& row : trace) {
        std::string key;
        if (row.contains("key"))
          key = row["key"].get<std::string>().empty() ? "  (empty key: at random by weight)"
                                                      : "  (key " + row["key"].get<std::string>() + ")";
        fmt::print("{:>5}  {}{}\n", row["pick"].get<int>(), row["chosen"].get<std::string>(), key);
      }
    }
  }
  std::string line;
  std::map<std::string, int> counts;
  for (const auto& s : sequence) {
    line += (line.empty() ? "" : " ") + s.get<std::string>();
    counts[s.get<std::string>()]++;
  }
  fmt::print("sequence: {}\n", line);
  std::string summary;
  for (const auto& n : names) summary += fmt::format("{}{}={}", summary.empty() ? "" : " ", n, counts[n]);
  fmt::print("counts: {}\n", summary);
  if (limited) {
    // "(full)": every backend that could take the pick was at its max_conns (the proxy's 503, or its queue).
    std::string flight;
    for (size_t i = 0; i < names.size(); ++i)
      flight += fmt::format("{}{}={}{}", i ? " " : "", names[i], in_flight[i],
                            max_conns[i] ? fmt::format("/{}", max_conns[i]) : "");
    fmt::print("in flight: {}\n", flight);
  }
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<PickOptions>();
  CLI::App* cmd = root.add_subcommand("pick", "Explain a policy: the backends it picks for a model pool");
  options->policy_option =
      cmd->add_option("--policy", options->policy,
                      "round_robin, weighted_round_robin, least_conn, hash (ip_hash), random, p2c, first")
          ->capture_default_str();
  cmd->add_option("--weights", options->weights, "comma-separated weights, e.g. 5,1,1 (blanks around each trimmed)")
      ->required();
  cmd->add_option("--names", options->names,
                  "comma-separated distinct names (default A,B,C...; blanks around each trimmed)")
      ->check(not_empty("one name per weight, or leave it out for A,B,C..."));
  options->count_option =
      cmd->add_option("--count", options->count, "number of picks, 1..1000000 (default: one cycle, at most 100)");
  options->active_option = cmd->add_option(
      "--active", options->active, "active requests per backend (least_conn and p2c only, or with --max-conns)");
  options->max_conns_option = cmd->add_option(
      "--max-conns", options->max_conns,
      "max_conns per backend (0 = none): each pick then stays in flight, and full backends are passed over");
  options->keys_option = cmd->add_option(
      "--keys", options->keys, "comma-separated keys to hash (hash policy only; an empty key is placed by weight)");
  options->keys_file_option = cmd->add_option(
      "--keys-file", options->keys_file, "keys to hash, one per line (hash only; an empty line is an empty key)");
  options->hash_strategy_option =
      cmd->add_option("--hash-strategy", options->hash_strategy, "ring or maglev (hash policy only)")
          ->capture_default_str();
  options->seed_option =
      cmd->add_option("--seed", options->seed, "random seed (random, p2c, and hash for picks without a key only)")
          ->capture_default_str();
  cmd->add_flag("--trace", options->trace, "print every backend's current weight before and after each pick");
  cmd->add_flag("--json", options->json, "machine-readable output");
  cmd->callback([options] { set_exit_code(run_pick(*options)); });
}

const bool registered = add_command(20, &setup);

}  // namespace
}  // namespace heft::cli
