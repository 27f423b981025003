#include "bench/pool_validation/validation_sim.h"

#include <memory>
#include <vector>

#include "bench/pool_validation/validation_trace.h"
#include "simulator/pool_configurations.h"
#include "simulator/pool_metrics.h"

namespace deepool::bench {

using simulator::JobCurves;
using simulator::PoolCurve;
using simulator::PoolCurvePoint;

StatusOr<simulator::PoolRun> SimulateValidation(const simulator::Workload& workload,
                                                const std::map<std::string, KindCalibration>& kinds,
                                                const ValidationSimOptions& options) {
  std::vector<simulator::PoolJobInput> inputs;
  for (const simulator::WorkloadJob& job : workload.jobs) {
    const auto kind = kinds.find(KindKey(job));
    if (kind == kinds.end()) return NotFoundError("no calibration of " + KindKey(job));
    const KindCalibration& measured = kind->second;
    const double iterations = static_cast<double>(job.iterations);
    PoolCurvePoint point;
    point.devices = job.gpus;
    point.burst_iteration_s = measured.iteration_s + measured.overhead_s / iterations;
    point.dp_iteration_s = point.burst_iteration_s;
    point.burst_busy_fraction = measured.busy_fraction;
    point.dp_busy_fraction = measured.busy_fraction;
    auto curves = std::make_shared<JobCurves>();
    curves->per_type.push_back(PoolCurve{"cpu", {point}});
    simulator::PoolJobInput input;
    input.job = &job;
    input.curves = std::move(curves);
    input.iterations = job.iterations;
    input.isolated_s = iterations * point.burst_iteration_s;
    inputs.push_back(std::move(input));
  }
  const std::vector<simulator::PoolDeviceType> pool = {{"cpu", options.devices}};
  ASSIGN_OR_RETURN(const simulator::PoolConfiguration configuration,
                   simulator::FindPoolConfiguration(options.configuration));
  ASSIGN_OR_RETURN(std::unique_ptr<simulator::PoolPolicy> policy,
                   simulator::MakePoolPolicy(configuration, pool));
  simulator::PoolOptions pool_options;
  pool_options.device_types = pool;
  pool_options.checkpoint_restore_s = options.restore_s;
  pool_options.node_contention = options.node_contention;
  return simulator::SimulatePool(inputs, pool_options, *policy);
}

StatusOr<double> MeanJctSensitivity(const simulator::Workload& workload,
                                    const std::map<std::string, KindCalibration>& kinds,
                                    const ValidationSimOptions& options, double slower) {
  if (!(slower > -1)) {
    return InvalidArgumentError("a kind can be made slower or faster, not take no time or less");
  }
  std::map<std::string, KindCalibration> slowed = kinds;
  for (auto& [key, calibration] : slowed) {
    calibration.short_s *= 1 + slower;
    calibration.long_s *= 1 + slower;
    calibration.iteration_s *= 1 + slower;
    calibration.overhead_s *= 1 + slower;
  }
  ValidationSimOptions slowed_options = options;
  slowed_options.restore_s *= 1 + slower;
  ASSIGN_OR_RETURN(const simulator::PoolRun as_measured,
                   SimulateValidation(workload, kinds, options));
  ASSIGN_OR_RETURN(const simulator::PoolRun slowed_run,
                   SimulateValidation(workload, slowed, slowed_options));
  const double mean_jct_s = simulator::ComputePoolMetrics(as_measured).mean_jct_s;
  if (!(mean_jct_s > 0)) return InvalidArgumentError("the simulated mean JCT is not positive");
  return simulator::ComputePoolMetrics(slowed_run).mean_jct_s / mean_jct_s - 1;
}

}  // namespace deepool::bench
