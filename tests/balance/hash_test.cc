// Tests of the consistent hashing policies (`hash` with the ring and maglev
// strategies): key hash golden values, weight-proportional shares, disruption
// when one backend joins or leaves, fallback past unavailable and tried
// backends, independence from pool order, and golden picks that pin the exact
// mapping across processes and hosts.
#include <gtest/gtest.h>

#include "heft/balance/balancer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "heft/balance/hash.h"
#include "heft/balance/policy.h"

namespace heft::balance {
namespace {

constexpr size_t kKeys = 1'000'000;

// A pool of named backends with their live state; members are built from
// names and weights exactly as the upstream layer does (id = hash_key(name)).
struct Pool {
  explicit Pool(std::vector<uint32_t> weights, std::string prefix = "backend-") : live(weights.size()) {
    for (uint32_t i = 0; i < weights.size(); ++i) {
      names.push_back(prefix + std::to_string(i));
      members.push_back(Member{i, weights[i], hash_key(names.back())});
    }
    for (auto& l : live) ptrs.push_back(&l);
  }
  std::unique_ptr<Policy> make(HashStrategy strategy, std::vector<Member> subset) const {
    return make_policy({PolicyKind::hash, strategy}, std::move(subset), std::span<BackendLive* const>(ptrs));
  }
  std::unique_ptr<Policy> make(HashStrategy strategy) const { return make(strategy, members); }
  uint64_t total_weight() const {
    uint64_t w = 0;
    for (const auto& m : members) w += m.weight;
    return w;
  }

  std::vector<std::string> names;
  std::vector<Member> members;
  std::vector<BackendLive> live;
  std::vector<BackendLive*> ptrs;
};

const std::vector<uint64_t>& test_keys() {
  static const std::vector<uint64_t> keys = [] {
    std::vector<uint64_t> k(kKeys);
    for (size_t i = 0; i < kKeys; ++i) k[i] = hash_key("key-" + std::to_string(i));
    return k;
  }();
  return keys;
}

// Key hashes that measure the share of the hash space each backend owns (the
// structure), free of the sampling noise of real keys. The ring looks at the
// top 32 bits: evenly spaced hashes sample it evenly. Maglev looks at
// key_hash % M: consecutive integers hit every slot equally often, give or
// take one partial round (2^22 keys are 16 to 64 rounds of a 65537..262147
// slot table).
const std::vector<uint64_t>& grid_keys() {
  static const std::vector<uint64_t> keys = [] {
    std::vector<uint64_t> k(kKeys);
    const uint64_t step = UINT64_MAX / kKeys;
    for (size_t i = 0; i < kKeys; ++i) k[i] = i * step + step / 2;
    return k;
  }();
  return keys;
}
const std::vector<uint64_t>& slot_keys() {
  static const std::vector<uint64_t> keys = [] {
    std::vector<uint64_t> k(size_t{1} << 22);
    for (size_t i = 0; i < k.size(); ++i) k[i] = i;
    return k;
  }();
  return keys;
}

std::optional<uint32_t> pick(Policy& p, uint64_t key_hash, const TriedSet* tried = nullptr) {
  PickContext ctx;
  ctx.key_hash = key_hash;
  ctx.tried = tried;
  return p.pick(ctx);
}

std::vector<uint32_t> assign(Policy& p, const std::vector<uint64_t>& keys) {
  std::vector<uint32_t> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto chosen = pick(p, keys[i]);
    out[i] = chosen.value_or(UINT32_MAX);
  }
  return out;
}

// Largest relative deviation of a backend's share from weight / total.
double max_relative_error(const Pool& pool, const std::vector<uint32_t>& owners) {
  std::vector<uint64_t> count(pool.members.size());
  for (uint32_t o : owners) ++count.at(o);
  const double total = static_cast<double>(pool.total_weight());
  double worst = 0;
  for (const auto& m : pool.members) {
    double expected = owners.size() * (m.weight / total);
    worst = std::max(worst, std::fabs(count[m.index] - expected) / expected);
  }
  return worst;
}

// mt19937's output sequence is fixed by the standard, so these weights are
// the same everywhere (unlike uniform_int_distribution's).
std::vector<uint32_t> random_weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> w(n);
  for (auto& x : w) x = rng() % 10 + 1;
  return w;
}

struct ShareCase {
  const char* name;
  std::vector<uint32_t> weights;
};

