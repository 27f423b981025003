// The cost model's caches: profile times kept once per share (counts with the same largest
// share ask the profile once), and the all-reduce charges kept by size, which must answer every
// layer with its own size's charge whatever order the layers and counts are asked in.
#include <algorithm>
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
    if (auto error = errors.find({layer_id, batch}); error != errors.end()) return error->second;
    if (graph.layer(layer_id).name == "nan") {
      return LayerTime{std::numeric_limits<double>::quiet_NaN(), 1.0};
    }
    // Per sample, the time falls with the batch up to 8 and rises beyond (caches spilling), so
    // the least device time is no single count's.
    const double b = static_cast<double>(batch);
    const double forward = static_cast<double>(layer_id + 1) * (1.0 + b + (b > 8 ? b * b : 0));
    return LayerTime{forward, 2 * forward};
  }
  Status Times(const Graph& graph, int layer_id, const std::vector<int64_t>& batches,
               std::vector<LayerTime>* times) const override {
    ++batched[layer_id];
    return Profile::Times(graph, layer_id, batches, times);
  }
  mutable std::map<std::pair<int, int64_t>, int> asked;  // Time's calls
  mutable std::map<int, int> batched;                    // Times' calls, by layer
  std::map<std::pair<int, int64_t>, Status> errors;
};

// LeastDeviceMs' definition (cost_model.h), from Compute count by count: the least over counts
// 1..most of (B / ceil(B / g)) x the layer's time; the first error by layer, then count.
StatusOr<double> ReferenceLeastDeviceMs(const CostModel& model, int most) {
  const int64_t batch = model.global_batch();
  double total = 0;
  for (int id = 0; id < model.graph().num_layers(); ++id) {
    double least = std::numeric_limits<double>::infinity();
    for (int g = 1; g <= most; ++g) {
      ASSIGN_OR_RETURN(const LayerTime time, model.Compute(id, g));
      least = std::min(least, static_cast<double>(batch) /
                                  static_cast<double>(LargestShare(batch, g)) * time.total_ms());
    }
    total += least;
  }
  return total;
}

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

// conv(8) bn conv(4) bn conv(8) bn, then a relu named "nan" unless left out: two batch norms share
// a size, one has another; the convolutions' gradients have three sizes (8x4+8, 4x8+4, 8x4+8
// parameters: two equal).
Graph Chain(bool with_nan = true) {
  Layer relu;
  relu.name = "nan";
  relu.op = Op::kRelu;
  relu.inputs = {"bn3"};
  std::vector<Layer> layers{Conv("c1", "input", 8), BatchNorm("bn1", "c1"), Conv("c2", "bn1", 4),
                            BatchNorm("bn2", "c2"), Conv("c3", "bn2", 8),   BatchNorm("bn3", "c3")};
  if (with_nan) layers.push_back(relu);
  auto graph = Graph::Create("chain", {4, 2, 2}, layers);
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
    CHECK(time->forward_ms == 5.0);  // share 4
    CHECK(time->backward_ms == 10.0);
  }
  CHECK(profile.asked.at({0, 4}) == 1);
  // Another layer at a share already slotted, and a count of another share after it.
  CHECK(model.Compute(2, 10).value().forward_ms == 3 * 5.0);
  CHECK(model.Compute(2, 3).value().forward_ms == 3 * (12.0 + 121.0));  // share 11
  CHECK(model.Compute(0, 3).value().forward_ms == 12.0 + 121.0);
  CHECK(profile.asked.at({2, 4}) == 1);
  CHECK(profile.asked.at({0, 11}) == 1);
  CHECK(profile.asked.size() == 4);
}

TEST_CASE("a profile's NaN is answered as it is and not taken for a time not yet known", "[cost]") {
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
  CHECK(model.Compute(0, 2).value().forward_ms == 17.0 + 256.0);  // share 16
}

