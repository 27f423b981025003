#include "planner/profile_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "planner/device_model.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

using deepool::testing::MakeLayer;

using nlohmann::json;

// input [3,8,8] -> conv(3->4, 3x3, pad 1) -> relu -> maxpool 2 -> flatten -> fc(64->10)
Graph TinyGraph() { return deepool::testing::ConvPoolLinearGraph("tiny", {3, 8, 8}, 4); }

LayerProfileData LayerData(std::string name, std::vector<BatchTime> batches) {
  return LayerProfileData{std::move(name), "", std::move(batches)};
}

// Every layer of TinyGraph measured at batches 2, 4 and 8, time proportional to the batch.
ProfileData TinyData() {
  ProfileData data;
  data.device = "cpu";
  data.model = "tiny";
  double scale = 1;
  for (const char* name : {"conv", "relu", "pool", "flatten", "fc"}) {
    data.layers.push_back(LayerData(name, {{2, 0.2 * scale, 0.4 * scale},
                                           {4, 0.4 * scale, 0.8 * scale},
                                           {8, 0.8 * scale, 1.6 * scale}}));
    scale += 1;
  }
  return data;
}

std::unique_ptr<TableProfile> MakeTable(const ProfileData& data, const Graph& graph,
                                        ProfileOptions options = {}) {
  auto table = TableProfile::Create(data, graph, options, "test");
  REQUIRE(table.ok());
  return std::move(table).value();
}

TEST_CASE("profile JSON round trips") {
  ProfileData data = TinyData();
  data.layers[0].op = "conv2d";
  auto parsed = ParseProfileJson(ProfileToJson(data));
  REQUIRE(parsed.ok());
  CHECK(*parsed == data);
  json doc = json::parse(ProfileToJson(data));
  CHECK(doc["format"] == "deepool.profile");
  CHECK(doc["version"] == 1);
  CHECK(doc["layers"][0]["batches"][1]["batch"] == 4);
}

TEST_CASE("what a profile was measured on round trips, and old profiles without it still read") {
  ProfileData data = TinyData();
  data.environment.device_model = "NVIDIA H200";
  data.environment.driver = "550.54.15";
  data.environment.torch = "2.12.1";
  data.environment.cuda = "12.8";
  data.environment.nccl = "2.27.3";
  data.environment.deepool = "e955cab1f2a3";
  auto parsed = ParseProfileJson(ProfileToJson(data));
  REQUIRE(parsed.ok());
  CHECK(*parsed == data);
  CHECK(EnvironmentSummary(parsed->environment) ==
        "NVIDIA H200, driver 550.54.15, torch 2.12.1, CUDA 12.8, NCCL 2.27.3, deepool "
        "e955cab1f2a3");
  ProfileEnvironment cpu;
  cpu.device_model = "Intel(R) Xeon(R) CPU @ 2.20GHz";
  cpu.threads = 1;
  cpu.torch = "2.12.1";
  CHECK(EnvironmentSummary(cpu) == "Intel(R) Xeon(R) CPU @ 2.20GHz, 1 thread, torch 2.12.1");
  // A table passes it on; a profile without one (as every profile before it) has none.
  const Graph graph = TinyGraph();
  CHECK(MakeTable(data, graph)->environment()->torch == "2.12.1");
  json old = json::parse(ProfileToJson(TinyData()));
  CHECK_FALSE(old.contains("environment"));
  auto old_parsed = ParseProfileJson(old.dump());
  REQUIRE(old_parsed.ok());
  CHECK(old_parsed->environment.empty());
  CHECK(MakeTable(*old_parsed, graph)->environment() == nullptr);
  // Its fields are checked like the rest of the document.
  json bad = json::parse(ProfileToJson(data));
  bad["environment"]["gpu"] = "h200";
  CHECK_THAT(ParseProfileJson(bad.dump()).status().message(),
             Catch::Contains("unknown field environment.gpu"));
  bad = json::parse(ProfileToJson(data));
  bad["environment"]["threads"] = "one";
  CHECK_THAT(ParseProfileJson(bad.dump()).status().message(),
             Catch::Contains("environment.threads"));
}

