// Plan format: shares, sample ranges, validation, JSON round trip and field-naming errors.
#include "planner/plan.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "planner/plan_svg.h"

namespace deepool::planner {
namespace {

Plan TwoLayerPlan() {
  Plan plan;
  plan.model = "toy";
  plan.global_batch = 10;
  plan.num_devices = 4;
  plan.amplification_limit = 2.0;
  plan.profile_source = "analytical:a100";
  plan.single_device_ms = 12.5;
  LayerPlacement wide;
  wide.layer = "conv";
  wide.devices = {0, 1, 2};
  wide.samples = {4, 3, 3};
  wide.forward_ms = 1.25;
  wide.backward_ms = 2.5;
  wide.comm_ms = 0.125;
  LayerPlacement narrow;
  narrow.layer = "fc";
  narrow.devices = {0};
  narrow.samples = {10};
  narrow.forward_ms = 3;
  narrow.backward_ms = 6;
  narrow.comm_ms = 0.5;
  plan.layers = {wide, narrow};
  plan.totals = PlanTotals{13.375, 0.0211, 1.688, 3};
  plan.data_parallel = PlanTotals{20.0, 0.08, 6.4, 4};
  return plan;
}

std::string ErrorOf(const nlohmann::json& doc) {
  auto plan = ParsePlanJson(doc.dump());
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == StatusCode::kInvalidArgument);
  return plan.status().message();
}

TEST_CASE("near-equal shares give the first B % g devices one more", "[plan]") {
  CHECK(NearEqualShares(10, 3) == std::vector<int64_t>{4, 3, 3});
  CHECK(NearEqualShares(8, 4) == std::vector<int64_t>{2, 2, 2, 2});
  CHECK(NearEqualShares(5, 1) == std::vector<int64_t>{5});
  CHECK(NearEqualShares(3, 4).empty());
  CHECK(NearEqualShares(3, 0).empty());
}

TEST_CASE("sample ranges follow the devices' order", "[plan]") {
  const Plan plan = TwoLayerPlan();
  const LayerPlacement& conv = *plan.Find("conv");
  CHECK(conv.SampleRange(0) == std::pair<int64_t, int64_t>{0, 4});
  CHECK(conv.SampleRange(1) == std::pair<int64_t, int64_t>{4, 7});
  CHECK(conv.SampleRange(2) == std::pair<int64_t, int64_t>{7, 10});
  CHECK(conv.SampleRange(3) == std::pair<int64_t, int64_t>{0, 0});
  CHECK(conv.Runs(2));
  CHECK_FALSE(conv.Runs(3));
  CHECK(plan.Find("missing") == nullptr);
}

// The shares of a one-layer plan with `shares` on devices 0..n-1, scaled to `batch`.
std::vector<int64_t> Scaled(std::vector<int64_t> shares, int64_t batch) {
  Plan plan;
  plan.num_devices = static_cast<int>(shares.size());
  plan.global_batch = 0;
  LayerPlacement placement;
  placement.layer = "layer";
  for (size_t i = 0; i < shares.size(); ++i) {
    placement.devices.push_back(static_cast<int>(i));
    plan.global_batch += shares[i];
  }
  placement.samples = std::move(shares);
  plan.layers = {placement};
  REQUIRE(plan.Validate().ok());
  const Plan scaled = ScalePlan(plan, batch);
  CHECK(scaled.global_batch == batch);
  CHECK(scaled.layers[0].devices == plan.layers[0].devices);
  return scaled.layers[0].samples;
}

TEST_CASE("a plan scaled to another batch keeps its devices and rounds by largest remainder",
          "[plan]") {
  // Exact multiples scale exactly; the same batch changes nothing.
  CHECK(Scaled({4, 3, 3}, 30) == std::vector<int64_t>{12, 9, 9});
  CHECK(Scaled({4, 3, 3}, 10) == std::vector<int64_t>{4, 3, 3});
  CHECK(Scaled({2, 14}, 16) == std::vector<int64_t>{2, 14});
  // 11 x {4,3,3}/10 = {4.4, 3.3, 3.3}: floors {4,3,3}, one left for the largest fraction.
  CHECK(Scaled({4, 3, 3}, 11) == std::vector<int64_t>{5, 3, 3});
  // 8 x {4,3,3}/10 = {3.2, 2.4, 2.4}: floors {3,2,2}, one left; the fractions tie, the earlier
  // device of the tie gets it.
  CHECK(Scaled({4, 3, 3}, 8) == std::vector<int64_t>{3, 3, 2});
  // 7 x {5,6,5}/16 = {2.1875, 2.625, 2.1875}: the largest fraction is the middle device's.
  CHECK(Scaled({5, 6, 5}, 7) == std::vector<int64_t>{2, 3, 2});
  // Fewer samples than devices, or a small share: devices with 0 samples.
  CHECK(Scaled({4, 3, 3}, 2) == std::vector<int64_t>{1, 1, 0});
  CHECK(Scaled({4, 3, 3}, 1) == std::vector<int64_t>{1, 0, 0});
  CHECK(Scaled({1, 15}, 4) == std::vector<int64_t>{0, 4});
  // Huge batches do not overflow share x batch.
  CHECK(Scaled({1, 2}, int64_t{3} << 61) ==
        std::vector<int64_t>{int64_t{1} << 61, int64_t{1} << 62});
}

TEST_CASE("a scaled plan keeps every layer and drops the predictions", "[plan]") {
  const Plan plan = TwoLayerPlan();
  const Plan scaled = ScalePlan(plan, 25);
  REQUIRE(scaled.layers.size() == 2);
  CHECK(scaled.layers[0].layer == "conv");
  CHECK(scaled.layers[0].samples == std::vector<int64_t>{10, 8, 7});  // {10, 7.5, 7.5}
  CHECK(scaled.layers[1].samples == std::vector<int64_t>{25});
  CHECK(scaled.layers[0].forward_ms == 0);
  CHECK(scaled.totals.iteration_ms == 0);
  CHECK(scaled.single_device_ms == 0);
  CHECK(scaled.num_devices == plan.num_devices);
  CHECK(scaled.model == plan.model);
  CHECK(scaled.Validate().ok());
}

TEST_CASE("plan JSON round trip keeps every field", "[plan]") {
  const Plan plan = TwoLayerPlan();
  REQUIRE(plan.Validate().ok());
  const std::string text = PlanToJson(plan);
  auto doc = nlohmann::json::parse(text);
  CHECK(doc["format"] == "deepool.plan");
  CHECK(doc["version"] == kPlanFormatVersion);
  auto parsed = ParsePlanJson(text);
  REQUIRE(parsed.ok());
  CHECK(parsed->model == plan.model);
  CHECK(parsed->global_batch == 10);
  CHECK(parsed->num_devices == 4);
  CHECK(parsed->amplification_limit == 2.0);
  CHECK(parsed->profile_source == plan.profile_source);
  CHECK(parsed->single_device_ms == 12.5);
  REQUIRE(parsed->layers.size() == 2);
  CHECK(parsed->layers[0].devices == plan.layers[0].devices);
  CHECK(parsed->layers[0].samples == plan.layers[0].samples);
  CHECK(parsed->layers[0].forward_ms == 1.25);
  CHECK(parsed->layers[0].backward_ms == 2.5);
  CHECK(parsed->layers[0].comm_ms == 0.125);
  CHECK(parsed->layers[1].layer == "fc");
  CHECK(parsed->totals.iteration_ms == plan.totals.iteration_ms);
  CHECK(parsed->totals.gpu_seconds == plan.totals.gpu_seconds);
  CHECK(parsed->totals.amplification == plan.totals.amplification);
  CHECK(parsed->totals.devices_used == 3);
  CHECK(parsed->data_parallel.iteration_ms == 20.0);
  CHECK(parsed->data_parallel.devices_used == 4);
  CHECK(PlanToJson(*parsed) == text);
  // No profile environment (an analytical profile): none written.
  CHECK_FALSE(doc.contains("profile_environment"));
}

TEST_CASE("a plan names what its measured profile was measured on", "[plan]") {
  Plan plan = TwoLayerPlan();
  plan.profile_environment.device_model = "Intel(R) Xeon(R) CPU @ 2.20GHz";
  plan.profile_environment.threads = 1;
  plan.profile_environment.torch = "2.12.1";
  plan.profile_environment.deepool = "e955cab1f2a3";
  const std::string text = PlanToJson(plan);
  CHECK(nlohmann::json::parse(text)["profile_environment"]["threads"] == 1);
  auto parsed = ParsePlanJson(text);
  REQUIRE(parsed.ok());
  CHECK(parsed->profile_environment == plan.profile_environment);
  auto bad = nlohmann::json::parse(text);
  bad["profile_environment"]["torch"] = 2;
  CHECK_THAT(ParsePlanJson(bad.dump()).status().message(),
             Catch::Contains("profile_environment.torch"));
}

TEST_CASE("plan parsing names the offending field", "[plan]") {
  const nlohmann::json good = nlohmann::json::parse(PlanToJson(TwoLayerPlan()));
  CHECK_THAT(ParsePlanJson("{not json").status().message(), Catch::Contains("not valid JSON"));
  auto doc = good;
  doc["format"] = "deepool.graph";
  CHECK_THAT(ErrorOf(doc), Catch::Contains("format"));
  doc = good;
  doc["version"] = 2;
  CHECK_THAT(ErrorOf(doc), Catch::Contains("version 2"));
  doc = good;
  doc.erase("global_batch");
  CHECK_THAT(ErrorOf(doc), Catch::Contains("missing field global_batch"));
  doc = good;
  doc["layers"][1]["samples"] = {9};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("layers[1] (fc): samples sum to 9"));
  doc = good;
  doc["layers"][0]["devices"] = {0, 1, 7};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("layers[0].devices: rank 7"));
  doc = good;
  doc["layers"][0]["devices"] = {0, 2, 1};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("ascending"));
  doc = good;
  doc["layers"][0]["samples"] = {5, 5};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("differ in length"));
  doc = good;
  doc["layers"][0]["samples"] = {"4", 3, 3};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("layers[0].samples[0] must be an integer"));
  doc = good;
  doc["layers"][1]["layer"] = "conv";
  CHECK_THAT(ErrorOf(doc), Catch::Contains("appears twice"));
  doc = good;
  doc["amplification_limit"] = 0.5;
  CHECK_THAT(ErrorOf(doc), Catch::Contains("amplification_limit"));
  doc = good;
  doc["totals"]["devices_used"] = 9;
  CHECK_THAT(ErrorOf(doc), Catch::Contains("totals.devices_used"));
  doc = good;
  doc["layers"][0]["samples"] = {10, 0, 0};
  CHECK_THAT(ErrorOf(doc), Catch::Contains("at least one sample"));
}