TEST_CASE("the least device time asks the profile once per layer for all its shares", "[cost]") {
  const Graph graph = Chain(/*with_nan=*/false);
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  // Count 1 known first, as a plan asks for the single-device time before: one call per layer.
  REQUIRE(model.SingleDeviceMs().ok());
  for (int id = 0; id < graph.num_layers(); ++id) CHECK(profile.batched[id] == 1);
  const StatusOr<double> least = model.LeastDeviceMs(8);
  REQUIRE(least.ok());
  for (int id = 0; id < graph.num_layers(); ++id) {
    CHECK(profile.batched[id] == 2);  // then shares 16, 11, 8, 7, 6, 5, 4 in one more call
    for (int64_t share : {32, 16, 11, 8, 7, 6, 5, 4}) CHECK(profile.asked[{id, share}] == 1);
  }
  // The same sum as count by count, and every time now cached.
  CountingProfile fresh;
  const CostModel reference(graph, fresh, cluster, 32);
  const StatusOr<double> expected = ReferenceLeastDeviceMs(reference, 8);
  REQUIRE(expected.ok());
  CHECK(*least == *expected);
  for (int g = 1; g <= 8; ++g) REQUIRE(model.Compute(0, g).ok());
  CHECK(profile.asked[{0, 16}] == 1);
}

TEST_CASE("the least device time is the least over the shares and not one count's", "[cost]") {
  const Graph graph = Chain(/*with_nan=*/false);
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  // (B / s) x 3 (id + 1) (1 + s + [s > 8] s^2) is least at s = 8 (g = 4): 4 x 27 (id + 1).
  double expected = 0;
  for (int id = 0; id < graph.num_layers(); ++id) expected += 108.0 * (id + 1);
  const StatusOr<double> least = model.LeastDeviceMs(8);
  REQUIRE(least.ok());
  CHECK(*least == expected);
  // Up to 3 devices the least is at s = 11 (g = 3), whatever was cached for 8.
  CountingProfile fresh;
  const CostModel reference(graph, fresh, cluster, 32);
  CHECK(model.LeastDeviceMs(3).value() == ReferenceLeastDeviceMs(reference, 3).value());
  CHECK(model.LeastDeviceMs(3).value() > expected);
}

TEST_CASE("the least device time answers the first error by layer and then count", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  // Layer 2 fails at share 8 (count 4) and at share 11 (count 3): count 3's comes first. Layer 4
  // fails at share 16, later by layer though earlier by count.
  profile.errors[{2, 8}] = OutOfRangeError("layer 2 at 8");
  profile.errors[{2, 11}] = NotFoundError("layer 2 at 11");
  profile.errors[{4, 16}] = NotFoundError("layer 4 at 16");
  const CostModel model(graph, profile, cluster, 32);
  CountingProfile same_errors;
  same_errors.errors = profile.errors;
  const CostModel reference(graph, same_errors, cluster, 32);
  const Status least = model.LeastDeviceMs(8).status();
  CHECK(least.message() == "layer 2 at 11");
  CHECK(least == ReferenceLeastDeviceMs(reference, 8).status());
  // And again, with the times asked before the error cached or not: the same answer.
  CHECK(model.LeastDeviceMs(8).status() == least);
}

