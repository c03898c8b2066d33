#include "upstream/place_queue.h"

#include <vector>

namespace heft::upstream {

PlaceQueue::Place::~Place() { queue_.leave(*this); }

std::unique_ptr<PlaceQueue::Place> PlaceQueue::join(std::size_t limit, std::function<void()> wake, bool front) {
  std::unique_ptr<Place> place(new Place(*this, std::move(wake)));
  std::lock_guard lock(mu_);
  if (!front && waiting_.size() >= limit) return nullptr;
  place->at_ = waiting_.insert(front ? waiting_.begin() : waiting_.end(), place.get());
  place->queued_ = true;
  size_.store(waiting_.size(), std::memory_order_relaxed);
  return place;
}

void PlaceQueue::wake_one() {
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    if (waiting_.empty()) return;
    Place* first = waiting_.front();
    waiting_.pop_front();
    first->queued_ = false;
    size_.store(waiting_.size(), std::memory_order_relaxed);
    // A copy: the waiter may leave and destroy its Place once unlocked.
    wake = first->wake_;
  }
  wake();
}

void PlaceQueue::wake_all() {
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    for (Place* p : waiting_) {
      p->queued_ = false;
      wakes.push_back(p->wake_);
    }
    waiting_.clear();
    size_.store(0, std::memory_order_relaxed);
  }
  for (auto& wake : wakes) wake();
}

bool PlaceQueue::leave(Place& place) {
  std::lock_guard lock(mu_);
  if (!place.queued_) return false;
  waiting_.erase(place.at_);
  place.queued_ = false;
  size_.store(waiting_.size(), std::memory_order_relaxed);
  return true;
}

}  // namespace heft::upstream
