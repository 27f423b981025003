// Precision: names, the presets' peaks per precision, activation widths in the roofline's bytes
// and the cost model's re-splits, profiles keyed by precision, and the default left as it was.
#include "planner/precision.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/gradient_sync.h"
#include "planner/graph.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

using deepool::testing::MakeLayer;
using deepool::testing::ZooModel;

// input [16,32,32] -> conv 16->32 3x3 -> relu -> maxpool 2x2 -> flatten -> linear 10
Graph SmallGraph() { return deepool::testing::ConvPoolLinearGraph("small", {16, 32, 32}, 32); }

Cluster EightDevices() {
  Cluster cluster;
  cluster.devices_per_node = 8;
  cluster.intra_node = Link{300, 2};
  cluster.inter_node = Link{25, 5};
  return cluster;
}

// Every layer of SmallGraph at batches 1..64, time proportional to the batch.
ProfileData SmallData() {
  ProfileData data;
  data.device = "a100";
  data.model = "small";
  for (const char* name : {"conv", "relu", "pool", "flatten", "fc"}) {
    data.layers.push_back(LayerProfileData{name, "", {{1, 0.01, 0.02}, {64, 0.64, 1.28}}});
  }
  return data;
}

TEST_CASE("precision names parse and print back") {
  for (Precision precision : AllPrecisions()) {
    auto parsed = ParsePrecision(PrecisionName(precision));
    REQUIRE(parsed.ok());
    CHECK(*parsed == precision);
  }
  CHECK(AllPrecisions().size() == 4);
  auto unknown = ParsePrecision("BF16");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.status().message(), Catch::Contains("\"BF16\""));
  CHECK_THAT(unknown.status().message(), Catch::Contains("fp32, tf32, bf16, fp16"));
  CHECK_FALSE(ParsePrecision("").ok());
  CHECK(BytesPerElement(Precision::kFp32) == 4);
  CHECK(BytesPerElement(Precision::kTf32) == 4);
  CHECK(BytesPerElement(Precision::kBf16) == 2);
  CHECK(BytesPerElement(Precision::kFp16) == 2);
}

