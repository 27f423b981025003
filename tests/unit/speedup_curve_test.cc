// Speed-up curves (planner/speedup_curve.h) and their cache (planner/speedup_curve_cache.h).
#include "planner/speedup_curve.h"

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "planner/device_model.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "planner/speedup_curve_cache.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

struct Inputs {
  std::shared_ptr<Profile> profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  Cluster node = ClusterPreset("dgx-a100").value();
};

PlanOptions Options(int64_t batch, double limit) {
  PlanOptions options;
  options.global_batch = batch;
  options.amplification_limit = limit;
  return options;
}

// Every point of the curve is the plan PlanBurstParallel makes on its own, to the byte.
void CheckCurveEqualsPlans(const Graph& graph, const Inputs& in, const PlanOptions& options,
                           const std::vector<int>& counts) {
  const SpeedupCurve curve = PlanSpeedupCurve(graph, *in.profile, in.node, options, counts).value();
  REQUIRE(curve.points.size() == counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    PlanOptions alone = options;
    alone.devices = counts[i];
    const Plan plan =
        PlanBurstParallel(graph, *in.profile, ResizeCluster(in.node, counts[i]), alone).value();
    INFO(graph.name() << " G=" << counts[i] << " B=" << options.global_batch
                      << " limit=" << options.amplification_limit);
    CHECK(curve.points[i].devices == counts[i]);
    CHECK(PlanToJson(curve.points[i].plan) == PlanToJson(plan));
    CHECK(curve.points[i].speedup() == Approx(plan.single_device_ms / plan.totals.iteration_ms));
  }
}

TEST_CASE("A speed-up curve's points are the plans made one by one on every zoo model") {
  const Inputs in;
  for (const std::string& name : zoo::ModelNames()) {
    const Graph graph = zoo::BuildModel(name).value();
    for (const double limit : {0.0, 1.5, 2.0}) {
      CheckCurveEqualsPlans(graph, in, Options(32, limit), DeviceCountsUpTo(8));
    }
  }
}

TEST_CASE("A speed-up curve across nodes and with exhaustive counts equals the plans") {
  const Inputs in;
  const Graph resnet = zoo::BuildModel("resnet50").value();
  CheckCurveEqualsPlans(resnet, in, Options(64, 2.0), {1, 3, 8, 12, 16, 24});
  PlanOptions exhaustive = Options(24, 1.7);
  exhaustive.exhaustive_counts = true;
  CheckCurveEqualsPlans(zoo::BuildModel("small_cnn").value(), in, exhaustive, {2, 5, 12});
  PlanOptions per_device = Options(48, 2.0);
  per_device.sync_batch_norm = false;
  per_device.concurrent_branches = true;
  CheckCurveEqualsPlans(zoo::BuildModel("inception_v3").value(), in, per_device, {1, 4, 8});
}

TEST_CASE("Clusters cost alike by their links and node shape over the devices used") {
  const Cluster node = ClusterPreset("dgx-a100").value();
  CHECK(CostsAlike(ResizeCluster(node, 3), ResizeCluster(node, 8), 3));
  CHECK(CostsAlike(ResizeCluster(node, 16), ResizeCluster(node, 32), 16));
  CHECK(CostsAlike(ResizeCluster(node, 5), ResizeCluster(node, 32), 5));
  Cluster small_nodes = node;
  small_nodes.devices_per_node = 4;
  CHECK_FALSE(CostsAlike(ResizeCluster(node, 8), ResizeCluster(small_nodes, 8), 8));
  CHECK(CostsAlike(ResizeCluster(node, 4), ResizeCluster(small_nodes, 8), 4));
  Cluster slower = node;
  slower.intra_node.latency_us += 1;
  CHECK_FALSE(CostsAlike(ResizeCluster(node, 2), ResizeCluster(slower, 8), 2));
}

