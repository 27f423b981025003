// The problem the burst-parallel search solves (search.cc), built from the graph and the cost
// model: layer groups (elementwise layers fused onto their producer) as the nodes of a
// series-parallel problem (pareto_search.h), each node's additive cost at every candidate count,
// the activation re-splits between groups as its edges, the counts each layer may take, and the
// way back from a solution to per-layer counts. docs/planner.md ("The search": fusion, the
// additive stand-in, the problem graph) describes what is built.
// Internal to the planner: search.cc is its only user.
// Threading: no state of its own; those taking a CostModel fill its lazy caches, so as
// CostModel's (cost_model.h), one thread at a time per model.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/cost_model.h"
#include "planner/graph.h"
#include "planner/pareto_search.h"
#include "planner/search.h"

namespace deepool::planner::search_problem {

// The layer groups of the search as nodes of a series-parallel problem: node 0 is the input,
// node 1 the outputs, group g is node g + 2.
struct SearchNodes {
  std::vector<int> group_of;  // per layer
  size_t count = 2;
  int of(int layer_id) const { return group_of[static_cast<size_t>(layer_id)] + 2; }
};

// Groups of layers planned as one: an elementwise layer joins its producer's group when it is
// that producer's only consumer (so fusion never changes the graph's series-parallel shape).
// Returns each layer's group and sets *num_groups; with `fuse` false every layer is its own group.
std::vector<int> GroupLayers(const Graph& graph, bool fuse, int* num_groups);

// Coarser groups for a faster search (PlanOptions::fuse_blocks): every block of the graph, the
// layers after a fork (a layer read by several) up to the first layer where all its paths meet
// again (the join: a residual add, a concat), becomes one group with the join's group, when
// nothing outside the block reads from or feeds into its layers and no layer inside it is a
// graph output. A block is a two-terminal series-parallel component, so merging it keeps the
// problem series-parallel; blocks inside a merged block merge with it. `group_of` is
// GroupLayers's; the groups are renumbered in order of their first layer (a topological order).
std::vector<int> GroupBlocks(const Graph& graph, std::vector<int> group_of, int* num_groups);

// Per layer, the most devices the search may put it on: min(G, B), and with batch norm
// statistics kept per device no more than leave every device of a batch-norm layer two values
// per channel (FewestSamplesPerDevice; a device holds at least floor(B / g) samples).
std::vector<int> MostDevicesPerLayer(const Graph& graph, const PlanOptions& options);

// The counts each layer may take: at most MostDevicesPerLayer, at least the fewest on which it
// fits in device memory alone (MemoryFit::FewestDevicesPerLayer).
struct CountBounds {
  std::vector<int> most;
  std::vector<int> fewest;
  bool Allows(int layer_id, int count) const {
    const auto id = static_cast<size_t>(layer_id);
    return count <= most[id] && count >= fewest[id];
  }
};

// Every layer's own charges at every candidate count, worked out once for the search's solves
// at its three sync weights: compute with batch norm's statistics (`base_ms`), and the amortised
// gradient all-reduce (`sync_ms`), so that the charge at weight w is base_ms + w x sync_ms, the
// sum SetNodeCosts made afresh per weight before, to the bit. An error of the cost model at a
// count is kept for it (OUT_OF_RANGE: the profile cannot time that count) and answered where
// the count is used. Errors are rare, so they are kept apart from the flat charges (a Status
// beside every charge made them three times the size: pages the plan's first call touches).
class OwnCharges {
 public:
  struct Charge {
    double base_ms = 0;
    double sync_ms = 0;
  };

  OwnCharges() = default;
  OwnCharges(const Graph& graph, const CostModel& model, const std::vector<int>& counts);

  const std::vector<int>& counts() const { return counts_; }
  // Zero where StatusAt is an error.
  const Charge& At(int layer_id, size_t count_index) const {
    return charges_[Index(layer_id, count_index)];
  }
  // OK, or the cost model's error for the layer at the count.
  const Status& StatusAt(int layer_id, size_t count_index) const;
  // Whether StatusAt is an error anywhere (rarely: a profile that cannot time some count).
  bool any_errors() const { return !errors_.empty(); }

 private:
  size_t Index(int layer_id, size_t count_index) const {
    return static_cast<size_t>(layer_id) * counts_.size() + count_index;
  }

  std::vector<int> counts_;
  std::vector<Charge> charges_;                    // [layer][count index]
  std::vector<std::pair<size_t, Status>> errors_;  // by index into charges_, ascending
};

// Node costs: every member's own charge (OwnCharges at `sync_weight`: 1 as if no gradient sync
// were hidden, 0 as if all were) at each of the charges' counts. A count the profile cannot
// time (OUT_OF_RANGE, e.g. a batch beyond the measured range) or outside a member's bounds is
// excluded (infinite time); any other error of the cost model is returned. Replaces problem's
// node costs and names; leaves its edges.
Status SetNodeCosts(const Graph& graph, const OwnCharges& charges, const CountBounds& bounds,
                    const SearchNodes& nodes, double sync_weight, SeriesParallelProblem* problem);

// Edges: activation re-splits between groups (several tensors between the same two groups
// share one edge, in order of (from, to) nodes; forward and backward as CostModel::ResplitMs,
// nothing between equal counts, device time on the larger count), zero-cost edges from the
// input and to the outputs (the graph's outputs and every node nothing reads). Appended to
// problem's edges.
void AddEdges(const Graph& graph, const CostModel& model, const std::vector<int>& counts,
              const SearchNodes& nodes, SeriesParallelProblem* problem);

// What the search's additive objective charges for these per-layer counts: every layer's own
// cost (as SetNodeCosts) and re-splits in, device time as the problem's nodes and edges count it;
// at any sync weight, from terms worked out once.
class AdditiveCost {
 public:
  static StatusOr<AdditiveCost> Of(const Graph& graph, const CostModel& model,
                                   const std::vector<int>& counts);
  CostPoint At(double sync_weight) const;

 private:
  struct Term {
    int devices = 0;
    double base_ms = 0;  // compute and batch norm's statistics
    double sync_ms = 0;  // the amortised gradient all-reduce
    double resplit_ms = 0;
    double resplit_device_ms = 0;
  };
  std::vector<Term> terms_;  // per layer
};

// The search's answer as per-layer counts: each layer on its node's chosen candidate count.
// `solution` must be a found solution of a problem built on `nodes` and `candidates`.
std::vector<int> CountsOf(const SeriesParallelSolution& solution, const SearchNodes& nodes,
                          const std::vector<int>& candidates, int num_layers);

}  // namespace deepool::planner::search_problem