TEST_CASE("presets have a dense peak per precision and a default precision") {
  auto peak = [](const char* name, Precision precision) {
    auto device = DevicePreset(name, precision);
    REQUIRE(device.ok());
    CHECK(device->precision == precision);
    CHECK(device->Validate().ok());
    return device->peak_tflops;
  };
  CHECK(peak("a100", Precision::kFp32) == 19.5);
  CHECK(peak("a100", Precision::kTf32) == 156);
  CHECK(peak("a100", Precision::kBf16) == 2 * peak("a100", Precision::kTf32));
  CHECK(peak("a100", Precision::kFp16) == 312);
  for (const char* hopper : {"h100", "h200"}) {
    INFO(hopper);
    CHECK(peak(hopper, Precision::kFp32) == 67);
    CHECK(peak(hopper, Precision::kTf32) == 495);
    CHECK(peak(hopper, Precision::kBf16) == 989);
    CHECK(peak(hopper, Precision::kFp16) == 989);
  }
  CHECK(peak("v100", Precision::kFp32) == 15.7);
  CHECK(peak("v100", Precision::kFp16) == 125);
  CHECK(peak("cpu", Precision::kBf16) == 2 * peak("cpu", Precision::kFp32));

  // The default is what the presets meant before precision was a choice: TF32 on Ampere and
  // Hopper, fp32 where there is no TF32.
  for (const auto& [name, expected] :
       std::vector<std::pair<std::string, Precision>>{{"a100", Precision::kTf32},
                                                      {"h100", Precision::kTf32},
                                                      {"h200", Precision::kTf32},
                                                      {"v100", Precision::kFp32},
                                                      {"cpu", Precision::kFp32}}) {
    INFO(name);
    auto device = DevicePreset(name);
    REQUIRE(device.ok());
    CHECK(device->precision == expected);
    CHECK(*DefaultPrecision(name) == expected);
    CHECK(device->peak_tflops == DevicePreset(name, expected)->peak_tflops);
  }
  CHECK(DevicePreset("a100")->peak_tflops == 156);
  CHECK(DevicePreset("cpu")->peak_tflops == 1.28);
  CHECK(DefaultPrecision("tpu").status().code() == StatusCode::kNotFound);
  CHECK(DevicePreset("tpu", Precision::kBf16).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a preset without a precision's math refuses it") {
  for (Precision missing : {Precision::kBf16, Precision::kTf32}) {
    auto v100 = DevicePreset("v100", missing);
    REQUIRE_FALSE(v100.ok());
    CHECK(v100.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(v100.status().message(),
               Catch::Contains("\"v100\" has no " + std::string(PrecisionName(missing))));
    CHECK_THAT(v100.status().message(), Catch::Contains("it supports fp32, fp16"));
  }
  CHECK(*SupportedPrecisions("v100") == std::vector<Precision>{Precision::kFp32, Precision::kFp16});
  CHECK(SupportedPrecisions("a100")->size() == 4);
}

TEST_CASE("16-bit activations halve the roofline's activation bytes but not the weights'") {
  const Graph graph = SmallGraph();
  const int64_t batch = 8;
  auto work = [&](const char* layer, Precision precision) {
    return EstimateLayerWork(graph, *graph.FindLayer(layer), batch, precision);
  };
  // relu: only activations move.
  const double relu_bytes = 2.0 * 32 * 32 * 32 * 4 * batch;
  CHECK(work("relu", Precision::kFp32).forward_bytes == Approx(relu_bytes));
  CHECK(work("relu", Precision::kTf32).forward_bytes == Approx(relu_bytes));
  CHECK(work("relu", Precision::kBf16).forward_bytes == Approx(relu_bytes / 2));
  CHECK(work("relu", Precision::kFp16).backward_bytes == Approx(1.5 * relu_bytes / 2));
  // fc: the weights stay fp32, so the layer's bytes fall by the activations' half only.
  const Layer& fc = graph.layer(*graph.FindLayer("fc"));
  const double fc_weights = static_cast<double>(fc.params) * 4;
  const double fc_activations = (32.0 * 16 * 16 + 10) * batch;  // elements in + out
  CHECK(work("fc", Precision::kFp32).forward_bytes == Approx(4 * fc_activations + fc_weights));
  CHECK(work("fc", Precision::kBf16).forward_bytes == Approx(2 * fc_activations + fc_weights));
  // max pooling's int64 indices keep their 8 bytes: in + 3 x out at fp32, as before.
  const double pool_in = 32.0 * 32 * 32 * batch, pool_out = 32.0 * 16 * 16 * batch;
  CHECK(work("pool", Precision::kFp32).forward_bytes == Approx(4 * pool_in + 3 * 4 * pool_out));
  CHECK(work("pool", Precision::kBf16).forward_bytes == Approx(2 * pool_in + (2 + 8) * pool_out));
  CHECK(work("pool", Precision::kFp32).backward_bytes ==
        Approx(2 * 4 * pool_in + 3 * 4 * pool_out));
  // The math does not change with the width.
  CHECK(work("fc", Precision::kBf16).forward_flops == work("fc", Precision::kFp32).forward_flops);
}

TEST_CASE("bf16 doubles the analytical compute peak and halves memory-bound time") {
  const Graph graph = ZooModel("vgg16");
  auto tf32 = MakeAnalyticalProfile(*DevicePreset("a100"));
  auto bf16 = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kBf16));
  CHECK(tf32->source() == "analytical:a100");
  CHECK(bf16->source() == "analytical:a100 (bf16)");
  CHECK(tf32->precision() == Precision::kTf32);
  CHECK(bf16->precision() == Precision::kBf16);
  // Launch costs aside: a big compute-bound convolution at twice the peak, and a memory-bound
  // ReLU with half the bytes, each in half the time.
  const double launch_ms = DevicePreset("a100")->launch_us / 1e3;
  for (const char* name : {"features.28", "features.1"}) {
    INFO(name);
    const int id = *graph.FindLayer(name);
    const LayerWork work = EstimateLayerWork(graph, id, 64, Precision::kTf32);
    const LayerTime slow = *tf32->Time(graph, id, 64);
    const LayerTime fast = *bf16->Time(graph, id, 64);
    const double forward_launch = work.forward_kernels * launch_ms;
    const double backward_launch = work.backward_kernels * launch_ms;
    CHECK(fast.forward_ms - forward_launch == Approx((slow.forward_ms - forward_launch) / 2));
    CHECK(fast.backward_ms - backward_launch == Approx((slow.backward_ms - backward_launch) / 2));
  }
}

