// Small helpers of the policy-facing types (pool_policy.h).
#include "simulator/pool_policy.h"

namespace deepool::simulator {

const PoolCurvePoint* PoolCurve::At(int devices) const {
  for (const PoolCurvePoint& point : points) {
    if (point.devices == devices) return &point;
  }
  return nullptr;
}

const PoolCurve* JobCurves::For(std::string_view device_type) const {
  for (const PoolCurve& curve : per_type) {
    if (curve.device_type == device_type) return &curve;
  }
  return nullptr;
}

const char* ParallelismName(Parallelism parallelism) {
  return parallelism == Parallelism::kBurst ? "burst" : "dp";
}

bool PoolAllocation::operator==(const PoolAllocation& other) const {
  if (running() != other.running()) return false;
  if (!running()) return true;
  return device_type == other.device_type && devices == other.devices &&
         parallelism == other.parallelism && host_job == other.host_job;
}

}  // namespace deepool::simulator
