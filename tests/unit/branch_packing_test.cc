// Concurrent branches (planner/branch_packing.h) and the cost model's list schedule under them
// (cost_model.h): blocks found in the zoo's graphs, the schedule agreeing with the serial sum
// where nothing can overlap, packed plans never slower and within the limit, and the simulator
// and the predicted timeline ending where the cost model says.
#include "planner/branch_packing.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/plan_trace.h"
#include "planner/search.h"
#include "planner/sim_engine.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

Graph Zoo(const std::string& name) {
  auto graph = zoo::BuildModel(name);
  REQUIRE(graph.ok());
  return *std::move(graph);
}

// One node, every link alike: shifting every range by a rank changes no re-split's cost.
Cluster UniformCluster(int devices) {
  Cluster cluster;
  cluster.name = "uniform";
  cluster.device_type = "a100";
  cluster.nodes = 1;
  cluster.devices_per_node = devices;
  cluster.intra_node = {100.0, 5.0};
  cluster.inter_node = {100.0, 5.0};
  return cluster;
}

// Inception-v3, B = 64 on 64 A100s, no limit: packing finds some towers side by side faster
// (docs/benchmarks.md, "Concurrent branches"; in most other settings it finds nothing).
constexpr int kPackedDevices = 64;
constexpr int64_t kPackedBatch = 64;

PlanOptions InceptionOptions() {
  PlanOptions options;
  options.global_batch = kPackedBatch;
  options.devices = kPackedDevices;
  options.amplification_limit = 0;
  options.concurrent_branches = true;
  return options;
}

Cluster InceptionCluster() {
  return ResizeCluster(ClusterPreset("dgx-a100").value(), kPackedDevices);
}

// A plan of Inception-v3 with some towers side by side.
Plan PackedInception(const Profile& profile) {
  const Graph graph = Zoo("inception_v3");
  const Cluster cluster = InceptionCluster();
  Plan plan = PlanBurstParallel(graph, profile, cluster, InceptionOptions()).value();
  REQUIRE(std::any_of(plan.layers.begin(), plan.layers.end(),
                      [](const LayerPlacement& layer) { return layer.devices.front() > 0; }));
  return plan;
}

TEST_CASE("branch blocks: Inception's towers and ResNet's downsampling shortcuts",
          "[branch_packing]") {
  const Graph inception = Zoo("inception_v3");
  const std::vector<BranchBlock> towers = FindBranchBlocks(inception);
  CHECK(towers.size() >= 10);
  for (const BranchBlock& block : towers) {
    CHECK(block.branches.size() >= 2);
    for (const std::vector<int>& branch : block.branches) {
      // A chain: each layer read once, by the next or, for the last, by the join.
      for (size_t i = 0; i < branch.size(); ++i) {
        const std::vector<int>& consumers = inception.consumers(branch[i]);
        REQUIRE(consumers.size() == 1);
        CHECK(consumers.front() == (i + 1 < branch.size() ? branch[i + 1] : block.join));
      }
      const std::vector<int>& first_inputs = inception.layer(branch.front()).input_ids;
      CHECK(first_inputs == std::vector<int>{block.fork});
    }
  }
  // ResNet-50: the four blocks with a downsampling shortcut (the identity shortcuts have no
  // layers, so those blocks have one branch).
  const std::vector<BranchBlock> residuals = FindBranchBlocks(Zoo("resnet50"));
  CHECK(residuals.size() == 4);
  for (const BranchBlock& block : residuals) CHECK(block.branches.size() == 2);
  CHECK(FindBranchBlocks(Zoo("vgg16")).empty());
}

TEST_CASE("the list schedule of ranges sharing a rank is the serial sum", "[branch_packing]") {
  // Every range moved up one rank still shares a rank with every other (the old rank 1), so
  // nothing can overlap: the list schedule must come to the serial sum exactly.
  std::mt19937 random(7);
  for (const char* name : {"resnet50", "inception_v3", "vgg16"}) {
    const Graph graph = Zoo(name);
    const auto a100 = MakeAnalyticalProfile(DevicePreset("a100").value());
    const Profile& profile = *a100;
    const Cluster cluster = UniformCluster(9);
    const CostModel model(graph, profile, cluster, 32);
    std::uniform_int_distribution<int> count(1, 8);
    for (int trial = 0; trial < 5; ++trial) {
      INFO(name << " trial " << trial);
      std::vector<int> counts;
      std::vector<DeviceRange> shifted;
      for (int id = 0; id < graph.num_layers(); ++id) {
        counts.push_back(count(random));
        shifted.emplace_back(1, counts.back());
      }
      const PlanTotals serial = model.Totals(counts, 9).value();
      const PlanTotals scheduled = model.Totals(shifted, 9).value();
      CHECK(scheduled.iteration_ms == Approx(serial.iteration_ms).epsilon(1e-9));
      CHECK(scheduled.gpu_seconds == Approx(serial.gpu_seconds).epsilon(1e-9));
      CHECK(scheduled.devices_used == serial.devices_used + 1);
    }
  }
}