TEST_CASE("the cost model moves activations at the profile's precision's width") {
  const Graph graph = ZooModel("vgg16");
  const Cluster cluster = EightDevices();
  auto tf32 = MakeAnalyticalProfile(*DevicePreset("a100"));
  auto bf16 = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kBf16));
  const CostModel wide(graph, *tf32, cluster, 64);
  const CostModel narrow(graph, *bf16, cluster, 64);
  const int conv = *graph.FindLayer("features.0");
  const Layer& layer = graph.layer(conv);
  // A profile that records no precision moves fp32 activations: the graph's output_bytes.
  CHECK(wide.ActivationBytes(conv) == layer.output_bytes);
  CHECK(narrow.ActivationBytes(conv) * 2 == layer.output_bytes);
  CHECK(wide.ResplitMs(conv, 8, 2) == Approx(2 * wide.Resplit(8, 2).Ms(layer.output_bytes)));
  CHECK(narrow.ResplitMs(conv, 8, 2) ==
        Approx(2 * narrow.Resplit(8, 2).Ms(layer.output_bytes / 2)));
  CHECK(narrow.ResplitMs(conv, 8, 2) < wide.ResplitMs(conv, 8, 2));
  // The gradients stay fp32.
  const int fc = *graph.FindLayer("classifier.0");
  CHECK(narrow.GradientBytes(fc) == wide.GradientBytes(fc));
  CHECK(narrow.GradientBytes(fc) == graph.layer(fc).params * 4);
}

TEST_CASE("gradient all-reduces stay fp32 unless a narrower width is asked for") {
  GradientSyncOptions fp32;
  CHECK(fp32.precision == Precision::kFp32);
  CHECK(AllReducedBytes(1000, fp32) == 1000);
  GradientSyncOptions bf16;
  bf16.precision = Precision::kBf16;
  CHECK(AllReducedBytes(1000, bf16) == 500);
  const Cluster cluster = EightDevices();
  const int64_t big = 400 << 20;  // past the bucket cap: its own all-reduce
  CHECK(AmortisedAllReduceMs(cluster, big, 8, bf16) == AllReduceMs(cluster, big / 2, 8));
  CHECK(AmortisedAllReduceMs(cluster, big, 8, fp32) == AllReduceMs(cluster, big, 8));
  // Buckets form by the fp32 bytes; each all-reduce moves half of them.
  const std::vector<ReadyGradient> gradients = {{2, 8, 30 << 20, 1.0, 0}, {1, 8, 10 << 20, 2.0, 0}};
  const GradientSyncTimeline wide = ScheduleGradientSync(gradients, 3.0, cluster, fp32);
  const GradientSyncTimeline narrow = ScheduleGradientSync(gradients, 3.0, cluster, bf16);
  REQUIRE(wide.buckets.size() == narrow.buckets.size());
  for (size_t i = 0; i < wide.buckets.size(); ++i) {
    CHECK(narrow.buckets[i].bytes == wide.buckets[i].bytes);
    CHECK(narrow.buckets[i].end_ms - narrow.buckets[i].start_ms ==
          Approx(AllReduceMs(cluster, wide.buckets[i].bytes / 2, 8)));
  }
  CHECK(narrow.all_reduce_ms < wide.all_reduce_ms);
  // VGG-16's 0.5 GB of gradients: data parallelism gains from narrower all-reduces.
  const Graph graph = ZooModel("vgg16");
  auto profile = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kBf16));
  PlanOptions options;
  options.global_batch = 64;
  options.devices = 8;
  auto wide_plan = PlanDataParallel(graph, *profile, cluster, options);
  options.gradient_sync.precision = Precision::kBf16;
  auto narrow_plan = PlanDataParallel(graph, *profile, cluster, options);
  REQUIRE(wide_plan.ok());
  REQUIRE(narrow_plan.ok());
  CHECK(narrow_plan->totals.iteration_ms < wide_plan->totals.iteration_ms);
}

TEST_CASE("a plan at the preset's default precision is the plan without one") {
  const Graph graph = ZooModel("resnet50");
  const Cluster cluster = EightDevices();
  auto by_default = MakeAnalyticalProfile(*DevicePreset("a100"));
  auto named = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kTf32));
  PlanOptions options;
  options.global_batch = 64;
  options.devices = 8;
  options.amplification_limit = 2;
  auto plain = PlanBurstParallel(graph, *by_default, cluster, options);
  options.precision = Precision::kTf32;
  auto checked = PlanBurstParallel(graph, *named, cluster, options);
  REQUIRE(plain.ok());
  REQUIRE(checked.ok());
  CHECK(PlanToJson(*plain) == PlanToJson(*checked));
  // And bf16 is a different plan: faster, same graph.
  auto bf16 = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kBf16));
  options.precision = Precision::kBf16;
  auto half = PlanBurstParallel(graph, *bf16, cluster, options);
  REQUIRE(half.ok());
  CHECK(half->totals.iteration_ms < plain->totals.iteration_ms);
  CHECK(half->single_device_ms < plain->single_device_ms);
}

