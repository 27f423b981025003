// FullModel (planner/search_full_model.h): a local move's totals equal the full cost model's, and
// the bound that skips a move's sync schedule never drops a move the full totals would take;
// DescentMemo stops a descent only where an earlier one went on with at least as many moves.
#include "planner/search_full_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

using internal::DescentMemo;
using internal::FullModel;

constexpr int kDevices = 8;
constexpr int64_t kBatch = 32;

// Plans to move from: every layer on one count, and counts that change along the graph.
std::vector<std::vector<int>> StartingPlans(int layers) {
  std::vector<std::vector<int>> plans;
  for (int count : {1, 2, 4, 8}) plans.emplace_back(static_cast<size_t>(layers), count);
  std::vector<int> steps(static_cast<size_t>(layers));
  for (int id = 0; id < layers; ++id) steps[static_cast<size_t>(id)] = 1 << (id * 4 / layers);
  plans.push_back(steps);
  return plans;
}

// Every move of a run of equal counts [begin, end) onto another count, as the search makes them.
struct Move {
  size_t begin;
  size_t end;
  std::vector<int> moved;
};

std::vector<Move> MovesOf(const std::vector<int>& counts) {
  std::vector<Move> moves;
  for (size_t begin = 0, end = 0; begin < counts.size(); begin = end) {
    while (end < counts.size() && counts[end] == counts[begin]) ++end;
    for (int to : {1, 2, 4, 8}) {
      if (to == counts[begin]) continue;
      std::vector<int> moved = counts;
      std::fill(moved.begin() + static_cast<std::ptrdiff_t>(begin),
                moved.begin() + static_cast<std::ptrdiff_t>(end), to);
      moves.push_back(Move{begin, end, std::move(moved)});
    }
  }
  return moves;
}

// A zoo model's plan cost model at G = kDevices, B = kBatch (the A100 analytical profile, a
// DGX A100 node), with what it refers to.
struct ZooCostModel {
  explicit ZooCostModel(const std::string& name)
      : graph(zoo::BuildModel(name).value()),
        model(graph, *profile, cluster, kBatch, PlanCostModelOptions(Options())) {}
  static PlanOptions Options() {
    PlanOptions options;
    options.global_batch = kBatch;
    options.devices = kDevices;
    return options;
  }
  const std::unique_ptr<Profile> profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), kDevices);
  const Graph graph;
  const CostModel model;
};

TEST_CASE("FullModel: a move that is better by the full totals is never skipped", "[search]") {
  for (const std::string name : {"resnet50", "inception_v3", "vgg16"}) {
    CAPTURE(name);
    const ZooCostModel zoo_model(name);
    const Graph& graph = zoo_model.graph;
    const CostModel& model = zoo_model.model;
    int checked = 0;
    int skipped = 0;
    for (const std::vector<int>& base : StartingPlans(graph.num_layers())) {
      for (const Move& move : MovesOf(base)) {
        const PlanTotals exact = model.Totals(PrefixRanges(move.moved), kDevices).value();
        const double gpu_ms = exact.gpu_seconds * 1000.0;
        // Just slower than the move, within its GPU-time: the move is better and must be costed,
        // to the same totals as the cost model's.
        FullModel full(model, kDevices);
        REQUIRE(full.Totals(base).ok());
        const std::optional<PlanTotals> taken =
            full.TotalsOfMoveIfBetter(base, move.moved, move.begin, move.end,
                                      exact.iteration_ms * (1 + 1e-9), gpu_ms * (1 + 1e-9))
                .value();
        REQUIRE(taken.has_value());
        REQUIRE(taken->iteration_ms == exact.iteration_ms);
        REQUIRE(taken->gpu_seconds == exact.gpu_seconds);
        // As the search asks: better than the plan it moves from, within a budget. A move the
        // bound skips is one the full totals reject.
        FullModel search(model, kDevices);
        const PlanTotals from = search.Totals(base).value();
        const double budget_gpu_ms = from.gpu_seconds * 1000.0 * 1.1;
        const std::optional<PlanTotals> found =
            search
                .TotalsOfMoveIfBetter(base, move.moved, move.begin, move.end, from.iteration_ms,
                                      budget_gpu_ms)
                .value();
        if (found) {
          REQUIRE(found->iteration_ms == exact.iteration_ms);
        } else {
          const bool rejected = exact.iteration_ms >= from.iteration_ms || gpu_ms > budget_gpu_ms;
          REQUIRE(rejected);
          ++skipped;
        }
        ++checked;
      }
    }
    // The bound does skip moves (else it would be no use).
    CHECK(checked > 20);
    CHECK(skipped > 0);
  }
}