TEST_CASE("the links a CPU profile measured round trip, and are checked as a cluster's") {
  ProfileData data = TinyData();
  Link link{2.5, 900};
  link.collective_bandwidth_gbps = 0.8;
  link.collective_latency_us = 1700;
  data.links = link;
  auto parsed = ParseProfileJson(ProfileToJson(data));
  REQUIRE(parsed.ok());
  CHECK(*parsed == data);
  json bad = json::parse(ProfileToJson(data));
  bad["links"]["latency_us"] = -1;
  CHECK_THAT(ParseProfileJson(bad.dump()).status().message(), Catch::Contains("links.latency_us"));
  CHECK_FALSE(ParseProfileJson(ProfileToJson(TinyData()))->links.has_value());
}

TEST_CASE("profile JSON writer sorts each layer's batches") {
  ProfileData data;
  data.device = "cpu";
  data.model = "m";
  data.layers.push_back(LayerData("a", {{8, 3, 3}, {1, 1, 1}, {4, 2, 2}}));
  json doc = json::parse(ProfileToJson(data));
  CHECK(doc["layers"][0]["batches"][0]["batch"] == 1);
  CHECK(doc["layers"][0]["batches"][2]["batch"] == 8);
}

TEST_CASE("profile JSON errors name the field") {
  const json valid = json::parse(ProfileToJson(TinyData()));
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"format", [](json& d) { d["format"] = "deepool.graph"; }, "format"},
      {"version", [](json& d) { d["version"] = 7; }, "version"},
      {"device", [](json& d) { d.erase("device"); }, "device"},
      {"model", [](json& d) { d["model"] = 1; }, "model"},
      {"layers", [](json& d) { d["layers"] = "x"; }, "layers"},
      {"name", [](json& d) { d["layers"][2].erase("name"); }, "layers[2].name"},
      {"dup name", [](json& d) { d["layers"][1]["name"] = "conv"; }, "layers[1].name"},
      {"batches", [](json& d) { d["layers"][0].erase("batches"); }, "layers[0].batches"},
      {"empty batches", [](json& d) { d["layers"][0]["batches"] = json::array(); },
       "layers[0].batches must not be empty"},
      {"batch zero", [](json& d) { d["layers"][3]["batches"][0]["batch"] = 0; },
       "layers[3].batches[0].batch"},
      {"batch repeats", [](json& d) { d["layers"][1]["batches"][2]["batch"] = 2; },
       "layers[1].batches[2].batch 2 repeats"},
      {"negative time", [](json& d) { d["layers"][4]["batches"][1]["forward_ms"] = -1; },
       "layers[4].batches[1].forward_ms"},
      {"missing time", [](json& d) { d["layers"][4]["batches"][1].erase("backward_ms"); },
       "layers[4].batches[1].backward_ms"},
      {"unknown field", [](json& d) { d["gpu"] = "a100"; }, "unknown field gpu"},
      {"unknown layer field", [](json& d) { d["layers"][2]["kind"] = "relu"; },
       "unknown field layers[2].kind"},
      {"unknown batch field", [](json& d) { d["layers"][0]["batches"][0]["forward_us"] = 3; },
       "unknown field layers[0].batches[0].forward_us"},
  };
  for (const Case& c : cases) {
    json doc = valid;
    c.edit(doc);
    auto parsed = ParseProfileJson(doc.dump());
    INFO(c.what);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(parsed.status().message(), Catch::Contains(c.expected));
  }
  CHECK_FALSE(ParseProfileJson("{").ok());
}

TEST_CASE("table profile is exact at measured batches and linear between them") {
  const Graph graph = TinyGraph();
  auto table = MakeTable(TinyData(), graph);
  const int fc = *graph.FindLayer("fc");
  auto at4 = table->Time(graph, fc, 4);
  REQUIRE(at4.ok());
  CHECK(at4->forward_ms == Approx(2.0));
  CHECK(at4->backward_ms == Approx(4.0));
  auto at6 = table->Time(graph, fc, 6);
  REQUIRE(at6.ok());
  CHECK(at6->forward_ms == Approx(3.0));
  auto at3 = table->Time(graph, fc, 3);
  REQUIRE(at3.ok());
  CHECK(at3->backward_ms == Approx(3.0));
  CHECK(table->source() == "test");
}