TEST_CASE("profiles record their precision and round-trip it") {
  ProfileData data = SmallData();
  data.precision = Precision::kBf16;
  const std::string text = ProfileToJson(data);
  CHECK_THAT(text, Catch::Contains("\"precision\": \"bf16\""));
  auto parsed = ParseProfileJson(text);
  REQUIRE(parsed.ok());
  CHECK(*parsed == data);
  CHECK(*RecordedProfilePrecision(text) == Precision::kBf16);

  data.precision.reset();
  const std::string unrecorded = ProfileToJson(data);
  CHECK_THAT(unrecorded, !Catch::Contains("precision"));
  CHECK_FALSE(ParseProfileJson(unrecorded)->precision.has_value());
  CHECK_FALSE(RecordedProfilePrecision(unrecorded)->has_value());

  std::string bad = text;
  bad.replace(bad.find("\"bf16\""), 6, "\"half\"");
  auto refused = ParseProfileJson(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("precision"));
  CHECK_THAT(refused.status().message(), Catch::Contains("\"half\""));
}

TEST_CASE("planning at another precision than the profile's is refused") {
  const Graph graph = SmallGraph();
  const Cluster cluster = EightDevices();
  PlanOptions options;
  options.global_batch = 64;
  options.devices = 8;
  ProfileData data = SmallData();
  data.precision = Precision::kBf16;
  auto bf16 = ParseProfileTable(ProfileToJson(data), graph, {});
  REQUIRE(bf16.ok());
  CHECK((*bf16)->precision() == Precision::kBf16);
  CHECK_THAT((*bf16)->source(), Catch::Contains("(bf16)"));

  options.precision = Precision::kFp32;
  for (bool burst : {true, false}) {
    INFO("burst " << burst);
    auto plan = burst ? PlanBurstParallel(graph, **bf16, cluster, options)
                      : PlanDataParallel(graph, **bf16, cluster, options);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.status().code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(plan.status().message(), Catch::Contains("is for bf16"));
    CHECK_THAT(plan.status().message(), Catch::Contains("cannot plan at fp32"));
  }
  options.precision = Precision::kBf16;
  CHECK(PlanBurstParallel(graph, **bf16, cluster, options).ok());
  options.precision.reset();  // unset: the profile's, unchecked
  CHECK(PlanBurstParallel(graph, **bf16, cluster, options).ok());

  // A profile that records none stands for fp32 or tf32, not for 16-bit precisions.
  data.precision.reset();
  auto unrecorded = ParseProfileTable(ProfileToJson(data), graph, {});
  REQUIRE(unrecorded.ok());
  for (Precision precision : {Precision::kFp32, Precision::kTf32}) {
    options.precision = precision;
    CHECK(PlanBurstParallel(graph, **unrecorded, cluster, options).ok());
  }
  options.precision = Precision::kFp16;
  auto fp16 = PlanBurstParallel(graph, **unrecorded, cluster, options);
  REQUIRE_FALSE(fp16.ok());
  CHECK(fp16.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(fp16.status().message(), Catch::Contains("does not record its precision"));
}

TEST_CASE("a profile's fallback must time the missing layers at the profile's precision") {
  const Graph graph = SmallGraph();
  ProfileData data = SmallData();
  data.layers.erase(data.layers.begin() + 1);  // relu, for the fallback
  data.precision = Precision::kBf16;
  auto tf32 = MakeAnalyticalProfile(*DevicePreset("a100"));
  auto bf16 = MakeAnalyticalProfile(*DevicePreset("a100", Precision::kBf16));
  ProfileOptions options;
  options.fallback = tf32.get();
  auto mixed = TableProfile::Create(data, graph, options, "test");
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(mixed.status().message(), Catch::Contains("is for bf16"));
  CHECK_THAT(mixed.status().message(), Catch::Contains("analytical:a100 is for tf32"));
  options.fallback = bf16.get();
  CHECK(TableProfile::Create(data, graph, options, "test").ok());
  // An unrecorded profile takes a fallback at its preset's default (tf32 here, fp32 on cpu).
  data.precision.reset();
  options.fallback = tf32.get();
  CHECK(TableProfile::Create(data, graph, options, "test").ok());
  options.fallback = bf16.get();
  CHECK_FALSE(TableProfile::Create(data, graph, options, "test").ok());
}

}  // namespace
}  // namespace deepool::planner
