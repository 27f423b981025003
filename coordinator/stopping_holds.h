// StoppingHolds: devices kept from admission while executors that nobody wants any more are
// still stopping. A job released while its tasks may still run (cancelled, failed, requeued)
// frees its devices at once in the Scheduler's view, but its executors run until their workers
// stop them; a node that registers with tasks it is told to cancel runs them a while too. Until
// those tasks have ended, the devices they may use are held in the DeviceLedger under a holder
// name of their own ("JOB (stopping)", "node N (stopping tasks it was told to cancel)"), so no
// job is placed beside them.
//
// It only holds and frees devices; whether a task still runs is the caller's to say (the
// Dispatcher's task table).
//
// Threading: not thread-safe; it changes the ledger it was given, under the lock that guards
// that ledger (the Scheduler's mu_).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "coordinator/device_ledger.h"
#include "coordinator/node_registry.h"

namespace deepool::coordinator {

class StoppingHolds {
 public:
  // Whether none of the tasks still runs.
  using NoneLive = std::function<bool(const std::vector<std::string>& task_ids)>;

  // `ledger` must outlive the holds.
  explicit StoppingHolds(DeviceLedger* ledger);

  // Job `job_id`, just released, held `devices`; `task_ids` may still run. Those of the devices
  // no other FG job holds (a hosted BG job used its host's) are held as "JOB (stopping)".
  void HoldForJob(const std::string& job_id, const std::vector<DeviceKey>& devices,
                  const std::vector<std::string>& task_ids);
  // The node still runs `task_ids`, which it was told to cancel: which devices they use is not
  // known here, so the node's devices no FG job holds are held until they stop.
  void HoldForNode(const NodeRecord& node, const std::vector<std::string>& task_ids);
  // Frees every hold whose tasks have all ended; returns whether any was freed.
  bool ReleaseEnded(const NoneLive& none_live);

 private:
  DeviceLedger* ledger_;
  std::map<std::string, std::vector<std::string>> tasks_of_;  // holder -> the tasks it waits for
};

}  // namespace deepool::coordinator
