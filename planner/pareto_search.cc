// Series-parallel reduction over Pareto frontiers (see pareto_search.h and docs/planner.md).
//
// Every edge (a, b) of the reduced graph carries a table: for each choice i of a and j of b, the
// Pareto frontier of (time, GPU-time) over the choices of the nodes strictly between a and b,
// costs of those nodes and of all edges between them included, a's and b's own costs excluded.
// Two rules shrink the graph until one source-sink edge is left:
//   series:   a node m with one in-edge (a, m) and one out-edge (m, b) becomes the edge (a, b):
//             T[i][j] = prune( U_k  T1[i][k] (+) cost(m, k) (+) T2[k][j] )
//   parallel: two edges (a, b) become one: T[i][j] = prune( T1[i][j] (+) T2[i][j] )
// where (+) is the Minkowski sum of frontiers. Nodes are reduced in the caller's (topological)
// order, so on chains the tables stay one row wide (the source has one choice) and the
// reduction is the classic left-to-right dynamic program. The order depends only on the graph,
// so it is worked out once (the Schedule) and replayed by every pass.
//
// Speed. A "scalar" pass keeps one point per cell, the least w_time x time + w_gpu x GPU-time.
// A bisection over lambda (w_gpu with w_time = 1: the Lagrangian relaxation of the budget)
// yields a feasible solution (the incumbent) and a lower bound. Scalar passes also give, by a
// top-down pass over the steps, the exact least weighted cost of everything OUTSIDE each cell
// (the "outside" value, as in inside-outside algorithms). The exact Pareto pass then drops a
// partial solution (t, g) of cell c when
//     t + out_time[c] > target,   g + out_gpu[c] > budget,   or
//     t + lambda g + out_lambda[c] > target + lambda x budget,
// none of which can lose a solution with time <= target (the last holds for every lambda >= 0
// because the rest must fit in what the budget leaves). Targets start just above the lower
// bound and grow towards the incumbent until a pass finds a solution: small targets keep the
// frontiers tiny.
#include "planner/pareto_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <tuple>
#include <unordered_map>

namespace deepool::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kRelativeSlack = 1e-9;  // floating-point slack on the bounds

// ---------------------------------------------------------------------------------------------
// The schedule: tables and reduction steps, from the graph's shape alone.

struct TableShape {
  int from = 0;
  int to = 0;
  int rows = 0;
  int cols = 0;
  size_t offset = 0;  // first cell in flat per-cell arrays
  int cells() const { return rows * cols; }
};

struct Step {
  enum Kind { kLeaf, kSeries, kParallel } kind = kLeaf;
  int result = 0;
  int first = -1;   // series: (a, m); parallel: one of the two (a, b)
  int second = -1;  // series: (m, b)
  int node = -1;    // series: m
  int edge = -1;    // leaf: the problem's edge
};

struct Schedule {
  std::vector<TableShape> tables;
  std::vector<Step> steps;
  int final_table = -1;
  size_t total_cells = 0;
};

int NumChoices(const SeriesParallelProblem& problem, int node) {
  return static_cast<int>(problem.node_costs[static_cast<size_t>(node)].size());
}