TEST_CASE("measurements are kept as measured, also where the time falls with the batch") {
  // Measured with deepool profile --threads 1 on this project's 2-core VM: ResNet-50's
  // layer4.0.conv1 at 32x32 images takes 6.6 + 27.0 ms at batch 8 and 2.0 + 4.6 ms at batch 16
  // (oneDNN picks another kernel), reproducibly. A non-decreasing fit would charge both batches
  // about 20 ms: too little for data parallelism at 8 per device, too much for one device.
  BatchCurve curve({{16, 2.0, 4.6}, {4, 3.0, 12.0}, {8, 6.6, 27.0}, {32, 4.1, 9.3}});
  const auto& points = curve.points();
  REQUIRE(points.size() == 4);
  CHECK(points[0].batch == 4);
  CHECK(points[1].forward_ms == 6.6);
  CHECK(points[2].backward_ms == 4.6);
  for (const BatchTime& point : points) {
    INFO("batch " << point.batch);
    CHECK(curve.At(point.batch).forward_ms == Approx(point.forward_ms));
    CHECK(curve.At(point.batch).backward_ms == Approx(point.backward_ms));
  }
  // Linear between neighbours.
  CHECK(curve.At(12).forward_ms == Approx(4.3));
  CHECK(curve.At(12).backward_ms == Approx(15.8));
}

TEST_CASE("random measurements: exact at each batch, between neighbours in between") {
  std::mt19937 random(12345);
  std::uniform_real_distribution<double> noise(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    // Up to 8 distinct batches in [1, 64] with noisy times (often non-monotone).
    std::vector<BatchTime> points;
    std::set<int64_t> batches;
    const int count = 1 + static_cast<int>(random() % 8);
    while (static_cast<int>(batches.size()) < count) batches.insert(1 + random() % 64);
    for (int64_t batch : batches) {
      points.push_back({batch, 0.1 * batch * (0.5 + noise(random)), 3.0 * noise(random)});
    }
    BatchCurve curve(points);
    INFO("trial " << trial);
    for (const BatchTime& point : points) {
      CHECK(curve.At(point.batch).forward_ms == Approx(point.forward_ms));
      CHECK(curve.At(point.batch).backward_ms == Approx(point.backward_ms));
    }
    const std::vector<BatchTime>& sorted = curve.points();
    for (size_t i = 0; i + 1 < sorted.size(); ++i) {
      for (int64_t batch = sorted[i].batch; batch <= sorted[i + 1].batch; ++batch) {
        const LayerTime time = curve.At(batch);
        CHECK(time.forward_ms >= std::min(sorted[i].forward_ms, sorted[i + 1].forward_ms) - 1e-12);
        CHECK(time.forward_ms <= std::max(sorted[i].forward_ms, sorted[i + 1].forward_ms) + 1e-12);
      }
    }
    for (int64_t batch = 1; batch <= 80; ++batch) {
      CHECK(curve.At(batch).forward_ms >= 0);
      CHECK(curve.At(batch).backward_ms >= 0);
    }
  }
}

TEST_CASE("an end segment that falls is not extended: the nearest measurement scales instead") {
  // 33.6 ms at batch 8, 6.6 ms at 16: a line through them would reach 0 before batch 32.
  BatchCurve curve({{8, 6.6, 27.0}, {16, 2.0, 4.6}});
  CHECK(curve.At(32).forward_ms == Approx(4.0));
  CHECK(curve.At(32).backward_ms == Approx(9.2));
  CHECK(curve.At(4).forward_ms == Approx(3.3));
  CHECK(curve.At(4).backward_ms == Approx(13.5));
  // Each series on its own: here forward rises, backward falls.
  BatchCurve mixed({{8, 1.0, 27.0}, {16, 2.0, 4.6}});
  CHECK(mixed.At(32).forward_ms == Approx(4.0));
  CHECK(mixed.At(32).backward_ms == Approx(9.2));
}

