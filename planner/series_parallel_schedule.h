// The reduction schedule of a series-parallel problem (pareto_search.h): the tables and the
// series and parallel steps that shrink the graph to one source-sink edge, worked out once from
// the graph's shape and replayed by every pass of the search (pareto_search.cc). Tables are
// created in step order (a table's id is the index of the step that makes it), and their cells
// are numbered in the same order, so one flat array holds every table's cells.
// Threading: pure functions; no shared state.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "planner/pareto_search.h"

namespace deepool::planner::series_parallel {

// A table between two nodes: one cell per (choice of `from`, choice of `to`), row-major.
struct TableShape {
  int from = 0;
  int to = 0;
  int rows = 0;
  int cols = 0;
  size_t offset = 0;  // first cell in flat per-cell arrays
  int cells() const { return rows * cols; }
};

// How a table is made: from a problem edge (leaf), by reducing a node in series, or by merging
// two tables between the same nodes (parallel).
struct Step {
  enum Kind { kLeaf, kSeries, kParallel } kind = kLeaf;
  int result = 0;
  int first = -1;   // series: (a, m); parallel: one of the two (a, b)
  int second = -1;  // series: (m, b)
  int node = -1;    // series: m
  int edge = -1;    // leaf: the problem's edge
};

struct Schedule {
  std::vector<TableShape> tables;  // by id
  std::vector<Step> steps;         // steps[id] makes tables[id]
  int final_table = -1;            // the source-to-sink table
  size_t total_cells = 0;
};

// The problem's nodes reduced in order of their ids (the caller's topological order), or
// FAILED_PRECONDITION naming a node when the graph is not series-parallel, INVALID_ARGUMENT
// when an edge is malformed.
StatusOr<Schedule> BuildSchedule(const SeriesParallelProblem& problem);

}  // namespace deepool::planner::series_parallel
