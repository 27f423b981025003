#include "coordinator/cluster_summary.h"

namespace deepool::coordinator {

ClusterSummary SummarizeCluster(
    const std::vector<JobSnapshot>& jobs, const std::vector<NodeRecord>& nodes,
    const std::map<std::pair<std::string, std::string>, DeviceUse>& uses) {
  ClusterSummary s;
  int fg_reported = 0;
  double fg_iteration_sum = 0;
  for (const JobSnapshot& snapshot : jobs) {
    const JobRecord& job = *snapshot;
    if (job.state != JobState::kRunning) continue;
    if (job.spec.role == JobRole::kBg) {
      ++s.bg_jobs_running;
      s.bg_samples_per_s += job.progress.samples_per_s;
      // A BG job alone on a device owns that device's time. Beside a FG rank its own executor's
      // iteration is a different window from the FG rank's, so it is not added there.
      for (const DeviceProgress& d : job.progress.devices) {
        if (!d.fg_job_id.empty()) continue;
        s.bg_busy_ms += d.bg_busy_ms;
        s.idle_ms += d.idle_ms;
      }
      continue;
    }
    ++s.fg_jobs_running;
    s.fg_samples_per_s += job.progress.samples_per_s;
    if (job.progress.iteration_ms > 0) {
      ++fg_reported;
      fg_iteration_sum += job.progress.iteration_ms;
    }
    for (const DeviceProgress& d : job.progress.devices) {
      s.fg_busy_ms += d.fg_busy_ms;
      s.bg_busy_ms += d.bg_busy_ms;
      s.idle_ms += d.idle_ms;
    }
  }
  s.total_samples_per_s = s.fg_samples_per_s + s.bg_samples_per_s;
  if (fg_reported > 0) s.fg_iteration_ms = fg_iteration_sum / fg_reported;

  for (const NodeRecord& node : nodes) {
    if (node.state == NodeState::kDown) continue;
    for (const DeviceInfo& device : node.devices) {
      ++s.devices;
      auto it = uses.find({node.id, device.device});
      const bool fg = it != uses.end() && !it->second.fg_job.empty();
      const bool bg = it != uses.end() && !it->second.bg_job.empty();
      s.devices_fg += fg;
      s.devices_bg += bg;
      s.devices_shared += fg && bg;
      s.devices_busy += fg || bg;
    }
  }
  s.devices_idle = s.devices - s.devices_busy;
  return s;
}

}  // namespace deepool::coordinator