TEST_CASE("every layer's time at a count at once is Compute's for each", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  profile.errors[{3, 8}] = NotFoundError("layer 3 at 8");
  profile.errors[{5, 8}] = NotFoundError("layer 5 at 8");
  const CostModel model(graph, profile, cluster, 32);
  const StatusOr<const LayerTime*> at_two = model.ComputeAll(2);
  REQUIRE(at_two.ok());
  for (int id = 0; id < graph.num_layers(); ++id) {
    const LayerTime time = model.Compute(id, 2).value();
    const LayerTime& all = (*at_two)[id];
    CHECK(std::isnan(all.forward_ms) == std::isnan(time.forward_ms));
    if (!std::isnan(time.forward_ms)) CHECK(all.forward_ms == time.forward_ms);
    CHECK(all.backward_ms == time.backward_ms);
  }
  CHECK(profile.batched[0] == 1);
  // Share 8: the first layer the profile cannot time answers, as Compute answers for it.
  CHECK(model.ComputeAll(4).status() == model.Compute(3, 4).status());
  CHECK(model.ComputeAll(4).status().message() == "layer 3 at 8");
  CHECK(model.ComputeAll(33).status() == model.Compute(0, 33).status());
  CHECK(model.ComputeAll(0).status().code() == StatusCode::kInvalidArgument);
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

TEST_CASE("a model built from another charges batch norm as its own options say", "[cost]") {
  const Graph graph = Chain();
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  CostModelOptions per_device;
  per_device.sync_batch_norm = false;
  // Built first without synchronised statistics, then with them from it, and back.
  const CostModel unsynchronised(graph, profile, cluster, 32, per_device);
  const CostModel synchronised(unsynchronised, CostModelOptions{});
  const CostModel from_unsynchronised(CostModel(synchronised, per_device), CostModelOptions{});
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    const double stats_ms = layer.op == Op::kBatchNorm2d
                                ? AllReduceMs(cluster, (2 * layer.output_shape.front() + 1) * 8, 4)
                                : 0;
    CHECK(synchronised.BatchNormSyncMs(id, 4) == stats_ms);
    CHECK(unsynchronised.BatchNormSyncMs(id, 4) == 0);
    CHECK(from_unsynchronised.BatchNormSyncMs(id, 4) == stats_ms);
    // The layers' bytes are the same in all three.
    CHECK(unsynchronised.ActivationBytes(id) == synchronised.ActivationBytes(id));
    CHECK(from_unsynchronised.GradientBytes(id) == synchronised.GradientBytes(id));
    CHECK(from_unsynchronised.AmortisedGradientSyncMs(id, 4) ==
          synchronised.AmortisedGradientSyncMs(id, 4));
  }
}

TEST_CASE("a plan's placements split the batch by each layer's own count", "[cost]") {
  // Evaluate works each count's shares out once and hands them to every layer on that count.
  const Graph graph = Chain(/*with_nan=*/false);
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 30);
  const std::vector<int> counts{1, 4, 4, 8, 1, 7};
  const StatusOr<Plan> plan = model.Evaluate(counts, 8);
  REQUIRE(plan.ok());
  REQUIRE(plan->layers.size() == counts.size());
  for (size_t id = 0; id < counts.size(); ++id) {
    CHECK(plan->layers[id].samples == NearEqualShares(30, counts[id]));
    CHECK(plan->layers[id].devices.size() == static_cast<size_t>(counts[id]));
  }
}

TEST_CASE("a layer's cost charges a re-split between equal counts on other ranks", "[cost]") {
  // CostOf skips the inputs on its own range; one on as many devices elsewhere still moves.
  const Graph graph = Chain(/*with_nan=*/false);
  const Cluster cluster = EightDevices();
  CountingProfile profile;
  const CostModel model(graph, profile, cluster, 32);
  std::vector<DeviceRange> ranges(static_cast<size_t>(graph.num_layers()), DeviceRange{0, 2});
  ranges[2] = DeviceRange{2, 2};  // c2 on ranks 2-3, reading bn1 on ranks 0-1
  const LayerCost moved = model.CostOf(2, ranges).value();
  const double expected = model.ResplitMs(1, DeviceRange{0, 2}, DeviceRange{2, 2});
  CHECK(expected > 0);
  CHECK(moved.resplit_ms == expected);
  CHECK(moved.resplit_device_ms == expected * 4);
  // On its producer's range: nothing.
  const LayerCost kept = model.CostOf(1, ranges).value();
  CHECK(kept.resplit_ms == 0);
  CHECK(kept.resplit_device_ms == 0);
}

}  // namespace
}  // namespace deepool::planner
