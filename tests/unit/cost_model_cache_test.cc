// The cost model's caches: profile times kept once per share (counts with the same largest
// share ask the profile once), and the all-reduce charges kept by size, which must answer every
// layer with its own size's charge whatever order the layers and counts are asked in.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost_model.h"
#include "planner/graph.h"

namespace deepool::planner {
namespace {

// forward = layer + batch, backward = 2 x forward; counts what it is asked. A layer named
// "nan" answers NaN (a profile may; the cache must not take it for a known time).
class CountingProfile : public Profile {
 public:
  std::string source() const override { return "counting"; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    ++asked[{layer_id, batch}];
    if (graph.layer(layer_id).name == "nan") {
      return LayerTime{std::numeric_limits<double>::quiet_NaN(), 1.0};
    }
    const double forward = static_cast<double>(layer_id) + static_cast<double>(batch);
    return LayerTime{forward, 2 * forward};
  }
  mutable std::map<std::pair<int, int64_t>, int> asked;
};

Layer Conv(const std::string& name, const std::string& input, int64_t channels) {
  Layer layer;
  layer.name = name;
  layer.op = Op::kConv2d;
  layer.inputs = {input};
  layer.attrs.out_channels = channels;
  return layer;
}

Layer BatchNorm(const std::string& name, const std::string& input) {
  Layer layer;
  layer.name = name;
  layer.op = Op::kBatchNorm2d;
  layer.inputs = {input};
  return layer;
}

// conv(8) bn conv(4) bn conv(8) bn nan(relu): two batch norms share a size, one has another;
// the convolutions' gradients have three sizes (8x4+8, 4x8+4, 8x4+8 parameters: two equal).
Graph Chain() {
  Layer relu;
  relu.name = "nan";
  relu.op = Op::kRelu;
  relu.inputs = {"bn3"};
  auto graph =
      Graph::Create("chain", {4, 2, 2},
                    {Conv("c1", "input", 8), BatchNorm("bn1", "c1"), Conv("c2", "bn1", 4),
                     BatchNorm("bn2", "c2"), Conv("c3", "bn2", 8), BatchNorm("bn3", "c3"), relu});
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

Cluster EightDevices() {
  Cluster cluster;
  cluster.nodes = 2;
  cluster.devices_per_node = 4;
  cluster.intra_node = Link{2.0, 3.0};
  cluster.inter_node = Link{0.5, 9.0};
  return cluster;
}

TEST_CASE("counts with the same largest share ask the profile once", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  // ceil(32 / g) is 4 for g = 8, 9 and 10.
  for (int devices : {8, 9, 10, 8, 9}) {
    const StatusOr<LayerTime> time = model.Compute(0, devices);
    REQUIRE(time.ok());
    CHECK(time->forward_ms == 4.0);
    CHECK(time->backward_ms == 8.0);
  }
  CHECK(profile.asked.at({0, 4}) == 1);
  // Another layer at a share already slotted, and a count of another share after it.
  CHECK(model.Compute(2, 10).value().forward_ms == 6.0);
  CHECK(model.Compute(2, 3).value().forward_ms == 2.0 + 11.0);
  CHECK(model.Compute(0, 3).value().forward_ms == 11.0);
  CHECK(profile.asked.at({2, 4}) == 1);
  CHECK(profile.asked.at({0, 11}) == 1);
  CHECK(profile.asked.size() == 4);
}

TEST_CASE("a profile's NaN is answered as it is, not taken for a time not yet known", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  const int nan_layer = graph.num_layers() - 1;
  for (int i = 0; i < 2; ++i) {
    const StatusOr<LayerTime> time = model.Compute(nan_layer, 2);
    REQUIRE(time.ok());
    CHECK(std::isnan(time->forward_ms));
    CHECK(time->backward_ms == 1.0);
  }
  CHECK(model.Compute(0, 2).value().forward_ms == 16.0);
}

TEST_CASE("all-reduce charges kept by size answer each layer with its own size", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  const GradientSyncOptions sync;
  // Asked in an order that mixes layers and counts, twice (the second time from the tables).
  for (int round = 0; round < 2; ++round) {
    for (int devices : {5, 2, 8, 0, 1, 3}) {
      for (int id = graph.num_layers() - 1; id >= 0; --id) {
        const Layer& layer = graph.layer(id);
        const int64_t stats_bytes =
            layer.op == Op::kBatchNorm2d ? (2 * layer.output_shape.front() + 1) * 8 : 0;
        const double stats_ms = stats_bytes == 0 ? 0 : AllReduceMs(cluster, stats_bytes, devices);
        CHECK(model.BatchNormSyncMs(id, devices) == stats_ms);
        CHECK(model.AmortisedGradientSyncMs(id, devices) ==
              AmortisedAllReduceMs(cluster, layer.params * 4, devices, sync));
      }
    }
  }
  // The sizes differ, so a mixed-up table would show: bn2 (4 channels) against bn1 (8).
  CHECK(model.BatchNormSyncMs(3, 8) < model.BatchNormSyncMs(1, 8));
  CHECK(model.AmortisedGradientSyncMs(2, 8) != model.AmortisedGradientSyncMs(0, 8));
}

TEST_CASE("batch norm kept per device charges no statistics all-reduce", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  CostModelOptions options;
  options.sync_batch_norm = false;
  const CostModel model(graph, profile, cluster, 32, options);
  for (int id = 0; id < graph.num_layers(); ++id) CHECK(model.BatchNormSyncMs(id, 8) == 0);
}

}  // namespace
}  // namespace deepool::planner
