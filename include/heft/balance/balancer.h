// A pool's balancer: the policy over its primary backends, the same policy over
// its backups (picked only when no primary is eligible), and the live
// per-backend state both read. This is what the proxy, the simulator and
// embedding applications call.
//
// A Balancer is one immutable snapshot of the pool's membership and weights.
// A change builds a new Balancer from the old one (`previous`): backends that
// stayed (same name) keep their live state (active counts, availability) and
// their smooth-WRR current and effective weights, so nothing resets.
// A backend added back under the name of one an earlier change removed,
// while an older Balancer that lists it is still alive (requests that began
// before the removal hold it), takes that live object again: its active
// count still counts those requests, so max_conns holds across the removal
// (availability starts over, true, as for any added backend).
//
// Thread safety: after construction every method may be called from any number
// of threads at once.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "heft/balance/policy.h"

namespace heft::balance {

template <class Entry>
class WrrFastPath;  // internal (src/balance/weighted_round_robin.h)

// The largest weight a backend may have (0 drains it): what the
// configuration, `heft pick` and `heft sim` accept. Sums of weights stay far
// inside 64 bits, and weight x kWeightResolution (slow start, adaptive) inside 32.
inline constexpr uint32_t kMaxWeight = 1'000'000;

// A backend as the balancer sees it. The configuration's upstreams and the
// run-time pool's backends are this plus what they add, so a weight written
// in a Heftfile reaches the policy as this one value.
struct BackendSpec {
  std::string name;        // identity, e.g. "10.0.0.1:8080"
  uint32_t weight = 1;     // 0..kMaxWeight; 0 = drained: listed, never picked
  bool backup = false;     // picked only when no primary is eligible
  bool down = false;       // administratively down: never picked
  uint32_t max_fails = 1;  // nginx: a failure costs weight / max_fails of effective weight
  // The weight the policy balances by; 0 = use `weight`. Set by the upstream
  // layer when slow start or adaptive weights scale a backend (see
  // src/upstream/weights.h). `weight` stays the configured value: what is
  // displayed, and what 0 (drained) means.
  uint32_t balance_weight = 0;
  // nginx's max_conns (HAProxy's maxconn): at most this many requests in
  // flight at once; a full backend is passed over until one ends. 0 = no limit.
  uint32_t max_conns = 0;

  bool operator==(const BackendSpec&) const = default;
};

class Balancer {
 public:
  explicit Balancer(PolicyOptions options, std::vector<BackendSpec> backends,
                    const Balancer* previous = nullptr);

  // Chooses a backend for one attempt: a primary if any is eligible, else a
  // backup. nullopt when nothing is eligible.
  std::optional<uint32_t> pick(const PickContext& ctx = {});

  // pick() and begin_request() in one, for pools whose backends may be full
  // (max_conns): a backend with max_conns requests in flight is passed over
  // for this pick, as if tried, and the chosen backend's count is raised as
  // part of the choice, so no thread can push it past its limit. `full`
  // (may be null) is set when a backend was passed over for being full;
  // nullopt with `full` set means every eligible backend was full. The
  // request ends with end_request().
  std::optional<uint32_t> acquire(const PickContext& ctx, bool* full = nullptr);

  // A request starts on / finishes with a backend: its active count goes up /
  // down by one (never below 0) and the policy is told, so least_conn can keep
  // its index instead of scanning. Prefer these to touching live(i).active.
  void begin_request(uint32_t index);
  void end_request(uint32_t index);

  // True when some backend has a max_conns limit.
  bool limited() const { return limited_; }
  // Places left under backend `index`'s max_conns: its limit less the
  // requests in flight there (0 when full); nullopt when it has no limit.
  std::optional<uint32_t> room(uint32_t index) const;

  // Marks a backend available or not (health checks, passive failure).
  // True when this told the policy that the backend became available (it
  // was unavailable to it before): new room for requests waiting for one.
  bool set_available(uint32_t index, bool available);
  // Tells the policies of every availability flag that changed since they
  // were last told. The flags are shared with the balancers of the pool's
  // other snapshots, and set_available() through an older one tells only its
  // own policies: whoever replaces snapshots calls this on the current one
  // now and then (heft's pools on every tick). True when some backend
  // became available to the policies.
  bool sync_availability();

  // An attempt at the backend failed: lowers its effective weight (nginx rule).
  void report_failure(uint32_t index);

  size_t size() const { return backends_.size(); }
  const BackendSpec& backend(uint32_t index) const { return backends_[index]; }
  BackendLive& live(uint32_t index) const { return *live_[index]; }
  std::shared_ptr<BackendLive> live_handle(uint32_t index) const { return live_[index]; }
  uint32_t effective_weight(uint32_t index) const;
  std::optional<uint32_t> find(std::string_view name) const;
  const PolicyOptions& options() const { return options_; }

  // Current and effective weights by backend index (what a rebuilt snapshot
  // carries over; also shown by tools). Leaves smooth WRR on its exact loop.
  CarriedState carried_state() const;

 private:
  [[gnu::noinline]] std::optional<uint32_t> acquire_limited(const PickContext& ctx, bool* full);
  // Tells both policies that backend `index`'s active count changed.
  void tell_active_changed(uint32_t index);

  PolicyOptions options_;
  std::vector<BackendSpec> backends_;
  std::vector<uint32_t> name_slots_;  // open-addressing table: backend index + 1, 0 = empty
  std::vector<std::shared_ptr<BackendLive>> live_;
  std::vector<BackendLive*> live_ptrs_;
  // Backends of earlier Balancers this one does not list, whose live objects
  // older Balancers may still hold (see the top): what a backend added back
  // takes again. Entries whose objects are gone are dropped at each rebuild.
  struct Retired {
    std::string name;
    std::weak_ptr<BackendLive> live;
  };
  std::vector<Retired> retired_;
  // The availability this balancer's policies were last told of, by index.
  std::unique_ptr<std::atomic<bool>[]> told_available_;
  std::unique_ptr<Policy> primary_;
  std::unique_ptr<Policy> backup_;
  bool limited_ = false;  // some backend has max_conns
  // primary_'s smooth-WRR fast path when it has one: picks skip the virtual call.
  WrrFastPath<uint32_t>* primary_wrr_ = nullptr;
};

}  // namespace heft::balance