TEST_CASE("two towers on disjoint ranks overlap, on the same rank they do not",
          "[branch_packing]") {
  const Graph graph = Zoo("inception_v3");
  const auto a100 = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Profile& profile = *a100;
  const Cluster cluster = UniformCluster(8);
  const CostModel model(graph, profile, cluster, 32);
  const BranchBlock block = FindBranchBlocks(graph).front();
  // Everything on ranks 0..3; then the block's second branch alone on ranks 4..7.
  std::vector<DeviceRange> ranges(static_cast<size_t>(graph.num_layers()), DeviceRange{0, 4});
  const PlanTotals together = model.Totals(ranges, 8).value();
  for (int id : block.branches[1]) ranges[static_cast<size_t>(id)] = DeviceRange{4, 4};
  const PlanTotals apart = model.Totals(ranges, 8).value();
  double branch_ms = 0;
  for (int id : block.branches[1]) branch_ms += model.CostOf(id, ranges).value().total_ms();
  // The moved branch's compute now hides behind the others; what is added is its re-splits in
  // and out, which its total_ms holds (a lower bound on the saving is its compute).
  double compute_ms = 0;
  for (int id : block.branches[1]) compute_ms += model.Compute(id, 4).value().total_ms();
  CHECK(apart.iteration_ms < together.iteration_ms);
  CHECK(apart.iteration_ms > together.iteration_ms - compute_ms);
  CHECK(apart.iteration_ms < together.iteration_ms - compute_ms + branch_ms);
  CHECK(apart.devices_used == 8);
  // A range below rank 0 or a count of 0 is refused, not scheduled.
  ranges.front() = DeviceRange{-1, 2};
  CHECK_FALSE(model.Schedule(ranges).ok());
  CHECK_FALSE(model.GradientSync(ranges).ok());
  ranges.front() = DeviceRange{0, 0};
  CHECK_FALSE(model.Schedule(ranges).ok());
  CHECK_FALSE(model.Totals(ranges, 8).ok());
}

TEST_CASE("packed plans are never slower, stay within the limit, and packing is asked for",
          "[branch_packing]") {
  const auto a100 = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Profile& profile = *a100;
  for (const char* name : {"inception_v3", "resnet50"}) {
    const Graph graph = Zoo(name);
    for (int devices : {8, 64}) {
      for (double limit : {1.3, 2.0, 0.0}) {
        INFO(name << " on " << devices << ", limit " << limit);
        const Cluster cluster = ResizeCluster(ClusterPreset("dgx-a100").value(), devices);
        PlanOptions options;
        options.global_batch = 32;
        options.devices = devices;
        options.amplification_limit = limit;
        options.concurrent_branches = false;
        const Plan serial = PlanBurstParallel(graph, profile, cluster, options).value();
        for (const LayerPlacement& layer : serial.layers) CHECK(layer.devices.front() == 0);
        options.concurrent_branches = true;
        const Plan packed = PlanBurstParallel(graph, profile, cluster, options).value();
        CHECK(packed.totals.iteration_ms <= serial.totals.iteration_ms * (1 + 1e-12));
        if (limit > 0) CHECK(packed.totals.amplification <= limit * (1 + 1e-9));
        CHECK(packed.totals.devices_used <= devices);
      }
    }
  }
  // Inception-v3 at G = 64: some towers run side by side, a little faster.
  const Plan packed = PackedInception(profile);
  const Graph inception = Zoo("inception_v3");
  PlanOptions options = InceptionOptions();
  options.concurrent_branches = false;
  const Plan serial = PlanBurstParallel(inception, profile, InceptionCluster(), options).value();
  CHECK(packed.totals.iteration_ms < serial.totals.iteration_ms * (1 - 1e-3));
}

TEST_CASE("a packed plan simulates and draws to the cost model's iteration time",
          "[branch_packing]") {
  const Graph graph = Zoo("inception_v3");
  const auto a100 = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Profile& profile = *a100;
  const Cluster cluster = InceptionCluster();
  const Plan plan = PackedInception(profile);
  const CostModel model(graph, profile, cluster, kPackedBatch);
  const FgTimeline timeline = BuildFgTimeline(plan, model).value();
  CHECK(timeline.iteration_ms() == Approx(plan.totals.iteration_ms).epsilon(1e-9));
  // The same with no BG job, through the engine's run.
  EngineOptions engine;
  engine.warmup_iterations = 1;
  engine.iterations = 2;
  const std::vector<const BgIteration*> no_bg(kPackedDevices, nullptr);
  const MultiplexResult run = SimulateMultiplexing(timeline, no_bg, engine).value();
  CHECK(run.fg_iteration_ms == Approx(plan.totals.iteration_ms).epsilon(1e-9));
  // Some steps really overlap: the serial sum of the steps is longer.
  double serial_ms = 0;
  for (const FgStep& step : timeline.steps) serial_ms += step.duration_ms;
  CHECK(serial_ms > plan.totals.iteration_ms * 1.01);
  // The predicted timeline ends there too, and no rank runs two spans at once.
  const Timeline drawn = PredictedTimeline(plan, model).value();
  double end_us = 0;
  std::vector<std::vector<std::pair<double, double>>> by_track(kPackedDevices);
  for (const TimelineSpan& span : drawn.spans) {
    end_us = std::max(end_us, span.start_us + span.duration_us);
    by_track[static_cast<size_t>(span.track)].emplace_back(span.start_us,
                                                           span.start_us + span.duration_us);
  }
  CHECK(end_us == Approx(plan.totals.iteration_ms * 1000.0).epsilon(1e-9));
  for (auto& spans : by_track) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      CHECK(spans[i].first >= spans[i - 1].second - 1e-6);
    }
  }
}

}  // namespace
}  // namespace deepool::planner
