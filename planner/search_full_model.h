// The burst-parallel search's full-model totals (search.cc): every plan the search costs by the
// full (bucketed, overlapped) cost model, remembered by its per-layer counts for one plan's
// search, so that the additive answers and the local moves, which meet the same plans again,
// cost each once, and a local move re-costs only the layers it changes; and where the local
// moves have been (DescentMemo), so that a descent that meets an earlier one stops. docs/planner.md
// ("The search", step 3) describes the local moves.
// Internal to the planner: search.cc is its only user.
// Threading: not thread-safe, and it fills the CostModel's lazy caches: one search, one thread,
// as CostModel's (cost_model.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/cost_model.h"
#include "planner/plan.h"

namespace deepool::planner::internal {

// A plan's per-layer counts hashed two at a time, as one 64-bit word: plans of hundreds of
// layers are hashed at every local move.
struct CountsHash {
  size_t operator()(const std::vector<int>& counts) const {
    uint64_t hash = counts.size();
    size_t i = 0;
    for (; i + 2 <= counts.size(); i += 2) {
      uint64_t pair = 0;
      std::memcpy(&pair, &counts[i], sizeof pair);
      hash = (hash ^ pair) * 1099511628211ULL;
    }
    if (i < counts.size()) hash = (hash ^ static_cast<uint32_t>(counts[i])) * 1099511628211ULL;
    return static_cast<size_t>(hash ^ (hash >> 29));
  }
};

// The full model's totals on `num_devices`, remembered by counts for one plan's search: the
// additive answers and the local moves from different starts meet the same plans again (a
// third to a half of the local moves' evaluations on the zoo models at G = 8). Every plan it
// costs keeps its layers' costs (CostModel::CostOf), so that a local move recomputes only the
// layers it moves and their consumers (CostModel::TotalsOfCosts): the same totals, to the bit.
// `model` must outlive it.
class FullModel {
 public:
  FullModel(const CostModel& model, int num_devices) : model_(model), num_devices_(num_devices) {}

  const CostModel& model() const { return model_; }

  // CostModel::Totals of these counts (prefix ranges) on `num_devices`, or its error.
  StatusOr<PlanTotals> Totals(const std::vector<int>& counts);

  // CostModel::Evaluate of these counts (prefix ranges) on `num_devices`: from the layer costs
  // kept for them where there are (the same plan, to the bit), else costed anew.
  StatusOr<Plan> Evaluate(const std::vector<int>& counts) const;

  // Totals(moved), where `moved` is `base` (costed here before) with the layers [begin, end) on
  // other counts; or nothing when the moved plan cannot be faster than `faster_than_ms` within
  // `budget_gpu_ms`: its layers' own costs, before any gradient sync is exposed, already reach
  // the time or exceed the GPU-time (the exposed sync only adds to both), so the sync schedule,
  // most of a plan's costing, is skipped. Exact: a move it drops is one the full totals would
  // reject too (the bounds allow for rounding). For plans on prefix ranges (the search's).
  // Only the layer costs of a moved plan faster than `faster_than_ms` are kept, as a later
  // move's start: a local move starts from a plan it found faster (or from one Totals costed),
  // and the others' costs would be most of this model's memory, touched for nothing.
  StatusOr<std::optional<PlanTotals>> TotalsOfMoveIfBetter(const std::vector<int>& base,
                                                           const std::vector<int>& moved,
                                                           size_t begin, size_t end,
                                                           double faster_than_ms,
                                                           double budget_gpu_ms);

 private:
  struct Known {
    PlanTotals totals;
    // CostOf every layer, before the gradient sync's share: kept only for a plan a local move
    // may start from (see TotalsOfMoveIfBetter); empty with has_costs false otherwise.
    std::vector<LayerCost> costs;
    bool has_costs = false;
    double own_ms = 0;  // the sums of the layers' times and device times
    double own_device_ms = 0;
  };

  // Remembers the plan of these counts with its totals, and its layer costs where `keep_costs`.
  Known& Remember(const std::vector<int>& counts, const PlanTotals& totals,
                  const std::vector<LayerCost>& costs, bool keep_costs);
  // Works out the layer costs of `known`, the plan of counts `base`, again where they were not
  // kept.
  Status KeepCosts(const std::vector<int>& base, Known& known);

  const CostModel& model_;
  const int num_devices_;
  std::unordered_map<std::vector<int>, Known, CountsHash> known_;
  // Into changed_costs_: the costs in `moved` of the layers [begin, end) and their consumers,
  // the layers whose costs differ from the plan it moved from.
  Status CostsOfMove(const std::vector<int>& moved, size_t begin, size_t end);

  // Into changed_ids_, each once: the layers in [begin, end) of a plan of `layers` layers that
  // `is_moved` says are on another count, and their consumers: the layers whose costs differ.
  template <typename IsMoved>
  void MarkMoved(size_t layers, size_t begin, size_t end, IsMoved is_moved);

  // The plan whose layer costs were worked out last (a node of known_, which stays put), for
  // Totals to cost a new plan from; null before the first.
  const std::pair<const std::vector<int>, Known>* last_costed_ = nullptr;

  // MarkMoved's and CostsOfMove's, kept for their capacity; changed_ is all 0 between calls (bytes,
  // not std::vector<bool>'s bits: a move marks and clears hundreds a call).
  std::vector<uint8_t> changed_;
  std::vector<size_t> changed_ids_;
  std::vector<std::pair<size_t, LayerCost>> changed_costs_;
};

// Where the local moves (search.cc's Refine) have been. Steepest descent is a function of the
// plan it is at (a move is chosen by the plan's counts and totals alone), so a descent that reaches
// a plan an earlier descent went through, with no more moves left than that one had there, would go
// where that one went and end at its end or at a plan on the way, no faster than a result already
// found: it stops there. Exact. Starts often meet (the additive answers at the three sync weights
// are alike, and descents meet again at the same local optimum).
class DescentMemo {
 public:
  // Records a descent at `counts` with `moves_left` moves (before its move from there); false
  // where an earlier one went on from there with at least as many, and this one can stop.
  bool Visit(const std::vector<int>& counts, int moves_left) {
    auto [it, inserted] = moves_left_.try_emplace(counts, moves_left);
    if (!inserted) {
      if (it->second >= moves_left) return false;
      it->second = moves_left;
    }
    path_.push_back(&it->second);
    return true;
  }
  // The descent since the last call ended: with no faster move (`complete`), its plans lead to
  // its end whatever moves are left; cut short, each with the moves it had there.
  void EndDescent(bool complete) {
    if (complete) {
      for (int* moves_left : path_) *moves_left = std::numeric_limits<int>::max();
    }
    path_.clear();
  }

 private:
  std::unordered_map<std::vector<int>, int, CountsHash> moves_left_;
  std::vector<int*> path_;  // the current descent's entries (stable: map nodes stay put)
};

}  // namespace deepool::planner::internal
