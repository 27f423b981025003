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

Status FullModel::CostsOfMove(const std::vector<LayerCost>& base_costs,
                              const std::vector<int>& moved, size_t begin, size_t end,
                              std::vector<LayerCost>* costs) {
  *costs = base_costs;
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
    ASSIGN_OR_RETURN((*costs)[id], model_.CostOf(static_cast<int>(id), moved));
  }
  return Status::Ok();
}

StatusOr<std::optional<PlanTotals>> FullModel::TotalsOfMoveIfBetter(const std::vector<int>& base,
                                                                    const std::vector<int>& moved,
                                                                    size_t begin, size_t end,
                                                                    double faster_than_ms,
                                                                    double budget_gpu_ms) {
  const auto known = known_.find(moved);
  if (known != known_.end()) return std::optional<PlanTotals>(known->second.totals);
  const auto from = known_.find(base);
  if (from == known_.end()) {
    ASSIGN_OR_RETURN(PlanTotals totals, Totals(moved));
    return std::optional<PlanTotals>(totals);
  }
  RETURN_IF_ERROR(CostsOfMove(from->second.costs, moved, begin, end, &move_costs_));
  // The full model's serial time is these sums with each layer's exposed sync (>= 0) added
  // (CostModel::SumCosts); the slack covers sums of the same terms in another order.
  constexpr double kSlack = 1e-9;
  double time_ms = 0;
  double gpu_ms = 0;
  for (size_t id = 0; id < moved.size(); ++id) {
    time_ms += move_costs_[id].total_ms();
    gpu_ms += move_costs_[id].device_ms(moved[id]);
  }
  if (time_ms * (1 - kSlack) >= faster_than_ms || gpu_ms * (1 - kSlack) > budget_gpu_ms) {
    return std::optional<PlanTotals>();
  }
  ASSIGN_OR_RETURN(PlanTotals totals, Remember(moved, PrefixRanges(moved), move_costs_));
  return std::optional<PlanTotals>(totals);
}

StatusOr<PlanTotals> FullModel::Remember(const std::vector<int>& counts,
                                         const std::vector<DeviceRange>& ranges,
                                         std::vector<LayerCost> costs) {
  ASSIGN_OR_RETURN(const PlanTotals totals, model_.TotalsOfCosts(ranges, num_devices_, costs));
  known_.emplace(counts, Known{totals, std::move(costs)});
  return totals;
}

}  // namespace deepool::planner::internal
