// Concurrent branches: the parallel branches of a graph (Inception's towers, a residual block's
// downsampling shortcut) run on disjoint device ranges at the same time, as DeepPool packs side
// branches onto the GPUs the main branch leaves idle. The search plans device counts on nested
// ranges from rank 0, where branches run one after another; this pass then moves whole branches
// to ranges side by side, and keeps a move when the cost model's list schedule (cost_model.h)
// finds the iteration faster within the device-time budget.
//
// A branch block: a fork layer (or the graph input), a join layer, and two or more branches
// between them, each a chain of layers (every layer of it has one input and one consumer inside
// the chain; the first reads the fork, the last is read by the join only). Branches that fork
// or join inside themselves are not chains and stay where the search put them.
// Threading: pure functions; the CostModel is not thread-safe, so one per thread.
#pragma once

#include <vector>

#include "common/status.h"
#include "planner/cost_model.h"
#include "planner/graph.h"
#include "planner/plan.h"

namespace deepool::planner {

struct BranchBlock {
  int fork = kGraphInputId;                // the layer every branch reads, or the graph input
  int join = -1;                           // the layer that reads every branch
  std::vector<std::vector<int>> branches;  // chains of layer ids, each in topological order
};

// Every block with at least two chain branches, by join id.
std::vector<BranchBlock> FindBranchBlocks(const Graph& graph);

struct PackedBranches {
  std::vector<DeviceRange> ranges;  // one per layer
  PlanTotals totals;                // the cost model's, for these ranges
};

// Starting from `ranges` (whose totals are `totals`), each block in turn: its branches laid out
// side by side over the devices (by descending single-device time; a branch that does not fit
// starts again at rank 0) at their current counts, at each of `candidate_counts`, and at counts
// proportional to their single-device time; the fastest layout within budget_gpu_ms is kept
// when it beats the plan so far. Layouts the cost model cannot time are skipped.
PackedBranches PackConcurrentBranches(const CostModel& model, std::vector<DeviceRange> ranges,
                                      const PlanTotals& totals,
                                      const std::vector<int>& candidate_counts,
                                      double budget_gpu_ms, int num_devices);

}  // namespace deepool::planner