TEST_CASE("data-parallel layout and matching a plan to its graph", "[plan]") {
  Layer conv;
  conv.name = "conv";
  conv.op = Op::kConv2d;
  conv.inputs = {"input"};
  conv.attrs.out_channels = 4;
  Layer relu;
  relu.name = "relu";
  relu.op = Op::kRelu;
  relu.inputs = {"conv"};
  auto graph = Graph::Create("tiny", {3, 4, 4}, {conv, relu});
  REQUIRE(graph.ok());

  const Plan layout = DataParallelLayout(*graph, 6, 8);
  REQUIRE(CheckPlanMatchesGraph(layout, *graph).ok());
  CHECK(layout.num_devices == 8);
  for (const LayerPlacement& placement : layout.layers) {
    CHECK(placement.devices == std::vector<int>{0, 1, 2, 3, 4, 5});  // min(G, B) = 6
    CHECK(placement.samples == std::vector<int64_t>(6, 1));
  }
  const Plan four = DataParallelLayout(*graph, 10, 4);
  CHECK(four.layers[1].samples == std::vector<int64_t>{3, 3, 2, 2});

  Plan renamed = layout;
  renamed.layers[1].layer = "act";
  CHECK_THAT(CheckPlanMatchesGraph(renamed, *graph).message(), Catch::Contains("'act'"));
  Plan shorter = layout;
  shorter.layers.pop_back();
  CHECK_FALSE(CheckPlanMatchesGraph(shorter, *graph).ok());
}

