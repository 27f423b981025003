// What a workload holds, in numbers: `deepool workload show` prints it, and the generator's
// tests check it against the options' distributions.
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "simulator/workload_file.h"

namespace deepool::simulator {

struct WorkloadSummary {
  int64_t jobs = 0;
  int64_t fg_jobs = 0;
  int64_t bg_jobs = 0;
  int64_t prioritised_jobs = 0;  // priority > 0
  std::map<std::string, int64_t> jobs_per_user;
  std::map<std::string, int64_t> jobs_per_model;
  std::map<int, int64_t> jobs_per_gpus;
  std::map<std::string, int64_t> jobs_per_device_type;  // "" for jobs that run on any type
  double last_arrival_s = 0;
  double mean_interarrival_s = 0;  // last arrival / jobs (the first job's wait counts)
  // Over the jobs given a duration (jobs_with_duration of them), in seconds: nearest-rank
  // percentiles.
  int64_t jobs_with_duration = 0;
  double duration_mean_s = 0;
  double duration_p50_s = 0;
  double duration_p90_s = 0;
  double duration_p99_s = 0;
  double duration_max_s = 0;
  double offered_device_s = 0;  // sum of gpus x duration_s
  // offered_device_s / (header devices x last arrival): the load the trace offers while jobs
  // arrive; 0 when the header states no devices.
  double offered_load = 0;
};

WorkloadSummary SummarizeWorkload(const Workload& workload);

// The nearest-rank percentile (q in [0, 1]) of a sorted, non-empty sample.
double NearestRankPercentile(const std::vector<double>& sorted, double q);

}  // namespace deepool::simulator
