// Smooth weighted round robin: golden sequences, nginx equivalence under random
// failures, availability flips and retries, and exactness across threads.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <thread>

#include "balance/reference_nginx.h"
#include "balance/weighted_round_robin.h"
#include "heft/balance/balancer.h"

namespace heft::balance {
namespace {

std::vector<BackendSpec> specs(const std::vector<uint32_t>& weights, uint32_t max_fails = 1) {
  std::vector<BackendSpec> out;
  for (size_t i = 0; i < weights.size(); ++i)
    out.push_back({.name = std::string(1, char('A' + i % 26)).append(std::to_string(i / 26)), .weight = weights[i],
                   .max_fails = max_fails});
  return out;
}

std::string letters(Balancer& b, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += char('A' + *b.pick());
  return s;
}

const PolicyOptions kSwrr{PolicyKind::weighted_round_robin};

TEST(WeightedRoundRobin, SeedSequence511) {
  Balancer b(kSwrr, specs({5, 1, 1}));
  EXPECT_EQ(letters(b, 7), "AABACAA");
  // Current weights are back at 0,0,0 after 7: the next 7 repeat exactly.
  CarriedState state = b.carried_state();
  for (auto& e : state.entries) EXPECT_EQ(e.current_weight, 0);
  EXPECT_EQ(letters(b, 7), "AABACAA");
}

TEST(WeightedRoundRobin, Seed421FromGoArticle) {
  Balancer b(kSwrr, specs({4, 2, 1}));
  EXPECT_EQ(letters(b, 14), "ABACABAABACABA");
}

TEST(WeightedRoundRobin, Seed124IsRealSwrrNotTheProse) {
  // 002's prose claims c,b,a,c,b,c,c; nginx's algorithm gives c,b,c,a,c,b,c.
  Balancer b(kSwrr, specs({1, 2, 4}));
  EXPECT_EQ(letters(b, 7), "CBCACBC");
}

TEST(WeightedRoundRobin, FiveThreeTwoExactInEveryCycleOfTen) {
  Balancer b(kSwrr, specs({5, 3, 2}));
  for (int cycle = 0; cycle < 100; ++cycle) {
    std::map<char, int> counts;
    for (char c : letters(b, 10)) counts[c]++;
    EXPECT_EQ(counts['A'], 5);
    EXPECT_EQ(counts['B'], 3);
    EXPECT_EQ(counts['C'], 2);
  }
}

TEST(WeightedRoundRobin, DrainedDownAndBackup) {
  auto s = specs({3, 0, 2, 5, 4});
  s[2].down = true;
  s[3].backup = true;
  s[4].backup = true;
  Balancer b(kSwrr, s);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*b.pick(), 0u);  // only A is an eligible primary
  b.set_available(0, false);
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 90; ++i) counts[*b.pick()]++;  // backups 5:4
  EXPECT_EQ(counts[3], 50);
  EXPECT_EQ(counts[4], 40);
  b.set_available(3, false);
  b.set_available(4, false);
  EXPECT_FALSE(b.pick().has_value());  // nothing available: says so
  b.set_available(0, true);
  EXPECT_EQ(*b.pick(), 0u);
}

// Random weights, failures, availability flips and retries: the balancer and
// the plain nginx loop give identical sequences at all times.
TEST(WeightedRoundRobin, MatchesNginxLoopUnderRandomEvents) {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 400; ++trial) {
    size_t n = 1 + rng() % 8;
    std::vector<uint32_t> weights;
    for (size_t i = 0; i < n; ++i) weights.push_back(1 + rng() % (trial % 2 ? 10 : 200));
    uint32_t max_fails = 1 + rng() % 3;
    Balancer b(kSwrr, specs(weights, max_fails));
    test::ReferenceSwrr ref(weights, max_fails);
    int steps = 300 + static_cast<int>(rng() % 700);
    for (int step = 0; step < steps; ++step) {
      uint64_t r = rng() % 100;
      if (r < 2) {
        size_t i = rng() % n;
        b.report_failure(static_cast<uint32_t>(i));
        ref.fail(i);
      } else if (r < 4) {
        size_t i = rng() % n;
        bool up = !ref.peers[i].available;
        b.set_available(static_cast<uint32_t>(i), up);
        ref.peers[i].available = up;
      } else if (r < 7) {
        std::set<size_t> tried_ref;
        TriedSet tried;
        size_t k = rng() % n;
        for (size_t j = 0; j < k; ++j) {
          size_t i = rng() % n;
          tried_ref.insert(i);
          tried.add(static_cast<uint32_t>(i));
        }
        auto want = ref.pick(tried_ref);
        auto got = b.pick({.tried = &tried});
        ASSERT_EQ(want.has_value(), got.has_value()) << "trial " << trial << " step " << step;
        if (want) {
          ASSERT_EQ(*want, *got) << "trial " << trial << " step " << step;
        }
      } else {
        auto want = ref.pick();
        auto got = b.pick();
        ASSERT_EQ(want.has_value(), got.has_value()) << "trial " << trial << " step " << step;
        if (want) {
          ASSERT_EQ(*want, *got) << "trial " << trial << " step " << step;
        }
      }
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(b.effective_weight(static_cast<uint32_t>(i)), uint32_t(ref.peers[i].effective));
    }
  }
}