std::vector<ShareCase> share_cases() {
  return {
      {"5:3:2", {5, 3, 2}},
      {"1:1:1:1:1", {1, 1, 1, 1, 1}},
      {"1:2:4", {1, 2, 4}},
      {"10 random 1..10", random_weights(10, 1)},
      {"10 random 1..10 (2)", random_weights(10, 2)},
      {"100 equal", std::vector<uint32_t>(100, 1)},
  };
}

TEST(HashKey, GoldenValues) {
  // Pinned: hash_key must never change, or every deployed mapping moves.
  EXPECT_EQ(hash_key(""), mix64(0xcbf29ce484222325ULL));
  EXPECT_EQ(hash_key("hello"), 0x16fe05a1c75bcd0fULL);  // FNV-1a 0xa430d84680aabd0b, then mix64
  EXPECT_NE(hash_key("key-1"), hash_key("key-2"));
}

TEST(HashPolicy, KindAndEffectiveWeight) {
  Pool pool({5, 3, 2});
  for (auto strategy : {HashStrategy::ring, HashStrategy::maglev}) {
    auto p = pool.make(strategy);
    EXPECT_EQ(p->kind(), PolicyKind::hash);
    EXPECT_EQ(p->effective_weight(0), 5u);
    EXPECT_EQ(p->effective_weight(1), 3u);
    EXPECT_EQ(p->effective_weight(2), 2u);
    p->attempt_failed(0, 1);  // hashing keeps its weights
    EXPECT_EQ(p->effective_weight(0), 5u);
  }
}

TEST(HashPolicy, EmptyPoolPicksNothing) {
  Pool pool({});
  for (auto strategy : {HashStrategy::ring, HashStrategy::maglev}) {
    auto p = pool.make(strategy);
    EXPECT_EQ(pick(*p, 42), std::nullopt);
  }
}

TEST(RingHash, SharesWithinFivePercent) {
  for (const auto& c : share_cases()) {
    Pool pool(c.weights);
    auto p = pool.make(HashStrategy::ring);
    double keys_error = max_relative_error(pool, assign(*p, test_keys()));
    double space_error = max_relative_error(pool, assign(*p, grid_keys()));
    EXPECT_LE(keys_error, 0.05) << c.name;
    EXPECT_LE(space_error, 0.05) << c.name;
    std::printf("ring %-20s max share error: keys %.2f %%, hash space %.2f %%\n", c.name, 100 * keys_error,
                100 * space_error);
  }
}

TEST(RingHash, HundredRandomWeightsOwnTheirShareOfTheSpace) {
  // With weights 1..10 over 100 backends a weight-1 backend expects only
  // ~1,800 of 1,000,000 keys (sampling noise alone is +-2.3 %), so check the
  // structure: the share of the hash space each backend owns.
  Pool pool(random_weights(100, 3));
  auto p = pool.make(HashStrategy::ring);
  double space_error = max_relative_error(pool, assign(*p, grid_keys()));
  EXPECT_LE(space_error, 0.05);
  std::printf("ring 100 random 1..10 max share error: hash space %.2f %%\n", 100 * space_error);
}

TEST(Maglev, SharesWithinOnePercent) {
  // The table gives every backend its weight's share of slots within 1 %.
  // Measured with real keys the share also carries binomial sampling noise
  // (sigma = sqrt((1-p) / (N p)) relative); the tolerance adds 4 sigma of it.
  for (const auto& c : share_cases()) {
    Pool pool(c.weights);
    auto p = pool.make(HashStrategy::maglev);
    double space_error = max_relative_error(pool, assign(*p, slot_keys()));
    EXPECT_LE(space_error, 0.01) << c.name;

    auto owners = assign(*p, test_keys());
    std::vector<uint64_t> count(pool.members.size());
    for (uint32_t o : owners) ++count.at(o);
    double worst = 0;
    for (const auto& m : pool.members) {
      double share = m.weight / static_cast<double>(pool.total_weight());
      double expected = kKeys * share;
      double error = std::fabs(count[m.index] - expected) / expected;
      double sigma = std::sqrt((1 - share) / (kKeys * share));
      EXPECT_LE(error, 0.01 + 4 * sigma) << c.name << " backend " << m.index;
      worst = std::max(worst, error);
    }
    std::printf("maglev %-20s max share error: keys %.2f %%, hash space %.3f %%\n", c.name, 100 * worst,
                100 * space_error);
  }
}

