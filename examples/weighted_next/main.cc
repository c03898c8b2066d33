// Embedding heft's balancing core as a weighted balancer library is used: add
// backends with weights, ask for the next one, report a failure.
//
//   find_package(heft REQUIRED)
//   target_link_libraries(app PRIVATE heft::balance)
#include <cstdio>
#include <string>
#include <vector>

#include <heft/balance/balancer.h>

int main() {
  using namespace heft::balance;

  // "Add": three servers weighted 4:2:1; nginx's max_fails 2 per backend.
  std::vector<BackendSpec> servers = {
      {.name = "127.0.0.1:81", .weight = 4, .max_fails = 2},
      {.name = "127.0.0.1:82", .weight = 2, .max_fails = 2},
      {.name = "127.0.0.1:83", .weight = 1, .max_fails = 2},
  };
  Balancer balancer({.kind = PolicyKind::weighted_round_robin}, servers);

  // "Next": one full cycle of smooth weighted round robin.
  std::string sequence;
  for (int i = 0; i < 7; ++i) {
    uint32_t chosen = *balancer.pick();
    sequence += balancer.backend(chosen).name.substr(10) + " ";
  }
  std::printf("cycle: %s\n", sequence.c_str());

  // A failure: the first server's effective weight drops by weight / max_fails
  // (4 / 2 = 2) and climbs back by one on each pick in which it takes part.
  balancer.report_failure(0);
  std::printf("effective weight after failure: %u\n", balancer.effective_weight(0));
  for (int i = 0; i < 2; ++i) balancer.pick();
  std::printf("effective weight after 2 picks: %u\n", balancer.effective_weight(0));
  return 0;
}
