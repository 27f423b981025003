#include "simulator/workload_generator.h"

#include <cmath>
#include <string>
#include <vector>

#include "simulator/random_draws.h"

namespace deepool::simulator {
namespace {

// What is written is rounded to milliseconds: enough for any scheduler, and it hides the last-bit
// differences of std::log and std::pow between C libraries, so files match byte for byte.
double RoundToMillis(double seconds) { return std::round(seconds * 1000) / 1000; }

std::vector<std::string> UserNames(int users) {
  const size_t width = std::to_string(users).size() < 2 ? 2 : std::to_string(users).size();
  std::vector<std::string> names;
  names.reserve(users);
  for (int i = 1; i <= users; ++i) {
    std::string number = std::to_string(i);
    names.push_back("user" + std::string(width - number.size(), '0') + number);
  }
  return names;
}

// Every distribution's prefix sums, computed once.
struct Tables {
  std::vector<double> models;
  std::vector<double> gpus;
  std::vector<double> users;
  std::vector<std::string> user_names;
};

Tables MakeTables(const WorkloadOptions& options) {
  Tables tables;
  std::vector<double> weights;
  for (const ModelShare& share : options.models) weights.push_back(share.weight);
  tables.models = CumulativeWeights(weights);
  weights.clear();
  for (const GpuShare& share : options.gpus) weights.push_back(share.weight);
  tables.gpus = CumulativeWeights(weights);
  weights.clear();
  for (int i = 1; i <= options.users; ++i) weights.push_back(std::pow(i, -options.user_skew));
  tables.users = CumulativeWeights(weights);
  tables.user_names = UserNames(options.users);
  return tables;
}

double DrawDurationSeconds(const WorkloadOptions& options, RandomDraws& draws) {
  if (options.durations == DurationDistribution::kBoundedPareto) {
    return 60 * draws.BoundedPareto(options.pareto_alpha, options.pareto_min_minutes,
                                    options.pareto_max_minutes);
  }
  // Gavel's (its "Philly distribution"): one job in five is long.
  const bool long_job = draws.Uniform01() >= 0.8;
  return 60 * (long_job ? draws.LogUniform10(3, 4) : draws.LogUniform10(1.5, 3));
}

// Draws one job's attributes, always in the same order and with the same number of draws per
// job, so that changing one option's value does not shift every later draw of the others.
WorkloadJob DrawJob(const WorkloadOptions& options, const Tables& tables, RandomDraws& draws) {
  WorkloadJob job;
  job.role = draws.Bernoulli(options.bg_fraction) ? WorkloadRole::kBg : WorkloadRole::kFg;
  const ModelShare& model = options.models[draws.Weighted(tables.models)];
  job.model = model.model;
  job.global_batch = model.global_batch;
  const int gpus = options.gpus[draws.Weighted(tables.gpus)].gpus;
  job.gpus = job.role == WorkloadRole::kBg ? 1 : gpus;
  job.user = tables.user_names[draws.Weighted(tables.users)];
  const bool constrained = draws.Bernoulli(options.constrained_fraction);
  const double type_draw = draws.Uniform01();
  if (constrained) {
    const size_t types = options.device_types.size();
    job.device_type = options.device_types[std::min(
        types - 1, static_cast<size_t>(type_draw * static_cast<double>(types)))];
  }
  job.priority = draws.Bernoulli(options.priority_fraction) ? 1 : 0;
  job.amplification_limit = options.amplification_limit;
  // At least a millisecond, so that rounding never makes a duration 0.
  job.duration_s = std::max(0.001, RoundToMillis(DrawDurationSeconds(options, draws)));
  return job;
}

}  // namespace

StatusOr<Workload> GenerateWorkload(WorkloadOptions options) {
  if (options.models.empty()) options.models = DefaultModelMix();
  RETURN_IF_ERROR(ValidateWorkloadOptions(options));
  const Tables tables = MakeTables(options);
  const double rate = ArrivalRatePerSecond(options);
  // Arrivals and job attributes come from separate streams, so a different load moves the jobs
  // in time but leaves what each job is unchanged.
  RandomDraws arrivals(options.seed);
  RandomDraws attributes(options.seed ^ 0x9e3779b97f4a7c15ULL);

  Workload workload;
  workload.header.devices = options.devices;
  workload.header.reference_device = options.reference_device;
  workload.jobs.reserve(static_cast<size_t>(options.jobs));
  double clock_s = 0;
  for (int64_t id = 0; id < options.jobs; ++id) {
    clock_s += arrivals.Exponential(rate);
    WorkloadJob job = DrawJob(options, tables, attributes);
    job.id = id;
    job.arrival_s = RoundToMillis(clock_s);
    workload.jobs.push_back(std::move(job));
  }
  workload.header.generator = std::move(options);
  return workload;
}

}  // namespace deepool::simulator
