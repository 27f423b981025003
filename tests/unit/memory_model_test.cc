// The per-device memory model (memory_model.h) and the search's use of it (memory_fit.h):
// parts by op, precision and optimizer, the peak of a plan's devices, and plans that fit.
#include "planner/memory_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

Layer MakeLayer(const std::string& name, Op op, const std::string& input) {
  Layer layer;
  layer.name = name;
  layer.op = op;
  layer.inputs = {input};
  return layer;
}

// [T=16, D=32] tokens -> attention (4 heads) -> linear 10, with or without attention dropout.
Graph Attention(int64_t tokens, double dropout) {
  Layer attention = MakeLayer("attn", Op::kMultiheadAttention, "input");
  attention.attrs.num_heads = 4;
  attention.attrs.dropout = dropout;
  Layer head = MakeLayer("head", Op::kLinear, "attn");
  head.attrs.out_features = 10;
  StatusOr<Graph> graph = Graph::Create("attention", {tokens, 32}, {attention, head});
  REQUIRE(graph.ok());
  return std::move(*graph);
}

int64_t PeakOf(const std::vector<DeviceMemory>& devices) {
  int64_t peak = 0;
  for (const DeviceMemory& device : devices) peak = std::max(peak, device.total());
  return peak;
}

TEST_CASE("A linear layer holds its weights gradients and optimizer state") {
  Layer linear = MakeLayer("fc", Op::kLinear, "input");
  linear.attrs.out_features = 100;
  StatusOr<Graph> graph = Graph::Create("fc", {50}, {linear});
  REQUIRE(graph.ok());
  const int64_t params = 50 * 100 + 100;
  MemoryModelOptions options;
  options.optimizer = OptimizerMemory::kSgd;
  LayerMemory sgd = EstimateLayerMemory(*graph, 0, options);
  CHECK(sgd.weight_bytes == 4 * params);
  CHECK(sgd.gradient_bytes == 4 * params);
  CHECK(sgd.optimizer_bytes == 0);
  // The input (50 floats) for backward, and the loss's log-softmax of the 100 outputs.
  CHECK(sgd.saved_bytes_per_sample == 4 * (50 + 100));
  CHECK(sgd.fixed_saved_bytes == 0);
  options.optimizer = OptimizerMemory::kSgdMomentum;
  CHECK(EstimateLayerMemory(*graph, 0, options).optimizer_bytes == 4 * params);
  options.optimizer = OptimizerMemory::kAdam;
  CHECK(EstimateLayerMemory(*graph, 0, options).optimizer_bytes == 8 * params);
  // bf16: the input kept at 2 bytes, and autocast's 16-bit copy of the weights.
  options.precision = Precision::kBf16;
  const LayerMemory bf16 = EstimateLayerMemory(*graph, 0, options);
  CHECK(bf16.fixed_saved_bytes == 2 * params);
  CHECK(bf16.saved_bytes_per_sample == 2 * 50 + 4 * 100);
  CHECK(bf16.weight_bytes == 4 * params);
}

