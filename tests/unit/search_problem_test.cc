// The search problem's own charges (search_problem.h): errors of the cost model are kept apart
// from the charges and answered where the count is used, OUT_OF_RANGE as an excluded count,
// any other error as the first one in layer and count order among the allowed counts.
#include "planner/search_problem.h"

#include <catch2/catch.hpp>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost_model.h"
#include "planner/graph.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner::search_problem {
namespace {

// forward = 1 + batch, backward = 2 x forward, except: "short" is measured only up to 8
// samples (OUT_OF_RANGE beyond), and "gap" and "hole" lack a batch of 8 and of 16 (NOT_FOUND).
class GappyProfile : public Profile {
 public:
  std::string source() const override { return "gappy"; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    const std::string& name = graph.layer(layer_id).name;
    if (name == "short" && batch > 8) return OutOfRangeError(name + ": beyond 8");
    if (name == "gap" && batch == 8) return NotFoundError(name + ": no 8");
    if (name == "hole" && batch == 16) return NotFoundError(name + ": no 16");
    const double forward = 1.0 + static_cast<double>(batch);
    return LayerTime{forward, 2 * forward};
  }
};

Layer Linear(const std::string& name, const std::string& input) {
  return deepool::testing::LinearLayer(name, input, 4);
}

Graph GappyChain() {
  auto built = Graph::Create("gappy", {4},
                             {Linear("fine", "input"), Linear("short", "fine"),
                              Linear("gap", "short"), Linear("hole", "gap")});
  REQUIRE(built.ok());
  return std::move(built).value();
}

struct Fixture {
  Fixture() : graph(GappyChain()) {
    cluster.devices_per_node = 4;
    cluster.intra_node = Link{1.0, 2.0};
  }
  // Every layer its own node; every count allowed unless `bounds` says otherwise.
  Status Set(const CountBounds& bounds, SeriesParallelProblem* problem) const {
    SearchNodes nodes;
    for (int id = 0; id < graph.num_layers(); ++id) nodes.group_of.push_back(id);
    nodes.count = static_cast<size_t>(graph.num_layers()) + 2;
    return SetNodeCosts(graph, *charges, bounds, nodes, 1.0, problem);
  }
  CountBounds AllAllowed() const {
    return CountBounds{std::vector<int>(4, 4), std::vector<int>(4, 1)};
  }

  Graph graph;
  Cluster cluster;
  GappyProfile profile;
  std::optional<CostModel> model;
  std::optional<OwnCharges> charges;
};

TEST_CASE("own charges answer the cost model's errors by layer and count", "[search]") {
  Fixture f;
  // B = 32 on counts 1, 2, 4: shares 32, 16, 8.
  f.model.emplace(f.graph, f.profile, f.cluster, 32);
  f.charges.emplace(f.graph, *f.model, std::vector<int>{1, 2, 4});
  const OwnCharges& charges = *f.charges;
  CHECK(charges.StatusAt(0, 0).ok());
  CHECK(charges.StatusAt(1, 0).code() == StatusCode::kOutOfRange);
  CHECK(charges.StatusAt(1, 1).code() == StatusCode::kOutOfRange);
  CHECK(charges.StatusAt(1, 2).ok());
  CHECK(charges.StatusAt(2, 2).message() == "gap: no 8");
  CHECK(charges.StatusAt(2, 1).ok());
  CHECK(charges.StatusAt(3, 1).message() == "hole: no 16");
  CHECK(charges.StatusAt(3, 2).ok());
  // A charge is the model's: compute with the amortised all-reduce apart.
  for (int id = 0; id < f.graph.num_layers(); ++id) {
    for (size_t k = 0; k < 3; ++k) {
      if (!charges.StatusAt(id, k).ok()) continue;
      const int devices = charges.counts()[k];
      CHECK(charges.At(id, k).base_ms == f.model->Compute(id, devices).value().total_ms());
      CHECK(charges.At(id, k).sync_ms == f.model->AmortisedGradientSyncMs(id, devices));
    }
  }

  SeriesParallelProblem problem;
  // Every count allowed: the first error other than OUT_OF_RANGE, in layer order.
  CHECK(f.Set(f.AllAllowed(), &problem).message() == "gap: no 8");
  // gap kept off 4 devices: hole's error is the first.
  CountBounds bounds = f.AllAllowed();
  bounds.most[2] = 2;
  CHECK(f.Set(bounds, &problem).message() == "hole: no 16");
  // hole kept on 4: every error left is OUT_OF_RANGE, an excluded count.
  bounds.fewest[3] = 4;
  REQUIRE(f.Set(bounds, &problem).ok());
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const std::vector<CostPoint>& short_costs = problem.node_costs[3];  // layer 1's node
  CHECK(short_costs[0].time_ms == kInfinity);
  CHECK(short_costs[1].time_ms == kInfinity);
  CHECK(short_costs[2].time_ms == charges.At(1, 2).base_ms + charges.At(1, 2).sync_ms);
  CHECK(problem.node_costs[2][0].time_ms == charges.At(0, 0).base_ms + charges.At(0, 0).sync_ms);
}

TEST_CASE("own charges without errors answer OK everywhere", "[search]") {
  Fixture f;
  // B = 4: shares 4, 2, 1, all measured and none 8 or 16.
  f.model.emplace(f.graph, f.profile, f.cluster, 4);
  f.charges.emplace(f.graph, *f.model, std::vector<int>{1, 2, 4});
  for (int id = 0; id < f.graph.num_layers(); ++id) {
    for (size_t k = 0; k < 3; ++k) CHECK(f.charges->StatusAt(id, k).ok());
  }
  SeriesParallelProblem problem;
  CHECK(f.Set(f.AllAllowed(), &problem).ok());
}

}  // namespace
}  // namespace deepool::planner::search_problem
