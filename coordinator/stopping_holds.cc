#include "coordinator/stopping_holds.h"

#include <algorithm>

namespace deepool::coordinator {

StoppingHolds::StoppingHolds(DeviceLedger* ledger) : ledger_(ledger) {}

void StoppingHolds::HoldForJob(const std::string& job_id, const std::vector<DeviceKey>& devices,
                               const std::vector<std::string>& task_ids) {
  const std::string holder = job_id + " (stopping)";
  bool holding = false;
  for (const DeviceKey& key : devices) {
    if (ledger_->ForegroundOf(key)) continue;
    ledger_->HoldForeground(key, holder);
    holding = true;
  }
  if (holding) tasks_of_[holder] = task_ids;
}

void StoppingHolds::HoldForNode(const NodeRecord& node, const std::vector<std::string>& task_ids) {
  if (task_ids.empty()) return;
  const std::string holder = "node " + node.name + " (stopping tasks it was told to cancel)";
  for (const DeviceInfo& device : node.devices) {
    const DeviceKey key{node.id, device.device};
    if (!ledger_->ForegroundOf(key)) ledger_->HoldForeground(key, holder);
  }
  // Each task once: a node that registers again and again with the same tasks (or lists one
  // many times) must not grow the wait.
  std::vector<std::string>& held = tasks_of_[holder];
  held.insert(held.end(), task_ids.begin(), task_ids.end());
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
}

bool StoppingHolds::ReleaseEnded(const NoneLive& none_live) {
  bool released = false;
  for (auto it = tasks_of_.begin(); it != tasks_of_.end();) {
    if (!none_live(it->second)) {
      ++it;
      continue;
    }
    ledger_->Release(it->first);
    it = tasks_of_.erase(it);
    released = true;
  }
  return released;
}

}  // namespace deepool::coordinator
