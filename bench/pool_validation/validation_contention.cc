#include "bench/pool_validation/validation_contention.h"

#include <algorithm>

#include "bench/bench_util.h"
#include "bench/pool_validation/validation_trace.h"

namespace deepool::bench {

namespace {

double MeanJct(const std::vector<RealJobRecord>& jobs) {
  double sum = 0;
  for (const RealJobRecord& job : jobs) sum += job.finish_s - job.submit_s;
  return sum / static_cast<double>(jobs.size());
}

}  // namespace

StatusOr<double> PairRatio(const std::vector<RealJobRecord>& short_pair,
                           const std::vector<RealJobRecord>& long_pair,
                           const KindCalibration& alone, int64_t iterations) {
  if (short_pair.empty() || long_pair.empty() || iterations < 1) {
    return InvalidArgumentError("a pair ratio needs both pairs and iterations");
  }
  const double side_by_side_s =
      (MeanJct(long_pair) - MeanJct(short_pair)) / static_cast<double>(2 * iterations);
  if (!(alone.iteration_s > 0) || !(side_by_side_s > 0)) {
    return InvalidArgumentError(
        "a pair ratio needs positive iteration times alone and side by side");
  }
  return side_by_side_s / alone.iteration_s;
}

StatusOr<double> MedianPairRatio(const std::vector<StatusOr<double>>& repetitions) {
  std::vector<double> measured;
  for (const StatusOr<double>& ratio : repetitions) {
    if (ratio.ok()) measured.push_back(*ratio);
  }
  if (measured.empty()) {
    if (repetitions.empty()) return InvalidArgumentError("a pair ratio needs a repetition");
    return repetitions.front().status();
  }
  return Median(std::move(measured));
}

StatusOr<ContentionCalibration> CalibrateContention(
    const std::vector<simulator::WorkloadJob>& jobs,
    const std::map<std::string, KindCalibration>& kinds, const ReplayTarget& target,
    int repetitions) {
  if (repetitions < 1) return InvalidArgumentError("the pairs need at least one repetition");
  ContentionCalibration calibration;
  double sum = 0;
  for (const simulator::WorkloadJob& job : jobs) {
    if (job.gpus != 1 || job.role != simulator::WorkloadRole::kFg) continue;
    const auto alone = kinds.find(KindKey(job));
    if (alone == kinds.end()) return NotFoundError("no calibration of " + KindKey(job));
    simulator::WorkloadJob copy = job;
    copy.arrival_s = 0;
    std::vector<simulator::WorkloadJob> pair = {copy, copy};
    pair[0].id = 0;
    pair[1].id = 1;
    std::vector<StatusOr<double>> ratios;
    std::vector<double>& samples = calibration.pair_samples[KindKey(job)];
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      const std::string prefix =
          "calibrate-pair-" + std::to_string(job.id) + "-" + std::to_string(repetition);
      ASSIGN_OR_RETURN(const std::vector<RealJobRecord> short_pair,
                       ReplayOnCluster(pair, target, prefix + "-short-"));
      std::vector<simulator::WorkloadJob> long_jobs = pair;
      for (simulator::WorkloadJob& longer : long_jobs) longer.iterations = 3 * job.iterations;
      ASSIGN_OR_RETURN(const std::vector<RealJobRecord> long_pair,
                       ReplayOnCluster(long_jobs, target, prefix + "-long-"));
      ratios.push_back(PairRatio(short_pair, long_pair, alone->second, job.iterations));
      if (ratios.back().ok()) samples.push_back(*ratios.back());
    }
    ASSIGN_OR_RETURN(const double ratio, MedianPairRatio(ratios));
    calibration.pair_ratio[KindKey(job)] = ratio;
    sum += ratio;
  }
  if (calibration.pair_ratio.empty()) {
    return FailedPreconditionError("no one-device FG job to run side by side");
  }
  calibration.two_devices = std::max(1.0, sum / static_cast<double>(calibration.pair_ratio.size()));
  return calibration;
}

simulator::NodeContention ContentionModel(const ContentionCalibration& calibration,
                                          const std::string& device_type, int devices_per_node) {
  simulator::NodeContention model;
  model.device_type = device_type;
  model.devices_per_node = devices_per_node;
  model.slowdown = {1, calibration.two_devices};
  return model;
}

}  // namespace deepool::bench
