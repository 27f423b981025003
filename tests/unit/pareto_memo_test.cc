// ScalarPassMemo (planner/pareto_search.h): solving a problem again at another budget with the
// passes of its earlier solves gives, to the bit, what a solve without them gives.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "planner/pareto_search.h"
#include "planner/series_parallel_schedule.h"

namespace deepool::planner {
namespace {

constexpr int kChoices = 3;

// A chain of diamonds (source -> a -> {b, c} -> d -> ... -> sink), random costs: series-parallel,
// with tables more than one row wide inside each diamond.
SeriesParallelProblem ChainOfDiamonds(int diamonds, std::mt19937* random) {
  std::uniform_real_distribution<double> time(1, 10);
  std::uniform_real_distribution<double> devices(1, 4);
  SeriesParallelProblem problem;
  const int nodes = 2 + 1 + 3 * diamonds;
  problem.node_costs.resize(static_cast<size_t>(nodes));
  problem.node_names.assign(static_cast<size_t>(nodes), "node");
  problem.node_costs[SeriesParallelProblem::kSource] = {CostPoint{0, 0}};
  problem.node_costs[SeriesParallelProblem::kSink] = {CostPoint{0, 0}};
  for (int node = 2; node < nodes; ++node) {
    for (int k = 0; k < kChoices; ++k) {
      // More devices: faster, more GPU-time, so the budget decides.
      const double t = time(*random) / (k + 1);
      problem.node_costs[static_cast<size_t>(node)].push_back(
          CostPoint{t, t * (k + 1) * devices(*random)});
    }
  }
  auto edge = [&](int from, int to) {
    SeriesParallelProblem::Edge e{from, to, {}};
    const size_t cells = problem.node_costs[static_cast<size_t>(from)].size() *
                         problem.node_costs[static_cast<size_t>(to)].size();
    for (size_t c = 0; c < cells; ++c) {
      const double t = time(*random) / 10;
      e.cells.push_back(CostPoint{t, t * devices(*random)});
    }
    problem.edges.push_back(std::move(e));
  };
  edge(SeriesParallelProblem::kSource, 2);
  for (int d = 0; d < diamonds; ++d) {
    const int a = 2 + 3 * d;
    edge(a, a + 1);
    edge(a, a + 2);
    edge(a + 1, a + 3);
    edge(a + 2, a + 3);
  }
  edge(nodes - 1, SeriesParallelProblem::kSink);
  return problem;
}

// The solve of `problem` without a memo on a thread of its own: nothing of this thread's scratch
// (where memos keep their passes) can reach it.
SeriesParallelSolution SolvedElsewhere(const SeriesParallelProblem& problem,
                                       const series_parallel::Schedule& schedule) {
  SeriesParallelSolution solution;
  std::thread([&] { solution = SolveSeriesParallel(problem, schedule).value(); }).join();
  return solution;
}

// The least time within the budget over every choice of every node (small problems only).
double BruteForceLeastTime(const SeriesParallelProblem& problem) {
  const size_t nodes = problem.node_costs.size();
  std::vector<int> choice(nodes, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    double time = 0, gpu = 0;
    for (size_t n = 0; n < nodes; ++n) {
      time += problem.node_costs[n][static_cast<size_t>(choice[n])].time_ms;
      gpu += problem.node_costs[n][static_cast<size_t>(choice[n])].gpu_ms;
    }
    for (const auto& edge : problem.edges) {
      const size_t cols = problem.node_costs[static_cast<size_t>(edge.to)].size();
      const CostPoint& cell =
          edge.cells[static_cast<size_t>(choice[static_cast<size_t>(edge.from)]) * cols +
                     static_cast<size_t>(choice[static_cast<size_t>(edge.to)])];
      time += cell.time_ms;
      gpu += cell.gpu_ms;
    }
    if (gpu <= problem.budget_gpu_ms) best = std::min(best, time);
    size_t n = 0;
    while (n < nodes && ++choice[n] == static_cast<int>(problem.node_costs[n].size())) {
      choice[n++] = 0;
    }
    if (n == nodes) return best;
  }
}

void RequireSame(const SeriesParallelSolution& a, const SeriesParallelSolution& b) {
  REQUIRE(a.found == b.found);
  REQUIRE(a.cost.time_ms == b.cost.time_ms);
  REQUIRE(a.cost.gpu_ms == b.cost.gpu_ms);
  REQUIRE(a.choices == b.choices);
}

TEST_CASE("ScalarPassMemo: a solve at a lower budget reuses the passes to the same answer",
          "[search]") {
  std::mt19937 random(7);
  int reused_budgets = 0;
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    SeriesParallelProblem problem = ChainOfDiamonds(1 + trial % 2, &random);
    const series_parallel::Schedule schedule = series_parallel::BuildSchedule(problem).value();
    // The least and most GPU-time any solution can take, roughly: budgets between them bind.
    problem.budget_gpu_ms = std::numeric_limits<double>::infinity();
    const SeriesParallelSolution fastest = SolveSeriesParallel(problem, schedule).value();
    const double most = fastest.cost.gpu_ms;
    // Every solve with the memo first (a solve without one in between would drop its passes),
    // then each budget again from scratch.
    const std::vector<double> fractions = {0.9, 0.8, 0.7, 0.75, 0.6, 0.5, 0.4};
    const ScalarPassMemo memo;
    std::vector<SeriesParallelSolution> with_memo;
    for (double fraction : fractions) {
      problem.budget_gpu_ms = most * fraction;
      with_memo.push_back(SolveSeriesParallel(problem, schedule, memo).value());
    }
    for (size_t b = 0; b < fractions.size(); ++b) {
      problem.budget_gpu_ms = most * fractions[b];
      RequireSame(with_memo[b], SolvedElsewhere(problem, schedule));
      const double least = BruteForceLeastTime(problem);
      REQUIRE(with_memo[b].found == (least < std::numeric_limits<double>::infinity()));
      if (with_memo[b].found) REQUIRE(with_memo[b].cost.time_ms == Approx(least).epsilon(1e-12));
      ++reused_budgets;
    }
  }
  CHECK(reused_budgets == 280);
}

TEST_CASE("ScalarPassMemo: another memo's solve in between does not mix up their passes",
          "[search]") {
  std::mt19937 random(11);
  SeriesParallelProblem first = ChainOfDiamonds(3, &random);
  SeriesParallelProblem second = ChainOfDiamonds(3, &random);
  const series_parallel::Schedule schedule = series_parallel::BuildSchedule(first).value();
  const ScalarPassMemo first_memo;
  const ScalarPassMemo second_memo;
  for (double budget : {40.0, 35.0, 30.0}) {
    first.budget_gpu_ms = budget;
    second.budget_gpu_ms = budget;
    RequireSame(SolveSeriesParallel(first, schedule, first_memo).value(),
                SolvedElsewhere(first, schedule));
    RequireSame(SolveSeriesParallel(second, schedule, second_memo).value(),
                SolvedElsewhere(second, schedule));
  }
}

}  // namespace
}  // namespace deepool::planner
