#include "simulator/workload_summary.h"

#include <algorithm>
#include <cmath>

namespace deepool::simulator {

double NearestRankPercentile(const std::vector<double>& sorted, double q) {
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

WorkloadSummary SummarizeWorkload(const Workload& workload) {
  WorkloadSummary summary;
  std::vector<double> durations;
  for (const WorkloadJob& job : workload.jobs) {
    ++summary.jobs;
    ++(job.role == WorkloadRole::kFg ? summary.fg_jobs : summary.bg_jobs);
    if (job.priority > 0) ++summary.prioritised_jobs;
    ++summary.jobs_per_user[job.user];
    ++summary.jobs_per_model[job.model];
    ++summary.jobs_per_gpus[job.gpus];
    ++summary.jobs_per_device_type[job.device_type];
    summary.last_arrival_s = std::max(summary.last_arrival_s, job.arrival_s);
    if (job.duration_s > 0) durations.push_back(job.duration_s);
    summary.offered_device_s += OfferedDeviceSeconds(job);
  }
  if (summary.jobs > 0) {
    summary.mean_interarrival_s = summary.last_arrival_s / static_cast<double>(summary.jobs);
  }
  summary.jobs_with_duration = static_cast<int64_t>(durations.size());
  if (!durations.empty()) {
    std::sort(durations.begin(), durations.end());
    double sum = 0;
    for (double duration : durations) sum += duration;
    summary.duration_mean_s = sum / static_cast<double>(durations.size());
    summary.duration_p50_s = NearestRankPercentile(durations, 0.50);
    summary.duration_p90_s = NearestRankPercentile(durations, 0.90);
    summary.duration_p99_s = NearestRankPercentile(durations, 0.99);
    summary.duration_max_s = durations.back();
  }
  if (workload.header.devices > 0 && summary.last_arrival_s > 0) {
    summary.offered_load =
        summary.offered_device_s / (workload.header.devices * summary.last_arrival_s);
  }
  return summary;
}

}  // namespace deepool::simulator
