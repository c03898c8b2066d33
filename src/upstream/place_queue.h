// Requests waiting for a place in a pool whose backends are all at their
// max_conns (nginx Plus's upstream `queue`, HAProxy's queue behind maxconn),
// first come, first served.
//
// A request that finds every backend full joins with a wake-up call; a
// request that ends at a backend of the pool wakes the one waiting longest,
// which then picks again (and, if a newcomer took the place first, rejoins at
// the front). No clock and no I/O here: the waiting itself, and its timeout,
// are the caller's.
//
// Thread safety: every method may be called from any thread at once. The
// wake-up call runs on the thread that frees the place, under no lock of
// this queue's; it must only hand the news to the waiter's own thread.
#pragma once

#include <atomic>
#include <cstddef>
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
    std::list<Place*>::iterator at_;
    bool queued_ = false;  // guarded by queue_.mu_
  };

  // Joins at the back, or at the front for a request woken whose place was
  // taken (it keeps its turn, and was counted in the queue already: the limit
  // does not apply to it). Null when `limit` requests wait already.
  std::unique_ptr<Place> join(std::size_t limit, std::function<void()> wake, bool front = false);
  // Wakes the request waiting longest, if any: a place may have freed.
  void wake_one();
  // Wakes every waiting request: the pool changed (limits, backends).
  void wake_all();
  // Leaves the queue; false when the request had been woken (and so had
  // left already). A woken request that gives up without picking should
  // pass its wake-up on (wake_one()), or a free place could stay unused
  // while others wait.
  bool leave(Place& place);

  // Requests waiting now (a hint: it may change at once).
  std::size_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::list<Place*> waiting_;
  std::atomic<std::size_t> size_{0};
};

}  // namespace heft::upstream
