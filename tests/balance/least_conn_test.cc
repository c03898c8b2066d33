// least_conn's index against a plain O(n) transcription of nginx's least_conn:
// pick for pick on pools of up to 64 members; on large pools, the minimum
// ratio, eligibility and weight-proportional tie shares.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "heft/balance/balancer.h"

namespace heft::balance {
namespace {

// nginx's ngx_http_upstream_get_least_conn_peer, deliberately naive.
struct ReferenceLeastConn {
  struct Peer {
    int64_t weight, effective, current = 0;
    uint64_t active = 0;
    bool available = true;
  };
  std::vector<Peer> peers;

  explicit ReferenceLeastConn(const std::vector<uint32_t>& weights) {
    for (uint32_t w : weights) peers.push_back({w, w});
  }

  std::optional<size_t> pick(const std::set<size_t>& tried = {}) {
    std::optional<size_t> best;
    size_t many = 0;
    for (size_t i = 0; i < peers.size(); ++i) {
      const Peer& p = peers[i];
      if (!p.available || tried.count(i)) continue;
      if (!best || p.active * peers[*best].weight < peers[*best].active * p.weight) {
        best = i;
        many = 0;
      } else if (p.active * peers[*best].weight == peers[*best].active * p.weight) {
        many = 1;
      }
    }
    if (!best || !many) return best;
    size_t first = *best;
    int64_t total = 0;
    std::optional<size_t> win;
    for (size_t i = first; i < peers.size(); ++i) {
      Peer& p = peers[i];
      if (!p.available || tried.count(i)) continue;
      if (p.active * peers[first].weight != peers[first].active * p.weight) continue;
      p.current += p.effective;
      total += p.effective;
      if (p.effective < p.weight) p.effective++;
      if (!win || p.current > peers[*win].current) win = i;
    }
    peers[*win].current -= total;
    return win;
  }