TEST_CASE("batches outside the measured range are refused unless extrapolation is asked for") {
  const Graph graph = TinyGraph();
  const int relu = *graph.FindLayer("relu");
  auto table = MakeTable(TinyData(), graph);
  auto above = table->Time(graph, relu, 9);
  REQUIRE_FALSE(above.ok());
  CHECK(above.status().code() == StatusCode::kOutOfRange);
  CHECK_THAT(above.status().message(), Catch::Contains("relu"));
  CHECK_THAT(above.status().message(), Catch::Contains("[2, 8]"));
  auto below = table->Time(graph, relu, 1);
  REQUIRE_FALSE(below.ok());
  CHECK(below.status().code() == StatusCode::kOutOfRange);
  CHECK(table->Time(graph, relu, 8).ok());
  CHECK(table->Time(graph, relu, 2).ok());

  ProfileOptions options;
  options.allow_extrapolation = true;
  auto extrapolating = MakeTable(TinyData(), graph, options);
  // relu: 0.4, 0.8, 1.6 ms forward at 2, 4, 8: slope 0.2 per sample from the last two points.
  auto at16 = extrapolating->Time(graph, relu, 16);
  REQUIRE(at16.ok());
  CHECK(at16->forward_ms == Approx(3.2));
  auto at1 = extrapolating->Time(graph, relu, 1);
  REQUIRE(at1.ok());
  CHECK(at1->forward_ms == Approx(0.2));
}

TEST_CASE("extrapolation never goes below zero") {
  // Steep first segment: a straight line through (10, 1) and (11, 10) is negative at batch 1.
  BatchCurve curve({{10, 1.0, 1.0}, {11, 10.0, 10.0}});
  LayerTime time = curve.At(1);
  CHECK(time.forward_ms == 0.0);
  CHECK(time.backward_ms == 0.0);
  CHECK(curve.At(12).forward_ms == Approx(19.0));
}

TEST_CASE("a single measured batch scales proportionally") {
  BatchCurve curve({{4, 2.0, 4.0}});
  CHECK(curve.At(4).forward_ms == Approx(2.0));
  CHECK(curve.At(8).backward_ms == Approx(8.0));
  CHECK(curve.At(1).forward_ms == Approx(0.5));
}

TEST_CASE("missing layers are NOT_FOUND and every one is named") {
  const Graph graph = TinyGraph();
  ProfileData data = TinyData();
  data.layers.erase(data.layers.begin() + 3);  // flatten
  data.layers.erase(data.layers.begin() + 1);  // relu
  auto table = TableProfile::Create(data, graph, {}, "test");
  REQUIRE_FALSE(table.ok());
  CHECK(table.status().code() == StatusCode::kNotFound);
  CHECK_THAT(table.status().message(), Catch::Contains("2 of 5 layers"));
  CHECK_THAT(table.status().message(), Catch::Contains("relu, flatten"));
}

