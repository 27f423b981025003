// Builds the reduction schedule (series_parallel_schedule.h): the series and parallel rules of
// pareto_search.cc applied to the graph's shape alone.
#include "planner/series_parallel_schedule.h"

#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

namespace deepool::planner::series_parallel {
namespace {

int NumChoices(const SeriesParallelProblem& problem, int node) {
  return static_cast<int>(problem.node_costs[static_cast<size_t>(node)].size());
}

// Live tables per node, as doubly linked lists threaded through the tables. At most one live
// table joins two nodes (a second one is merged with it at once), so a node's few out-tables
// are searched by their other end.
struct TableLists {
  // Room for `tables` tables up front: growing the lists a table at a time cost more than the
  // rest of the reduction.
  TableLists(size_t nodes, size_t tables)
      : head(nodes, -1), count(nodes, 0), next(tables), previous(tables) {}

  void Link(int node, int id) {
    const auto n = static_cast<size_t>(node);
    const auto i = static_cast<size_t>(id);
    if (i >= next.size()) {
      next.resize(2 * i + 1);
      previous.resize(2 * i + 1);
    }
    next[i] = head[n];
    previous[i] = -1;
    if (head[n] >= 0) previous[static_cast<size_t>(head[n])] = id;
    head[n] = id;
    ++count[n];
  }

  void Unlink(int node, int id) {
    const int after = next[static_cast<size_t>(id)];
    const int before = previous[static_cast<size_t>(id)];
    (before >= 0 ? next[static_cast<size_t>(before)] : head[static_cast<size_t>(node)]) = after;
    if (after >= 0) previous[static_cast<size_t>(after)] = before;
    --count[static_cast<size_t>(node)];
  }

  std::vector<int> head, count;     // per node
  std::vector<int> next, previous;  // per table
};

// Applies the parallel rule as tables are added and the series rule to every node with one
// table in and one out, smallest node first, recording each step.
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(const SeriesParallelProblem& problem)
      : problem_(problem),
        nodes_(problem.node_costs.size()),
        in_(nodes_, 3 * problem.edges.size()),
        out_(nodes_, 3 * problem.edges.size()),
        queued_(nodes_, false),
        reduced_(nodes_, false) {
    schedule_.tables.reserve(3 * problem.edges.size());
    schedule_.steps.reserve(3 * problem.edges.size());
  }

  // One leaf table per edge.
  Status AddEdges() {
    for (size_t e = 0; e < problem_.edges.size(); ++e) {
      const SeriesParallelProblem::Edge& edge = problem_.edges[e];
      if (edge.from < 0 || edge.to < 0 || static_cast<size_t>(edge.from) >= nodes_ ||
          static_cast<size_t>(edge.to) >= nodes_) {
        return InvalidArgumentError("an edge names a node that does not exist");
      }
      TableShape shape{edge.from, edge.to, NumChoices(problem_, edge.from),
                       NumChoices(problem_, edge.to), 0};
      if (edge.cells.size() != static_cast<size_t>(shape.cells())) {
        return InvalidArgumentError(
            "edge " + std::string(problem_.node_names.at(static_cast<size_t>(edge.from))) + " -> " +
            std::string(problem_.node_names.at(static_cast<size_t>(edge.to))) +
            " has the wrong number of cells");
      }
      Step leaf;
      leaf.edge = static_cast<int>(e);
      Add(shape, leaf);
    }
    return Status::Ok();
  }

  // Series rule until no node has exactly one table in and one out.
  void ReduceSeries() {
    for (size_t n = 2; n < nodes_; ++n) Enqueue(static_cast<int>(n));
    while (!ready_.empty()) {
      const int m = ready_.top();
      const auto node = static_cast<size_t>(m);
      ready_.pop();
      queued_[node] = false;
      if (reduced_[node] || in_.count[node] != 1 || out_.count[node] != 1) continue;
      reduced_[node] = true;
      const int first = in_.head[node];
      const int second = out_.head[node];
      const TableShape& a = schedule_.tables[static_cast<size_t>(first)];
      const TableShape& b = schedule_.tables[static_cast<size_t>(second)];
      TableShape shape{a.from, b.to, a.rows, b.cols, 0};
      Kill(first);
      Kill(second);
      Step series;
      series.kind = Step::kSeries;
      series.first = first;
      series.second = second;
      series.node = m;
      Add(shape, series);
    }
  }

  // The schedule, when every node reduced and one source-to-sink table is left.
  StatusOr<Schedule> Finish() && {
    for (size_t n = 2; n < nodes_; ++n) {
      if (!reduced_[n]) {
        return FailedPreconditionError(
            "the graph is not series-parallel around '" + std::string(problem_.node_names.at(n)) +
            "' (the exact search handles chains, branch-and-concat and residual blocks)");
      }
    }
    const int from_source = out_.head[SeriesParallelProblem::kSource];
    if (live_ != 1 || from_source < 0 ||
        schedule_.tables[static_cast<size_t>(from_source)].to != SeriesParallelProblem::kSink) {
      return FailedPreconditionError("the graph does not reduce to one source-to-sink edge");
    }
    schedule_.final_table = from_source;
    return std::move(schedule_);
  }

 private:
  // Each node at most once in the queue (a second entry could only be popped right after the
  // first, with nothing changed in between); the source and sink never reduce.
  void Enqueue(int node) {
    const auto n = static_cast<size_t>(node);
    if (node < 2 || queued_[n] || reduced_[n]) return;
    queued_[n] = true;
    ready_.push(node);
  }

  void Kill(int id) {
    const TableShape& t = schedule_.tables[static_cast<size_t>(id)];
    in_.Unlink(t.to, id);
    out_.Unlink(t.from, id);
    --live_;
  }

  // Adds a table; a second table between the same nodes is merged with it at once (parallel
  // rule). The merged table is then the only one between them.
  void Add(TableShape shape, Step step) {
    for (;;) {
      const int id = static_cast<int>(schedule_.tables.size());
      shape.offset = schedule_.total_cells;
      schedule_.total_cells += static_cast<size_t>(shape.cells());
      step.result = id;
      schedule_.tables.push_back(shape);
      schedule_.steps.push_back(step);
      int other = out_.head[static_cast<size_t>(shape.from)];
      while (other >= 0 && schedule_.tables[static_cast<size_t>(other)].to != shape.to) {
        other = out_.next[static_cast<size_t>(other)];
      }
      in_.Link(shape.to, id);
      out_.Link(shape.from, id);
      ++live_;
      Enqueue(shape.from);
      Enqueue(shape.to);
      if (other < 0) return;
      Kill(other);
      Kill(id);
      step = Step{};
      step.kind = Step::kParallel;
      step.first = other;
      step.second = id;
    }
  }

  const SeriesParallelProblem& problem_;
  const size_t nodes_;
  Schedule schedule_;
  TableLists in_;
  TableLists out_;
  size_t live_ = 0;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready_;  // nodes to try
  std::vector<bool> queued_, reduced_;
};

}  // namespace

StatusOr<Schedule> BuildSchedule(const SeriesParallelProblem& problem) {
  ScheduleBuilder builder(problem);
  RETURN_IF_ERROR(builder.AddEdges());
  builder.ReduceSeries();
  return std::move(builder).Finish();
}

}  // namespace deepool::planner::series_parallel
