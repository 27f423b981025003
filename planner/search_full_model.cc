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

Status FullModel::CostsOfMove(const std::vector<int>& moved, size_t begin, size_t end) {
  const Graph& graph = model_.graph();
  changed_.resize(moved.size(), false);
  changed_ids_.clear();
  auto mark = [&](size_t id) {
    if (changed_[id]) return;
    changed_[id] = true;
    changed_ids_.push_back(id);
  };
  for (size_t id = begin; id < end; ++id) {
    mark(id);
    for (int consumer : graph.consumers(static_cast<int>(id))) {
      mark(static_cast<size_t>(consumer));
    }
  }
  changed_costs_.clear();
  Status status;
  for (size_t id : changed_ids_) {
    changed_[id] = false;
    if (!status.ok()) continue;
    StatusOr<LayerCost> cost = model_.CostOf(static_cast<int>(id), moved);
    if (cost.ok()) {
      changed_costs_.emplace_back(id, *cost);
    } else {
      status = cost.status();
    }
  }
  return status;
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
  RETURN_IF_ERROR(CostsOfMove(moved, begin, end));
  // The full model's serial time is the layers' own costs with each layer's exposed sync (>= 0)
  // added (CostModel::SumCosts): these sums, from the base's with the changed layers' swapped,
  // bound it from below. The slack covers sums of the same terms in another order.
  constexpr double kSlack = 1e-9;
  const Known& from_plan = from->second;
  double time_ms = from_plan.own_ms;
  double gpu_ms = from_plan.own_device_ms;
  for (const auto& [id, cost] : changed_costs_) {
    const LayerCost& before = from_plan.costs[id];
    time_ms += cost.total_ms() - before.total_ms();
    gpu_ms += cost.device_ms(moved[id]) - before.device_ms(base[id]);
  }
  if (time_ms * (1 - kSlack) >= faster_than_ms || gpu_ms * (1 - kSlack) > budget_gpu_ms) {
    return std::optional<PlanTotals>();
  }
  std::vector<LayerCost> costs = from_plan.costs;
  for (const auto& [id, cost] : changed_costs_) costs[id] = cost;
  ASSIGN_OR_RETURN(PlanTotals totals, Remember(moved, PrefixRanges(moved), std::move(costs)));
  return std::optional<PlanTotals>(totals);
}

StatusOr<PlanTotals> FullModel::Remember(const std::vector<int>& counts,
                                         const std::vector<DeviceRange>& ranges,
                                         std::vector<LayerCost> costs) {
  ASSIGN_OR_RETURN(const PlanTotals totals, model_.TotalsOfCosts(ranges, num_devices_, costs));
  Known known{totals, std::move(costs), 0, 0};
  for (size_t id = 0; id < known.costs.size(); ++id) {
    known.own_ms += known.costs[id].total_ms();
    known.own_device_ms += known.costs[id].device_ms(counts[id]);
  }
  known_.emplace(counts, std::move(known));
  return totals;
}

}  // namespace deepool::planner::internal
