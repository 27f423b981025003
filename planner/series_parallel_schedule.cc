// Builds the reduction schedule (series_parallel_schedule.h): the series and parallel rules of
// pareto_search.cc applied to the graph's shape alone.
#include "planner/series_parallel_schedule.h"

#include <functional>
#include <queue>
#include <string>

namespace deepool::planner::series_parallel {
namespace {

int NumChoices(const SeriesParallelProblem& problem, int node) {
  return static_cast<int>(problem.node_costs[static_cast<size_t>(node)].size());
}

}  // namespace

StatusOr<Schedule> BuildSchedule(const SeriesParallelProblem& problem) {
  const size_t nodes = problem.node_costs.size();
  Schedule schedule;
  schedule.tables.reserve(3 * problem.edges.size());
  schedule.steps.reserve(3 * problem.edges.size());
  // Live tables per node, as doubly linked lists threaded through the tables. At most one live
  // table joins two nodes (a second one is merged with it at once), so a node's few out-tables
  // are searched by their other end.
  struct Lists {
    std::vector<int> head, count;
    std::vector<int> next, previous;  // per table
  };
  Lists in{std::vector<int>(nodes, -1), std::vector<int>(nodes, 0), {}, {}};
  Lists out = in;
  auto link = [](Lists& lists, int node, int id) {
    const size_t n = static_cast<size_t>(node);
    lists.next.resize(static_cast<size_t>(id) + 1);
    lists.previous.resize(static_cast<size_t>(id) + 1);
    lists.next[static_cast<size_t>(id)] = lists.head[n];
    lists.previous[static_cast<size_t>(id)] = -1;
    if (lists.head[n] >= 0) lists.previous[static_cast<size_t>(lists.head[n])] = id;
    lists.head[n] = id;
    ++lists.count[n];
  };
  auto unlink = [](Lists& lists, int node, int id) {
    const int next = lists.next[static_cast<size_t>(id)];
    const int previous = lists.previous[static_cast<size_t>(id)];
    (previous >= 0 ? lists.next[static_cast<size_t>(previous)]
                   : lists.head[static_cast<size_t>(node)]) = next;
    if (next >= 0) lists.previous[static_cast<size_t>(next)] = previous;
    --lists.count[static_cast<size_t>(node)];
  };
  size_t live = 0;
  // Nodes to try, smallest first; each at most once in the queue (a second entry could only be
  // popped right after the first, with nothing changed in between).
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  std::vector<bool> queued(nodes, false), reduced(nodes, false);
  auto enqueue = [&](int node) {
    const size_t n = static_cast<size_t>(node);
    if (node < 2 || queued[n] || reduced[n]) return;  // the source and sink never reduce
    queued[n] = true;
    ready.push(node);
  };
  auto kill = [&](int id) {
    const TableShape& t = schedule.tables[static_cast<size_t>(id)];
    unlink(in, t.to, id);
    unlink(out, t.from, id);
    --live;
  };
  // Adds a table; a second table between the same nodes is merged with it at once (parallel
  // rule). The merged table is then the only one between them.
  auto add = [&](TableShape shape, Step step) {
    for (;;) {
      const int id = static_cast<int>(schedule.tables.size());
      shape.offset = schedule.total_cells;
      schedule.total_cells += static_cast<size_t>(shape.cells());
      step.result = id;
      schedule.tables.push_back(shape);
      schedule.steps.push_back(step);
      int other = out.head[static_cast<size_t>(shape.from)];
      while (other >= 0 && schedule.tables[static_cast<size_t>(other)].to != shape.to) {
        other = out.next[static_cast<size_t>(other)];
      }
      link(in, shape.to, id);
      link(out, shape.from, id);
      ++live;
      enqueue(shape.from);
      enqueue(shape.to);
      if (other < 0) return;
      kill(other);
      kill(id);
      step = Step{};
      step.kind = Step::kParallel;
      step.first = other;
      step.second = id;
    }
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
      return InvalidArgumentError(
          "edge " + std::string(problem.node_names.at(static_cast<size_t>(edge.from))) + " -> " +
          std::string(problem.node_names.at(static_cast<size_t>(edge.to))) +
          " has the wrong number of cells");
    }
    Step leaf;
    leaf.edge = static_cast<int>(e);
    add(shape, leaf);
  }
  for (size_t n = 2; n < nodes; ++n) enqueue(static_cast<int>(n));
  while (!ready.empty()) {
    const int m = ready.top();
    ready.pop();
    queued[static_cast<size_t>(m)] = false;
    if (reduced[static_cast<size_t>(m)]) continue;
    if (in.count[static_cast<size_t>(m)] != 1 || out.count[static_cast<size_t>(m)] != 1) continue;
    reduced[static_cast<size_t>(m)] = true;
    const int first = in.head[static_cast<size_t>(m)], second = out.head[static_cast<size_t>(m)];
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
          "the graph is not series-parallel around '" + std::string(problem.node_names.at(n)) +
          "' (the exact search handles chains, branch-and-concat and residual blocks)");
    }
  }
  const int from_source = out.head[SeriesParallelProblem::kSource];
  if (live != 1 || from_source < 0 ||
      schedule.tables[static_cast<size_t>(from_source)].to != SeriesParallelProblem::kSink) {
    return FailedPreconditionError("the graph does not reduce to one source-to-sink edge");
  }
  schedule.final_table = from_source;
  return schedule;
}

}  // namespace deepool::planner::series_parallel
