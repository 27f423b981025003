// Profiles at a precision in the coordinator (profile_cache_key.h).
#include "coordinator/profile_cache_key.h"

#include "planner/profile.h"
#include "protocol/version.h"

namespace deepool::coordinator {

std::string ProfileCacheKey(const PlanningBackend& planner, const JobSpec& spec,
                            planner::Precision profiled_at) {
  return ProfileCacheKey(planner.ModelKey(spec), profiled_at);
}

std::string ProfileCacheKey(const std::string& model_key, planner::Precision profiled_at) {
  if (planner::MayBeUnrecordedPrecision(profiled_at)) return model_key;
  return model_key + "/precision=" + planner::PrecisionName(profiled_at);
}

std::optional<planner::Precision> ProfilePrecisionOn(const NodeRecord& node,
                                                     planner::Precision precision) {
  if (planner::MayBeUnrecordedPrecision(precision)) return std::nullopt;
  if (!node.protocol.Contains(protocol::kPrecisionProfileProtocolVersion)) return std::nullopt;
  return precision;
}

}  // namespace deepool::coordinator