// Larger pools, long steady stretches: the table path over many periods.
TEST(WeightedRoundRobin, MatchesNginxLoopOnLargePools) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    size_t n = 50 + rng() % 200;
    std::vector<uint32_t> weights;
    for (size_t i = 0; i < n; ++i) weights.push_back(1 + rng() % 7);
    Balancer b(kSwrr, specs(weights));
    test::ReferenceSwrr ref(weights);
    for (int step = 0; step < 5000; ++step) {
      if (step % 1000 == 999) {
        size_t i = rng() % n;
        b.report_failure(static_cast<uint32_t>(i));
        ref.fail(i);
      }
      ASSERT_EQ(*ref.pick(), *b.pick()) << "trial " << trial << " step " << step;
    }
  }
}

TEST(WeightedRoundRobin, WeightChangeCarriesStateOver) {
  auto s = specs({5, 1, 1});
  Balancer before(kSwrr, s);
  EXPECT_EQ(letters(before, 3), "AAB");
  CarriedState state = before.carried_state();
  s[2].weight = 3;  // C 1 -> 3
  Balancer after(kSwrr, s, &before);
  // Current weights of A and B carried over (not reset to 0, which would start with A).
  CarriedState carried = after.carried_state();
  EXPECT_EQ(carried.entries.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(carried.find(i)->current_weight, state.find(i)->current_weight);
  // Live state carries over too.
  before.live(0).active = 7;
  Balancer again(kSwrr, s, &before);
  EXPECT_EQ(again.live(0).active.load(), 7u);
  // Over any 9 picks of a steady period the new weights hold exactly.
  std::map<char, int> counts;
  letters(after, 9 * 20);  // leave the transient of the carried-over state
  for (char c : letters(after, 9 * 10)) counts[c]++;
  EXPECT_EQ(counts['A'], 50);
  EXPECT_EQ(counts['B'], 10);
  EXPECT_EQ(counts['C'], 30);
}

// A drained backend is no member of the policy: brought back it starts as an
// added one (current weight 0, full effective weight), as docs/balancing.md
// says, while the others keep their state across both changes.
TEST(WeightedRoundRobin, DrainedThenRestoredStartsAsAdded) {
  auto s = specs({5, 2, 1});
  Balancer before(kSwrr, s);
  EXPECT_EQ(letters(before, 3), "ABA");
  ASSERT_LT(before.carried_state().find(1)->current_weight, 0);
  before.report_failure(1);  // max_fails 1: B's effective weight 2 -> 0
  ASSERT_EQ(before.effective_weight(1), 0u);
  s[1].weight = 0;
  Balancer drained(kSwrr, s, &before);
  EXPECT_EQ(letters(drained, 12).find('B'), std::string::npos);
  s[1].weight = 2;
  Balancer restored(kSwrr, s, &drained);
  EXPECT_EQ(restored.carried_state().find(1)->current_weight, 0);
  EXPECT_EQ(restored.effective_weight(1), 2u);
  for (uint32_t i : {0u, 2u})
    EXPECT_EQ(restored.carried_state().find(i)->current_weight, drained.carried_state().find(i)->current_weight);
}

// A raised weight holds from the first pick (the canary's 1:1 -> 95:5): the
// effective weight of a backend at full weight is its new full weight at once,
// not the old one climbing by one per pick.
TEST(WeightedRoundRobin, RaisedWeightIsFullAtOnce) {
  auto s = specs({1, 1});
  Balancer before(kSwrr, s);
  EXPECT_EQ(letters(before, 2), "AB");  // current weights back at 0, 0
  s[0].weight = 95;
  s[1].weight = 5;
  Balancer after(kSwrr, s, &before);
  EXPECT_EQ(after.effective_weight(0), 95u);
  EXPECT_EQ(after.effective_weight(1), 5u);
  std::map<char, int> counts;
  for (char c : letters(after, 100)) counts[c]++;
  EXPECT_EQ(counts['A'], 95);
  EXPECT_EQ(counts['B'], 5);
  // And down again: 95:5 -> 5:95 within the next 100.
  s[0].weight = 5;
  s[1].weight = 95;
  Balancer back(kSwrr, s, &after);
  counts.clear();
  for (char c : letters(back, 100)) counts[c]++;
  EXPECT_EQ(counts['A'], 5);
  EXPECT_EQ(counts['B'], 95);
}

// Any k * total picks from any mix of threads: exactly k * weight each.
TEST(WeightedRoundRobin, ExactAcrossFourThreads) {
  for (auto weights : std::vector<std::vector<uint32_t>>{{5, 3, 2}, {5, 1, 1}, {13, 7, 3, 1, 1}}) {
    Balancer b(kSwrr, specs(weights));
    uint32_t total = 0;
    for (uint32_t w : weights) total += w;
    const int kThreads = 4;
    const int k = 2000;
    std::vector<std::vector<int>> counts(kThreads, std::vector<int>(weights.size(), 0));
    std::vector<std::thread> threads;
    std::atomic<int> remaining{static_cast<int>(k * total)};
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        while (remaining.fetch_sub(1) > 0) counts[t][*b.pick()]++;
      });
    for (auto& th : threads) th.join();
    for (size_t i = 0; i < weights.size(); ++i) {
      int sum = 0;
      for (int t = 0; t < kThreads; ++t) sum += counts[t][i];
      EXPECT_EQ(sum, k * static_cast<int>(weights[i])) << "backend " << i;
    }
    // The pool state is still a point of the exact sequence: the next period is exact too.
    std::map<char, int> next;
    for (char c : letters(b, static_cast<int>(total))) next[c]++;
    for (size_t i = 0; i < weights.size(); ++i) EXPECT_EQ(next[char('A' + i)], static_cast<int>(weights[i]));
  }
}