TEST(Maglev, HundredRandomWeightsOwnTheirShareOfTheSpace) {
  Pool pool(random_weights(100, 3));
  auto p = pool.make(HashStrategy::maglev);
  double space_error = max_relative_error(pool, assign(*p, slot_keys()));
  EXPECT_LE(space_error, 0.01);
  std::printf("maglev 100 random 1..10 max share error: hash space %.3f %%\n", 100 * space_error);
}

TEST(HashPolicy, HugeWeightsStayBounded) {
  // Weights up to 1,000,000 must not blow up the ring or the table; the light
  // backend still gets some keys and the heavy one nearly all.
  Pool pool({1'000'000, 1, 500'000});
  for (auto strategy : {HashStrategy::ring, HashStrategy::maglev}) {
    auto p = pool.make(strategy);
    auto owners = assign(*p, strategy == HashStrategy::ring ? grid_keys() : slot_keys());
    std::vector<uint64_t> count(3);
    for (uint32_t o : owners) ++count.at(o);
    const double keys = static_cast<double>(owners.size());
    EXPECT_NEAR(count[0] / keys, 2.0 / 3, 0.01);
    EXPECT_NEAR(count[2] / keys, 1.0 / 3, 0.01);
    EXPECT_GT(count[1], 0u);  // at least one point / slot
    EXPECT_LT(count[1] / keys, 0.001);
  }
}

// Compares the assignment of `keys` before and after a membership change;
// `changed` is the pool index of the backend that joined or left.
struct Movement {
  double moved = 0;          // fraction of all keys that changed backend
  double moved_others = 0;   // fraction of all keys that moved without involving `changed`
};

Movement movement(const std::vector<uint32_t>& before, const std::vector<uint32_t>& after, uint32_t changed) {
  size_t moved = 0, others = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == after[i]) continue;
    ++moved;
    if (before[i] != changed && after[i] != changed) ++others;
  }
  return {moved / double(before.size()), others / double(before.size())};
}

// Members without the one at `index`.
std::vector<Member> without(const std::vector<Member>& members, uint32_t index) {
  std::vector<Member> out;
  for (const auto& m : members)
    if (m.index != index) out.push_back(m);
  return out;
}

TEST(RingHash, AddingOrRemovingOneBackendMovesAboutItsShare) {
  for (size_t n : {5, 10, 100}) {
    Pool pool(std::vector<uint32_t>(n, 1));
    auto full = assign(*pool.make(HashStrategy::ring), test_keys());
    // Remove a backend from the middle, and add the last one to the others.
    for (uint32_t changed : {static_cast<uint32_t>(n / 2), static_cast<uint32_t>(n - 1)}) {
      auto part = assign(*pool.make(HashStrategy::ring, without(pool.members, changed)), test_keys());
      Movement m = movement(full, part, changed);
      EXPECT_LE(m.moved, 1.2 / n) << "n=" << n;
      EXPECT_EQ(m.moved_others, 0.0) << "n=" << n;  // equal weights: other points don't change at all
      std::printf("ring n=%zu change backend %u: moved %.3f %% (1/n = %.3f %%), others %.4f %%\n", n, changed,
                  100 * m.moved, 100.0 / n, 100 * m.moved_others);
    }
  }
  // Unequal weights: a change of the mean weight rescales every backend's
  // points a little, so some keys move between unchanged backends too.
  Pool pool(random_weights(10, 1));
  auto full = assign(*pool.make(HashStrategy::ring), test_keys());
  for (uint32_t changed : {4u, 9u}) {
    auto part = assign(*pool.make(HashStrategy::ring, without(pool.members, changed)), test_keys());
    Movement m = movement(full, part, changed);
    double share = pool.members[changed].weight / double(pool.total_weight());
    EXPECT_LE(m.moved, share + 1.0 / 10);
    EXPECT_LE(m.moved_others, 0.05);
    std::printf("ring 10 random, change backend %u (share %.2f %%): moved %.3f %%, others %.3f %%\n", changed,
                100 * share, 100 * m.moved, 100 * m.moved_others);
  }
}

