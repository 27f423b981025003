// Which measured profile a job is planned with and a PROFILE task measures at: 16-bit jobs are
// profiled at their precision by workers that can (executor protocol 8), and profiles are cached
// under a key that names a 16-bit precision (docs/coordinator.md, "Scheduling": Profiles).
// Threading: pure functions.
#pragma once

#include <string>

#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "planner/precision.h"

namespace deepool::coordinator {

// The key a profile of `spec` timed at `profiled_at` is cached under (with the device type): the
// backend's ModelKey, followed by "/precision=bf16" (or fp16) for a 16-bit profile. fp32 and
// tf32 profiles keep the key they always had: PROFILE tasks measured both alike, unrecorded.
std::string ProfileCacheKey(const PlanningBackend& planner, const JobSpec& spec,
                            planner::Precision profiled_at);
// The same from the backend's ModelKey(spec), computed beforehand.
std::string ProfileCacheKey(const std::string& model_key, planner::Precision profiled_at);

// The precision a PROFILE task on `node` for a job at `precision` measures at: the job's when
// it is 16-bit and the node's worker profiles at a precision
// (protocol::kPrecisionProfileProtocolVersion); nullopt otherwise (fp32, unrecorded, as PROFILE
// tasks always measured).
std::optional<planner::Precision> ProfilePrecisionOn(const NodeRecord& node,
                                                     planner::Precision precision);

}  // namespace deepool::coordinator