StatusOr<Schedule> BuildSchedule(const SeriesParallelProblem& problem) {
  const size_t nodes = problem.node_costs.size();
  Schedule schedule;
  std::vector<std::vector<int>> in(nodes), out(nodes);  // live tables per node
  std::unordered_map<int64_t, int> live;                // (from, to) -> table
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  auto key_of = [nodes](int from, int to) { return static_cast<int64_t>(from) * nodes + to; };
  auto kill = [&](int id) {
    const TableShape& t = schedule.tables[static_cast<size_t>(id)];
    live.erase(key_of(t.from, t.to));
    auto drop = [id](std::vector<int>& list) {
      list.erase(std::find(list.begin(), list.end(), id));
    };
    drop(in[static_cast<size_t>(t.to)]);
    drop(out[static_cast<size_t>(t.from)]);
  };
  // Adds a table; a second table between the same nodes is merged at once (parallel rule).
  std::function<void(TableShape, Step)> add = [&](TableShape shape, Step step) {
    const int id = static_cast<int>(schedule.tables.size());
    shape.offset = schedule.total_cells;
    schedule.total_cells += static_cast<size_t>(shape.cells());
    step.result = id;
    schedule.tables.push_back(shape);
    schedule.steps.push_back(step);
    in[static_cast<size_t>(shape.to)].push_back(id);
    out[static_cast<size_t>(shape.from)].push_back(id);
    ready.push(shape.from);
    ready.push(shape.to);
    auto existing = live.find(key_of(shape.from, shape.to));
    if (existing == live.end()) {
      live.emplace(key_of(shape.from, shape.to), id);
      return;
    }
    const int other = existing->second;
    kill(other);
    kill(id);
    Step merge;
    merge.kind = Step::kParallel;
    merge.first = other;
    merge.second = id;
    add(shape, merge);
  };
  for (size_t e = 0; e < problem.edges.size(); ++e) {
    const SeriesParallelProblem::Edge& edge = problem.edges[e];
    if (edge.from < 0 || edge.to < 0 || static_cast<size_t>(edge.from) >= nodes ||
        static_cast<size_t>(edge.to) >= nodes) {
      return InvalidArgumentError("an edge names a node that does not exist");
    }
    TableShape shape{edge.from, edge.to, NumChoices(problem, edge.from),
                     NumChoices(problem, edge.to), 0};
    if (edge.cells.size() != static_cast<size_t>(shape.cells())) {
      return InvalidArgumentError("edge " + problem.node_names.at(static_cast<size_t>(edge.from)) +
                                  " -> " + problem.node_names.at(static_cast<size_t>(edge.to)) +
                                  " has the wrong number of cells");
    }
    Step leaf;
    leaf.edge = static_cast<int>(e);
    add(shape, leaf);
  }
  for (size_t n = 2; n < nodes; ++n) ready.push(static_cast<int>(n));
  std::vector<bool> reduced(nodes, false);
  while (!ready.empty()) {
    const int m = ready.top();
    ready.pop();
    if (m < 2 || reduced[static_cast<size_t>(m)]) continue;
    if (in[static_cast<size_t>(m)].size() != 1 || out[static_cast<size_t>(m)].size() != 1) continue;
    reduced[static_cast<size_t>(m)] = true;
    const int first = in[static_cast<size_t>(m)][0], second = out[static_cast<size_t>(m)][0];
    const TableShape& a = schedule.tables[static_cast<size_t>(first)];
    const TableShape& b = schedule.tables[static_cast<size_t>(second)];
    TableShape shape{a.from, b.to, a.rows, b.cols, 0};
    kill(first);
    kill(second);
    Step series;
    series.kind = Step::kSeries;
    series.first = first;
    series.second = second;
    series.node = m;
    add(shape, series);
  }
  for (size_t n = 2; n < nodes; ++n) {
    if (!reduced[n]) {
      return FailedPreconditionError(
          "the graph is not series-parallel around '" + problem.node_names.at(n) +
          "' (the exact search handles chains, branch-and-concat and residual blocks)");
    }
  }
  const auto last = live.find(key_of(SeriesParallelProblem::kSource, SeriesParallelProblem::kSink));
  if (last == live.end() || live.size() != 1) {
    return FailedPreconditionError("the graph does not reduce to one source-to-sink edge");
  }
  schedule.final_table = last->second;
  return schedule;
}

// ---------------------------------------------------------------------------------------------
// Scalar passes: one point per cell in flat arrays.

struct ScalarCell {
  double time = kInfinity;  // infinity: no solution in this cell
  double gpu = kInfinity;
  int32_t left = -1;   // flat index of the first part, or -1
  int32_t right = -1;  // flat index of the second part, or -1
  int32_t node = -1;   // series: the middle node
  int32_t choice = 0;
};

class ScalarPass {
 public:
  // `cells` is the caller's workspace, reused between passes to save allocations.
  ScalarPass(const SeriesParallelProblem& problem, const Schedule& schedule, double w_time,
             double w_gpu, std::vector<ScalarCell>* cells)
      : problem_(problem), schedule_(schedule), w_time_(w_time), w_gpu_(w_gpu), cells_(*cells) {}

