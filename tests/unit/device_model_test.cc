#include "planner/device_model.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "planner/a100_import.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/reference_profiles.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

using deepool::testing::MakeLayer;
using deepool::testing::ZooModel;

// input [64,56,56] -> conv 64->64 3x3 (no bias) -> conv 64->64 3x3 -> relu
Graph ConvPair() {
  LayerAttrs conv;
  conv.out_channels = 64;
  conv.kernel_size = {3, 3};
  conv.padding = {1, 1};
  conv.bias = false;
  auto graph = Graph::Create("pair", {64, 56, 56},
                             {MakeLayer("first", Op::kConv2d, {"input"}, conv),
                              MakeLayer("second", Op::kConv2d, {"first"}, conv),
                              MakeLayer("relu", Op::kRelu, {"second"})});
  REQUIRE(graph.ok());
  return *graph;
}

double ModelMs(const Profile& profile, const Graph& graph, int64_t batch) {
  double total = 0;
  for (int id = 0; id < graph.num_layers(); ++id) {
    auto time = profile.Time(graph, id, batch);
    REQUIRE(time.ok());
    total += time->total_ms();
  }
  return total;
}

TEST_CASE("device presets exist and validate") {
  for (const std::string& name : DevicePresetNames()) {
    auto device = DevicePreset(name);
    INFO(name);
    REQUIRE(device.ok());
    CHECK(device->name == name);
    CHECK(device->Validate().ok());
  }
  auto unknown = DevicePreset("tpu");
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK_THAT(unknown.status().message(), Catch::Contains("a100, h100, h200, v100, cpu"));
}

TEST_CASE("Validate names the bad field") {
  DeviceModel device = *DevicePreset("a100");
  device.compute_efficiency = 1.5;
  CHECK_THAT(device.Validate().message(), Catch::Contains("compute_efficiency"));
  device = *DevicePreset("a100");
  device.memory_bandwidth_gbps = 0;
  CHECK_THAT(device.Validate().message(), Catch::Contains("memory_bandwidth_gbps"));
  device = *DevicePreset("a100");
  device.gemm_half_depth = -1;
  CHECK_THAT(device.Validate().message(), Catch::Contains("gemm_half_depth"));
  device = *DevicePreset("a100");
  device.gemm_half_outputs = -1;
  CHECK_THAT(device.Validate().message(), Catch::Contains("gemm_half_outputs"));
}

TEST_CASE("roofline: compute-bound conv and memory-bound relu") {
  const Graph graph = ConvPair();
  DeviceModel device;
  device.name = "unit";
  device.peak_tflops = 100;
  device.memory_bandwidth_gbps = 1000;
  device.compute_efficiency = 0.5;
  device.memory_efficiency = 0.5;
  device.launch_us = 10;
  device.gemm_half_depth = 576;  // = 64 x 3 x 3: the conv runs at half the efficiency

  const int second = *graph.FindLayer("second");
  const LayerWork conv = EstimateLayerWork(graph, second, 8);
  const double flops = 2.0 * 64 * 64 * 9 * 56 * 56 * 8;
  CHECK(conv.forward_flops == Approx(flops));
  CHECK(conv.backward_flops == Approx(2 * flops));
  LayerTime conv_time = RooflineTime(device, conv);
  // 100 TFLOPS x 0.5 x 0.5 = 25 TFLOPS effective.
  CHECK(conv_time.forward_ms == Approx(flops / 25e9 + 0.010));
  CHECK(conv_time.backward_ms == Approx(2 * flops / 25e9 + 2 * 0.010));

  const int relu = *graph.FindLayer("relu");
  const LayerWork elementwise = EstimateLayerWork(graph, relu, 8);
  const double bytes = 2.0 * 64 * 56 * 56 * 4 * 8;  // read + write
  CHECK(elementwise.forward_bytes == Approx(bytes));
  CHECK(elementwise.backward_bytes == Approx(1.5 * bytes));
  LayerTime relu_time = RooflineTime(device, elementwise);
  CHECK(relu_time.forward_ms == Approx(bytes / 500e6 + 0.010));

  // A GEMM with as many output elements as gemm_half_outputs runs at half its efficiency again;
  // the memory-bound relu does not change.
  device.gemm_half_outputs = 64.0 * 56 * 56 * 8;  // the forward conv's outputs
  const LayerTime small_gemm = RooflineTime(device, conv);
  CHECK(small_gemm.forward_ms == Approx(2 * flops / 25e9 + 0.010));
  CHECK(RooflineTime(device, elementwise).forward_ms == Approx(relu_time.forward_ms));
}

TEST_CASE("a layer reading the graph input has no grad-input work") {
  const Graph graph = ConvPair();
  const LayerWork first = EstimateLayerWork(graph, *graph.FindLayer("first"), 4);
  const LayerWork second = EstimateLayerWork(graph, *graph.FindLayer("second"), 4);
  CHECK(first.forward_flops == Approx(second.forward_flops));
  CHECK(first.backward_flops == Approx(first.forward_flops));
  CHECK(second.backward_flops == Approx(2 * second.forward_flops));
  CHECK(first.backward_kernels < second.backward_kernels);
}

