// A job's speed-up curve: its burst-parallel plan at every device count it may get, for
// scheduling policies that size jobs by what another device buys them (issue 44). Point g is
// exactly PlanBurstParallel(graph, profile, ResizeCluster(cluster, g), options with devices = g);
// the points share the cost models' caches (profile times per layer and count, re-splits, least
// device times: PlanningModels, search.h) wherever the resized clusters cost alike, so a curve
// costs less than its plans one by one. docs/planner.md, "Speed-up curves".
// Threading: pure functions; no shared state.
#pragma once

#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/search.h"

namespace deepool::planner {

struct SpeedupPoint {
  int devices = 0;  // G of this point
  Plan plan;        // PlanBurstParallel's plan on G devices, data-parallel totals beside it
  // The single-device iteration time over the plan's: what G devices buy the job.
  double speedup() const {
    return plan.totals.iteration_ms > 0 ? plan.single_device_ms / plan.totals.iteration_ms : 0;
  }
};

struct SpeedupCurve {
  std::vector<SpeedupPoint> points;  // by ascending device count
};

// 1, 2, ..., devices.
std::vector<int> DeviceCountsUpTo(int devices);

// The plans at each of `device_counts` (ascending, distinct, each >= 1); options.devices is
// ignored (each point plans on its own count). INVALID_ARGUMENT for empty or unordered counts;
// otherwise the first point's error as PlanBurstParallel gives it, naming the device count.
StatusOr<SpeedupCurve> PlanSpeedupCurve(const Graph& graph, const Profile& profile,
                                        const Cluster& cluster, const PlanOptions& options,
                                        const std::vector<int>& device_counts);

// Whether a cost model built on `shared` prices plans on the first `devices` ranks exactly as one
// built on `own` does: the cost model sees a cluster only through the link between two ranks
// (Cluster::LinkBetween) and the slowest link of an all-reduce over that many ranks, so equal
// links and either one node's worth of devices in both or the same node size suffice.
bool CostsAlike(const Cluster& own, const Cluster& shared, int devices);

}  // namespace deepool::planner
