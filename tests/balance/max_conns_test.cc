// max_conns: Balancer::acquire() passes over a backend with max_conns requests
// in flight, counts the chosen one in the same step, and says when a backend
// was full.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heft/balance/balancer.h"

namespace heft::balance {
namespace {

constexpr PolicyKind kEveryPolicy[] = {PolicyKind::round_robin, PolicyKind::weighted_round_robin,
                                       PolicyKind::least_conn,  PolicyKind::hash,
                                       PolicyKind::random,      PolicyKind::p2c,
                                       PolicyKind::first};

std::vector<BackendSpec> specs(const std::vector<uint32_t>& weights, const std::vector<uint32_t>& limits) {
  std::vector<BackendSpec> out;
  for (size_t i = 0; i < weights.size(); ++i)
    out.push_back({.name = std::string(1, char('A' + i)), .weight = weights[i], .max_conns = limits[i]});
  return out;
}

TEST(MaxConns, AFullBackendIsPassedOverUntilARequestEnds) {
  // 5:3:2, A may hold 2 requests. Nothing ends: A gets its first two turns,
  // then every pick goes to B or C, and each acquire says A was full.
  Balancer b({PolicyKind::weighted_round_robin}, specs({5, 3, 2}, {2, 0, 0}));
  EXPECT_TRUE(b.limited());
  std::map<uint32_t, int> counts;
  int passed_over = 0;
  for (int k = 0; k < 100; ++k) {
    bool full = false;
    auto got = b.acquire({}, &full);
    ASSERT_TRUE(got);
    ++counts[*got];
    passed_over += full;
    EXPECT_FALSE(full && *got == 0);
  }
  EXPECT_EQ(counts[0], 2);
  EXPECT_EQ(counts[1] + counts[2], 98);
  EXPECT_GT(passed_over, 0);
  EXPECT_EQ(b.live(0).active.load(), 2u);
  EXPECT_EQ(b.live(1).active.load() + b.live(2).active.load(), 98u);
  // B and C keep their own 3:2 among themselves while A is full.
  EXPECT_NEAR(double(counts[1]) / counts[2], 1.5, 0.1);
  // One of A's requests ends: A has room for one more, then is full again.
  b.end_request(0);
  int to_a = 0;
  for (int k = 0; k < 10; ++k) to_a += *b.acquire({}) == 0;
  EXPECT_EQ(to_a, 1);
  EXPECT_EQ(b.live(0).active.load(), 2u);
}

TEST(MaxConns, WithRoomTheSplitIsTheWeights) {
  // Every request ends before the next: no backend ever reaches its limit,
  // so the sequence is the policy's own (nginx's 5:3:2 order).
  Balancer limited({PolicyKind::weighted_round_robin}, specs({5, 3, 2}, {1, 1, 1}));
  Balancer plain({PolicyKind::weighted_round_robin}, specs({5, 3, 2}, {0, 0, 0}));
  EXPECT_FALSE(plain.limited());
  for (int k = 0; k < 1000; ++k) {
    bool full = false;
    auto got = limited.acquire({}, &full);
    ASSERT_TRUE(got);
    EXPECT_FALSE(full);
    EXPECT_EQ(*got, *plain.pick());
    limited.end_request(*got);
  }
}

TEST(MaxConns, EveryPolicyPassesOverFullBackendsAndSaysWhenAllAreFull) {
  for (PolicyKind kind : kEveryPolicy) {
    Balancer b({kind}, specs({3, 1, 2}, {1, 2, 1}));
    // Four requests fill the pool whatever the policy picks first.
    for (int k = 0; k < 4; ++k) {
      auto got = b.acquire({.key_hash = 12345, .random = uint64_t(k) * 0x9e3779b97f4a7c15ull});
      ASSERT_TRUE(got) << policy_name(kind) << " request " << k;
    }
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(b.live(i).active.load(), b.backend(i).max_conns) << policy_name(kind);
    bool full = false;
    EXPECT_FALSE(b.acquire({.key_hash = 999, .random = 7}, &full)) << policy_name(kind);
    EXPECT_TRUE(full) << policy_name(kind);
    // Room again on B only: the next request goes there, whatever its key.
    b.end_request(1);
    full = false;
    auto got = b.acquire({.key_hash = 999, .random = 7}, &full);
    ASSERT_TRUE(got) << policy_name(kind);
    EXPECT_EQ(*got, 1u) << policy_name(kind);
  }
}

TEST(MaxConns, BackupsTakeOverWhenEveryPrimaryIsFull) {
  auto s = specs({1, 1, 1}, {1, 1, 0});
  s[2].backup = true;
  for (PolicyKind kind : kEveryPolicy) {
    Balancer b({kind}, s);
    std::map<uint32_t, int> counts;
    for (int k = 0; k < 5; ++k) ++counts[*b.acquire({.key_hash = uint64_t(k), .random = uint64_t(k)})];
    EXPECT_EQ(counts[0], 1) << policy_name(kind);
    EXPECT_EQ(counts[1], 1) << policy_name(kind);
    EXPECT_EQ(counts[2], 3) << policy_name(kind);
  }
}

TEST(MaxConns, AFullBackendIsNotAddedToTheRequestsTriedSet) {
  // `first` asks A first every time.
  Balancer b({PolicyKind::first}, specs({1, 1, 1}, {1, 0, 0}));
  ASSERT_EQ(*b.acquire({}), 0u);
  TriedSet tried;
  tried.add(1);
  // A is full and B tried: C. The caller's set is left as it was.
  bool full = false;
  EXPECT_EQ(b.acquire({.tried = &tried}, &full), std::optional<uint32_t>(2));
  EXPECT_TRUE(full);
  EXPECT_FALSE(tried.contains(0));
  EXPECT_EQ(tried.size(), 1u);
}

TEST(MaxConns, HashedKeysStayOnTheirBackendWhileItHasRoom) {
  for (HashStrategy strategy : {HashStrategy::ring, HashStrategy::maglev}) {
    Balancer b({PolicyKind::hash, strategy}, specs({1, 1, 1, 1}, {2, 2, 2, 2}));
    const PickContext key{.key_hash = 0xabcdef};
    const uint32_t home = *b.acquire(key);
    EXPECT_EQ(*b.acquire(key), home);
    // Full: the key goes elsewhere, and home again once a request ends there.
    const uint32_t away = *b.acquire(key);
    EXPECT_NE(away, home);
    b.end_request(away);
    b.end_request(home);
    EXPECT_EQ(*b.acquire(key), home);
  }
}

// A change removes A while a request is in flight there (the request holds
// the older Balancer), and the next change adds A back: the request still
// counts, so A is full until it ends. A fresh count let max_conns more in
// (measured at a real origin: 2 in flight with max_conns 1).
TEST(MaxConns, ABackendAddedBackCountsTheRequestsStillInFlightThere) {
  const auto a_and_b = specs({1, 1}, {1, 0});
  const std::vector<BackendSpec> b_alone = {a_and_b[1]};
  for (PolicyKind kind : kEveryPolicy) {
    auto with_a = std::make_unique<Balancer>(PolicyOptions{kind}, a_and_b);
    // `first` and the others alike: A is the only place left once B is full.
    std::optional<uint32_t> at_a;
    for (int k = 0; k < 64 && at_a != 0u; ++k) at_a = with_a->acquire({.key_hash = uint64_t(k), .random = uint64_t(k)});
    ASSERT_EQ(at_a, std::optional<uint32_t>(0)) << policy_name(kind);
    auto without_a = std::make_unique<Balancer>(PolicyOptions{kind}, b_alone, with_a.get());
    auto back = std::make_unique<Balancer>(PolicyOptions{kind}, a_and_b, without_a.get());
    EXPECT_EQ(back->live(0).active.load(), 1u) << policy_name(kind);
    EXPECT_TRUE(back->live(0).available.load()) << policy_name(kind);
    for (int k = 0; k < 6; ++k) {
      bool full = false;
      EXPECT_EQ(back->acquire({.key_hash = uint64_t(k), .random = uint64_t(k)}, &full), std::optional<uint32_t>(1))
          << policy_name(kind);
    }
    // The request ends through the Balancer it began with: A has room again.
    with_a->end_request(0);
    EXPECT_EQ(back->live(0).active.load(), 0u) << policy_name(kind);
    bool to_a = false;
    for (int k = 0; k < 20 && !to_a; ++k) to_a = back->acquire({.key_hash = uint64_t(k), .random = uint64_t(k)}) == 0u;
    EXPECT_TRUE(to_a) << policy_name(kind);
  }
}

// Only while an older Balancer holds the object: once every Balancer that
// listed A is gone, A added back starts afresh, and nothing is kept for it.
TEST(MaxConns, ARemovedBackendIsForgottenOnceNoBalancerHoldsIt) {
  const auto a_and_b = specs({1, 1}, {1, 0});
  const std::vector<BackendSpec> b_alone = {a_and_b[1]};
  auto with_a = std::make_unique<Balancer>(PolicyOptions{PolicyKind::first}, a_and_b);
  ASSERT_EQ(with_a->acquire({}), std::optional<uint32_t>(0));
  auto without_a = std::make_unique<Balancer>(PolicyOptions{PolicyKind::first}, b_alone, with_a.get());
  with_a.reset();
  auto still_without = std::make_unique<Balancer>(PolicyOptions{PolicyKind::first}, b_alone, without_a.get());
  without_a.reset();
  Balancer back({PolicyKind::first}, a_and_b, still_without.get());
  EXPECT_EQ(back.live(0).active.load(), 0u);
  EXPECT_EQ(back.acquire({}), std::optional<uint32_t>(0));
}

TEST(MaxConns, TheLimitHoldsAcrossThreads) {
  // Four threads acquire and end as fast as they can on a pool of two
  // backends limited to 3 and 1; each records the count it saw right after
  // its acquire. A check-then-increment would let two threads take the last
  // place at once.
  for (PolicyKind kind : {PolicyKind::weighted_round_robin, PolicyKind::least_conn, PolicyKind::random}) {
    Balancer b({kind}, specs({1, 1}, {3, 1}));
    std::atomic<uint32_t> worst[2] = {0, 0};
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 0; k < 20000; ++k) {
          bool full = false;
          auto got = b.acquire({.random = uint64_t(k) * 2654435761u + t}, &full);
          if (!got) {
            ++refused;
            continue;
          }
          const uint32_t seen = b.live(*got).active.load();
          uint32_t w = worst[*got].load();
          while (seen > w && !worst[*got].compare_exchange_weak(w, seen)) {
          }
          b.end_request(*got);
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_LE(worst[0].load(), 3u) << policy_name(kind);
    EXPECT_LE(worst[1].load(), 1u) << policy_name(kind);
    EXPECT_EQ(b.live(0).active.load(), 0u) << policy_name(kind);
    EXPECT_EQ(b.live(1).active.load(), 0u) << policy_name(kind);
  }
}

}  // namespace
}  // namespace heft::balance
