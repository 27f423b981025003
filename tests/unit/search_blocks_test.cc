// Block search (PlanOptions::fuse_blocks, search_problem::GroupBlocks): which layers are searched
// as one group, that the groups stay in topological order, and that plans made this way keep to
// the limit and never lose to single-device or data-parallel execution.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/search.h"
#include "planner/search_problem.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

struct Groups {
  Graph graph;
  std::vector<int> of;
  int count = 0;

  int Of(const std::string& layer) const {
    return of[static_cast<size_t>(graph.FindLayer(layer).value())];
  }
};

Groups BlockGroups(Graph graph) {
  int count = 0;
  std::vector<int> of = search_problem::GroupLayers(graph, /*fuse=*/true, &count);
  of = search_problem::GroupBlocks(graph, std::move(of), &count);
  return Groups{std::move(graph), std::move(of), count};
}

Layer Linear(const std::string& name, const std::string& input) {
  return deepool::testing::LinearLayer(name, input, 64);
}

Layer Add(const std::string& name, std::vector<std::string> inputs) {
  Layer layer;
  layer.name = name;
  layer.op = Op::kAdd;
  layer.inputs = std::move(inputs);
  return layer;
}

// Every layer's producers are in its group or an earlier one, and the groups are numbered
// 0..count-1 in order of their first layer: the problem's nodes stay topologically ordered.
void RequireTopologicalGroups(const Groups& groups) {
  int next = 0;
  for (int id = 0; id < groups.graph.num_layers(); ++id) {
    const int group = groups.of[static_cast<size_t>(id)];
    REQUIRE(group <= next);
    if (group == next) ++next;
    for (int input : groups.graph.layer(id).input_ids) {
      if (input < 0) continue;
      REQUIRE(groups.of[static_cast<size_t>(input)] <= group);
    }
  }
  REQUIRE(next == groups.count);
}

TEST_CASE("GroupBlocks searches a ResNet bottleneck as one group") {
  const Groups groups = BlockGroups(zoo::BuildModel("resnet50").value());
  RequireTopologicalGroups(groups);
  const int block = groups.Of("layer1.0.conv1");
  for (const char* layer :
       {"layer1.0.bn1", "layer1.0.conv2", "layer1.0.conv3", "layer1.0.downsample.0",
        "layer1.0.downsample.1", "layer1.0.add", "layer1.0.relu_2"}) {
    INFO(layer);
    REQUIRE(groups.Of(layer) == block);
  }
  REQUIRE(groups.Of("layer1.1.conv1") != block);
  REQUIRE(groups.Of("maxpool") != block);  // the fork stays outside its block
  // The stem, maxpool, 16 bottlenecks, the pool with flatten and fc.
  REQUIRE(groups.count == 20);
}

TEST_CASE("GroupBlocks merges every Inception module but the one that feeds the auxiliary head") {
  const Groups groups = BlockGroups(zoo::BuildModel("inception_v3").value());
  RequireTopologicalGroups(groups);
  // A module forked by the previous module's concat (the join of that block) is a block too.
  for (const char* module : {"Mixed_5b", "Mixed_5c", "Mixed_6b", "Mixed_7b", "Mixed_7c"}) {
    INFO(module);
    REQUIRE(groups.Of(std::string(module) + ".branch1x1.conv") ==
            groups.Of(std::string(module) + ".concat"));
  }
  // Mixed_6e's output is read by Mixed_7a and by the auxiliary head, a graph output: the paths
  // from it never meet again, so Mixed_7a's towers stay groups of their own.
  REQUIRE(groups.Of("Mixed_7a.branch3x3_1.conv") != groups.Of("Mixed_7a.concat"));
  REQUIRE(groups.Of("AuxLogits.fc") != groups.Of("Mixed_7a.concat"));
}

TEST_CASE("GroupBlocks leaves a block that a later layer reads from or an outside layer feeds") {
  // a forks into b and c, which meet in d; e reads b as well, after the join: merging b..d would
  // hide an edge leaving the block from its middle, so nothing is merged.
  const Graph graph = Graph::Create("leaky", {64},
                                    {Linear("a", "input"), Linear("b", "a"), Linear("c", "a"),
                                     Add("d", {"b", "c"}), Add("e", {"d", "b"})})
                          .value();
  const Groups groups = BlockGroups(graph);
  RequireTopologicalGroups(groups);
  REQUIRE(groups.count == 5);

  // A layer of the block that also reads from outside it (c reads z): no two-terminal block.
  const Graph entered =
      Graph::Create("entered", {64},
                    {Linear("a", "input"), Linear("z", "input"), Linear("b", "a"),
                     Add("c", {"a", "z"}), Add("d", {"b", "c"}), Linear("e", "d")})
          .value();
  const Groups unmerged = BlockGroups(entered);
  RequireTopologicalGroups(unmerged);
  REQUIRE(unmerged.count == 6);

  // The same block without the leak is merged: b, c and d in one group.
  const Graph clean = Graph::Create("clean", {64},
                                    {Linear("a", "input"), Linear("b", "a"), Linear("c", "a"),
                                     Add("d", {"b", "c"}), Linear("e", "d")})
                          .value();
  const Groups merged = BlockGroups(clean);
  RequireTopologicalGroups(merged);
  REQUIRE(merged.count == 3);
  REQUIRE(merged.Of("b") == merged.Of("d"));
  REQUIRE(merged.Of("c") == merged.Of("d"));
}

TEST_CASE("Block search plans keep to the limit and beat one device and data parallelism") {
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  for (const char* model : {"resnet50", "wide_resnet101_2", "inception_v3", "vgg16"}) {
    const Graph graph = zoo::BuildModel(model).value();
    for (int devices : {2, 8}) {
      PlanOptions options;
      options.global_batch = 32;
      options.devices = devices;
      options.amplification_limit = 2.0;
      options.sync_batch_norm = false;  // data parallelism is then a plan of the search's own
      options.granularity = SearchGranularity::kBlocks;
      const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), devices);
      INFO(model << " G=" << devices);
      const StatusOr<Plan> plan = PlanBurstParallel(graph, *profile, cluster, options);
      REQUIRE(plan.ok());
      REQUIRE(plan->totals.amplification <= 2.0 * (1 + 1e-9));
      REQUIRE(plan->totals.iteration_ms <= plan->single_device_ms * (1 + 1e-12));
      if (plan->data_parallel.amplification <= 2.0) {
        REQUIRE(plan->totals.iteration_ms <= plan->data_parallel.iteration_ms * (1 + 1e-12));
      }
    }
  }
}

TEST_CASE("SearchesBlocks: only a granularity other than layers on a graph with blocks",
          "[search]") {
  PlanOptions options;
  options.global_batch = 32;
  options.devices = 8;
  const Graph chain = zoo::BuildModel("vgg16").value();
  const Graph residual = zoo::BuildModel("resnet50").value();
  const Graph inception = zoo::BuildModel("inception_v3").value();
  for (SearchGranularity granularity : {SearchGranularity::kMixed, SearchGranularity::kBlocks}) {
    options.granularity = granularity;
    CHECK_FALSE(SearchesBlocks(chain, options));
    CHECK(SearchesBlocks(residual, options));
    CHECK(SearchesBlocks(inception, options));
  }
  options.granularity = SearchGranularity::kLayers;
  CHECK_FALSE(SearchesBlocks(residual, options));
}

}  // namespace
}  // namespace deepool::planner
