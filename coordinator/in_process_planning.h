// InProcessPlanningBackend: the product's PlanningBackend. Builds graphs from the zoo
// (planner/zoo/zoo.h) or an inline graph document, reads measured profiles (planner/
// profile_table.h) or uses the device type's analytical preset (planner/device_model.h), and
// calls the burst-parallel search (planner/search.h) in-process. Zoo models are built with
// planner::zoo::JobModelOptions, the one rule for a job's model defaults, everywhere: the
// planned graph, the profiled graph and the profile cache key.
// Threading: stateless; safe to call from several threads.
#pragma once

#include "coordinator/planning.h"

namespace deepool::coordinator {

class InProcessPlanningBackend final : public PlanningBackend {
 public:
  Status CheckModel(const JobSpec& spec) const override;
  Status CheckMemoryCanFit(const JobSpec& spec, const ClusterShape& shape) const override;
  std::string ModelKey(const JobSpec& spec) const override;
  StatusOr<std::string> ProfileGraphJson(const JobSpec& spec) const override;
  bool HasAnalyticalPreset(const std::string& device_type) const override;
  std::vector<int64_t> ProfileBatchSizes(const JobSpec& spec) const override;
  StatusOr<PlannedJob> PlanForeground(const JobSpec& spec, const ClusterShape& shape,
                                      const std::string& profile_json) const override;
  StatusOr<PlannedJob> PlanBackground(const JobSpec& spec,
                                      const ClusterShape& device) const override;
};

}  // namespace deepool::coordinator
