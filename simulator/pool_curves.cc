// Speed-up curves for the pool simulator (pool_curves.h).
#include "simulator/pool_curves.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/zoo/zoo.h"

namespace deepool::simulator {
namespace {

using CurveKey = std::tuple<std::string, int64_t, double>;  // model, batch, amplification limit

PoolCurvePoint ToPoint(const planner::SpeedupPoint& point) {
  const planner::Plan& plan = point.plan;
  PoolCurvePoint out;
  out.devices = point.devices;
  out.burst_iteration_s = plan.totals.iteration_ms / 1000;
  out.dp_iteration_s = plan.data_parallel.iteration_ms / 1000;
  // Busy device time per iteration over the devices held for an iteration.
  auto busy = [&](const planner::PlanTotals& totals) {
    const double held_s = point.devices * totals.iteration_ms / 1000;
    return held_s > 0 ? std::min(1.0, totals.gpu_seconds / held_s) : 1.0;
  };
  out.burst_busy_fraction = busy(plan.totals);
  out.dp_busy_fraction = busy(plan.data_parallel);
  return out;
}

StatusOr<std::shared_ptr<const JobCurves>> PlanJobCurves(const WorkloadJob& job,
                                                         const PoolCurveOptions& options,
                                                         int max_devices,
                                                         planner::SpeedupCurveCache& cache) {
  ASSIGN_OR_RETURN(const planner::Graph graph, planner::zoo::BuildModel(job.model));
  const std::string graph_key = planner::SpeedupCurveGraphKey(graph);
  const int top = static_cast<int>(std::min<int64_t>(max_devices, job.global_batch));
  auto curves = std::make_shared<JobCurves>();
  for (const std::string& type : options.device_types) {
    const std::string where = job.model + " on " + type;
    StatusOr<planner::DeviceModel> device = planner::DevicePreset(type);
    if (!device.ok()) return device.status().WithContext(where);
    const std::unique_ptr<planner::Profile> profile = planner::MakeAnalyticalProfile(*device);
    StatusOr<planner::Cluster> cluster =
        planner::ClusterPreset(planner::DefaultClusterPresetFor(type, top));
    if (!cluster.ok()) return cluster.status().WithContext(where);
    cluster->device_type = type;
    planner::PlanOptions plan_options;
    plan_options.global_batch = job.global_batch;
    plan_options.amplification_limit = job.amplification_limit;
    StatusOr<std::shared_ptr<const planner::SpeedupCurve>> curve = cache.GetOrPlan(
        graph, graph_key, *profile, *cluster, plan_options, planner::DeviceCountsUpTo(top));
    if (!curve.ok()) return curve.status().WithContext(where);
    PoolCurve pool_curve;
    pool_curve.device_type = type;
    for (const planner::SpeedupPoint& point : (*curve)->points) {
      pool_curve.points.push_back(ToPoint(point));
    }
    curves->per_type.push_back(std::move(pool_curve));
  }
  return std::shared_ptr<const JobCurves>(std::move(curves));
}

}  // namespace

std::vector<PoolDeviceType> EvenPool(const std::vector<std::string>& device_types, int devices) {
  std::vector<PoolDeviceType> pool;
  const int types = static_cast<int>(device_types.size());
  for (int i = 0; i < types; ++i) {
    pool.push_back({device_types[i], devices / types + (i < devices % types ? 1 : 0)});
  }
  return pool;
}

StatusOr<std::vector<PoolJobInput>> PlanPoolInputs(const Workload& workload,
                                                   const PoolCurveOptions& options,
                                                   planner::SpeedupCurveCache& cache) {
  int max_devices = options.max_devices;
  if (max_devices <= 0) {
    for (const WorkloadJob& job : workload.jobs) max_devices = std::max(max_devices, job.gpus);
  }
  const std::string& reference = workload.header.reference_device;
  if (std::find(options.device_types.begin(), options.device_types.end(), reference) ==
      options.device_types.end()) {
    return InvalidArgumentError("the reference device " + reference +
                                " is not one of the pool's device types");
  }
  std::map<CurveKey, std::shared_ptr<const JobCurves>> known;
  std::vector<PoolJobInput> inputs;
  inputs.reserve(workload.jobs.size());
  for (const WorkloadJob& job : workload.jobs) {
    const CurveKey key{job.model, job.global_batch, job.amplification_limit};
    auto found = known.find(key);
    if (found == known.end()) {
      ASSIGN_OR_RETURN(std::shared_ptr<const JobCurves> curves,
                       PlanJobCurves(job, options, max_devices, cache));
      found = known.emplace(key, std::move(curves)).first;
    }
    const PoolCurvePoint* asked = found->second->For(reference)->At(job.gpus);
    if (asked == nullptr) {
      return InvalidArgumentError("job " + std::to_string(job.id) + ": no plan on " +
                                  std::to_string(job.gpus) + " devices (global batch " +
                                  std::to_string(job.global_batch) + ")");
    }
    PoolJobInput input;
    input.job = &job;
    input.curves = found->second;
    input.iterations = IterationsFor(job, asked->dp_iteration_s);
    double fastest_s = asked->dp_iteration_s;
    for (const PoolCurve& curve : found->second->per_type) {
      const PoolCurvePoint* point = curve.At(job.gpus);
      if (point == nullptr || (!job.device_type.empty() && curve.device_type != job.device_type)) {
        continue;
      }
      fastest_s = std::min(fastest_s, point->dp_iteration_s);
    }
    if (!job.device_type.empty()) {
      const PoolCurve* own = found->second->For(job.device_type);
      if (own && own->At(job.gpus)) fastest_s = own->At(job.gpus)->dp_iteration_s;
    }
    input.isolated_s = static_cast<double>(input.iterations) * fastest_s;
    inputs.push_back(std::move(input));
  }
  return inputs;
}

}  // namespace deepool::simulator