// Pools large enough to prefetch availability ahead, with flips and failures.
TEST(WeightedRoundRobin, MatchesNginxLoopOnPrefetchingPools) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    size_t n = 257 + rng() % 400;
    std::vector<uint32_t> weights;
    for (size_t i = 0; i < n; ++i) weights.push_back(1 + rng() % 9);
    Balancer b(kSwrr, specs(weights));
    test::ReferenceSwrr ref(weights);
    for (int step = 0; step < 6000; ++step) {
      if (step % 700 == 350) {
        size_t i = rng() % n;
        bool up = !ref.peers[i].available;
        b.set_available(static_cast<uint32_t>(i), up);
        ref.peers[i].available = up;
      } else if (step % 1500 == 1499) {
        size_t i = rng() % n;
        b.report_failure(static_cast<uint32_t>(i));
        ref.fail(i);
      }
      ASSERT_EQ(*ref.pick(), *b.pick()) << "trial " << trial << " step " << step;
    }
  }
}

// Every table epoch has a 16-bit tag; more epochs than tags (availability flips)
// and long steady stretches (the ticket counter lowered by whole periods) keep
// the exact sequence.
TEST(WeightedRoundRobin, EpochTagsWrapAndCounterStaysExact) {
  std::vector<uint32_t> weights{5, 3, 2, 7};
  Balancer b(kSwrr, specs(weights));
  test::ReferenceSwrr ref(weights);
  std::mt19937_64 rng(3);
  for (int epoch = 0; epoch < 70000; ++epoch) {
    size_t i = rng() % weights.size();
    bool up = !ref.peers[i].available;
    b.set_available(static_cast<uint32_t>(i), up);
    ref.peers[i].available = up;
    int picks = epoch % 10000 == 0 ? 9000 : static_cast<int>(rng() % 3);
    for (int k = 0; k < picks; ++k) {
      auto want = ref.pick();
      auto got = b.pick();
      ASSERT_EQ(want.has_value(), got.has_value()) << "epoch " << epoch;
      if (want) {
        ASSERT_EQ(*want, *got) << "epoch " << epoch;
      }
    }
  }
}

