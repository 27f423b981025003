#include "coordinator/call_slots.h"

namespace deepool::coordinator {

StatusOr<CallSlots::Slot> CallSlots::Acquire(const std::string& user) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!user.empty() && limits_.per_user > 0) {
    auto it = open_by_user_.find(user);
    if (it != open_by_user_.end() && it->second >= limits_.per_user) {
      return ResourceExhaustedError("user " + user + " already has " + std::to_string(it->second) +
                                    " " + what_ + " open, the most one user may (" +
                                    per_user_flag_ + " " + std::to_string(limits_.per_user) +
                                    "); close some and try again");
    }
  }
  if (limits_.total > 0 && open_ >= limits_.total) {
    return ResourceExhaustedError("the coordinator already serves " +
                                  std::to_string(limits_.total) + " " + what_ + " (" + total_flag_ +
                                  "); close some and try again");
  }
  ++open_;
  if (!user.empty()) ++open_by_user_[user];
  return Slot(this, user);
}

void CallSlots::Release(const std::string& user) {
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  if (user.empty()) return;
  auto it = open_by_user_.find(user);
  if (it != open_by_user_.end() && --it->second == 0) open_by_user_.erase(it);
}

int CallSlots::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

int CallSlots::open(const std::string& user) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_by_user_.find(user);
  return it == open_by_user_.end() ? 0 : it->second;
}

}  // namespace deepool::coordinator