TEST(Maglev, AddingOrRemovingOneBackendMovesLittleElse) {
  std::vector<std::vector<uint32_t>> weight_sets = {std::vector<uint32_t>(5, 1), random_weights(10, 1),
                                                    random_weights(100, 3), std::vector<uint32_t>(100, 1)};
  for (const auto& weights : weight_sets) {
    const size_t n = weights.size();
    Pool pool(weights);
    auto full = assign(*pool.make(HashStrategy::maglev), test_keys());
    for (uint32_t changed : {static_cast<uint32_t>(n / 2), static_cast<uint32_t>(n - 1)}) {
      auto part = assign(*pool.make(HashStrategy::maglev, without(pool.members, changed)), test_keys());
      Movement m = movement(full, part, changed);
      EXPECT_LE(m.moved_others, 0.01) << "n=" << n;
      std::printf("maglev n=%zu change backend %u: moved %.3f %%, others %.3f %%\n", n, changed, 100 * m.moved,
                  100 * m.moved_others);
    }
  }
}

class HashStrategies : public ::testing::TestWithParam<HashStrategy> {};
INSTANTIATE_TEST_SUITE_P(Both, HashStrategies, ::testing::Values(HashStrategy::ring, HashStrategy::maglev),
                         [](const auto& info) { return std::string(hash_strategy_name(info.param)); });

TEST_P(HashStrategies, UnavailableBackendIsSkippedAndItsKeysSpread) {
  Pool pool({5, 3, 2, 4, 1});
  auto p = pool.make(GetParam());
  const std::vector<uint64_t> keys(test_keys().begin(), test_keys().begin() + 200'000);
  auto before = assign(*p, keys);
  pool.live[3].available = false;
  p->availability_changed(3);
  auto after = assign(*p, keys);
  std::vector<uint64_t> received(5);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(after[i], 3u);
    if (before[i] != 3) {
      EXPECT_EQ(after[i], before[i]);  // keys of healthy backends stay put
    } else {
      ++received[after[i]];
    }
  }
  // The down backend's keys spread over all the others, roughly by weight.
  uint64_t spread = received[0] + received[1] + received[2] + received[4];
  for (uint32_t i : {0u, 1u, 2u, 4u}) {
    double share = received[i] / double(spread);
    double expected = pool.members[i].weight / 11.0;
    EXPECT_NEAR(share, expected, 0.5 * expected) << "backend " << i;
  }
  // Back up: the original mapping returns.
  pool.live[3].available = true;
  EXPECT_EQ(assign(*p, keys), before);
}

// A backend marked down keeps its place (nginx keeps down peers on its
// consistent-hash ring): only its own keys move, and they come back when it
// is up again. Rebuilding without it moved 7.6 % of the others' keys (ring,
// 5:3:2:4). Drained (weight 0) backends leave the ring, like a weight change.
TEST_P(HashStrategies, DownBackendKeepsItsPlaceSoOnlyItsKeysMove) {
  std::vector<BackendSpec> specs;
  for (uint32_t w : {5u, 3u, 2u, 4u}) specs.push_back({.name = "10.0.0." + std::to_string(w) + ":80", .weight = w});
  const std::vector<uint64_t> keys(test_keys().begin(), test_keys().begin() + 50'000);
  auto owners = [&](Balancer& b) {
    std::vector<uint32_t> out;
    for (uint64_t k : keys) out.push_back(b.pick({.key_hash = k}).value_or(99));
    return out;
  };
  Balancer up({PolicyKind::hash, GetParam()}, specs);
  const auto before = owners(up);
  specs[2].down = true;
  Balancer down({PolicyKind::hash, GetParam()}, specs, &up);
  const auto during = owners(down);
  size_t moved = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(during[i], 2u);
    ASSERT_NE(during[i], 99u);
    if (before[i] != 2) {
      ASSERT_EQ(during[i], before[i]) << "key " << i << " of an unchanged backend moved";
    } else {
      ++moved;
    }
  }
  EXPECT_GT(moved, keys.size() / 10);  // its share (2/14) did move
  EXPECT_EQ(down.effective_weight(2), 0u);
  specs[2].down = false;
  Balancer again({PolicyKind::hash, GetParam()}, specs, &down);
  EXPECT_EQ(owners(again), before);
  // Every primary down: the backup answers.
  for (BackendSpec& s : specs) s.down = true;
  specs.push_back({.name = "10.0.0.9:80", .weight = 1, .backup = true});
  Balancer backup_only({PolicyKind::hash, GetParam()}, specs);
  EXPECT_EQ(backup_only.pick({.key_hash = keys[0]}), std::optional<uint32_t>(4));
}