// A replaced snapshot is never told about availability changes made through
// its successor, but shares the backends' live state: it must still never
// return an unavailable backend.
TEST(WeightedRoundRobin, ReplacedSnapshotSeesAvailability) {
  auto s = specs({4, 3, 2, 1});
  Balancer old_snapshot(kSwrr, s);
  letters(old_snapshot, 5);
  Balancer current(kSwrr, s, &old_snapshot);
  letters(old_snapshot, 5);  // back on its table
  current.set_available(0, false);
  current.set_available(2, false);
  for (int i = 0; i < 1000; ++i) {
    uint32_t got = *old_snapshot.pick();
    ASSERT_TRUE(got == 1 || got == 3) << i;
  }
  for (int i = 0; i < 1000; ++i) {
    uint32_t got = *current.pick();
    ASSERT_TRUE(got == 1 || got == 3) << i;
  }
}

// Pools over 65,536 backends use wide table entries.
TEST(WeightedRoundRobin, WideTableEntries) {
  const uint32_t n = 70000;
  Balancer b(kSwrr, specs(std::vector<uint32_t>(n, 1)));
  // Equal weights from the zero state: configured order, over and over.
  for (uint32_t k = 0; k < 2 * n; ++k) ASSERT_EQ(*b.pick(), k % n) << k;
  b.set_available(68000, false);
  std::vector<int> counts(n, 0);
  for (uint32_t k = 0; k < 2 * (n - 1); ++k) counts[*b.pick()]++;
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(counts[i], i == 68000 ? 0 : 2) << i;
}

// Threads picking while another flips availability and reports failures: no
// crash, never a backend that was down for the whole pick, and afterwards the
// carried state continues exactly as nginx's loop would from it.
TEST(WeightedRoundRobin, ConcurrentChurnThenExact) {
  std::vector<uint32_t> weights{9, 5, 3, 2, 1, 7, 4, 4};
  for (int round = 0; round < 4; ++round) {
    Balancer b(kSwrr, specs(weights, 2));
    const uint32_t kAlwaysDown = 6;
    b.set_available(kAlwaysDown, false);
    std::atomic<bool> stop{false};
    std::atomic<bool> bad{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        TriedSet tried;
        tried.add(static_cast<uint32_t>(t));
        while (!stop.load(std::memory_order_relaxed)) {
          auto got = t == 0 ? b.pick({.tried = &tried}) : b.pick();
          if (got && (*got == kAlwaysDown || (t == 0 && *got == 0))) bad = true;
        }
      });
    std::mt19937_64 rng(round);
    for (int k = 0; k < 3000; ++k) {
      uint32_t i = static_cast<uint32_t>(rng() % weights.size());
      if (i == kAlwaysDown) continue;
      if (rng() % 2) b.set_available(i, !b.live(i).available.load());
      else b.report_failure(i);
      if (k % 100 == 0) std::this_thread::yield();
    }
    stop = true;
    for (auto& th : threads) th.join();
    EXPECT_FALSE(bad.load());
    for (uint32_t i = 0; i < weights.size(); ++i)
      if (i != kAlwaysDown) b.set_available(i, true);
    CarriedState state = b.carried_state();
    test::ReferenceSwrr ref(weights, 2);
    for (uint32_t i = 0; i < weights.size(); ++i) {
      ref.peers[i].current = state.find(i)->current_weight;
      ref.peers[i].effective = state.find(i)->effective_weight;
    }
    ref.peers[kAlwaysDown].available = false;
    for (int step = 0; step < 5000; ++step)
      ASSERT_EQ(*ref.pick(), *b.pick()) << "round " << round << " step " << step;
  }
}

// engaged_index builds std::optional<uint32_t> from its bytes.
TEST(WeightedRoundRobin, EngagedIndexIsAnOptional) {
  for (uint32_t v : {0u, 1u, 65535u, 123456789u, UINT32_MAX - 1}) {
    std::optional<uint32_t> o = engaged_index(v);
    ASSERT_TRUE(o.has_value());
    ASSERT_EQ(*o, v);
    ASSERT_EQ(o, std::optional<uint32_t>(v));
  }
}

}  // namespace
}  // namespace heft::balance
