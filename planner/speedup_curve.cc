// Speed-up curves: one plan per device count on shared cost models (speedup_curve.h).
#include "planner/speedup_curve.h"

#include <optional>
#include <string>

namespace deepool::planner {

std::vector<int> DeviceCountsUpTo(int devices) {
  std::vector<int> counts;
  for (int g = 1; g <= devices; ++g) counts.push_back(g);
  return counts;
}

bool CostsAlike(const Cluster& own, const Cluster& shared, int devices) {
  if (!(own.intra_node == shared.intra_node) || !(own.inter_node == shared.inter_node)) {
    return false;
  }
  const bool one_node_in_both =
      devices <= own.devices_per_node && devices <= shared.devices_per_node;
  return one_node_in_both || own.devices_per_node == shared.devices_per_node;
}

StatusOr<SpeedupCurve> PlanSpeedupCurve(const Graph& graph, const Profile& profile,
                                        const Cluster& cluster, const PlanOptions& options,
                                        const std::vector<int>& device_counts) {
  if (device_counts.empty()) return InvalidArgumentError("a speed-up curve needs device counts");
  for (size_t i = 0; i < device_counts.size(); ++i) {
    if (device_counts[i] < 1 || (i > 0 && device_counts[i] <= device_counts[i - 1])) {
      return InvalidArgumentError("device counts must be ascending, distinct and >= 1; got " +
                                  std::to_string(device_counts[i]) + " at position " +
                                  std::to_string(i));
    }
  }
  // The models for the largest count serve every count whose cluster costs alike (all of them
  // for a cluster resized from one shape, CostsAlike); others get models of their own.
  const Cluster shared_cluster = ResizeCluster(cluster, device_counts.back());
  std::optional<PlanningModels> shared;
  SpeedupCurve curve;
  for (const int devices : device_counts) {
    PlanOptions at = options;
    at.devices = devices;
    const Cluster own = ResizeCluster(cluster, devices);
    StatusOr<Plan> plan = InternalError("not planned");
    if (options.global_batch >= 1 && CostsAlike(own, shared_cluster, devices)) {
      if (!shared) shared.emplace(graph, profile, shared_cluster, options);
      plan = PlanBurstParallelWith(*shared, at);
    } else {
      plan = PlanBurstParallel(graph, profile, own, at);
    }
    if (!plan.ok()) return plan.status().WithContext("on " + std::to_string(devices) + " devices");
    curve.points.push_back(SpeedupPoint{devices, std::move(*plan)});
  }
  return curve;
}

}  // namespace deepool::planner
