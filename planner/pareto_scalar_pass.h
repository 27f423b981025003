// The scalar passes of the series-parallel search (pareto_search.cc): one point per cell, the
// least w_time x time + w_gpu x GPU-time, in flat structure-of-arrays tables that every pass
// reuses. The chord method over the Lagrangian weight runs them, and their cells give the
// exact Pareto pass its bounds. Internal to the planner's search.
// Threading: plain functions over caller-owned tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "planner/pareto_search.h"
#include "planner/series_parallel_schedule.h"

namespace deepool::planner::series_parallel {

// Node costs laid out flat once, so passes index them without chasing nested vectors.
struct NodeTable {
  std::vector<size_t> offset;  // first choice of node n; offset[n + 1] - offset[n] choices
  std::vector<CostPoint> costs;

  explicit NodeTable(const SeriesParallelProblem& problem) {
    offset.reserve(problem.node_costs.size() + 1);
    offset.push_back(0);
    for (const auto& choices : problem.node_costs) {
      costs.insert(costs.end(), choices.begin(), choices.end());
      offset.push_back(costs.size());
    }
  }
};

// A flat array left uninitialised when (re)allocated: every pass writes every cell it later
// reads, so zero-filling it first would only cost time.
template <typename T>
class FlatArray {
 public:
  void resize(size_t size) {
    if (size > capacity_) {
      data_.reset(new T[size]);
      capacity_ = size;
    }
  }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

// One scalar pass's result, structure of arrays over the schedule's flat cells: `weight` is the
// cell's least w_time x time + w_gpu x gpu (the "inside" value), infinity where the cell has no
// solution. What the later bounds read of a pass; kept per pass.
struct ScalarTables {
  FlatArray<double> weight;
  FlatArray<double> node_weight;  // per flat node choice; infinity where it cannot be taken
};

// A pass's working arrays, read only until its solution is (ScalarSolution), so one set serves
// every pass. `choice` is a series cell's middle-node choice: where a cell came from follows from
// the schedule and `choice`, so no back-pointers are stored, and the final solution's own time
// and GPU-time are re-added along its choices rather than kept for every cell.
struct ScalarWork {
  FlatArray<int32_t> choice;
  // Only when ties are broken: the GPU-time of each cell's solution, so that of two choices of
  // equal weight the one using less GPU-time wins (the fastest pass: of equally fast layers'
  // counts, the fewest devices).
  FlatArray<double> gpu;
};

// One chosen cell on the way down a pass's solution (ScalarSolution).
struct ChosenCell {
  int table;
  int cell;        // within the table
  int first = -1;  // positions of the parts in the list
  int second = -1;
  CostPoint cost{};  // summed on the way back up
};

// Fills `out` (its buffers are reused) with the least weighted cost of every cell, and `work`
// with the cells' choices (until the next pass into it).
void RunScalarPass(const SeriesParallelProblem& problem, const Schedule& schedule,
                   const NodeTable& nodes, double w_time, double w_gpu, bool break_ties_by_gpu,
                   ScalarTables* out, ScalarWork* work);

// A pass's final solution: every node's choice (0 for the source and sink) and its time and
// GPU-time, re-added along the chosen cells in the same order as the pass would have summed
// them (so the values match a pass that kept them for every cell, to the last bit). `scratch`
// is reused between calls.
SeriesParallelSolution ScalarSolution(const SeriesParallelProblem& problem,
                                      const Schedule& schedule, const NodeTable& nodes,
                                      const ScalarTables& s, const ScalarWork& work,
                                      std::vector<ChosenCell>* scratch);

}  // namespace deepool::planner::series_parallel
