#include "planner/pareto_scalar_pass.h"

#include <cmath>
#include <limits>

namespace deepool::planner::series_parallel {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// f(0), f(1), ..., f(N - 1), in that order, unrolled.
template <int N, typename F>
void Unrolled(F& f) {
  if constexpr (N > 0) {
    Unrolled<N - 1>(f);
    f(N - 1);
  }
}

// The steps of a scalar pass; kBreakTies also tracks every cell's GPU-time (see ScalarTables).
// Only series cells' choices are written: nothing reads the others'.
template <bool kBreakTies>
void ScalarPassSteps(const SeriesParallelProblem& problem, const Schedule& schedule,
                     const NodeTable& nodes, double w_time, double w_gpu, ScalarTables& s,
                     ScalarWork& work) {
  for (const Step& step : schedule.steps) {
    const TableShape& shape = schedule.tables[static_cast<size_t>(step.result)];
    const size_t cells = static_cast<size_t>(shape.cells());
    double* weight = &s.weight[shape.offset];
    int32_t* choice = &work.choice[shape.offset];
    double* gpu = kBreakTies ? &work.gpu[shape.offset] : nullptr;
    if (step.kind == Step::kLeaf) {
      const CostPoint* costs = problem.edges[static_cast<size_t>(step.edge)].cells.data();
      for (size_t c = 0; c < cells; ++c) {
        weight[c] = std::isinf(costs[c].time_ms)
                        ? kInfinity
                        : w_time * costs[c].time_ms + w_gpu * costs[c].gpu_ms;
        if constexpr (kBreakTies) gpu[c] = costs[c].gpu_ms;
      }
      continue;
    }
    const TableShape& first = schedule.tables[static_cast<size_t>(step.first)];
    const TableShape& second = schedule.tables[static_cast<size_t>(step.second)];
    if (step.kind == Step::kParallel) {
      const double* p = &s.weight[first.offset];
      const double* q = &s.weight[second.offset];
      // Infinity when either part has no solution.
      for (size_t c = 0; c < cells; ++c) weight[c] = p[c] + q[c];
      if constexpr (kBreakTies) {
        for (size_t c = 0; c < cells; ++c)
          gpu[c] = work.gpu[first.offset + c] + work.gpu[second.offset + c];
      }
      continue;
    }
    // Series: the best middle choice k for every (i, j).
    const size_t middle = nodes.offset[static_cast<size_t>(step.node)];
    const int choices = static_cast<int>(nodes.offset[static_cast<size_t>(step.node) + 1] - middle);
    const double* middle_weight = &s.node_weight[middle];
    const double* from_weight = &s.node_weight[nodes.offset[static_cast<size_t>(shape.from)]];
    const double* to_weight = &s.node_weight[nodes.offset[static_cast<size_t>(shape.to)]];
    const size_t right_stride = static_cast<size_t>(second.cols);
    for (int i = 0; i < shape.rows; ++i) {
      const size_t left_row = first.offset + static_cast<size_t>(i * first.cols);
      const double* left_weight = &s.weight[left_row];
      for (int j = 0; j < shape.cols; ++j) {
        const size_t c =
            static_cast<size_t>(i) * static_cast<size_t>(shape.cols) + static_cast<size_t>(j);
        // A row or column whose own end cannot take that choice is never used: skip it.
        if (std::isinf(from_weight[i]) || std::isinf(to_weight[j])) {
          weight[c] = kInfinity;
          choice[c] = -1;
          if constexpr (kBreakTies) gpu[c] = kInfinity;
          continue;
        }
        const double* right_weight = &s.weight[second.offset + static_cast<size_t>(j)];
        auto gpu_through = [&](int k) {
          return work.gpu[left_row + static_cast<size_t>(k)] + nodes.costs[middle + k].gpu_ms +
                 work.gpu[second.offset + static_cast<size_t>(k) * right_stride + j];
        };
        double best_weight = kInfinity;
        int best = -1;
        auto consider = [&](int k) {
          const double through = left_weight[k] + middle_weight[k] +
                                 right_weight[static_cast<size_t>(k) * right_stride];
          if (through < best_weight) {
            best_weight = through;
            best = k;
          } else if (kBreakTies && through == best_weight && best >= 0 &&
                     gpu_through(k) < gpu_through(best)) {
            best = k;
          }
        };
        // The candidate counts are powers of two up to G: 4 to 7 of them from G = 8 to 64.
        switch (choices) {
          case 4:
            Unrolled<4>(consider);
            break;
          case 5:
            Unrolled<5>(consider);
            break;
          case 6:
            Unrolled<6>(consider);
            break;
          case 7:
            Unrolled<7>(consider);
            break;
          default:
            for (int k = 0; k < choices; ++k) consider(k);
        }
        weight[c] = best_weight;
        choice[c] = best;
        if constexpr (kBreakTies) gpu[c] = best < 0 ? kInfinity : gpu_through(best);
      }
    }
  }
}

}  // namespace

