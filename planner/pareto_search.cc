// Series-parallel reduction over Pareto frontiers (see pareto_search.h and docs/planner.md).
//
// Every live edge (a, b) carries a table: for each choice i of a and j of b, the Pareto frontier
// of (time, GPU-time) over the choices of the nodes strictly between a and b, costs of those
// nodes and of all edges between them included, a's and b's own costs excluded. Two rules shrink
// the graph until one source-sink edge is left:
//   series:   a node m with one in-edge (a, m) and one out-edge (m, b) becomes the edge (a, b):
//             T[i][j] = prune( U_k  T1[i][k] (+) cost(m, k) (+) T2[k][j] )
//   parallel: two edges (a, b) become one: T[i][j] = prune( T1[i][j] (+) T2[i][j] )
// where (+) is the Minkowski sum of frontiers. Nodes are reduced in the caller's (topological)
// order, so on chains the tables stay one row wide (the source has one choice) and the
// reduction is the classic left-to-right dynamic program.
#include "planner/pareto_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <unordered_map>

namespace deepool::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kRelativeSlack = 1e-9;  // floating-point slack on the bounds

struct Point {
  double time;
  double gpu;
  int32_t trace;  // index into Reducer::traces_, or -1 for no choices below
};
using Frontier = std::vector<Point>;  // gpu ascending, time strictly descending

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

struct Table {
  int from = 0;
  int to = 0;
  int rows = 0;
  int cols = 0;
  std::vector<Frontier> cells;
  double interior_min_time = 0;  // lower bounds of what the interior nodes cost
  double interior_min_gpu = 0;
  bool alive = true;
  Frontier& cell(int i, int j) { return cells[static_cast<size_t>(i * cols + j)]; }
};

class Reducer {
 public:
  explicit Reducer(const SeriesParallelProblem& problem) : problem_(problem) {}

  StatusOr<SeriesParallelSolution> Run();

 private:
  int NumChoices(int node) const {
    return static_cast<int>(problem_.node_costs[static_cast<size_t>(node)].size());
  }
  const CostPoint& NodeCost(int node, int choice) const {
    return problem_.node_costs[static_cast<size_t>(node)][static_cast<size_t>(choice)];
  }
  // Largest time / GPU-time a partial solution of `table`'s cell (i, j) may have and still be
  // completed within the budget and below the incumbent.
  void Limits(const Table& table, int i, int j, double* time_limit, double* gpu_limit) const;
  // Sorts candidates and keeps a bounded Pareto frontier; survivors get traces.
  void Prune(std::vector<Candidate>& candidates, int node, Frontier* out);
  void AddTable(Table table);
  void Series(int node);
  void Parallel(int keep, int merge);
  void RemoveFrom(std::vector<int>& list, int value) {
    list.erase(std::find(list.begin(), list.end(), value));
  }

  const SeriesParallelProblem& problem_;
  std::vector<Table> tables_;
  std::vector<std::vector<int>> in_;   // live table ids per node
  std::vector<std::vector<int>> out_;
  std::unordered_map<int64_t, int> live_;  // (from, to) -> table id
  std::vector<Trace> traces_;
  std::vector<double> min_time_, min_gpu_;
  double total_min_time_ = 0, total_min_gpu_ = 0;
  double window_ = 0;  // GPU-time width of one pruning window
  bool constrained_ = false;
  int64_t max_frontier_ = 0;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready_;
  std::vector<Candidate> scratch_;
};

void Reducer::Limits(const Table& table, int i, int j, double* time_limit,
                     double* gpu_limit) const {
  const CostPoint& a = NodeCost(table.from, i);
  const CostPoint& b = NodeCost(table.to, j);
  const double rest_time = total_min_time_ - table.interior_min_time -
                           min_time_[static_cast<size_t>(table.from)] -
                           min_time_[static_cast<size_t>(table.to)] + a.time_ms + b.time_ms;
  const double rest_gpu = total_min_gpu_ - table.interior_min_gpu -
                          min_gpu_[static_cast<size_t>(table.from)] -
                          min_gpu_[static_cast<size_t>(table.to)] + a.gpu_ms + b.gpu_ms;
  *time_limit = problem_.incumbent_time_ms * (1 + kRelativeSlack) - rest_time;
  *gpu_limit = problem_.budget_gpu_ms * (1 + kRelativeSlack) - rest_gpu;
  if (std::isinf(a.time_ms) || std::isinf(b.time_ms)) *time_limit = -kInfinity;
}