  void Run() {
    // Every step writes every cell of its table, so the workspace needs no clearing.
    cells_.resize(schedule_.total_cells);
    for (const Step& step : schedule_.steps) {
      const TableShape& shape = schedule_.tables[static_cast<size_t>(step.result)];
      ScalarCell* result = &cells_[shape.offset];
      if (step.kind == Step::kLeaf) {
        const auto& edge = problem_.edges[static_cast<size_t>(step.edge)];
        for (int c = 0; c < shape.cells(); ++c) {
          result[c] = ScalarCell{edge.cells[static_cast<size_t>(c)].time_ms,
                                 edge.cells[static_cast<size_t>(c)].gpu_ms,
                                 -1,
                                 -1,
                                 -1,
                                 0};
        }
      } else if (step.kind == Step::kParallel) {
        const size_t a = schedule_.tables[static_cast<size_t>(step.first)].offset;
        const size_t b = schedule_.tables[static_cast<size_t>(step.second)].offset;
        for (int c = 0; c < shape.cells(); ++c) {
          const ScalarCell& p = cells_[a + static_cast<size_t>(c)];
          const ScalarCell& q = cells_[b + static_cast<size_t>(c)];
          if (std::isinf(p.time) || std::isinf(q.time)) {
            result[c] = ScalarCell{};
            continue;
          }
          result[c] = ScalarCell{p.time + q.time,
                                 p.gpu + q.gpu,
                                 static_cast<int32_t>(a + c),
                                 static_cast<int32_t>(b + c),
                                 -1,
                                 0};
        }
      } else {
        Series(step, shape, result);
      }
    }
  }

  const ScalarCell& Final() const {
    return cells_[schedule_.tables[static_cast<size_t>(schedule_.final_table)].offset];
  }

  // The choice of every node in the final solution (0 for the source and sink).
  std::vector<int> Choices() const {
    std::vector<int> choices(problem_.node_costs.size(), 0);
    std::vector<int32_t> stack{
        static_cast<int32_t>(schedule_.tables[static_cast<size_t>(schedule_.final_table)].offset)};
    while (!stack.empty()) {
      const int32_t id = stack.back();
      stack.pop_back();
      if (id < 0) continue;
      const ScalarCell& cell = cells_[static_cast<size_t>(id)];
      if (cell.node >= 0) choices[static_cast<size_t>(cell.node)] = cell.choice;
      stack.push_back(cell.left);
      stack.push_back(cell.right);
    }
    return choices;
  }

  // Least weighted cost of everything outside each cell (flat), by a top-down pass.
  std::vector<double> Outside() const {
    std::vector<double> outside(schedule_.total_cells, kInfinity);
    outside[schedule_.tables[static_cast<size_t>(schedule_.final_table)].offset] = 0;
    for (auto step = schedule_.steps.rbegin(); step != schedule_.steps.rend(); ++step) {
      if (step->kind == Step::kLeaf) continue;
      const TableShape& shape = schedule_.tables[static_cast<size_t>(step->result)];
      const TableShape& first = schedule_.tables[static_cast<size_t>(step->first)];
      const TableShape& second = schedule_.tables[static_cast<size_t>(step->second)];
      if (step->kind == Step::kParallel) {
        for (int c = 0; c < shape.cells(); ++c) {
          const double outer = outside[shape.offset + static_cast<size_t>(c)];
          outside[first.offset + c] = outer + Inside(second.offset + c);
          outside[second.offset + c] = outer + Inside(first.offset + c);
        }
        continue;
      }
      const int choices = NumChoices(problem_, step->node);
      for (int i = 0; i < shape.rows; ++i) {
        for (int j = 0; j < shape.cols; ++j) {
          const double outer = outside[shape.offset + static_cast<size_t>(i * shape.cols + j)];
          if (std::isinf(outer)) continue;
          for (int k = 0; k < choices; ++k) {
            const CostPoint& node = NodeCost(step->node, k);
            if (std::isinf(node.time_ms)) continue;
            const double middle = Weight(node.time_ms, node.gpu_ms);
            const size_t left = first.offset + static_cast<size_t>(i * first.cols + k);
            const size_t right = second.offset + static_cast<size_t>(k * second.cols + j);
            outside[left] = std::min(outside[left], outer + middle + Inside(right));
            outside[right] = std::min(outside[right], outer + middle + Inside(left));
          }
        }
      }
    }
    return outside;
  }

