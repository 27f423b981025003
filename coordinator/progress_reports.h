// ProgressReports: a worker's ReportProgress for one task, turned into what the coordinator keeps
// of it: the c10d store's address (then handed to the Dispatcher, which sends the other nodes
// their ranks), the job's iterations, evaluations and per-device rows (job_progress.h), a note
// where an attempt resumed, and the log lines. Each part is idempotent, so a report that failed
// half way (UNAVAILABLE: the store could not take it) is sent again whole by the worker.
//
// Threading: keeps no state of its own; Report may be called from any thread at once. It must
// not be called under the Scheduler's mu_: it writes to the store, and `holders` (which takes
// mu_) is called before the job table's lock is taken, never under it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/device_ledger.h"
#include "coordinator/dispatcher.h"
#include "coordinator/job.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_progress.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

// A report speaks for one task; only the node the task was sent to may make it (the service has
// already checked that the caller's certificate is that node's, so this closes the rest).
// PERMISSION_DENIED when `node_id` is not `task_node`; OK for a task not known.
Status CheckReportingNode(const std::string& task_id, const std::optional<std::string>& task_node,
                          const std::string& node_id);
// UNAVAILABLE for a worker report whose `what` could not be stored; the worker resends it.
Status StoreFailure(const std::string& what, const Status& status);

class ProgressReports {
 public:
  // Who holds each device of a placement (FG and BG job), read under the Scheduler's lock.
  using HoldersOf =
      std::function<std::map<DeviceKey, DeviceJobs>(const std::vector<RankPlacement>& devices)>;

  // `jobs`, `dispatcher` and `clock` must outlive it. `wake` wakes the control loop (a FG rank's
  // first iteration: a BG job may wait to run inside its executor).
  ProgressReports(JobManager* jobs, Dispatcher* dispatcher, const Clock* clock, HoldersOf holders,
                  std::function<void()> wake);

  // Returns true when the task is no longer wanted (the worker should stop it): unknown, ended,
  // or its job ended. PERMISSION_DENIED from another node; UNAVAILABLE when the store failed.
  StatusOr<bool> Report(const v1::ReportProgressRequest& report);

 private:
  // The report's iterations and evaluations into the job (`evaluated`: those new to the job).
  Status RecordIterations(const JobRecord& job, const v1::ReportProgressRequest& report,
                          std::vector<Evaluation>* evaluated);

  JobManager* jobs_;
  Dispatcher* dispatcher_;
  const Clock* clock_;
  const HoldersOf holders_;
  const std::function<void()> wake_;
};

}  // namespace deepool::coordinator
