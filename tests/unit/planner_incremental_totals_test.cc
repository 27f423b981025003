// CostModel::TotalsOfCosts, which the search's local moves use: a plan's totals from layer costs
// copied from the plan it moved from, with only the moved layers and their consumers costed
// again, are exactly (to the bit) the totals of costing every layer; and EvaluateOfCosts, with
// which the search evaluates its plan from the costs it kept, is Evaluate's plan to the bit.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

// The costs of `moved` as the search makes them: `base`'s costs, with the layers in [begin, end)
// and every consumer of one of them costed again.
std::vector<LayerCost> MovedCosts(const CostModel& model, std::vector<LayerCost> costs,
                                  const std::vector<int>& moved, int begin, int end) {
  std::vector<bool> changed(moved.size(), false);
  for (int id = begin; id < end; ++id) {
    changed[static_cast<size_t>(id)] = true;
    for (int consumer : model.graph().consumers(id)) changed[static_cast<size_t>(consumer)] = true;
  }
  for (size_t id = 0; id < moved.size(); ++id) {
    if (changed[id]) costs[id] = model.CostOf(static_cast<int>(id), moved).value();
  }
  return costs;
}

void RequireSameTotals(const PlanTotals& a, const PlanTotals& b) {
  REQUIRE(a.iteration_ms == b.iteration_ms);
  REQUIRE(a.gpu_seconds == b.gpu_seconds);
  REQUIRE(a.amplification == b.amplification);
  REQUIRE(a.devices_used == b.devices_used);
}

// A local move as the search makes them, drawn at random: a plan on counts 1, 2, 4 and 8, and
// the same plan with the layers [begin, end) on one of those counts.
struct RandomMove {
  std::vector<int> base;
  std::vector<int> moved;
  int begin = 0;
  int end = 0;
};

RandomMove DrawMove(std::mt19937& rng, int layers) {
  const std::vector<int> counts_drawn = {1, 2, 4, 8};
  std::uniform_int_distribution<size_t> count(0, counts_drawn.size() - 1);
  std::uniform_int_distribution<int> layer(0, layers - 1);
  RandomMove move;
  move.base.resize(static_cast<size_t>(layers));
  for (int& c : move.base) c = counts_drawn[count(rng)];
  move.begin = layer(rng);
  move.end = layer(rng);
  if (move.begin > move.end) std::swap(move.begin, move.end);
  ++move.end;
  move.moved = move.base;
  const int to = counts_drawn[count(rng)];
  for (int id = move.begin; id < move.end; ++id) move.moved[static_cast<size_t>(id)] = to;
  return move;
}

TEST_CASE("Totals of a local move from copied layer costs equal the full totals to the bit") {
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), 8);
  for (const char* name : {"inception_v3", "resnet50", "vgg16"}) {
    const Graph graph = zoo::BuildModel(name).value();
    const CostModel model(graph, *profile, cluster, 32);
    const int layers = graph.num_layers();
    std::mt19937 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
      const RandomMove move = DrawMove(rng, layers);
      const std::vector<LayerCost> base_costs =
          model.LayerCostsOf(PrefixRanges(move.base), 8).value();
      const PlanTotals full = model.Totals(move.moved, 8).value();
      const PlanTotals incremental =
          model
              .TotalsOfCosts(PrefixRanges(move.moved), 8,
                             MovedCosts(model, base_costs, move.moved, move.begin, move.end))
              .value();
      RequireSameTotals(full, incremental);
    }
  }
}

TEST_CASE("Evaluate of a local move from copied layer costs is the full plan to the bit") {
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), 8);
  for (const char* name : {"inception_v3", "resnet50"}) {
    const Graph graph = zoo::BuildModel(name).value();
    const CostModel model(graph, *profile, cluster, 32);
    const int layers = graph.num_layers();
    std::mt19937 rng(11);
    for (int trial = 0; trial < 10; ++trial) {
      const RandomMove move = DrawMove(rng, layers);
      const std::vector<LayerCost> base_costs =
          model.LayerCostsOf(PrefixRanges(move.base), 8).value();
      const Plan full = model.Evaluate(move.moved, 8).value();
      const Plan of_costs =
          model
              .EvaluateOfCosts(PrefixRanges(move.moved), 8,
                               MovedCosts(model, base_costs, move.moved, move.begin, move.end))
              .value();
      // Every placement's predictions and the totals, printed to the last bit.
      REQUIRE(PlanToJson(of_costs) == PlanToJson(full));
      RequireSameTotals(full.totals, of_costs.totals);
    }
  }
}

TEST_CASE("TotalsOfCosts and EvaluateOfCosts refuse costs that are not one per layer") {
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), 8);
  const Graph graph = zoo::BuildModel("vgg16").value();
  const CostModel model(graph, *profile, cluster, 32);
  const std::vector<DeviceRange> ranges =
      PrefixRanges(std::vector<int>(static_cast<size_t>(graph.num_layers()), 2));
  std::vector<LayerCost> costs = model.LayerCostsOf(ranges, 8).value();
  costs.pop_back();
  const StatusOr<PlanTotals> totals = model.TotalsOfCosts(ranges, 8, costs);
  REQUIRE(totals.status().code() == StatusCode::kInvalidArgument);
  REQUIRE(model.EvaluateOfCosts(ranges, 8, costs).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepool::planner
