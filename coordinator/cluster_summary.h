// The cluster at a glance: throughput of the running FG and BG jobs and how the devices are
// used. A pure function over what the job manager, node registry and scheduler know, so it is
// tested without a server; CoordinatorService::ListJobs returns it beside the jobs.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {

struct ClusterSummary {
  int fg_jobs_running = 0;
  int bg_jobs_running = 0;
  double fg_samples_per_s = 0;
  double bg_samples_per_s = 0;
  double total_samples_per_s = 0;
  double fg_iteration_ms = 0;  // mean over the RUNNING FG jobs that reported an iteration
  int devices = 0;             // on nodes that are not DOWN
  int devices_busy = 0;        // held by a FG or a BG job
  int devices_idle = 0;
  int devices_fg = 0;
  int devices_bg = 0;
  int devices_shared = 0;  // FG and BG on the same device
  // Device time of the last reported iteration, summed over the device rows of RUNNING FG jobs
  // and of RUNNING BG jobs alone on their device. BG time beside a FG rank is measured only when
  // the BG job runs inside the FG rank's executor (DeviceProgress.shared_executor).
  double fg_busy_ms = 0;
  double bg_busy_ms = 0;
  double idle_ms = 0;
};

// `jobs` may hold jobs in any state (JobManager::Active): only RUNNING ones count. `uses` is
// Scheduler::DeviceUses(). A device in `uses` that no listed node has (or whose node is DOWN) is
// not counted.
ClusterSummary SummarizeCluster(
    const std::vector<JobSnapshot>& jobs, const std::vector<NodeRecord>& nodes,
    const std::map<std::pair<std::string, std::string>, DeviceUse>& uses);

}  // namespace deepool::coordinator
