#include "upstream/place_queue.h"

#include <vector>

namespace heft::upstream {

PlaceQueue::Place::~Place() { queue_.leave(*this); }

std::unique_ptr<PlaceQueue::Place> PlaceQueue::join(std::size_t limit, std::function<void()> wake, bool front,
                                                    bool* first) {
  std::unique_ptr<Place> place(new Place(*this, std::move(wake)));
  std::lock_guard lock(mu_);
  if (!front && waiting_.size() >= limit) {
    full_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (!front) joined_.fetch_add(1, std::memory_order_relaxed);  // (a rejoin was counted when it first came)
  if (first) {
    *first = front || pending_ == 0;
    // Only woken requests ahead, and a place freed that none of them was
    // woken for: this request is the one to look for it.
    if (!*first && spare_ > 0 && waiting_.empty()) {
      --spare_;
      *first = true;
    }
  }
  place->at_ = waiting_.insert(front ? waiting_.begin() : waiting_.end(), place.get());
  place->state_ = Place::State::queued;
  size_.store(++pending_, std::memory_order_seq_cst);
  return place;
}

void PlaceQueue::wake(std::size_t count) {
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    while (!waiting_.empty() && wakes.size() < count) {
      Place* first = waiting_.front();
      waiting_.pop_front();
      first->state_ = Place::State::woken;  // still pending until it leaves
      // A copy: the waiter may leave and destroy its Place once unlocked.
      wakes.push_back(first->wake_);
    }
    // Places left over with nobody in line but woken requests still to
    // pick, each for a place of its own: nobody's yet. Kept for the next to
    // join (see join()), or it would wait behind them for another request
    // to end with a place free (to its queue_timeout if none did).
    if (count != SIZE_MAX && wakes.size() < count && pending_ > 0) spare_ += count - wakes.size();
  }
  for (auto& wake : wakes) wake();
}

bool PlaceQueue::leave(Place& place) {
  std::lock_guard lock(mu_);
  if (place.state_ == Place::State::gone) return false;
  const bool was_queued = place.state_ == Place::State::queued;
  if (was_queued) waiting_.erase(place.at_);
  place.state_ = Place::State::gone;
  size_.store(--pending_, std::memory_order_seq_cst);
  if (pending_ == 0) spare_ = 0;  // a newcomer is first now anyway
  return was_queued;
}

}  // namespace heft::upstream
