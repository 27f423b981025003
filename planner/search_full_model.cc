// FullModel (search_full_model.h): the full model's totals, remembered by counts, and a local
// move's totals from the plan it moved from.
#include "planner/search_full_model.h"

#include <utility>

#include "planner/graph.h"

namespace deepool::planner::internal {

StatusOr<PlanTotals> FullModel::Totals(const std::vector<int>& counts) {
  const auto known = known_.find(counts);
  if (known != known_.end()) return known->second.totals;
  const std::vector<DeviceRange> ranges = PrefixRanges(counts);
  ASSIGN_OR_RETURN(std::vector<LayerCost> costs, model_.LayerCostsOf(ranges, num_devices_));
  return Remember(counts, ranges, std::move(costs));
}

StatusOr<PlanTotals> FullModel::TotalsOfMove(const std::vector<int>& base,
                                             const std::vector<int>& moved, size_t begin,
                                             size_t end) {
  const auto known = known_.find(moved);
  if (known != known_.end()) return known->second.totals;
  const auto from = known_.find(base);
  if (from == known_.end()) return Totals(moved);
  std::vector<LayerCost> costs = from->second.costs;
  const Graph& graph = model_.graph();
  changed_.assign(moved.size(), false);
  for (size_t id = begin; id < end; ++id) {
    changed_[id] = true;
    for (int consumer : graph.consumers(static_cast<int>(id))) {
      changed_[static_cast<size_t>(consumer)] = true;
    }
  }
  for (size_t id = 0; id < moved.size(); ++id) {
    if (!changed_[id]) continue;
    ASSIGN_OR_RETURN(costs[id], model_.CostOf(static_cast<int>(id), moved));
  }
  return Remember(moved, PrefixRanges(moved), std::move(costs));
}

StatusOr<PlanTotals> FullModel::Remember(const std::vector<int>& counts,
                                         const std::vector<DeviceRange>& ranges,
                                         std::vector<LayerCost> costs) {
  ASSIGN_OR_RETURN(const PlanTotals totals, model_.TotalsOfCosts(ranges, num_devices_, costs));
  known_.emplace(counts, Known{totals, std::move(costs)});
  return totals;
}

}  // namespace deepool::planner::internal