TEST_CASE("analytical times are positive and non-decreasing in the batch for every zoo layer") {
  auto profile = MakeAnalyticalProfile(*DevicePreset("a100"));
  CHECK(profile->source() == "analytical:a100");
  for (const char* model : {"small_cnn", "resnet50", "inception_v3", "mlp"}) {
    const Graph graph = ZooModel(model);
    for (int id = 0; id < graph.num_layers(); ++id) {
      LayerTime previous = *profile->Time(graph, id, 1);
      INFO(model << " " << graph.layer(id).name);
      CHECK(previous.forward_ms > 0);
      CHECK(previous.backward_ms > 0);
      for (int64_t batch : {2, 3, 5, 8, 16, 33, 64, 256}) {
        LayerTime time = *profile->Time(graph, id, batch);
        CHECK(time.forward_ms >= previous.forward_ms);
        CHECK(time.backward_ms >= previous.backward_ms);
        previous = time;
      }
    }
  }
}

TEST_CASE("newer GPUs are faster, and a CPU is much slower") {
  const Graph graph = ZooModel("vgg16");
  auto ms = [&](const char* device) {
    return ModelMs(*MakeAnalyticalProfile(*DevicePreset(device)), graph, 32);
  };
  const double h200 = ms("h200"), h100 = ms("h100"), a100 = ms("a100"), v100 = ms("v100");
  const double cpu = ms("cpu");
  CHECK(h200 < h100);  // the same GH100 and factors, faster memory
  CHECK(h100 < a100);
  CHECK(a100 < v100);
  CHECK(v100 * 5 < cpu);
}

TEST_CASE("analytical profile rejects bad layer ids and batches") {
  const Graph graph = ConvPair();
  auto profile = MakeAnalyticalProfile(*DevicePreset("v100"));
  CHECK(profile->Time(graph, 3, 1).status().code() == StatusCode::kInvalidArgument);
  auto zero = profile->Time(graph, 0, 0);
  CHECK(zero.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(zero.status().message(), Catch::Contains("first"));
}

TEST_CASE("an analytical profile's times for several batches are its time at each to the bit") {
  // The batch of times works out each layer's rule once (Profile::Times): every op of the zoo,
  // transformers' included, at two activation widths.
  for (const Precision precision : {Precision::kTf32, Precision::kBf16}) {
    auto profile = MakeAnalyticalProfile(*DevicePreset("a100", precision));
    for (const char* model : {"inception_v3", "resnet50", "vgg16", "mlp", "gpt_tiny", "vit_tiny"}) {
      const Graph graph = ZooModel(model);
      const std::vector<int64_t> batches{1, 2, 3, 5, 8, 11, 16, 33};
      std::vector<LayerTime> times;
      for (int id = 0; id < graph.num_layers(); ++id) {
        INFO(model << " " << graph.layer(id).name << " " << PrecisionName(precision));
        REQUIRE(profile->Times(graph, id, batches, &times).ok());
        REQUIRE(times.size() == batches.size());
        for (size_t i = 0; i < batches.size(); ++i) {
          const LayerTime time = *profile->Time(graph, id, batches[i]);
          CHECK(times[i].forward_ms == time.forward_ms);
          CHECK(times[i].backward_ms == time.backward_ms);
        }
      }
    }
  }
}

TEST_CASE("an analytical profile's batch of times stops at Time's first error") {
  const Graph graph = ConvPair();
  auto profile = MakeAnalyticalProfile(*DevicePreset("v100"));
  std::vector<LayerTime> times;
  const Status bad_batch = profile->Times(graph, 1, {4, 0, -1}, &times);
  CHECK(bad_batch == profile->Time(graph, 1, 0).status());
  const Status bad_layer = profile->Times(graph, 3, {4}, &times);
  CHECK(bad_layer == profile->Time(graph, 3, 4).status());
  CHECK(profile->Times(graph, 0, {}, &times).ok());
  CHECK(times.empty());
}

// The A100 preset against the measured VGG-16 file (docs/benchmarks.md has the full table):
// the whole-model error stays within 10% from batch 4 up, and within 15% below.
TEST_CASE("A100 preset predicts measured VGG-16 whole-model time") {
  READ_REFERENCE_PROFILE_OR_SKIP(text, "A100_vgg.prof");
  const Graph graph = ZooModel("vgg16");
  auto imported = ImportA100Profile(text, graph);
  REQUIRE(imported.ok());
  auto profile = MakeAnalyticalProfile(*DevicePreset("a100"));
  std::map<int64_t, std::pair<double, double>> totals;  // predicted, measured
  for (const LayerProfileData& layer : imported->data.layers) {
    const int id = *graph.FindLayer(layer.name);
    for (const BatchTime& point : layer.batches) {
      totals[point.batch].first += profile->Time(graph, id, point.batch)->total_ms();
      totals[point.batch].second += point.forward_ms + point.backward_ms;
    }
  }
  REQUIRE(totals.size() == 9);
  for (const auto& [batch, total] : totals) {
    INFO("batch " << batch << ": predicted " << total.first << " measured " << total.second);
    CHECK(total.first == Approx(total.second).epsilon(batch >= 4 ? 0.10 : 0.15));
  }
}

}  // namespace
}  // namespace deepool::planner
