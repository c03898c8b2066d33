#include "heft/balance/balancer.h"

#include "heft/balance/hash.h"

namespace heft::balance {

Balancer::Balancer(PolicyOptions options, std::vector<BackendSpec> backends, const Balancer* previous)
    : options_(options), backends_(std::move(backends)) {
  std::vector<Member> primaries, backups;
  by_name_.reserve(backends_.size());
  for (uint32_t i = 0; i < backends_.size(); ++i) {
    const BackendSpec& b = backends_[i];
    by_name_.emplace(b.name, i);
    std::shared_ptr<BackendLive> live;
    if (previous) {
      if (auto old = previous->find(b.name)) live = previous->live_[*old];
    }
    live_.push_back(live ? live : std::make_shared<BackendLive>());
    live_ptrs_.push_back(live_.back().get());
    if (b.weight == 0 || b.down) continue;  // drained or down: listed, never a member
    (b.backup ? backups : primaries).push_back(Member{i, b.weight, hash_key(b.name)});
  }
  CarriedState carried;
  if (previous) carried = previous->carried_state();
  const CarriedState* carry = previous ? &carried : nullptr;
  primary_ = make_policy(options_, std::move(primaries), live_ptrs_, carry);
  backup_ = make_policy(options_, std::move(backups), live_ptrs_, carry);
}

std::optional<uint32_t> Balancer::pick(const PickContext& ctx) {
  if (auto choice = primary_->pick(ctx)) return choice;
  return backup_->pick(ctx);
}

void Balancer::set_available(uint32_t index, bool available) {
  if (index >= live_.size()) return;
  if (live_[index]->available.exchange(available) == available) return;
  Policy& policy = backends_[index].backup ? *backup_ : *primary_;
  policy.availability_changed(index);
}

void Balancer::report_failure(uint32_t index) {
  if (index >= backends_.size()) return;
  Policy& policy = backends_[index].backup ? *backup_ : *primary_;
  policy.attempt_failed(index, backends_[index].max_fails);
}

uint32_t Balancer::effective_weight(uint32_t index) const {
  if (index >= backends_.size()) return 0;
  const BackendSpec& b = backends_[index];
  if (b.weight == 0 || b.down) return 0;
  return (b.backup ? *backup_ : *primary_).effective_weight(index);
}

std::optional<uint32_t> Balancer::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

CarriedState Balancer::carried_state() const {
  CarriedState out;
  primary_->export_state(out);
  backup_->export_state(out);
  return out;
}

}  // namespace heft::balance