 private:
  const CostPoint& NodeCost(int node, int choice) const {
    return problem_.node_costs[static_cast<size_t>(node)][static_cast<size_t>(choice)];
  }
  double Weight(double time, double gpu) const { return w_time_ * time + w_gpu_ * gpu; }
  double Inside(size_t cell) const {
    const ScalarCell& c = cells_[cell];
    return std::isinf(c.time) ? kInfinity : Weight(c.time, c.gpu);
  }

  void Series(const Step& step, const TableShape& shape, ScalarCell* result) {
    const TableShape& first = schedule_.tables[static_cast<size_t>(step.first)];
    const TableShape& second = schedule_.tables[static_cast<size_t>(step.second)];
    const int choices = NumChoices(problem_, step.node);
    std::fill(result, result + shape.cells(), ScalarCell{});
    for (int i = 0; i < shape.rows; ++i) {
      if (std::isinf(NodeCost(shape.from, i).time_ms)) continue;
      for (int j = 0; j < shape.cols; ++j) {
        if (std::isinf(NodeCost(shape.to, j).time_ms)) continue;
        double best_weight = kInfinity, best_gpu = kInfinity;
        int best = -1;
        for (int k = 0; k < choices; ++k) {
          const CostPoint& node = NodeCost(step.node, k);
          const ScalarCell& p = cells_[first.offset + static_cast<size_t>(i * first.cols + k)];
          const ScalarCell& q = cells_[second.offset + static_cast<size_t>(k * second.cols + j)];
          if (std::isinf(node.time_ms) || std::isinf(p.time) || std::isinf(q.time)) continue;
          const double gpu = p.gpu + node.gpu_ms + q.gpu;
          const double weight = Weight(p.time + node.time_ms + q.time, gpu);
          if (weight < best_weight || (weight == best_weight && gpu < best_gpu)) {
            best_weight = weight;
            best_gpu = gpu;
            best = k;
          }
        }
        if (best < 0) continue;
        const size_t left = first.offset + static_cast<size_t>(i * first.cols + best);
        const size_t right = second.offset + static_cast<size_t>(best * second.cols + j);
        const CostPoint& node = NodeCost(step.node, best);
        result[i * shape.cols + j] =
            ScalarCell{cells_[left].time + node.time_ms + cells_[right].time,
                       best_gpu,
                       static_cast<int32_t>(left),
                       static_cast<int32_t>(right),
                       step.node,
                       best};
      }
    }
  }

  const SeriesParallelProblem& problem_;
  const Schedule& schedule_;
  const double w_time_, w_gpu_;
  std::vector<ScalarCell>& cells_;
};

// ---------------------------------------------------------------------------------------------
// The exact Pareto pass.

struct Point {
  double time;
  double gpu;
  int32_t trace;  // index into the pass's traces, or -1 for no choices below
};

// How a frontier point was built: its two parts and, for a series step, the middle node's choice.
struct Trace {
  int32_t left;
  int32_t right;
  int32_t node;  // -1 for a parallel step
  int32_t choice;
};

struct Candidate {
  double time;
  double gpu;
  int32_t left;
  int32_t right;
  int32_t choice;
};

// One table's frontiers, contiguous: cell c holds points[offsets[c], offsets[c + 1]).
struct Frontiers {
  std::vector<Point> points;
  std::vector<uint32_t> offsets{0};
  const Point* begin(int cell) const { return points.data() + offsets[static_cast<size_t>(cell)]; }
  const Point* end(int cell) const {
    return points.data() + offsets[static_cast<size_t>(cell) + 1];
  }
};