// Fills `out` (its buffers are reused) with the least weighted cost of every cell.
void RunScalarPass(const SeriesParallelProblem& problem, const Schedule& schedule,
                   const NodeTable& nodes, double w_time, double w_gpu, bool break_ties_by_gpu,
                   ScalarTables* out, ScalarWork* work) {
  ScalarTables& s = *out;
  // Every step writes every cell of its table that is read later: no clearing needed.
  s.weight.resize(schedule.total_cells);
  work->choice.resize(schedule.total_cells);
  if (break_ties_by_gpu) work->gpu.resize(schedule.total_cells);
  s.node_weight.resize(nodes.costs.size());
  for (size_t c = 0; c < nodes.costs.size(); ++c) {
    const CostPoint& node = nodes.costs[c];
    // Weighing an infinite time by 0 would give NaN: an unusable choice is infinite outright.
    s.node_weight[c] =
        std::isinf(node.time_ms) ? kInfinity : w_time * node.time_ms + w_gpu * node.gpu_ms;
  }
  if (break_ties_by_gpu) {
    ScalarPassSteps<true>(problem, schedule, nodes, w_time, w_gpu, s, *work);
  } else {
    ScalarPassSteps<false>(problem, schedule, nodes, w_time, w_gpu, s, *work);
  }
}

// A pass's final solution: every node's choice (0 for the source and sink) and its time and
// GPU-time, re-added along the chosen cells in the same order as the pass would have summed
// them (so the values match a pass that kept them for every cell, to the last bit). `scratch`
// is reused between calls.
SeriesParallelSolution ScalarSolution(const SeriesParallelProblem& problem,
                                      const Schedule& schedule, const NodeTable& nodes,
                                      const ScalarTables& s, const ScalarWork& work,
                                      std::vector<ChosenCell>* scratch) {
  SeriesParallelSolution solution;
  solution.choices.assign(problem.node_costs.size(), 0);
  const size_t final_cell = schedule.tables[static_cast<size_t>(schedule.final_table)].offset;
  if (std::isinf(s.weight[final_cell])) return solution;
  // The chosen cells, parents before children; a table's id is also its step's index.
  std::vector<ChosenCell>& visits = *scratch;
  visits.clear();
  visits.push_back(ChosenCell{schedule.final_table, 0});
  for (size_t v = 0; v < visits.size(); ++v) {
    const Step& step = schedule.steps[static_cast<size_t>(visits[v].table)];
    if (step.kind == Step::kLeaf) continue;
    const int cell = visits[v].cell;
    int first_cell = cell, second_cell = cell;
    if (step.kind == Step::kSeries) {
      const TableShape& shape = schedule.tables[static_cast<size_t>(visits[v].table)];
      const int k = work.choice[shape.offset + static_cast<size_t>(cell)];
      solution.choices[static_cast<size_t>(step.node)] = k;
      first_cell = cell / shape.cols * schedule.tables[static_cast<size_t>(step.first)].cols + k;
      second_cell = k * schedule.tables[static_cast<size_t>(step.second)].cols + cell % shape.cols;
    }
    visits[v].first = static_cast<int>(visits.size());
    visits.push_back(ChosenCell{step.first, first_cell});
    visits[v].second = static_cast<int>(visits.size());
    visits.push_back(ChosenCell{step.second, second_cell});
  }
  // Children sit after their parents, so summing backwards meets every part before its whole.
  for (size_t v = visits.size(); v-- > 0;) {
    ChosenCell& visit = visits[v];
    const Step& step = schedule.steps[static_cast<size_t>(visit.table)];
    if (step.kind == Step::kLeaf) {
      visit.cost =
          problem.edges[static_cast<size_t>(step.edge)].cells[static_cast<size_t>(visit.cell)];
      continue;
    }
    const CostPoint& a = visits[static_cast<size_t>(visit.first)].cost;
    const CostPoint& b = visits[static_cast<size_t>(visit.second)].cost;
    if (step.kind == Step::kParallel) {
      visit.cost = CostPoint{a.time_ms + b.time_ms, a.gpu_ms + b.gpu_ms};
    } else {
      const CostPoint& node =
          nodes.costs[nodes.offset[static_cast<size_t>(step.node)] +
                      static_cast<size_t>(solution.choices[static_cast<size_t>(step.node)])];
      visit.cost =
          CostPoint{a.time_ms + node.time_ms + b.time_ms, a.gpu_ms + node.gpu_ms + b.gpu_ms};
    }
  }
  solution.found = true;
  solution.cost = visits[0].cost;
  return solution;
}

}  // namespace deepool::planner::series_parallel