  void fail(size_t i, int64_t max_fails) {
    Peer& p = peers[i];
    p.effective = std::max<int64_t>(0, p.effective - p.weight / max_fails);
  }
};

std::vector<BackendSpec> specs(const std::vector<uint32_t>& weights, uint32_t max_fails = 1) {
  std::vector<BackendSpec> out;
  for (size_t i = 0; i < weights.size(); ++i)
    out.push_back({.name = std::string("b").append(std::to_string(i)), .weight = weights[i], .max_fails = max_fails});
  return out;
}

std::vector<uint32_t> random_weights(std::mt19937_64& rng, size_t n, uint32_t max_weight) {
  std::vector<uint32_t> w(n);
  for (auto& x : w) x = 1 + rng() % max_weight;
  return w;
}

// Minimum active/weight among eligible members, as (active, weight), by brute force.
bool is_minimum(Balancer& b, uint32_t chosen, const TriedSet* tried = nullptr) {
  uint64_t ca = b.live(chosen).active.load(), cw = b.backend(chosen).weight;
  for (uint32_t i = 0; i < b.size(); ++i) {
    if (!b.live(i).available.load() || (tried && tried->contains(i))) continue;
    if (uint64_t(b.live(i).active.load()) * cw < ca * b.backend(i).weight) return false;
  }
  return true;
}

TEST(LeastConnIndex, MatchesNginxPickForPickUpTo64Members) {
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 300; ++round) {
    size_t n = 2 + rng() % 63;
    uint32_t max_weight = round % 3 == 0 ? 3 : round % 3 == 1 ? 10 : 100;
    uint32_t max_fails = 1 + rng() % 3;
    auto weights = random_weights(rng, n, max_weight);
    Balancer b({PolicyKind::least_conn}, specs(weights, max_fails));
    ReferenceLeastConn ref(weights);
    for (int step = 0; step < 2000; ++step) {
      uint32_t r = rng() % 100;
      if (r < 45) {  // pick; usually the request starts
        auto got = b.pick();
        auto want = ref.pick();
        ASSERT_EQ(got.has_value(), want.has_value()) << "round " << round << " step " << step;
        if (!got) continue;
        ASSERT_EQ(*got, *want) << "round " << round << " step " << step << " n " << n;
        if (rng() % 4 != 0) {
          b.begin_request(*got);
          ref.peers[*want].active++;
        }
      } else if (r < 80) {  // a request ends somewhere
        uint32_t i = rng() % n;
        b.end_request(i);
        if (ref.peers[i].active) ref.peers[i].active--;
      } else if (r < 88) {  // an extra request begins somewhere
        uint32_t i = rng() % n;
        b.begin_request(i);
        ref.peers[i].active++;
      } else if (r < 93) {  // availability flips
        uint32_t i = rng() % n;
        bool up = rng() % 3 != 0;
        b.set_available(i, up);
        ref.peers[i].available = up;
      } else if (r < 96) {  // a failed attempt
        uint32_t i = rng() % n;
        b.report_failure(i);
        ref.fail(i, max_fails);
      } else {  // a retry with a tried set
        TriedSet tried;
        std::set<size_t> ref_tried;
        for (int k = 0; k < 3; ++k) {
          uint32_t i = rng() % n;
          tried.add(i);
          ref_tried.insert(i);
        }
        auto got = b.pick({.tried = &tried});
        auto want = ref.pick(ref_tried);
        ASSERT_EQ(got.has_value(), want.has_value());
        if (got) {
          ASSERT_EQ(*got, *want) << "round " << round << " step " << step << " (tried)";
        }
      }
    }
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(b.effective_weight(i), uint32_t(ref.peers[i].effective));
  }
}

TEST(LeastConnIndex, LargePoolsPickTheMinimumRatioAndNeverIneligible) {
  std::mt19937_64 rng(7);
  for (size_t n : {1000u, 4000u, 10000u}) {
    auto weights = random_weights(rng, n, n == 4000 ? 1000 : 10);  // few or many weight classes
    Balancer b({PolicyKind::least_conn}, specs(weights));
    for (int step = 0; step < 60000; ++step) {
      uint32_t r = rng() % 100;
      if (r < 50) {
        TriedSet tried;
        bool with_tried = rng() % 50 == 0;
        if (with_tried) {
          for (int k = 0; k < 5; ++k) tried.add(rng() % n);
        }
        auto got = b.pick({.tried = with_tried ? &tried : nullptr});
        ASSERT_TRUE(got.has_value());
        ASSERT_TRUE(b.live(*got).available.load()) << "step " << step;
        ASSERT_FALSE(with_tried && tried.contains(*got));
        ASSERT_TRUE(is_minimum(b, *got, with_tried ? &tried : nullptr)) << "n " << n << " step " << step;
        b.begin_request(*got);
      } else if (r < 95) {
        b.end_request(rng() % n);
      } else if (r < 98) {
        b.begin_request(rng() % n);
      } else {
        b.set_available(rng() % n, rng() % 4 != 0);
      }
    }
  }
}

TEST(LeastConnIndex, LargeIdleRunSharesFollowWeights) {
  std::mt19937_64 rng(99);
  for (size_t n : {1000u, 5000u}) {
    auto weights = random_weights(rng, n, n == 1000 ? 50 : 10);
    Balancer b({PolicyKind::least_conn}, specs(weights));
    uint64_t total_weight = 0;
    for (uint32_t w : weights) total_weight += w;
    // A few long-lived requests on some backends; everything else is idle.
    std::vector<uint32_t> busy;
    for (int k = 0; k < 20; ++k) {
      busy.push_back(rng() % n);
      b.begin_request(busy.back());
    }
    std::vector<uint64_t> counts(n, 0);
    const uint64_t rounds = 50;
    for (uint64_t t = 0; t < rounds * total_weight; ++t) {
      uint32_t i = *b.pick();
      ++counts[i];
      b.begin_request(i);
      b.end_request(i);
    }
    std::set<uint32_t> busy_set(busy.begin(), busy.end());
    for (uint32_t i = 0; i < n; ++i) {
      if (busy_set.count(i)) continue;
      double want = double(rounds) * weights[i];
      // Proportional within a few %: tie sets are large, so round robin inside
      // a weight class and EDF across classes carry the shares.
      EXPECT_NEAR(double(counts[i]), want, std::max(0.03 * want, 2.0)) << "member " << i << " weight " << weights[i];
    }
  }
}

TEST(LeastConnIndex, UnnotifiedChangesAreCaught) {
  std::mt19937_64 rng(5);
  auto weights = random_weights(rng, 500, 10);
  Balancer b({PolicyKind::least_conn}, specs(weights));
  // Direct increments (what callers did before begin_request): always exact.
  for (int step = 0; step < 20000; ++step) {
    auto got = b.pick();
    ASSERT_TRUE(got);
    ASSERT_TRUE(is_minimum(b, *got)) << step;
    b.live(*got).active.fetch_add(1);
    if (step % 3 == 0) b.live(rng() % 500).active.fetch_add(1);
  }
  // Direct decreases elsewhere: repaired within n picks by the audit.
  for (uint32_t i = 0; i < 500; i += 7) b.live(i).active.store(0);
  for (int step = 0; step < 510; ++step) b.pick();
  for (int step = 0; step < 2000; ++step) {
    auto got = b.pick();
    ASSERT_TRUE(is_minimum(b, *got)) << step;
    b.begin_request(*got);
  }
  // Availability flipped behind its back: never returned.
  for (uint32_t i = 0; i < 500; ++i)
    if (i % 5) b.live(i).available.store(false);
  for (int step = 0; step < 2000; ++step) {
    auto got = b.pick();
    ASSERT_TRUE(got);
    ASSERT_EQ(*got % 5, 0u);
    b.begin_request(*got);
  }
}

TEST(LeastConnIndex, BeginEndRequestAndRebuildCarryActive) {
  Balancer b({PolicyKind::least_conn}, specs(std::vector<uint32_t>(20, 1)));
  b.begin_request(3);
  b.begin_request(3);
  b.end_request(4);  // never below 0
  EXPECT_EQ(b.live(3).active.load(), 2u);
  EXPECT_EQ(b.live(4).active.load(), 0u);
  for (uint32_t i = 0; i < 20; ++i)
    if (i != 3) b.begin_request(i), b.begin_request(i), b.begin_request(i);
  EXPECT_EQ(*b.pick(), 3u);
  Balancer next({PolicyKind::least_conn}, specs(std::vector<uint32_t>(20, 1)), &b);
  EXPECT_EQ(*next.pick(), 3u);  // the rebuilt index starts from the live counts
  next.end_request(5);
  next.end_request(5);
  next.end_request(5);
  EXPECT_EQ(*next.pick(), 5u);
}

}  // namespace
}  // namespace heft::balance