TEST_P(HashStrategies, TriedBackendsAreExcluded) {
  Pool pool({5, 3, 2});
  auto p = pool.make(GetParam());
  for (size_t i = 0; i < 1000; ++i) {
    uint64_t key = test_keys()[i];
    TriedSet tried;
    auto first = pick(*p, key, &tried);
    ASSERT_TRUE(first);
    tried.add(*first);
    auto second = pick(*p, key, &tried);
    ASSERT_TRUE(second);
    EXPECT_NE(*second, *first);
    EXPECT_EQ(pick(*p, key, &tried), second);  // the retry is deterministic too
    tried.add(*second);
    auto third = pick(*p, key, &tried);
    ASSERT_TRUE(third);
    EXPECT_NE(*third, *first);
    EXPECT_NE(*third, *second);
    tried.add(*third);
    EXPECT_EQ(pick(*p, key, &tried), std::nullopt);
  }
}

TEST_P(HashStrategies, AllUnavailableGivesNothing) {
  Pool pool(random_weights(50, 4));
  auto p = pool.make(GetParam());
  for (auto& l : pool.live) l.available = false;
  for (size_t i = 0; i < 1000; ++i) EXPECT_EQ(pick(*p, test_keys()[i]), std::nullopt);
  // One left: everything goes there.
  pool.live[17].available = true;
  for (size_t i = 0; i < 1000; ++i) EXPECT_EQ(pick(*p, test_keys()[i]), 17u);
}

TEST_P(HashStrategies, MappingDependsOnNamesNotPoolOrder) {
  Pool pool(random_weights(20, 5));
  auto p = pool.make(GetParam());
  // The same backends listed in reverse order get other pool indices.
  std::vector<Member> reversed;
  for (const auto& m : pool.members)
    reversed.push_back(Member{static_cast<uint32_t>(pool.members.size() - 1 - m.index), m.weight, m.id});
  auto q = pool.make(GetParam(), reversed);
  for (size_t i = 0; i < 20'000; ++i) {
    uint64_t key = test_keys()[i];
    EXPECT_EQ(*q->pick({key}), pool.members.size() - 1 - *p->pick({key}));
  }
}

TEST_P(HashStrategies, ConcurrentPicksAgreeWithSerialOnes) {
  Pool pool(random_weights(100, 6));
  auto p = pool.make(GetParam());
  const std::vector<uint64_t> keys(test_keys().begin(), test_keys().begin() + 100'000);
  auto serial = assign(*p, keys);
  std::vector<uint32_t> a, b;
  std::thread ta([&] { a = assign(*p, keys); });
  std::thread tb([&] { b = assign(*p, keys); });
  ta.join();
  tb.join();
  EXPECT_EQ(a, serial);
  EXPECT_EQ(b, serial);
}

// Golden mappings. These pin the exact key -> backend function (hash_key,
// point positions, table construction) so that every heft process on every
// host, today and after any refactoring, sends a key to the same backend: a
// change here breaks session affinity across a fleet. Backends "backend-0"
// .. "backend-4" with weights 5, 3, 2, 1, 4; keys "user-0" .. "user-19".
std::vector<uint32_t> golden_picks(HashStrategy strategy) {
  Pool pool({5, 3, 2, 1, 4});
  auto p = pool.make(strategy);
  std::vector<uint32_t> out;
  for (int i = 0; i < 20; ++i) out.push_back(*pick(*p, hash_key("user-" + std::to_string(i))));
  return out;
}

TEST(RingHash, GoldenPicks) {
  const std::vector<uint32_t> golden = {2, 0, 4, 0, 2, 2, 4, 4, 0, 0, 0, 2, 1, 4, 4, 3, 3, 0, 3, 2};
  EXPECT_EQ(golden_picks(HashStrategy::ring), golden);
}

TEST(Maglev, GoldenPicks) {
  const std::vector<uint32_t> golden = {4, 1, 0, 1, 1, 4, 2, 0, 1, 0, 1, 0, 2, 0, 4, 0, 1, 4, 2, 4};
  EXPECT_EQ(golden_picks(HashStrategy::maglev), golden);
}

}  // namespace
}  // namespace heft::balance
