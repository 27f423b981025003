// Device memory as the coordinator plans with it (docs/coordinator.md, "Device memory"): what a
// registered device has (its worker's report, else its type preset's memory_gb, the rule
// `deepool plan` uses too: planner::DeviceMemoryGbOr), and the search options that hold a plan
// of a job to the least memory among its devices.
// Threading: pure functions.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "planner/search.h"

namespace deepool::coordinator {

// The bytes of memory of `device`: what its worker reports, else its type preset's memory_gb;
// 0 when neither is known (a device type that is no preset, reported without memory).
int64_t DeviceMemoryBytes(const DeviceInfo& device);

// Holds a plan of `spec` on `shape` to the shape's memory: options->device_memory_bytes becomes
// the part of shape.device_memory_bytes a plan may use (planner::DeviceCapacityBytes: 92 %; 0,
// unchecked, when it is unknown) and options->optimizer_memory the spec's optimizer's state.
// INVALID_ARGUMENT naming the optimizer when the memory model does not know it.
Status HoldToDeviceMemory(const JobSpec& spec, const ClusterShape& shape,
                          planner::PlanOptions* options);

}  // namespace deepool::coordinator
