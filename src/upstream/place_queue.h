// Requests waiting for a place in a pool whose backends are all at their
// max_conns (nginx Plus's upstream `queue`, HAProxy's queue behind maxconn),
// first come, first served.
//
// A request that finds every backend full joins with a wake-up call; a
// request that ends at a backend of the pool wakes the one waiting longest,
// which then picks again (and, if another took the place first, rejoins at
// the front). A woken request counts as waiting until it leaves (picked or
// gave up), so a newcomer that checks size() queues behind it instead of
// taking the place freed for it. No clock and no I/O here: the waiting
// itself, and its timeout, are the caller's.
//
// Thread safety: every method may be called from any thread at once. The
// wake-up call runs on the thread that frees the place, under no lock of
// this queue's; it must only hand the news to the waiter's own thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

namespace heft::upstream {

class PlaceQueue {
 public:
  // One waiting request; leaves the queue when destroyed.
  class Place {
   public:
    ~Place();
    Place(const Place&) = delete;
    Place& operator=(const Place&) = delete;

   private:
    friend class PlaceQueue;
    Place(PlaceQueue& queue, std::function<void()> wake) : queue_(queue), wake_(std::move(wake)) {}
    PlaceQueue& queue_;
    std::function<void()> wake_;
    enum class State { queued, woken, gone };
    std::list<Place*>::iterator at_;
    State state_ = State::gone;  // guarded by queue_.mu_
  };

  // Joins at the back, or at the front for a request woken whose place was
  // taken (it keeps its turn, and was counted in the queue already: the limit
  // does not apply to it). Null when `limit` requests are in line already.
  // `first` (may be null): nobody waits ahead of it, woken or not, so no
  // wake-up may be on its way for a place freed just before: the caller
  // should look for one itself. Also set for the first to join behind woken
  // requests only, after a wake-up found nobody in line (a place freed
  // while every waiting request had been woken already: theirs are taken
  // care of, this one is nobody's).
  std::unique_ptr<Place> join(std::size_t limit, std::function<void()> wake, bool front = false,
                              bool* first = nullptr);
  // Wakes the request waiting longest, if any: a place may have freed. With
  // nobody in line but woken requests still to pick, the place is kept for
  // the next to join (`first`).
  void wake_one() { wake(1); }
  // Wakes every waiting request: the pool changed (limits, backends).
  void wake_all() { wake(SIZE_MAX); }
  // Wakes the `count` requests waiting longest (fewer if fewer wait): that
  // many places may have freed at once (a backend came back). Places left
  // over are kept as wake_one() keeps its one.
  void wake(std::size_t count);
  // Leaves the queue (a place found, or given up); false when the request
  // had been woken, or had left already. A woken request that gives up
  // without picking should pass its wake-up on (wake_one()), or a free place
  // could stay unused while others wait.
  bool leave(Place& place);

  // Requests waiting now, the woken ones that have not left included (a
  // hint: it may change at once).
  // (seq_cst, as the counts Balancer::acquire() and end_request() change:
  // a request ending reads this after its count, one joining writes it
  // before it picks.)
  std::size_t size() const { return size_.load(std::memory_order_seq_cst); }

  // Counted since the pool began (nginx Plus's queue `overflows`, HAProxy's
  // per-backend queue counts): requests that joined, that found it full, and
  // that gave up after the queue timeout (the caller's note_timeout()).
  struct Counts {
    uint64_t joined = 0, full = 0, timed_out = 0;
  };
  Counts counts() const {
    return {joined_.load(std::memory_order_relaxed), full_.load(std::memory_order_relaxed),
            timed_out_.load(std::memory_order_relaxed)};
  }
  void note_timeout() { timed_out_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::list<Place*> waiting_;  // in line, not yet woken
  std::size_t pending_ = 0;    // in line or woken, not left
  // Wake-ups that found nobody in line while woken requests were pending:
  // places freed for no one. The next to join at the back with an empty
  // line takes one (as `first`); forgotten when nobody is pending (every
  // newcomer looks for a place itself then).
  std::size_t spare_ = 0;
  std::atomic<std::size_t> size_{0};
  std::atomic<uint64_t> joined_{0}, full_{0}, timed_out_{0};
};

}  // namespace heft::upstream
