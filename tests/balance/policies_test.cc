// least_conn, round_robin, first, random and p2c: exact behaviour on small pools.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "heft/balance/balancer.h"

namespace heft::balance {
namespace {

std::vector<BackendSpec> specs(const std::vector<uint32_t>& weights) {
  std::vector<BackendSpec> out;
  for (size_t i = 0; i < weights.size(); ++i) out.push_back({.name = std::string(1, char('A' + i)), .weight = weights[i]});
  return out;
}

TEST(LeastConn, SeedExampleTwoFive) {
  // A: weight 2 with 10 active (ratio 5); B: weight 5 with 15 active (ratio 3) -> B.
  Balancer b({PolicyKind::least_conn}, specs({2, 5}));
  b.live(0).active = 10;
  b.live(1).active = 15;
  EXPECT_EQ(*b.pick(), 1u);
  b.live(1).active = 26;  // 26/5 = 5.2 > 5
  EXPECT_EQ(*b.pick(), 0u);
}

TEST(LeastConn, TiesBrokenBySmoothWrrAmongTied) {
  // All idle: every pick is a tie among all, so the sequence is nginx's SWRR.
  Balancer b({PolicyKind::least_conn}, specs({5, 1, 1}));
  std::string seq;
  for (int i = 0; i < 7; ++i) seq += char('A' + *b.pick());
  EXPECT_EQ(seq, "AABACAA");
  // Only the tied take part: B and C tie at 0 active, A is busier.
  Balancer c({PolicyKind::least_conn}, specs({5, 1, 1}));
  c.live(0).active = 3;
  seq.clear();
  for (int i = 0; i < 4; ++i) seq += char('A' + *c.pick());
  EXPECT_EQ(seq, "BCBC");
  // Cross-multiplication: 3 active on weight 6 ties 1 active on weight 2.
  Balancer d({PolicyKind::least_conn}, specs({6, 2}));
  d.live(0).active = 3;
  d.live(1).active = 1;
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 8; ++i) counts[*d.pick()]++;
  EXPECT_EQ(counts[0], 6);
  EXPECT_EQ(counts[1], 2);
}

TEST(LeastConn, HonoursAvailabilityDrainAndBackup) {
  auto s = specs({1, 1, 0, 1});
  s[3].backup = true;
  Balancer b({PolicyKind::least_conn}, s);
  b.live(0).active = 100;
  b.set_available(1, false);
  EXPECT_EQ(*b.pick(), 0u);  // busy but the only eligible primary; drained C never
  b.set_available(0, false);
  EXPECT_EQ(*b.pick(), 3u);  // backup
  TriedSet tried;
  tried.add(3);
  EXPECT_FALSE(b.pick({.tried = &tried}).has_value());
}

TEST(RoundRobin, IgnoresWeightsAndSkipsUnavailable) {
  Balancer b({PolicyKind::round_robin}, specs({5, 1, 1}));
  std::string seq;
  for (int i = 0; i < 6; ++i) seq += char('A' + *b.pick());
  EXPECT_EQ(seq, "ABCABC");
  b.set_available(1, false);
  seq.clear();
  for (int i = 0; i < 6; ++i) seq += char('A' + *b.pick());
  EXPECT_EQ(seq, "ACACAC");  // B's turns are spent, not handed to C (was A C A C C A)
  // Two of four out: the others still alternate.
  Balancer c({PolicyKind::round_robin}, specs({1, 1, 1, 1}));
  c.set_available(1, false);
  c.set_available(2, false);
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 100; ++i) counts[*c.pick()]++;
  EXPECT_EQ(counts[0], 50);
  EXPECT_EQ(counts[3], 50);
}

TEST(First, FirstAvailableInOrder) {
  Balancer b({PolicyKind::first}, specs({1, 1, 1}));
  EXPECT_EQ(*b.pick(), 0u);
  b.set_available(0, false);
  EXPECT_EQ(*b.pick(), 1u);
  TriedSet tried;
  tried.add(1);
  EXPECT_EQ(*b.pick({.tried = &tried}), 2u);
}

TEST(WeightedRandom, SharesFollowWeights) {
  Balancer b({PolicyKind::random}, specs({5, 3, 2, 0}));
  std::mt19937_64 rng(42);
  std::map<uint32_t, int> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) counts[*b.pick({.random = rng()})]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.01);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.01);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.01);
  EXPECT_EQ(counts[3], 0);
  b.set_available(0, false);
  counts.clear();
  for (int i = 0; i < n; ++i) counts[*b.pick({.random = rng()})]++;
  EXPECT_EQ(counts[0], 0);
  EXPECT_NEAR(counts[1] / double(n), 0.6, 0.01);
}

