// `deepool plan`'s device memory: the capacity a plan is checked against (--device-memory-gb,
// the cluster file's device_memory_gb, or the device preset's memory_gb) and the predicted
// peak of every device, printed under the plan (docs/planner.md, "Memory").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/search.h"

namespace deepool::cli {

// The GiB of one device: `flag_gb` when >= 0 (0 turns the check off), else the cluster's
// device_memory_gb when set, else the device preset's memory_gb (0, unchecked, for a device
// type that is no preset).
double DeviceMemoryGb(double flag_gb, const planner::Cluster& cluster);

// --optimizer as the memory model counts it (planner::OptimizerMemoryFor, SGD with the job
// spec's default momentum 0.9); INVALID_ARGUMENT naming it otherwise.
StatusOr<planner::OptimizerMemory> OptimizerMemoryFlag(const std::string& name);

// "device memory: ..." lines: every rank's predicted peak (up to 16 ranks one by one, else the
// largest and smallest), the parts of the largest, and the capacity.
void PrintDeviceMemory(const planner::Plan& plan, const planner::Graph& graph,
                       const planner::Profile& profile, const planner::PlanOptions& options,
                       double memory_gb, std::ostream& out);

}  // namespace deepool::cli