// Flat outside values for the three bounds.
struct Bounds {
  double lambda = 0;
  std::vector<double> time;      // weights (1, 0)
  std::vector<double> gpu;       // weights (0, 1)
  std::vector<double> weighted;  // weights (1, lambda)
};

class ParetoPass {
 public:
  ParetoPass(const SeriesParallelProblem& problem, const Schedule& schedule, const Bounds& bounds,
             double target)
      : problem_(problem), schedule_(schedule), bounds_(bounds), target_(target) {}

  SeriesParallelSolution Run() {
    const double steps = static_cast<double>(schedule_.steps.size());
    window_ = problem_.tolerance_gpu_ms / std::max(1.0, steps);
    tables_.assign(schedule_.tables.size(), Frontiers{});
    for (const Step& step : schedule_.steps) {
      Frontiers& result = tables_[static_cast<size_t>(step.result)];
      const TableShape& shape = schedule_.tables[static_cast<size_t>(step.result)];
      if (step.kind == Step::kLeaf) {
        const auto& edge = problem_.edges[static_cast<size_t>(step.edge)];
        for (const CostPoint& cell : edge.cells) {
          result.points.push_back(Point{cell.time_ms, cell.gpu_ms, -1});
          result.offsets.push_back(static_cast<uint32_t>(result.points.size()));
        }
        continue;
      }
      const Frontiers& first = tables_[static_cast<size_t>(step.first)];
      const Frontiers& second = tables_[static_cast<size_t>(step.second)];
      if (step.kind == Step::kParallel) {
        for (int c = 0; c < shape.cells(); ++c) {
          const Limit limit = Limits(shape, c);
          scratch_.clear();
          for (const Point* p = first.begin(c); p != first.end(c); ++p) {
            if (p->gpu > limit.gpu) break;
            for (const Point* q = second.begin(c); q != second.end(c); ++q) {
              if (p->gpu + q->gpu > limit.gpu) break;
              Consider(p->time + q->time, p->gpu + q->gpu, limit, p->trace, q->trace, 0);
            }
          }
          Prune(-1, &result);
        }
      } else {
        Series(step, shape, first, second, &result);
      }
      tables_[static_cast<size_t>(step.first)] = Frontiers{};
      tables_[static_cast<size_t>(step.second)] = Frontiers{};
    }
    SeriesParallelSolution solution;
    solution.max_frontier = max_frontier_;
    solution.choices.assign(problem_.node_costs.size(), 0);
    const Frontiers& last = tables_[static_cast<size_t>(schedule_.final_table)];
    const Point* best = nullptr;
    for (const Point* point = last.begin(0); point != last.end(0); ++point) {
      if (point->gpu > problem_.budget_gpu_ms * (1 + kRelativeSlack)) continue;
      if (best == nullptr || point->time < best->time) best = point;
    }
    if (best == nullptr) return solution;
    solution.found = true;
    solution.cost = CostPoint{best->time, best->gpu};
    std::vector<int32_t> stack{best->trace};
    while (!stack.empty()) {
      const int32_t id = stack.back();
      stack.pop_back();
      if (id < 0) continue;
      const Trace& trace = traces_[static_cast<size_t>(id)];
      if (trace.node >= 0) solution.choices[static_cast<size_t>(trace.node)] = trace.choice;
      stack.push_back(trace.left);
      stack.push_back(trace.right);
    }
    return solution;
  }

 private:
  struct Limit {
    double time;
    double gpu;
    double weighted;  // on time + lambda x gpu
  };

  Limit Limits(const TableShape& shape, int cell) const {
    const size_t c = shape.offset + static_cast<size_t>(cell);
    const double target = target_ * (1 + kRelativeSlack);
    const double budget = problem_.budget_gpu_ms * (1 + kRelativeSlack);
    return Limit{target - bounds_.time[c], budget - bounds_.gpu[c],
                 target + bounds_.lambda * budget - bounds_.weighted[c]};
  }

  void Consider(double time, double gpu, const Limit& limit, int32_t left, int32_t right,
                int32_t choice) {
    if (gpu > limit.gpu || time > limit.time || time + bounds_.lambda * gpu > limit.weighted) {
      return;
    }
    scratch_.push_back(Candidate{time, gpu, left, right, choice});
  }

