// `deepool plan --explain`: why the planner gave each group of layers its device count. A group
// is a run of consecutive layers (topological order) on the same count. For each group the plan
// is re-evaluated with that group alone moved to the next smaller and the next larger candidate
// count, every other layer kept: the difference in iteration time and GPU-time, and whether the
// amplification limit would still hold, is the trade-off the search weighed. These are the cost
// model's predictions, not measurements.
// Threading: pure functions; no shared state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/search.h"

namespace deepool::planner {

// The plan with one group moved to another device count.
struct GroupAlternative {
  int devices = 0;
  double delta_iteration_ms = 0;  // > 0: slower than the plan
  double delta_gpu_ms = 0;        // > 0: more device time than the plan
  double amplification = 0;       // of the whole plan with this change
  bool within_limit = true;
  // With batch norm statistics per device: a layer of the group that could not train on this
  // many devices (some device would hold fewer than 2 values per channel), else empty.
  std::string cannot_train;
};

struct GroupExplanation {
  std::string first_layer;
  std::string last_layer;
  int layers = 0;
  int devices = 0;
  double time_ms = 0;  // the group's predicted forward + backward + comm in the plan
  std::optional<GroupAlternative> fewer;
  std::optional<GroupAlternative> more;
  std::string why;  // one sentence for people
};

struct PlanExplanation {
  // Data parallelism as deepool runs it with the options' batch norm (synchronised by default),
  // which the search compares against; plan.data_parallel is the baseline a user would run
  // (statistics per device).
  PlanTotals data_parallel_synced;
  bool sync_batch_norm = true;  // PlanOptions::sync_batch_norm
  std::vector<GroupExplanation> groups;
};

// `plan` must be PlanBurstParallel(graph, profile, cluster, options)'s answer (or any plan of
// the graph whose counts are candidates). Errors as CostModel's.
StatusOr<PlanExplanation> ExplainPlan(const Graph& graph, const Profile& profile,
                                      const Cluster& cluster, const PlanOptions& options,
                                      const Plan& plan);

// The explanation as text: why not data parallelism, then one block per group.
std::string ExplanationText(const PlanExplanation& explanation, const Plan& plan);

}  // namespace deepool::planner