TEST_CASE("A speed-up curve refuses bad device counts and names the count a plan failed at") {
  const Inputs in;
  const Graph graph = zoo::BuildModel("mlp").value();
  CHECK(PlanSpeedupCurve(graph, *in.profile, in.node, Options(32, 2), {}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(PlanSpeedupCurve(graph, *in.profile, in.node, Options(32, 2), {2, 2}).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(PlanSpeedupCurve(graph, *in.profile, in.node, Options(32, 2), {0, 1}).status().code() ==
        StatusCode::kInvalidArgument);
  const Status bad_limit =
      PlanSpeedupCurve(graph, *in.profile, in.node, Options(32, 0.5), {1, 2}).status();
  CHECK(bad_limit.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad_limit.message(), Catch::Contains("on 1 devices"));
}

TEST_CASE("Planning on shared models refuses models built for other options") {
  const Inputs in;
  const Graph graph = zoo::BuildModel("mlp").value();
  const Cluster cluster = ResizeCluster(in.node, 8);
  const PlanningModels models(graph, *in.profile, cluster, Options(32, 2));
  PlanOptions at = Options(32, 2);
  at.devices = 4;
  CHECK(PlanBurstParallelWith(models, at).ok());
  PlanOptions other_batch = at;
  other_batch.global_batch = 64;
  CHECK(PlanBurstParallelWith(models, other_batch).status().code() == StatusCode::kInvalidArgument);
  PlanOptions other_sync = at;
  other_sync.gradient_sync.bucket_bytes = 0;
  CHECK(PlanBurstParallelWith(models, other_sync).status().code() == StatusCode::kInvalidArgument);
  PlanOptions other_batch_norm = at;
  other_batch_norm.sync_batch_norm = false;
  CHECK(PlanBurstParallelWith(models, other_batch_norm).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("The curve cache hits on the same inputs and plans again on others") {
  const Inputs in;
  const Graph graph = zoo::BuildModel("vgg16").value();
  SpeedupCurveCache cache(4);
  const auto first =
      cache.GetOrPlan(graph, *in.profile, in.node, Options(32, 2), DeviceCountsUpTo(4)).value();
  const auto again = cache
                         .GetOrPlan(graph, SpeedupCurveGraphKey(graph), *in.profile, in.node,
                                    Options(32, 2), DeviceCountsUpTo(4))
                         .value();
  CHECK(first.get() == again.get());
  const auto other =
      cache.GetOrPlan(graph, *in.profile, in.node, Options(64, 2), DeviceCountsUpTo(4)).value();
  CHECK(other.get() != first.get());
  CHECK(other->points.back().plan.global_batch == 64);
  const SpeedupCurveCache::Stats stats = cache.stats();
  CHECK(stats.hits == 1);
  CHECK(stats.misses == 2);
  CHECK(stats.size == 2);
  // Errors are not cached.
  CHECK_FALSE(cache.GetOrPlan(graph, *in.profile, in.node, Options(32, 0.5), {1}).ok());
  CHECK(cache.stats().size == 2);
}

TEST_CASE("The curve cache evicts the least recently used curve beyond its capacity") {
  SpeedupCurveCache cache(2);
  auto curve = [](int devices) {
    auto made = std::make_shared<SpeedupCurve>();
    made->points.push_back(SpeedupPoint{devices, {}});
    return std::shared_ptr<const SpeedupCurve>(made);
  };
  cache.Insert("a", curve(1));
  cache.Insert("b", curve(2));
  REQUIRE(cache.Find("a") != nullptr);  // now "b" is the least recently used
  cache.Insert("c", curve(3));
  CHECK(cache.Find("b") == nullptr);
  CHECK(cache.Find("a") != nullptr);
  CHECK(cache.Find("c")->points[0].devices == 3);
  cache.Insert("c", curve(4));  // replaces, evicts nothing
  CHECK(cache.Find("c")->points[0].devices == 4);
  CHECK(cache.Find("a") != nullptr);
  const SpeedupCurveCache::Stats stats = cache.stats();
  CHECK(stats.evictions == 1);
  CHECK(stats.size == 2);
  SpeedupCurveCache at_least_one(0);
  at_least_one.Insert("x", curve(1));
  CHECK(at_least_one.Find("x") != nullptr);
}

TEST_CASE("The curve key changes with every input a curve depends on") {
  const Inputs in;
  const Graph graph = zoo::BuildModel("mlp").value();
  const PlanOptions base = Options(32, 2);
  const std::vector<int> counts = DeviceCountsUpTo(4);
  const std::string key = SpeedupCurveKey(graph, *in.profile, in.node, base, counts);
  CHECK(key == SpeedupCurveKey(graph, *in.profile, in.node, base, counts));
  PlanOptions other_devices = base;
  other_devices.devices = 99;  // ignored by curves
  CHECK(key == SpeedupCurveKey(graph, *in.profile, in.node, other_devices, counts));

  const std::vector<std::function<void(PlanOptions&)>> changes = {
      [](PlanOptions& o) { o.global_batch = 64; },
      [](PlanOptions& o) { o.amplification_limit = 2.0000001; },
      [](PlanOptions& o) { o.exhaustive_counts = true; },
      [](PlanOptions& o) { o.fuse_elementwise = false; },
      [](PlanOptions& o) { o.granularity = SearchGranularity::kLayers; },
      [](PlanOptions& o) { o.granularity = SearchGranularity::kBlocks; },
      [](PlanOptions& o) { o.pareto_tolerance = 0; },
      [](PlanOptions& o) { o.gradient_sync.bucket_bytes += 1; },
      [](PlanOptions& o) { o.gradient_sync.overlap = false; },
      [](PlanOptions& o) { o.gradient_sync.tree = false; },
      [](PlanOptions& o) { o.gradient_sync.precision = Precision::kBf16; },
      [](PlanOptions& o) { o.concurrent_branches = true; },
      [](PlanOptions& o) { o.sync_batch_norm = false; },
      [](PlanOptions& o) { o.precision = Precision::kTf32; },
      [](PlanOptions& o) { o.device_memory_bytes = int64_t{40} << 30; },
      [](PlanOptions& o) { o.optimizer_memory = OptimizerMemory::kAdam; },
  };
  std::set<std::string> keys{key};
  for (const auto& change : changes) {
    PlanOptions changed = base;
    change(changed);
    keys.insert(SpeedupCurveKey(graph, *in.profile, in.node, changed, counts));
  }
  CHECK(keys.size() == changes.size() + 1);

  const Graph other_graph = zoo::BuildModel("small_cnn").value();
  CHECK(key != SpeedupCurveKey(other_graph, *in.profile, in.node, base, counts));
  const auto h100 = MakeAnalyticalProfile(DevicePreset("h100").value());
  CHECK(key != SpeedupCurveKey(graph, *h100, in.node, base, counts));
  Cluster h100_node = in.node;
  h100_node.device_type = "h100";
  CHECK(key != SpeedupCurveKey(graph, *in.profile, h100_node, base, counts));
  Cluster slower = in.node;
  slower.inter_node.bandwidth_gbps /= 2;
  CHECK(key != SpeedupCurveKey(graph, *in.profile, slower, base, counts));
  Cluster calibrated = in.node;
  calibrated.intra_node.collective_latency_us = 3;
  CHECK(key != SpeedupCurveKey(graph, *in.profile, calibrated, base, counts));
  Cluster small_nodes = in.node;
  small_nodes.devices_per_node = 4;
  CHECK(key != SpeedupCurveKey(graph, *in.profile, small_nodes, base, counts));
  CHECK(key != SpeedupCurveKey(graph, *in.profile, in.node, base, {1, 2, 4}));
  CHECK(key == SpeedupCurveKey(SpeedupCurveGraphKey(graph), *in.profile, in.node, base, counts));
  // The same graph built again, and one whose last layer differs in its width only.
  CHECK(SpeedupCurveGraphKey(zoo::BuildModel("mlp").value()) == SpeedupCurveGraphKey(graph));
  zoo::ModelOptions ten_classes;
  ten_classes.num_classes = 10;
  CHECK(SpeedupCurveGraphKey(zoo::BuildModel("mlp", ten_classes).value()) !=
        SpeedupCurveGraphKey(graph));
}

TEST_CASE("The curve cache serves several threads at once") {
  const Inputs in;
  const Graph graph = zoo::BuildModel("mlp").value();
  SpeedupCurveCache cache(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const int64_t batch = (i + t) % 3 == 0 ? 32 : 64;
        const auto curve =
            cache.GetOrPlan(graph, *in.profile, in.node, Options(batch, 2), {1, 2}).value();
        if (curve->points.back().plan.global_batch != batch) std::abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const SpeedupCurveCache::Stats stats = cache.stats();
  CHECK(stats.hits + stats.misses == 80);
  CHECK(stats.size <= 2);
}

}  // namespace
}  // namespace deepool::planner