TEST_CASE("a profile whose layer op differs from the graph's is refused") {
  const Graph graph = TinyGraph();
  ProfileData data = TinyData();
  data.layers[1].op = "conv2d";  // "relu" in the graph
  auto table = TableProfile::Create(data, graph, {}, "test");
  REQUIRE_FALSE(table.ok());
  CHECK(table.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(table.status().message(), Catch::Contains("layer relu is conv2d in the profile"));
  data.layers[1].op = "relu";
  CHECK(TableProfile::Create(data, graph, {}, "test").ok());
}

TEST_CASE("a fallback profile times exactly the missing layers and is recorded") {
  const Graph graph = TinyGraph();
  ProfileData data = TinyData();
  data.layers.erase(data.layers.begin() + 1);  // relu
  auto fallback = MakeAnalyticalProfile(*DevicePreset("cpu"));
  ProfileOptions options;
  options.fallback = fallback.get();
  auto table = MakeTable(data, graph, options);
  CHECK(table->fallback_layers() == std::vector<std::string>{"relu"});
  CHECK_THAT(table->source(), Catch::Contains("analytical:cpu"));

  const int relu = *graph.FindLayer("relu");
  auto from_table = table->Time(graph, relu, 3);
  auto from_fallback = fallback->Time(graph, relu, 3);
  REQUIRE(from_table.ok());
  REQUIRE(from_fallback.ok());
  CHECK(from_table->forward_ms == from_fallback->forward_ms);
  CHECK(from_table->backward_ms == from_fallback->backward_ms);
  // Measured layers still come from the table, and still refuse to extrapolate.
  CHECK(table->Time(graph, *graph.FindLayer("conv"), 4)->forward_ms == Approx(0.4));
  CHECK(table->Time(graph, *graph.FindLayer("conv"), 16).status().code() ==
        StatusCode::kOutOfRange);
}

TEST_CASE("bad layer ids and batches are errors") {
  const Graph graph = TinyGraph();
  auto table = MakeTable(TinyData(), graph);
  CHECK(table->Time(graph, 99, 4).status().code() == StatusCode::kInvalidArgument);
  CHECK(table->Time(graph, -1, 4).status().code() == StatusCode::kInvalidArgument);
  auto zero = table->Time(graph, 0, 0);
  CHECK(zero.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(zero.status().message(), Catch::Contains("conv"));
}

TEST_CASE("ParseProfile reads profile JSON") {
  const Graph graph = TinyGraph();
  auto profile = ParseProfile("\n  " + ProfileToJson(TinyData()), graph, {});
  REQUIRE(profile.ok());
  CHECK((*profile)->source() == "profile:cpu/tiny");
  auto time = (*profile)->Time(graph, *graph.FindLayer("pool"), 4);
  REQUIRE(time.ok());
  CHECK(time->forward_ms == Approx(1.2));

  auto bad = ParseProfile("{\"format\": \"deepool.profile\"}", graph, {});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
TEST_CASE("the iteration overhead round trips, interpolates and stays flat beyond its batches") {
  const Graph graph = TinyGraph();
  ProfileData data = TinyData();
  CHECK(MakeTable(data, graph)->IterationOverheadMs(4) == 0);  // none measured
  CHECK(json::parse(ProfileToJson(data)).count("iteration_overhead") == 0);
  data.iteration_overhead = {{8, 3.0}, {2, 1.0}};
  auto parsed = ParseProfileJson(ProfileToJson(data));
  REQUIRE(parsed.ok());
  CHECK(parsed->iteration_overhead == std::vector<OverheadPoint>{{2, 1.0}, {8, 3.0}});
  auto table = MakeTable(*parsed, graph);
  CHECK(table->IterationOverheadMs(2) == Approx(1.0));
  CHECK(table->IterationOverheadMs(5) == Approx(2.0));
  CHECK(table->IterationOverheadMs(1) == Approx(1.0));   // the nearest measurement's value,
  CHECK(table->IterationOverheadMs(64) == Approx(3.0));  // not a proportional extension
}

TEST_CASE("a malformed iteration overhead is refused naming the entry") {
  json doc = json::parse(ProfileToJson(TinyData()));
  auto error_of = [&](json overhead) {
    doc["iteration_overhead"] = std::move(overhead);
    auto parsed = ParseProfileJson(doc.dump());
    REQUIRE_FALSE(parsed.ok());
    return parsed.status().message();
  };
  CHECK_THAT(error_of(json::array({{{"batch", 2}, {"ms", -1.0}}})),
             Catch::Contains("iteration_overhead[0].ms"));
  CHECK_THAT(error_of(json::array({{{"batch", 2}, {"ms", 1.0}}, {{"batch", 2}, {"ms", 2.0}}})),
             Catch::Contains("iteration_overhead[1].batch 2 repeats"));
  CHECK_THAT(error_of(json::array({{{"batch", 0}, {"ms", 1.0}}})),
             Catch::Contains("iteration_overhead[0].batch must be >= 1"));
  CHECK_THAT(error_of(json::array({{{"batch", 2}, {"ms", 1.0}, {"seconds", 1}}})),
             Catch::Contains("seconds"));
  CHECK_THAT(error_of(json::object()), Catch::Contains("iteration_overhead"));
}

}  // namespace deepool::planner