void Reducer::Prune(std::vector<Candidate>& candidates, int node, Frontier* out) {
  out->clear();
  if (candidates.empty()) return;
  if (!constrained_) {
    // Only time matters: the frontier is the single fastest point.
    const auto best = std::min_element(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.time < b.time; });
    candidates[0] = *best;
    candidates.resize(1);
  } else {
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.gpu != b.gpu ? a.gpu < b.gpu : a.time < b.time;
    });
  }
  // Sweep by GPU-time: drop dominated points; within a window of width window_ above the point
  // that opened it, keep only the fastest (it dominates the others up to window_ GPU-time).
  std::vector<const Candidate*> kept;
  double anchor = -kInfinity;
  for (const Candidate& candidate : candidates) {
    if (!kept.empty() && candidate.time >= kept.back()->time) continue;
    if (!kept.empty() && candidate.gpu <= anchor + window_) {
      kept.back() = &candidate;
    } else {
      kept.push_back(&candidate);
      anchor = candidate.gpu;
    }
  }
  out->reserve(kept.size());
  for (const Candidate* candidate : kept) {
    int32_t trace = -1;
    if (candidate->left >= 0 || candidate->right >= 0 || node >= 0) {
      trace = static_cast<int32_t>(traces_.size());
      traces_.push_back(Trace{candidate->left, candidate->right, node, candidate->choice});
    }
    out->push_back(Point{candidate->time, candidate->gpu, trace});
  }
  max_frontier_ = std::max<int64_t>(max_frontier_, static_cast<int64_t>(out->size()));
}

void Reducer::AddTable(Table table) {
  const int id = static_cast<int>(tables_.size());
  const int64_t key = static_cast<int64_t>(table.from) * static_cast<int64_t>(in_.size()) + table.to;
  in_[static_cast<size_t>(table.to)].push_back(id);
  out_[static_cast<size_t>(table.from)].push_back(id);
  ready_.push(table.from);
  ready_.push(table.to);
  tables_.push_back(std::move(table));
  auto existing = live_.find(key);
  if (existing == live_.end()) {
    live_.emplace(key, id);
  } else {
    Parallel(existing->second, id);
  }
}

// Two tables between the same nodes: the first absorbs the second.
void Reducer::Parallel(int keep_id, int merge_id) {
  Table& merge = tables_[static_cast<size_t>(merge_id)];
  Table merged;
  {
    const Table& keep = tables_[static_cast<size_t>(keep_id)];
    merged.from = keep.from;
    merged.to = keep.to;
    merged.rows = keep.rows;
    merged.cols = keep.cols;
    merged.interior_min_time = keep.interior_min_time + merge.interior_min_time;
    merged.interior_min_gpu = keep.interior_min_gpu + merge.interior_min_gpu;
    merged.cells.resize(keep.cells.size());
  }
  for (int i = 0; i < merged.rows; ++i) {
    for (int j = 0; j < merged.cols; ++j) {
      double time_limit, gpu_limit;
      Limits(merged, i, j, &time_limit, &gpu_limit);
      const Frontier& first = tables_[static_cast<size_t>(keep_id)].cell(i, j);
      const Frontier& second = merge.cell(i, j);
      scratch_.clear();
      for (const Point& p : first) {
        if (p.gpu > gpu_limit) break;
        for (const Point& q : second) {
          const double gpu = p.gpu + q.gpu;
          if (gpu > gpu_limit) break;
          const double time = p.time + q.time;
          if (time > time_limit) continue;
          scratch_.push_back(Candidate{time, gpu, p.trace, q.trace, 0});
        }
      }
      Prune(scratch_, -1, &merged.cell(i, j));
    }
  }
  merge.alive = false;
  merge.cells.clear();
  merge.cells.shrink_to_fit();
  RemoveFrom(in_[static_cast<size_t>(merge.to)], merge_id);
  RemoveFrom(out_[static_cast<size_t>(merge.from)], merge_id);
  Table& keep = tables_[static_cast<size_t>(keep_id)];
  keep.cells = std::move(merged.cells);
  keep.interior_min_time = merged.interior_min_time;
  keep.interior_min_gpu = merged.interior_min_gpu;
}

// Reduces node m (one in-edge, one out-edge) into an edge between its neighbours.
void Reducer::Series(int m) {
  const int first_id = in_[static_cast<size_t>(m)][0];
  const int second_id = out_[static_cast<size_t>(m)][0];
  Table result;
  {
    const Table& first = tables_[static_cast<size_t>(first_id)];
    const Table& second = tables_[static_cast<size_t>(second_id)];
    result.from = first.from;
    result.to = second.to;
    result.rows = first.rows;
    result.cols = second.cols;
    result.interior_min_time = first.interior_min_time + second.interior_min_time +
                               min_time_[static_cast<size_t>(m)];
    result.interior_min_gpu =
        first.interior_min_gpu + second.interior_min_gpu + min_gpu_[static_cast<size_t>(m)];
    result.cells.resize(static_cast<size_t>(result.rows * result.cols));
  }
  const int choices = NumChoices(m);
  for (int i = 0; i < result.rows; ++i) {
    for (int j = 0; j < result.cols; ++j) {
      double time_limit, gpu_limit;
      Limits(result, i, j, &time_limit, &gpu_limit);
      scratch_.clear();
      for (int k = 0; k < choices; ++k) {
        const CostPoint& node = NodeCost(m, k);
        if (std::isinf(node.time_ms)) continue;
        const Frontier& left = tables_[static_cast<size_t>(first_id)].cell(i, k);
        const Frontier& right = tables_[static_cast<size_t>(second_id)].cell(k, j);
        for (const Point& p : left) {
          const double gpu_left = p.gpu + node.gpu_ms;
          if (gpu_left > gpu_limit) break;
          const double time_left = p.time + node.time_ms;
          for (const Point& q : right) {
            const double gpu = gpu_left + q.gpu;
            if (gpu > gpu_limit) break;
            const double time = time_left + q.time;
            if (time > time_limit) continue;
            scratch_.push_back(Candidate{time, gpu, p.trace, q.trace, k});
          }
        }
      }
      Prune(scratch_, m, &result.cell(i, j));
    }
  }
  for (int id : {first_id, second_id}) {
    Table& table = tables_[static_cast<size_t>(id)];
    table.alive = false;
    live_.erase(static_cast<int64_t>(table.from) * static_cast<int64_t>(in_.size()) + table.to);
    RemoveFrom(in_[static_cast<size_t>(table.to)], id);
    RemoveFrom(out_[static_cast<size_t>(table.from)], id);
    table.cells.clear();
    table.cells.shrink_to_fit();
  }
  AddTable(std::move(result));
}