TEST_CASE("Optimizers map to their state copies") {
  CHECK(*OptimizerMemoryFor("sgd", 0.9) == OptimizerMemory::kSgdMomentum);
  CHECK(*OptimizerMemoryFor("sgd", 0) == OptimizerMemory::kSgd);
  CHECK(*OptimizerMemoryFor("adamw", 0) == OptimizerMemory::kAdam);
  CHECK(OptimizerMemoryFor("lamb", 0).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("Attention keeps its weights only with dropout so quadratic in T only then") {
  const MemoryModelOptions options;
  const auto saved = [&](int64_t tokens, double dropout) {
    return EstimateLayerMemory(Attention(tokens, dropout), 0, options).saved_bytes_per_sample;
  };
  // Without dropout (the fused kernel): linear in T.
  CHECK(saved(32, 0) == 2 * saved(16, 0));
  // With dropout: 4 heads x T x T x (two fp32 tensors and a bool mask) on top.
  CHECK(saved(16, 0.1) - saved(16, 0) == 4 * 16 * 16 * 9 - 4 * 16 * 4);
  CHECK(saved(64, 0.1) - saved(64, 0) > 15 * (saved(16, 0.1) - saved(16, 0)));
}

TEST_CASE("The search plans peak is rank 0 of the plan and falls with more devices") {
  StatusOr<Graph> graph = zoo::BuildModel("vgg16");
  REQUIRE(graph.ok());
  const MemoryModel model(*graph, 64, MemoryModelOptions{});
  const std::vector<int> on_one(static_cast<size_t>(graph->num_layers()), 1);
  const std::vector<int> on_eight(static_cast<size_t>(graph->num_layers()), 8);
  CHECK(model.PeakOfCounts(on_eight).total() < model.PeakOfCounts(on_one).total());
  // The same weights on every device; activations an eighth.
  CHECK(model.PeakOfCounts(on_eight).state_bytes == model.PeakOfCounts(on_one).state_bytes);
  CHECK(model.PeakOfCounts(on_eight).activation_bytes * 8 ==
        model.PeakOfCounts(on_one).activation_bytes);
  const std::vector<DeviceMemory> devices = model.PerDevice(DataParallelLayout(*graph, 64, 8));
  REQUIRE(devices.size() == 8);
  CHECK(devices[0].total() == model.PeakOfCounts(on_eight).total());
  CHECK(PeakOf(devices) == devices[0].total());
}

// vgg16 at batch 64 on 8 analytical A100s within amplification 1.05, whose plan without a
// memory limit keeps early convolutions on few devices: 4.78 GiB on rank 0, more than data
// parallelism's.
struct Vgg {
  Graph graph = *zoo::BuildModel("vgg16");
  std::unique_ptr<Profile> profile = MakeAnalyticalProfile(*DevicePreset("a100"));
  Cluster cluster = *ClusterPreset("dgx-a100");
  PlanOptions options;
  Vgg() {
    options.global_batch = 64;
    options.devices = 8;
    options.amplification_limit = 1.05;
  }
  int64_t Peak(const Plan& plan) const {
    const MemoryModel model(graph, options.global_batch, PlanMemoryModelOptions(options, *profile));
    return PeakOf(model.PerDevice(plan));
  }
};

TEST_CASE("A memory limit makes the search return a plan that fits") {
  Vgg vgg;
  StatusOr<Plan> free = PlanBurstParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  REQUIRE(free.ok());
  StatusOr<Plan> wide = PlanDataParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  REQUIRE(wide.ok());
  const int64_t free_peak = vgg.Peak(*free);
  const int64_t least_peak = vgg.Peak(*wide);
  INFO("free plan peak " << GiBString(free_peak) << ", data parallel " << GiBString(least_peak));
  REQUIRE(least_peak < free_peak);
  // Between the two: the free plan does not fit, data parallelism does.
  vgg.options.device_memory_bytes = (free_peak + least_peak) / 2;
  StatusOr<Plan> fitted = PlanBurstParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  INFO(fitted.status().message());
  REQUIRE(fitted.ok());
  CHECK(vgg.Peak(*fitted) <= vgg.options.device_memory_bytes);
  CHECK(fitted->totals.amplification <= vgg.options.amplification_limit * (1 + 1e-9));
}

TEST_CASE("When nothing fits the search names the layer its bytes and its device count") {
  Vgg vgg;
  StatusOr<Plan> wide = PlanDataParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  REQUIRE(wide.ok());
  // Every layer fits alone but not all together on their most devices.
  vgg.options.device_memory_bytes = vgg.Peak(*wide) - 1;
  StatusOr<Plan> none = PlanBurstParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  REQUIRE(!none.ok());
  CHECK(none.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(none.status().message(), Catch::Contains("no plan fits in device memory"));
  CHECK_THAT(none.status().message(), Catch::Contains("on 8 devices"));
  // One layer that fits on no count: named, with its count.
  vgg.options.device_memory_bytes = int64_t{64} << 20;
  none = PlanBurstParallel(vgg.graph, *vgg.profile, vgg.cluster, vgg.options);
  REQUIRE(!none.ok());
  CHECK(none.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(none.status().message(),
             Catch::Contains("layer 'features.0' does not fit in device "
                             "memory: on 8 devices (the most it may use)"));
}

TEST_CASE("A cluster file may set the memory of its devices") {
  const std::string text = R"({"format": "deepool.cluster", "version": 1, "device_type": "a100",
    "nodes": 1, "devices_per_node": 8, "device_memory_gb": 80,
    "intra_node": {"bandwidth_gbps": 300, "latency_us": 5}})";
  StatusOr<Cluster> cluster = ParseClusterJson(text);
  REQUIRE(cluster.ok());
  CHECK(cluster->device_memory_gb == 80);
  StatusOr<Cluster> again = ParseClusterJson(ClusterToJson(*cluster));
  REQUIRE(again.ok());
  CHECK(again->device_memory_gb == 80);
  CHECK(ClusterPreset("dgx-a100")->device_memory_gb == 0);  // the preset's memory_gb
  std::string negative = text;
  negative.replace(negative.find("80"), 2, "-1");
  CHECK_THAT(ParseClusterJson(negative).status().message(), Catch::Contains("device_memory_gb"));
}

TEST_CASE("Device capacity leaves headroom") {
  CHECK(DeviceCapacityBytes(0) == 0);
  CHECK(DeviceCapacityBytes(40) == static_cast<int64_t>(40 * 0.92 * (int64_t{1} << 30)));
  CHECK(GiBString(int64_t{3} << 29) == "1.50 GiB");
}

}  // namespace
}  // namespace deepool::planner