TEST(PowerOfTwoChoices, LowerLoadPerWeightWins) {
  Balancer b({PolicyKind::p2c}, specs({1, 1}));
  b.live(0).active = 5;
  b.live(1).active = 1;
  std::mt19937_64 rng(1);
  // Two distinct candidates of a two-member pool are always both members.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(*b.pick({.random = rng()}), 1u);
  // Weighted: 4 active on weight 4 beats 2 active on weight 1.
  Balancer c({PolicyKind::p2c}, specs({4, 1}));
  c.live(0).active = 4;
  c.live(1).active = 2;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(*c.pick({.random = rng()}), 0u);
}

TEST(PowerOfTwoChoices, IdlePoolSharesFollowWeights) {
  // With equal loads the first (weighted) draw wins, as nginx's random two:
  // an idle pool's shares are its weights (5:3:2 must not starve the 2).
  Balancer b({PolicyKind::p2c}, specs({3, 1, 1, 1}));
  std::mt19937_64 rng(3);
  std::map<uint32_t, int> counts;
  const int n = 60000;
  for (int i = 0; i < n; ++i) counts[*b.pick({.random = rng()})]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.01);
  for (uint32_t i : {1u, 2u, 3u}) EXPECT_NEAR(counts[i] / double(n), 1.0 / 6, 0.01) << i;
  Balancer c({PolicyKind::p2c}, specs({5, 3, 2}));
  counts.clear();
  for (int i = 0; i < n; ++i) counts[*c.pick({.random = rng()})]++;
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.01);
}

TEST(EveryPolicy, NothingAvailableSaysSo) {
  for (PolicyKind kind : {PolicyKind::round_robin, PolicyKind::weighted_round_robin, PolicyKind::least_conn,
                          PolicyKind::hash, PolicyKind::random, PolicyKind::p2c, PolicyKind::first}) {
    auto s = specs({1, 2, 0});
    s[1].down = true;
    Balancer b({kind}, s);
    b.set_available(0, false);
    for (int i = 0; i < 10; ++i) EXPECT_FALSE(b.pick({.key_hash = uint64_t(i) * 7919, .random = uint64_t(i)}).has_value())
        << policy_name(kind);
    b.set_available(0, true);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(*b.pick({.key_hash = uint64_t(i) * 7919, .random = uint64_t(i)}), 0u)
        << policy_name(kind);
  }
}

TEST(EveryPolicy, NeverReturnsAnIneligibleBackend) {
  std::mt19937_64 rng(99);
  for (PolicyKind kind : {PolicyKind::round_robin, PolicyKind::weighted_round_robin, PolicyKind::least_conn,
                          PolicyKind::hash, PolicyKind::random, PolicyKind::p2c, PolicyKind::first}) {
    auto s = specs({3, 0, 2, 5, 1, 4});
    s[3].down = true;
    s[5].backup = true;
    Balancer b({kind}, s);
    std::vector<bool> up(s.size(), true);
    for (int step = 0; step < 3000; ++step) {
      if (step % 37 == 0) {
        uint32_t i = rng() % s.size();
        up[i] = !up[i];
        b.set_available(i, up[i]);
      }
      TriedSet tried;
      if (step % 5 == 0) tried.add(rng() % s.size());
      auto got = b.pick({.key_hash = rng(), .random = rng(), .tried = &tried});
      bool primary_eligible = false;
      for (uint32_t i = 0; i < s.size(); ++i)
        primary_eligible |= up[i] && s[i].weight && !s[i].down && !s[i].backup && !tried.contains(i);
      if (!got) {
        EXPECT_FALSE(primary_eligible) << policy_name(kind);
        continue;
      }
      EXPECT_TRUE(up[*got]) << policy_name(kind);
      EXPECT_FALSE(tried.contains(*got)) << policy_name(kind);
      EXPECT_NE(s[*got].weight, 0u) << policy_name(kind);
      EXPECT_FALSE(s[*got].down) << policy_name(kind);
      if (s[*got].backup) {
        EXPECT_FALSE(primary_eligible) << policy_name(kind);
      }
    }
  }
}

}  // namespace
}  // namespace heft::balance