// A moved plan that was not faster than asked keeps no layer costs; a move from it later (another
// local search may accept it) works them out again, to the cost model's totals.
TEST_CASE("FullModel: a move from a plan remembered without its layer costs is exact", "[search]") {
  const ZooCostModel zoo_model("resnet50");
  const Graph& graph = zoo_model.graph;
  const CostModel& model = zoo_model.model;
  constexpr double kAny = std::numeric_limits<double>::infinity();
  int moved_on = 0;
  for (const std::vector<int>& base : StartingPlans(graph.num_layers())) {
    for (const Move& move : MovesOf(base)) {
      const PlanTotals exact = model.Totals(PrefixRanges(move.moved), kDevices).value();
      FullModel full(model, kDevices);
      REQUIRE(full.Totals(base).ok());
      // Asked to beat its own time: costed (the layers' own costs are below it) but not faster,
      // so remembered without its costs.
      const std::optional<PlanTotals> not_faster =
          full.TotalsOfMoveIfBetter(base, move.moved, move.begin, move.end, exact.iteration_ms,
                                    kAny)
              .value();
      if (!not_faster) continue;
      REQUIRE(not_faster->iteration_ms == exact.iteration_ms);
      const std::vector<Move> next = MovesOf(move.moved);
      for (size_t m = 0; m < next.size(); m += 7) {
        const PlanTotals next_exact = model.Totals(PrefixRanges(next[m].moved), kDevices).value();
        const std::optional<PlanTotals> from_it =
            full.TotalsOfMoveIfBetter(move.moved, next[m].moved, next[m].begin, next[m].end, kAny,
                                      kAny)
                .value();
        REQUIRE(from_it.has_value());
        REQUIRE(from_it->iteration_ms == next_exact.iteration_ms);
        REQUIRE(from_it->gpu_seconds == next_exact.gpu_seconds);
        ++moved_on;
      }
    }
  }
  CHECK(moved_on > 20);
}

// Totals costs a new plan from the one it costed last, recomputing only the layers on other
// counts and their consumers: the totals are still the cost model's, to the bit.
TEST_CASE("FullModel: plans costed one after another give the cost model's totals", "[search]") {
  for (const std::string name : {"resnet50", "inception_v3"}) {
    CAPTURE(name);
    const ZooCostModel zoo_model(name);
    const Graph& graph = zoo_model.graph;
    const CostModel& model = zoo_model.model;
    FullModel full(model, kDevices);
    int costed = 0;
    for (const std::vector<int>& base : StartingPlans(graph.num_layers())) {
      const std::vector<Move> moves = MovesOf(base);
      for (size_t m = 0; m < moves.size(); ++m) {
        for (const std::vector<int>* plan : {&base, &moves[m].moved}) {
          const PlanTotals exact = model.Totals(PrefixRanges(*plan), kDevices).value();
          const PlanTotals totals = full.Totals(*plan).value();
          REQUIRE(totals.iteration_ms == exact.iteration_ms);
          REQUIRE(totals.gpu_seconds == exact.gpu_seconds);
          ++costed;
        }
      }
    }
    CHECK(costed > 20);
  }
}

TEST_CASE("DescentMemo: a descent stops only where an earlier one went on as far", "[search]") {
  const std::vector<int> start{1, 1, 2}, middle{1, 2, 2}, end{2, 2, 2}, other{4, 4, 4};
  DescentMemo memo;
  // A descent cut short after two moves (its last plan not moved from): start with 2, middle 1.
  REQUIRE(memo.Visit(start, 2));
  REQUIRE(memo.Visit(middle, 1));
  memo.EndDescent(/*complete=*/false);
  // Again at those plans: as many moves or fewer stop; more go on (the cut descent did not
  // show where they lead).
  CHECK_FALSE(memo.Visit(start, 2));
  CHECK_FALSE(memo.Visit(middle, 1));
  memo.EndDescent(false);
  CHECK(memo.Visit(middle, 3));
  CHECK(memo.Visit(end, 2));
  // That one ended with no faster move: its plans lead to its end with any moves left.
  memo.EndDescent(/*complete=*/true);
  CHECK_FALSE(memo.Visit(middle, 1000));
  CHECK_FALSE(memo.Visit(end, 1000));
  memo.EndDescent(false);
  // The first descent's start kept what it had: more moves from it go on. Another plan is new.
  CHECK(memo.Visit(start, 3));
  CHECK(memo.Visit(other, 1));
  memo.EndDescent(false);
  CHECK_FALSE(memo.Visit(start, 3));
}

}  // namespace
}  // namespace deepool::planner
