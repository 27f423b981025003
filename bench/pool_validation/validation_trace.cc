#include "bench/pool_validation/validation_trace.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "simulator/random_draws.h"

namespace deepool::bench {

using simulator::WorkloadJob;
using simulator::WorkloadRole;

namespace {

double Scaled(int64_t iterations, double scale) {
  return std::max(1.0, std::round(static_cast<double>(iterations) * scale));
}

}  // namespace

std::string KindKey(const WorkloadJob& job) {
  return job.model + "/" + std::to_string(job.global_batch) + "/" + std::to_string(job.gpus) + "/" +
         simulator::WorkloadRoleName(job.role);
}

const std::vector<ValidationJobKind>& ValidationKinds() {
  // Iteration counts from one-thread CPU timings (deepool-train, 2-core VM): small_cnn at 512
  // about 70 ms per iteration on one device and 57 ms on two, vit_tiny at 128 about 19 ms and at
  // 64 about 10 ms. Iterations of tens of milliseconds keep the executors' per-iteration
  // reports a small part of the work.
  static const std::vector<ValidationJobKind> kinds = {
      {"small_cnn", 512, 1, WorkloadRole::kFg, 60, 250, 4},
      {"small_cnn", 512, 2, WorkloadRole::kFg, 60, 200, 2},
      {"vit_tiny", 128, 1, WorkloadRole::kFg, 200, 800, 3},
      {"vit_tiny", 64, 1, WorkloadRole::kBg, 300, 1200, 1},
  };
  return kinds;
}

simulator::Workload MakeValidationTrace(const ValidationTraceOptions& options) {
  simulator::RandomDraws draws(options.seed);
  std::vector<double> weights;
  for (const ValidationJobKind& kind : ValidationKinds()) weights.push_back(kind.weight);
  const std::vector<double> cumulative = simulator::CumulativeWeights(weights);
  std::vector<double> arrivals;
  std::vector<WorkloadJob> jobs;
  for (int i = 0; i < options.jobs; ++i) {
    const ValidationJobKind& kind = ValidationKinds()[draws.Weighted(cumulative)];
    WorkloadJob job;
    job.model = kind.model;
    job.global_batch = kind.global_batch;
    job.gpus = kind.gpus;
    job.role = kind.role;
    job.amplification_limit = 0;  // the plan may use every device it is given
    const double low = Scaled(kind.min_iterations, options.iteration_scale);
    const double span = Scaled(kind.max_iterations, options.iteration_scale) - low + 1;
    job.iterations = static_cast<int64_t>(low + std::floor(draws.Uniform01() * span));
    job.user = "user" + std::to_string(1 + static_cast<int>(draws.Uniform01() * options.users));
    jobs.push_back(job);
    arrivals.push_back(std::round(draws.Uniform01() * options.arrival_window_s * 1000) / 1000);
  }
  std::sort(arrivals.begin(), arrivals.end());
  simulator::Workload workload;
  workload.header.reference_device = "cpu";
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].id = static_cast<int64_t>(i);
    jobs[i].arrival_s = arrivals[i];
  }
  workload.jobs = std::move(jobs);
  return workload;
}

std::vector<WorkloadJob> OneJobPerKind(const simulator::Workload& workload,
                                       double iteration_scale) {
  std::set<std::string> seen;
  std::vector<WorkloadJob> jobs;
  for (const WorkloadJob& job : workload.jobs) {
    if (!seen.insert(KindKey(job)).second) continue;
    WorkloadJob one = job;
    one.arrival_s = 0;
    for (const ValidationJobKind& kind : ValidationKinds()) {
      if (kind.model == job.model && kind.gpus == job.gpus && kind.role == job.role) {
        one.iterations = static_cast<int64_t>(Scaled(kind.min_iterations, iteration_scale));
      }
    }
    jobs.push_back(one);
  }
  return jobs;
}

}  // namespace deepool::bench