StatusOr<SeriesParallelSolution> Reducer::Run() {
  const size_t nodes = problem_.node_costs.size();
  if (nodes < 2) return InvalidArgumentError("the problem needs a source and a sink");
  for (int terminal : {SeriesParallelProblem::kSource, SeriesParallelProblem::kSink}) {
    if (NumChoices(terminal) != 1) {
      return InvalidArgumentError("the source and sink must have exactly one choice");
    }
  }
  constrained_ = !std::isinf(problem_.budget_gpu_ms);
  in_.assign(nodes, {});
  out_.assign(nodes, {});
  min_time_.assign(nodes, kInfinity);
  min_gpu_.assign(nodes, kInfinity);
  for (size_t n = 0; n < nodes; ++n) {
    for (const CostPoint& cost : problem_.node_costs[n]) {
      if (std::isinf(cost.time_ms)) continue;
      min_time_[n] = std::min(min_time_[n], cost.time_ms);
      min_gpu_[n] = std::min(min_gpu_[n], cost.gpu_ms);
    }
    if (std::isinf(min_time_[n])) {
      return InvalidArgumentError("node '" + problem_.node_names.at(n) + "' has no usable choice");
    }
    total_min_time_ += min_time_[n];
    total_min_gpu_ += min_gpu_[n];
  }
  const double reductions = static_cast<double>(nodes + problem_.edges.size());
  window_ = constrained_ ? problem_.tolerance_gpu_ms / reductions : 0;

  for (const SeriesParallelProblem::Edge& edge : problem_.edges) {
    Table table;
    table.from = edge.from;
    table.to = edge.to;
    table.rows = NumChoices(edge.from);
    table.cols = NumChoices(edge.to);
    if (edge.cells.size() != static_cast<size_t>(table.rows * table.cols)) {
      return InvalidArgumentError("edge " + problem_.node_names.at(static_cast<size_t>(edge.from)) +
                                  " -> " + problem_.node_names.at(static_cast<size_t>(edge.to)) +
                                  " has the wrong number of cells");
    }
    table.cells.resize(edge.cells.size());
    for (size_t c = 0; c < edge.cells.size(); ++c) {
      table.cells[c].push_back(Point{edge.cells[c].time_ms, edge.cells[c].gpu_ms, -1});
    }
    AddTable(std::move(table));
  }
  for (size_t n = 2; n < nodes; ++n) ready_.push(static_cast<int>(n));
  std::vector<bool> reduced(nodes, false);
  while (!ready_.empty()) {
    const int m = ready_.top();
    ready_.pop();
    if (m < 2 || reduced[static_cast<size_t>(m)]) continue;
    if (in_[static_cast<size_t>(m)].size() != 1 || out_[static_cast<size_t>(m)].size() != 1) {
      continue;
    }
    Series(m);
    reduced[static_cast<size_t>(m)] = true;
  }

  for (size_t n = 2; n < nodes; ++n) {
    if (!reduced[n]) {
      return FailedPreconditionError(
          "the graph is not series-parallel around '" + problem_.node_names.at(n) +
          "' (the exact search handles chains, branch-and-concat and residual blocks)");
    }
  }
  const auto final_table = live_.find(static_cast<int64_t>(SeriesParallelProblem::kSource) *
                                          static_cast<int64_t>(nodes) +
                                      SeriesParallelProblem::kSink);
  if (final_table == live_.end() || live_.size() != 1) {
    return FailedPreconditionError("the graph does not reduce to one source-to-sink edge");
  }
  SeriesParallelSolution solution;
  solution.max_frontier = max_frontier_;
  solution.choices.assign(nodes, 0);
  const Frontier& frontier = tables_[static_cast<size_t>(final_table->second)].cell(0, 0);
  const Point* best = nullptr;
  for (const Point& point : frontier) {
    if (point.gpu > problem_.budget_gpu_ms * (1 + kRelativeSlack)) continue;
    if (best == nullptr || point.time < best->time) best = &point;
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

}  // namespace

StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem) {
  Reducer reducer(problem);
  return reducer.Run();
}

}  // namespace deepool::planner
