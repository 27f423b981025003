// Device memory as the coordinator plans with it (device_memory.h).
#include "coordinator/device_memory.h"

#include "planner/device_model.h"
#include "planner/memory_model.h"

namespace deepool::coordinator {
namespace {

constexpr double kBytesPerGiB = static_cast<double>(int64_t{1} << 30);

}  // namespace

int64_t DeviceMemoryBytes(const DeviceInfo& device) {
  if (device.memory_bytes > 0) return device.memory_bytes;
  return static_cast<int64_t>(planner::DeviceMemoryGbOr(0, device.type) * kBytesPerGiB);
}

Status HoldToDeviceMemory(const JobSpec& spec, const ClusterShape& shape,
                          planner::PlanOptions* options) {
  ASSIGN_OR_RETURN(options->optimizer_memory,
                   planner::OptimizerMemoryFor(spec.optimizer.name, spec.optimizer.momentum));
  options->device_memory_bytes =
      planner::DeviceCapacityBytes(static_cast<double>(shape.device_memory_bytes) / kBytesPerGiB);
  return Status::Ok();
}

}  // namespace deepool::coordinator
