// The exact core of the burst-parallel search: a dynamic program over Pareto frontiers of
// (time, GPU-time) on a two-terminal series-parallel graph, solved by series-parallel reduction.
// It knows nothing about layers: every node has a few choices (device counts) with a cost each,
// every edge a cost for each pair of its ends' choices; it picks one choice per node minimising
// the summed time subject to the summed GPU-time staying within a budget. docs/planner.md
// explains the algorithm and the pruning.
// Threading: pure functions; each thread keeps its own scratch buffers (and ScalarPassMemo's
// passes) between solves.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::planner {
namespace series_parallel {
struct Schedule;
}  // namespace series_parallel

struct CostPoint {
  double time_ms = 0;
  double gpu_ms = 0;  // devices x milliseconds
};

struct SeriesParallelProblem {
  static constexpr int kSource = 0;  // virtual: exactly one choice, zero cost
  static constexpr int kSink = 1;    // virtual: exactly one choice, zero cost

  // [node][choice]; an infinite time marks a choice the node cannot take. Nodes 0 and 1 are the
  // source and sink and must have exactly one choice.
  std::vector<std::vector<CostPoint>> node_costs;
  // For error messages; views of names that outlive the problem (the graph's layer names).
  std::vector<std::string_view> node_names;

  struct Edge {
    int from = 0;
    int to = 0;
    // Row-major [choice of from][choice of to].
    std::vector<CostPoint> cells;
  };
  std::vector<Edge> edges;

  // Hard constraint on the summed gpu_ms; infinity: unconstrained (only time matters).
  double budget_gpu_ms = std::numeric_limits<double>::infinity();
  // Time of a known feasible solution; partial solutions that cannot beat it are dropped.
  double incumbent_time_ms = std::numeric_limits<double>::infinity();
  // Total GPU-time slack the frontier bounding may give away over the whole reduction.
  double tolerance_gpu_ms = 0;
};

struct SeriesParallelSolution {
  bool found = false;  // false: no solution within the budget beats the incumbent
  CostPoint cost;
  std::vector<int> choices;  // per node; 0 for the source and sink
  int64_t max_frontier = 0;  // largest frontier kept, for diagnostics and benchmarks
};

// FAILED_PRECONDITION naming a node when the graph does not reduce to a single source-sink edge
// (not series-parallel, or a node unreachable from the source or not reaching the sink).
StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem);

// The same on `schedule`, which series_parallel::BuildSchedule made for a problem of the same
// nodes, choice counts and edges (only costs, budget, incumbent and tolerance may differ): a
// caller that solves one shape several times works its schedule out once. INVALID_ARGUMENT when
// the schedule's edges or nodes do not match the problem's in number.
StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem,
                                                     const series_parallel::Schedule& schedule);

// The scalar passes of a problem (the Lagrangian relaxation's), kept between its solves at other
// budgets or incumbents, which they do not depend on: the search solves an answer that the full
// model finds over the limit again below it, and meets the same passes (the same lambdas) again.
// So are the Pareto passes' bounds' outside values, which depend only on those passes, and the
// last exact Pareto pass's frontiers: a solve below that pass's budget takes the fastest point
// of its final frontier within the new budget where there is one (the pass kept every solution
// no slower than its target, up to the frontier tolerance), and runs a pass only where there is
// none. All of it lives in the solving thread's scratch: a memo serves solves on one thread, and
// the solve of another memo in between drops it (it is then worked out again). Valid only while the
// problem's node and edge costs and its schedule stay those of the memo's first solve.
class ScalarPassMemo {
 public:
  ScalarPassMemo();
  uint64_t id() const { return id_; }

 private:
  uint64_t id_;
};

// SolveSeriesParallel on `schedule`, reusing the passes `memo` kept from earlier solves of the
// same problem (see ScalarPassMemo); the answer is the same as without it, to the bit.
StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem,
                                                     const series_parallel::Schedule& schedule,
                                                     const ScalarPassMemo& memo);

}  // namespace deepool::planner
