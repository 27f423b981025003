// What the trace generator (workload_generator.h) draws, and from which distributions
// (docs/simulator.md, "Workload traces"). The defaults follow Gavel's trace generator: Poisson
// arrivals, Gavel's duration distribution, mostly single-device jobs.
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::simulator {

// One model of the mix: drawn with probability weight / sum of weights, trained at global_batch.
struct ModelShare {
  std::string model;  // a zoo name (the CLI checks it against the zoo; the library cannot)
  double weight = 1;
  int64_t global_batch = 0;
};

// A device count an FG job asks for, with its weight.
struct GpuShare {
  int gpus = 1;
  double weight = 1;
};

enum class DurationDistribution {
  // Gavel's: 10^x minutes, x uniform in [1.5, 3) with probability 0.8, else in [3, 4).
  kGavel,
  // Pareto with shape pareto_alpha truncated to [pareto_min_minutes, pareto_max_minutes].
  kBoundedPareto,
};
const char* DurationDistributionName(DurationDistribution distribution);  // "gavel", "pareto"
StatusOr<DurationDistribution> ParseDurationDistribution(const std::string& name);

struct WorkloadOptions {
  uint64_t seed = 1;
  int64_t jobs = 1000;
  // The arrival rate: jobs_per_hour when > 0, else the rate at which the jobs offer `load` x
  // `devices` device-seconds per second (offered load: sum of gpus x duration_s over the
  // capacity), computed from the distributions' exact means.
  double jobs_per_hour = 0;
  double load = 0.8;
  int devices = 4096;
  std::vector<ModelShare> models;  // empty: DefaultModelMix()
  // FG jobs' device counts (BG jobs run on 1 device). Gavel's: 1 (70 %), 2 (10 %), 4 (15 %),
  // 8 (5 %).
  std::vector<GpuShare> gpus = {{1, 70}, {2, 10}, {4, 15}, {8, 5}};
  double bg_fraction = 0.3;  // probability a job is BG
  // users "user01".."userNN"; user i (from 1) submits with weight 1 / i^user_skew (Zipf).
  int users = 16;
  double user_skew = 1.0;
  // The pool's device types. A job names one (uniformly drawn) with probability
  // constrained_fraction, else runs on any.
  std::vector<std::string> device_types = {"a100", "h100", "v100"};
  double constrained_fraction = 0.2;
  // The device type durations are measured on (Gavel's traces use V100 step rates).
  std::string reference_device = "v100";
  DurationDistribution durations = DurationDistribution::kGavel;
  double pareto_alpha = 1.1;
  double pareto_min_minutes = 30;     // about 10^1.5 minutes, Gavel's shortest
  double pareto_max_minutes = 10000;  // 10^4 minutes, Gavel's longest
  double priority_fraction = 0.1;     // probability a job has priority 1 (else 0)
  double amplification_limit = 2.0;   // every job's (JobSpec's default)
};

// The default mix: every zoo model a cluster trains (CNNs and transformers, not the tiny test
// models except gpt_tiny, the zoo's only GPT), equally weighted as Gavel draws job types.
std::vector<ModelShare> DefaultModelMix();

// Checks ranges ("load: must be in (0, 10]", "models[2].weight: must be >= 0").
Status ValidateWorkloadOptions(const WorkloadOptions& options);

// Mean job duration in seconds under the options' distribution, and mean device count per job.
double MeanDurationSeconds(const WorkloadOptions& options);
double MeanGpus(const WorkloadOptions& options);
// Arrivals per second: jobs_per_hour / 3600, or the rate that offers `load`.
double ArrivalRatePerSecond(const WorkloadOptions& options);

}  // namespace deepool::simulator