  void Series(const Step& step, const TableShape& shape, const Frontiers& first,
              const Frontiers& second, Frontiers* result) {
    const TableShape& first_shape = schedule_.tables[static_cast<size_t>(step.first)];
    const TableShape& second_shape = schedule_.tables[static_cast<size_t>(step.second)];
    const int choices = NumChoices(problem_, step.node);
    for (int i = 0; i < shape.rows; ++i) {
      for (int j = 0; j < shape.cols; ++j) {
        const Limit limit = Limits(shape, i * shape.cols + j);
        scratch_.clear();
        for (int k = 0; k < choices; ++k) {
          const CostPoint& node =
              problem_.node_costs[static_cast<size_t>(step.node)][static_cast<size_t>(k)];
          if (std::isinf(node.time_ms)) continue;
          const int left = i * first_shape.cols + k, right = k * second_shape.cols + j;
          for (const Point* p = first.begin(left); p != first.end(left); ++p) {
            const double gpu_left = p->gpu + node.gpu_ms;
            if (gpu_left > limit.gpu) break;
            const double time_left = p->time + node.time_ms;
            for (const Point* q = second.begin(right); q != second.end(right); ++q) {
              if (gpu_left + q->gpu > limit.gpu) break;
              Consider(time_left + q->time, gpu_left + q->gpu, limit, p->trace, q->trace, k);
            }
          }
        }
        Prune(step.node, result);
      }
    }
  }

  // Keeps a bounded Pareto frontier of scratch_ as the next cell of `table`.
  void Prune(int node, Frontiers* table) {
    std::sort(scratch_.begin(), scratch_.end(), [](const Candidate& a, const Candidate& b) {
      return a.gpu != b.gpu ? a.gpu < b.gpu : a.time < b.time;
    });
    // Sweep by GPU-time: drop dominated points; within a window of width window_ above the
    // point that opened it keep only the fastest (it dominates the others up to window_).
    kept_.clear();
    double anchor = -kInfinity;
    for (const Candidate& candidate : scratch_) {
      if (!kept_.empty() && candidate.time >= kept_.back()->time) continue;
      if (!kept_.empty() && candidate.gpu <= anchor + window_) {
        kept_.back() = &candidate;
      } else {
        kept_.push_back(&candidate);
        anchor = candidate.gpu;
      }
    }
    for (const Candidate* candidate : kept_) {
      int32_t trace = -1;
      if (candidate->left >= 0 || candidate->right >= 0 || node >= 0) {
        trace = static_cast<int32_t>(traces_.size());
        traces_.push_back(Trace{candidate->left, candidate->right, node, candidate->choice});
      }
      table->points.push_back(Point{candidate->time, candidate->gpu, trace});
    }
    table->offsets.push_back(static_cast<uint32_t>(table->points.size()));
    max_frontier_ = std::max<int64_t>(max_frontier_, static_cast<int64_t>(kept_.size()));
  }

  const SeriesParallelProblem& problem_;
  const Schedule& schedule_;
  const Bounds& bounds_;
  const double target_;
  double window_ = 0;
  std::vector<Frontiers> tables_;
  std::vector<Trace> traces_;
  std::vector<Candidate> scratch_;
  std::vector<const Candidate*> kept_;
  int64_t max_frontier_ = 0;
};

}  // namespace

StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem) {
  const size_t nodes = problem.node_costs.size();
  if (nodes < 2) return InvalidArgumentError("the problem needs a source and a sink");
  for (int terminal : {SeriesParallelProblem::kSource, SeriesParallelProblem::kSink}) {
    if (problem.node_costs[static_cast<size_t>(terminal)].size() != 1) {
      return InvalidArgumentError("the source and sink must have exactly one choice");
    }
  }
  for (size_t n = 0; n < nodes; ++n) {
    const auto& costs = problem.node_costs[n];
    if (std::none_of(costs.begin(), costs.end(),
                     [](const CostPoint& c) { return !std::isinf(c.time_ms); })) {
      return InvalidArgumentError("node '" + problem.node_names.at(n) + "' has no usable choice");
    }
  }
  ASSIGN_OR_RETURN(const Schedule schedule, BuildSchedule(problem));
  const double budget = problem.budget_gpu_ms * (1 + kRelativeSlack);
  auto finish = [&problem](SeriesParallelSolution solution) {
    solution.found = solution.found && solution.cost.time_ms < problem.incumbent_time_ms;
    return solution;
  };
  auto scalar_solution = [&](const ScalarPass& pass) {
    SeriesParallelSolution solution;
    const ScalarCell& cell = pass.Final();
    solution.found = !std::isinf(cell.time);
    solution.cost = CostPoint{cell.time, cell.gpu};
    solution.choices = pass.Choices();
    return solution;
  };

  std::vector<ScalarCell> workspace;
  // The fastest solution regardless of GPU-time; optimal when it fits the budget.
  {
    ScalarPass fastest(problem, schedule, 1, 0, &workspace);
    fastest.Run();
    if (fastest.Final().gpu <= budget) return finish(scalar_solution(fastest));
  }

  // Lagrangian bisection: every scalar solution is optimal for its own GPU-time, so a feasible
  // one is a candidate, and min(time + lambda x gpu) - lambda x budget bounds the optimum below.
  SeriesParallelSolution best;
  double lower_bound = -kInfinity, best_lambda = 0;
  auto feasible_at = [&](double lambda) {
    ScalarPass pass(problem, schedule, 1, lambda, &workspace);
    pass.Run();
    const ScalarCell& cell = pass.Final();
    if (std::isinf(cell.time)) return false;
    const double bound = cell.time + lambda * (cell.gpu - problem.budget_gpu_ms);
    if (bound > lower_bound) {
      lower_bound = bound;
      best_lambda = lambda;
    }
    const bool fits = cell.gpu <= budget;
    if (fits && (!best.found || cell.time < best.cost.time_ms)) best = scalar_solution(pass);
    return fits;
  };
  auto gap_closed = [&] {
    return best.found && best.cost.time_ms - lower_bound <= kRelativeSlack * best.cost.time_ms;
  };
  double low = 0, high = 1;
  for (int step = 0; step < 40 && !feasible_at(high); ++step) {
    low = high;
    high *= 8;
  }
  if (low == 0) {
    // Feasible at lambda = 1: search downwards for an infeasible lambda.
    low = high / 8;
    for (int step = 0; step < 40 && feasible_at(low); ++step) {
      high = low;
      low /= 8;
    }
  }
  // Geometric bisection until the bracket is within 2%.
  while (low > 0 && high / low > 1.02 && best.found && !gap_closed()) {
    const double middle = std::sqrt(low * high);
    (feasible_at(middle) ? high : low) = middle;
  }
  if (gap_closed()) return finish(best);  // the relaxation proved it optimal
  const double incumbent = best.found ? std::min(best.cost.time_ms, problem.incumbent_time_ms)
                                      : problem.incumbent_time_ms;

  // Exact Pareto passes, pruned with the outside values, for growing targets.
  Bounds bounds;
  bounds.lambda = best_lambda;
  for (auto [w_time, w_gpu, out] :
       {std::make_tuple(1.0, 0.0, &bounds.time), std::make_tuple(0.0, 1.0, &bounds.gpu),
        std::make_tuple(1.0, best_lambda, &bounds.weighted)}) {
    ScalarPass pass(problem, schedule, w_time, w_gpu, &workspace);
    pass.Run();
    *out = pass.Outside();
  }
  const double gap = incumbent - lower_bound;
  for (double fraction : {1.0 / 64, 1.0 / 8, 1.0}) {
    const double target = std::isinf(gap) ? incumbent : lower_bound + fraction * gap;
    ParetoPass pass(problem, schedule, bounds, target);
    SeriesParallelSolution pareto = pass.Run();
    if (pareto.found && (!best.found || pareto.cost.time_ms < best.cost.time_ms)) {
      return finish(pareto);
    }
    if (std::isinf(gap)) break;
  }
  return finish(best);
}

}  // namespace deepool::planner