// conv -> batch norm on a 1x1 map: a batch of 1 leaves one value per channel in training.
Graph OneByOneBatchNorm() {
  Layer conv;
  conv.name = "conv";
  conv.op = Op::kConv2d;
  conv.inputs = {"input"};
  conv.attrs.out_channels = 4;
  Layer bn;
  bn.name = "bn";
  bn.op = Op::kBatchNorm2d;
  bn.inputs = {"conv"};
  auto graph = Graph::Create("one_by_one", {3, 1, 1}, {conv, bn});
  REQUIRE(graph.ok());
  return *graph;
}

TEST_CASE("batch norm with one value per channel in training is refused by layer", "[plan]") {
  const Graph graph = OneByOneBatchNorm();
  const Status alone = CheckBatchNormTraining(graph, 1);
  CHECK(alone.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(alone.message(), Catch::Contains("'bn'") && Catch::Contains("single value"));
  // A hand-written plan is checked against its graph: one sample in all is refused.
  const Status plan_error = CheckPlanMatchesGraph(DataParallelLayout(graph, 1, 4), graph);
  CHECK(plan_error.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(plan_error.message(), Catch::Contains("'bn'"));
  // Synchronised over its device set, the layer sees the global batch: one sample per rank on
  // two ranks is fine, and so is one sample on a larger map.
  CHECK(CheckBatchNormTraining(graph, 2).ok());
  CHECK(CheckPlanMatchesGraph(DataParallelLayout(graph, 2, 2), graph).ok());
  Layer bn_on_input;
  bn_on_input.name = "bn0";
  bn_on_input.op = Op::kBatchNorm2d;
  bn_on_input.inputs = {"input"};
  auto wide = Graph::Create("two_by_one", {3, 2, 1}, {bn_on_input});
  REQUIRE(wide.ok());
  CHECK(CheckBatchNormTraining(*wide, 1).ok());
  auto narrow = Graph::Create("one_by_one_input", {3, 1, 1}, {bn_on_input});
  REQUIRE(narrow.ok());
  CHECK_THAT(CheckBatchNormTraining(*narrow, 1).message(), Catch::Contains("'bn0'"));
}

TEST_CASE("per-device batch norm needs two values per channel on every device", "[plan]") {
  const Graph graph = OneByOneBatchNorm();
  // Synchronised, one sample on each of two ranks is fine (above); per device it is not.
  const Status one_each = CheckPerDeviceBatchNormTraining(DataParallelLayout(graph, 2, 2), graph);
  CHECK(one_each.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(one_each.message(), Catch::Contains("'bn'") && Catch::Contains("1 sample"));
  // Uneven shares: the device with the fewest samples decides (3 samples on 2 ranks: 2 and 1).
  CHECK_FALSE(CheckPerDeviceBatchNormTraining(DataParallelLayout(graph, 3, 2), graph).ok());
  CHECK(CheckPerDeviceBatchNormTraining(DataParallelLayout(graph, 4, 2), graph).ok());
  CHECK(CheckPerDeviceBatchNormTraining(DataParallelLayout(graph, 2, 1), graph).ok());
}

TEST_CASE("the SVG draws one cell per layer and device it runs on", "[plan]") {
  Plan plan = TwoLayerPlan();
  plan.model = "toy<1>";
  const std::string svg = PlanToSvg(plan);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK_THAT(svg, Catch::Contains("toy&lt;1&gt;"));
  CHECK_THAT(svg, Catch::Contains("<title>conv: 3 devices"));
  CHECK_THAT(svg, Catch::Contains("<title>fc: 1 devices"));
  size_t cells = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) {
    ++cells;
  }
  CHECK(cells == 2 + 3 + 1);  // background, grid, conv on 3 devices, fc on 1
  // Beyond 128 devices rows stand for bands of ranks.
  plan.num_devices = 1024;
  plan.layers[0].devices = {0, 1, 2};
  CHECK_THAT(PlanToSvg(plan), Catch::Contains("8 per row"));
}

}  // namespace
}  // namespace deepool::planner
