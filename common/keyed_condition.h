// KeyedCondition: condition variables by key, all under their owner's one mutex. A waiter on a
// key is woken by a change of that key (or by NotifyAll), not by every change: a thousand
// streams each waiting for their own node's commands or their own job's change do not all wake,
// and take the owner's lock, for every change of any of them.
//
// Threading: every method must be called with the owner's mutex held (Wait* take the
// std::unique_lock on it and release it while they sleep, as std::condition_variable does).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace deepool {

class KeyedCondition {
 public:
  // Sleeps until pred() holds (checked first), a Notify of `key` or NotifyAll makes it hold, or
  // `timeout` passes; returns pred().
  template <typename Predicate>
  bool WaitFor(std::unique_lock<std::mutex>& lock, const std::string& key,
               std::chrono::milliseconds timeout, Predicate pred) {
    std::unique_ptr<Entry>& slot = entries_[key];
    if (!slot) slot = std::make_unique<Entry>();
    Entry* entry = slot.get();  // stays put: only the last waiter of the key erases it
    ++entry->waiters;
    const bool held = entry->cv.wait_for(lock, timeout, pred);
    if (--entry->waiters == 0) entries_.erase(key);
    return held;
  }
  void Notify(const std::string& key) {
    auto it = entries_.find(key);
    if (it != entries_.end()) it->second->cv.notify_all();
  }
  void NotifyAll() {
    for (auto& [key, entry] : entries_) entry->cv.notify_all();
  }

 private:
  struct Entry {
    std::condition_variable cv;
    int waiters = 0;
  };
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;
};

}  // namespace deepool
