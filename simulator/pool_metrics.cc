// Pool simulation metrics (pool_metrics.h).
#include "simulator/pool_metrics.h"

#include <algorithm>
#include <vector>

#include "simulator/workload_summary.h"

namespace deepool::simulator {
namespace {

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (double value : values) sum += value;
  return sum / static_cast<double>(values.size());
}

double P99(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return NearestRankPercentile(values, 0.99);
}

}  // namespace

PoolMetrics ComputePoolMetrics(const PoolRun& run) {
  PoolMetrics metrics;
  std::vector<double> jct, fg_jct, bg_jct, fg_slowdown, wait;
  double samples = 0;
  for (const PoolJobRecord& job : run.jobs) {
    ++metrics.jobs;
    metrics.moves += job.moves;
    metrics.preemptions += job.preemptions;
    samples += static_cast<double>(job.iterations) * static_cast<double>(job.global_batch);
    const double completion = job.finish_s - job.arrival_s;
    jct.push_back(completion);
    wait.push_back(job.start_s - job.arrival_s);
    if (job.role == WorkloadRole::kFg) {
      ++metrics.fg_jobs;
      fg_jct.push_back(completion);
      if (job.isolated_s > 0) fg_slowdown.push_back(completion / job.isolated_s);
    } else {
      bg_jct.push_back(completion);
    }
  }
  metrics.mean_jct_s = Mean(jct);
  metrics.p99_jct_s = P99(jct);
  metrics.fg_mean_jct_s = Mean(fg_jct);
  metrics.bg_mean_jct_s = Mean(bg_jct);
  metrics.fg_mean_slowdown = Mean(fg_slowdown);
  metrics.fg_p99_slowdown = P99(fg_slowdown);
  metrics.mean_wait_s = Mean(wait);
  metrics.makespan_s = run.end_s;
  metrics.decisions = run.decisions;
  const double capacity = static_cast<double>(run.total_devices) * run.end_s;
  if (capacity > 0) {
    metrics.allocated_utilisation = run.allocated_device_s / capacity;
    metrics.busy_utilisation = run.busy_device_s / capacity;
  }
  if (run.window_s > 0) {
    metrics.window_busy_utilisation =
        run.window_busy_device_s / (static_cast<double>(run.total_devices) * run.window_s);
    metrics.window_allocated_utilisation =
        run.window_allocated_device_s / (static_cast<double>(run.total_devices) * run.window_s);
    metrics.window_samples_per_s = run.window_samples / run.window_s;
  }
  if (run.end_s > 0) metrics.throughput_samples_per_s = samples / run.end_s;
  return metrics;
}

}  // namespace deepool::simulator
