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
  std::vector<LayerCost> costs;
  if (last_costed_ != nullptr && last_costed_->first.size() == counts.size()) {
    // From the plan costed last: only the layers on other counts and their consumers change.
    const std::vector<int>& base = last_costed_->first;
    costs = last_costed_->second.costs;
    MarkMoved(counts.size(), 0, counts.size(), [&](size_t id) { return counts[id] != base[id]; });
    for (size_t id : changed_ids_) {
      ASSIGN_OR_RETURN(costs[id], model_.CostOf(static_cast<int>(id), counts));
    }
  } else {
    ASSIGN_OR_RETURN(costs, model_.LayerCostsOf(ranges, num_devices_));
  }
  ASSIGN_OR_RETURN(const PlanTotals totals, model_.TotalsOfCosts(ranges, num_devices_, costs));
  Known& remembered = Remember(counts, totals, costs, /*keep_costs=*/false);
  remembered.costs = std::move(costs);
  remembered.has_costs = true;
  last_costed_ = &*known_.find(counts);
  return totals;
}

StatusOr<Plan> FullModel::Evaluate(const std::vector<int>& counts) const {
  const auto known = known_.find(counts);
  if (known != known_.end() && known->second.has_costs) {
    return model_.EvaluateOfCosts(PrefixRanges(counts), num_devices_, known->second.costs);
  }
  return model_.Evaluate(counts, num_devices_);
}

template <typename IsMoved>
void FullModel::MarkMoved(size_t layers, size_t begin, size_t end, IsMoved is_moved) {
  const Graph& graph = model_.graph();
  changed_.resize(layers, 0);
  changed_ids_.clear();
  auto mark = [&](size_t id) {
    if (changed_[id]) return;
    changed_[id] = 1;
    changed_ids_.push_back(id);
  };
  for (size_t id = begin; id < end; ++id) {
    if (!is_moved(id)) continue;
    mark(id);
    for (int consumer : graph.consumers(static_cast<int>(id))) {
      mark(static_cast<size_t>(consumer));
    }
  }
  for (size_t id : changed_ids_) changed_[id] = 0;
}

Status FullModel::KeepCosts(const std::vector<int>& base, Known& known) {
  if (!known.has_costs) {
    ASSIGN_OR_RETURN(known.costs, model_.LayerCostsOf(PrefixRanges(base), num_devices_));
    known.has_costs = true;
  }
  return Status::Ok();
}

Status FullModel::CostsOfMove(const std::vector<int>& moved, size_t begin, size_t end) {
  MarkMoved(moved.size(), begin, end, [](size_t) { return true; });
  changed_costs_.clear();
  for (size_t id : changed_ids_) {
    ASSIGN_OR_RETURN(const LayerCost cost, model_.CostOf(static_cast<int>(id), moved));
    changed_costs_.emplace_back(id, cost);
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
  RETURN_IF_ERROR(KeepCosts(base, from->second));
  Known& from_plan = from->second;
  RETURN_IF_ERROR(CostsOfMove(moved, begin, end));
  // The full model's serial time is the layers' own costs with each layer's exposed sync (>= 0)
  // added (CostModel::SumCosts): these sums, from the base's with the changed layers' swapped,
  // bound it from below. The slack covers sums of the same terms in another order.
  constexpr double kSlack = 1e-9;
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
  // The moved plan's costs are the base's with the changed layers' swapped in: swapped in place
  // for its totals (a copy of every layer's cost per move cost more than the rest), and back.
  auto swap_changed = [&] {
    for (auto& [id, cost] : changed_costs_) std::swap(from_plan.costs[id], cost);
  };
  swap_changed();
  const StatusOr<PlanTotals> totals =
      model_.TotalsOfCosts(PrefixRanges(moved), num_devices_, from_plan.costs);
  if (totals.ok()) {
    Remember(moved, *totals, from_plan.costs, totals->iteration_ms < faster_than_ms);
  }
  swap_changed();
  RETURN_IF_ERROR(totals.status());
  return std::optional<PlanTotals>(*totals);
}

FullModel::Known& FullModel::Remember(const std::vector<int>& counts, const PlanTotals& totals,
                                      const std::vector<LayerCost>& costs, bool keep_costs) {
  Known known{totals, {}, keep_costs, 0, 0};
  for (size_t id = 0; id < costs.size(); ++id) {
    known.own_ms += costs[id].total_ms();
    known.own_device_ms += costs[id].device_ms(counts[id]);
  }
  if (keep_costs) known.costs = costs;
  auto& entry = *known_.emplace(counts, std::move(known)).first;
  if (keep_costs) last_costed_ = &entry;
  return entry.second;
}

}  // namespace deepool::planner::internal
