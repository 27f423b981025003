// InProcessPlanningBackend: the product's PlanningBackend. Builds graphs from the zoo
// (planner/zoo/zoo.h) or an inline graph document, reads measured profiles (planner/
// profile_table.h) or uses the device type's analytical preset (planner/device_model.h), and
// calls the burst-parallel search (planner/search.h) in-process. Zoo models are built with
// planner::zoo::JobModelOptions, the one rule for a job's model defaults, everywhere: the
// planned graph, the profiled graph and the profile cache key.
// Speed-up curves go through a bounded planner::SpeedupCurveCache (least recently used beyond its
// capacity), so jobs of one model, options, profile and device type share one entry.
// Threading: safe to call from several threads (the curve cache has its own lock).
#pragma once

#include <cstddef>
#include <memory>

#include "coordinator/planning.h"

namespace deepool::planner {
class SpeedupCurveCache;
}

namespace deepool::coordinator {

class InProcessPlanningBackend final : public PlanningBackend {
 public:
  explicit InProcessPlanningBackend(size_t curve_cache_capacity = 128);
  ~InProcessPlanningBackend() override;

  Status CheckModel(const JobSpec& spec) const override;
  Status CheckMemoryCanFit(const JobSpec& spec, const ClusterShape& shape) const override;
  std::string ModelKey(const JobSpec& spec) const override;
  StatusOr<std::string> ProfileGraphJson(const JobSpec& spec) const override;
  bool HasAnalyticalPreset(const std::string& device_type) const override;
  std::vector<int64_t> ProfileBatchSizes(const JobSpec& spec) const override;
  StatusOr<PlannedJob> PlanForeground(const JobSpec& spec, const ClusterShape& shape,
                                      const std::string& profile_json) const override;
  StatusOr<policy::SpeedCurve> SpeedupCurve(const JobSpec& spec, const ClusterShape& pool,
                                            const std::string& profile_json) const override;
  StatusOr<PlannedJob> PlanBackground(const JobSpec& spec,
                                      const ClusterShape& device) const override;

 private:
  std::unique_ptr<planner::SpeedupCurveCache> curves_;
};

}  // namespace deepool::coordinator
