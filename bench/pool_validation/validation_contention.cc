#include "bench/pool_validation/validation_contention.h"

#include <algorithm>

#include "bench/pool_validation/validation_trace.h"

namespace deepool::bench {

StatusOr<double> PairRatio(const std::vector<RealJobRecord>& pair, const KindCalibration& alone,
                           int64_t iterations) {
  const double alone_s = alone.overhead_s + static_cast<double>(iterations) * alone.iteration_s;
  if (pair.empty() || !(alone_s > 0)) {
    return InvalidArgumentError("a pair ratio needs jobs and a positive time alone");
  }
  double sum = 0;
  for (const RealJobRecord& job : pair) sum += job.finish_s - job.submit_s;
  return sum / static_cast<double>(pair.size()) / alone_s;
}

StatusOr<ContentionCalibration> CalibrateContention(
    const std::vector<simulator::WorkloadJob>& jobs,
    const std::map<std::string, KindCalibration>& kinds, const ReplayTarget& target) {
  ContentionCalibration calibration;
  double sum = 0;
  for (const simulator::WorkloadJob& job : jobs) {
    if (job.gpus != 1 || job.role != simulator::WorkloadRole::kFg) continue;
    const auto alone = kinds.find(KindKey(job));
    if (alone == kinds.end()) return NotFoundError("no calibration of " + KindKey(job));
    simulator::WorkloadJob copy = job;
    copy.arrival_s = 0;
    copy.iterations = 3 * job.iterations;
    std::vector<simulator::WorkloadJob> pair = {copy, copy};
    pair[0].id = 0;
    pair[1].id = 1;
    ASSIGN_OR_RETURN(
        const std::vector<RealJobRecord> records,
        ReplayOnCluster(pair, target, "calibrate-pair-" + std::to_string(job.id) + "-"));
    ASSIGN_OR_RETURN(const double ratio, PairRatio(records, alone->second, copy.iterations));
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
