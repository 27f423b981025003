// Simulator tests: the discrete-event engine on timelines computable by hand, the FG timeline of
// a plan, and the configurations of SimulateCluster (DP and BP equal the plan's predictions,
// static partitions, BP+BG on a two-layer chain whose idle time is known exactly).
#include "planner/simulator.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/search.h"
#include "planner/sim_engine.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

// Per layer: forward and backward time = per_sample x batch + fixed.
struct FakeLayerCost {
  double per_sample_ms = 0;
  double fixed_ms = 0;
};

class FakeProfile : public Profile {
 public:
  explicit FakeProfile(std::map<std::string, FakeLayerCost> costs) : costs_(std::move(costs)) {}
  std::string source() const override { return "fake"; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    auto it = costs_.find(graph.layer(layer_id).name);
    if (it == costs_.end()) return NotFoundError("no time for " + graph.layer(layer_id).name);
    const double ms = it->second.per_sample_ms * static_cast<double>(batch) + it->second.fixed_ms;
    return LayerTime{ms, ms};
  }

 private:
  std::map<std::string, FakeLayerCost> costs_;
};

// input[4] -> l1 (linear 4->8) -> l2 (linear 8->2).
Graph TwoLayerChain() {
  Layer l1;
  l1.name = "l1";
  l1.op = Op::kLinear;
  l1.inputs = {"input"};
  l1.attrs.out_features = 8;
  Layer l2;
  l2.name = "l2";
  l2.op = Op::kLinear;
  l2.inputs = {"l1"};
  l2.attrs.out_features = 2;
  StatusOr<Graph> graph = Graph::Create("chain", {4}, {l1, l2});
  REQUIRE(graph.ok());
  return *graph;
}

Cluster TestCluster(int devices, double bandwidth_gbps, double latency_us) {
  Cluster cluster;
  cluster.name = "test";
  cluster.device_type = "cpu";
  cluster.nodes = 1;
  cluster.devices_per_node = devices;
  cluster.intra_node = {bandwidth_gbps, latency_us};
  cluster.inter_node = {bandwidth_gbps, latency_us};
  return cluster;
}

// Two devices: A on both (2 ms forward, 2 ms backward), B on device 0 only (4 + 4 ms), so
// device 1 is idle for one contiguous 8 ms gap in every 12 ms iteration.
FgTimeline GapTimeline() {
  FgTimeline timeline;
  timeline.num_devices = 2;
  timeline.global_batch = 4;
  timeline.steps = {{"A fw", {0, 1}, 2.0, {}},
                    {"B fw", {0}, 4.0, {0}},
                    {"B bw", {0}, 4.0, {1}},
                    {"A bw", {0, 1}, 2.0, {2}}};
  return timeline;
}

BgIteration UniformBg(int kernels, double kernel_ms, int64_t batch) {
  BgIteration bg;
  bg.model = "bg";
  bg.batch = batch;
  for (int i = 0; i < kernels; ++i) bg.kernels.push_back({"k" + std::to_string(i), kernel_ms});
  return bg;
}

EngineOptions Options(BgPolicy policy, int warmup = 1, int iterations = 4) {
  EngineOptions options;
  options.warmup_iterations = warmup;
  options.iterations = iterations;
  options.interference.policy = policy;
  return options;
}

TEST_CASE("Engine without BG reproduces the timeline", "[simulator]") {
  const FgTimeline timeline = GapTimeline();
  StatusOr<MultiplexResult> result =
      SimulateMultiplexing(timeline, {nullptr, nullptr}, Options(BgPolicy::kGreedy));
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(12.0));
  CHECK(result->fg_samples_per_s == Approx(4 * 1000.0 / 12.0));
  CHECK(result->bg_samples_per_s == 0);
  CHECK(result->fg_delay_ms == Approx(0).margin(1e-9));
  REQUIRE(result->devices.size() == 2);
  CHECK(result->devices[0].fg_busy_ms == Approx(12.0));
  CHECK(result->devices[1].fg_busy_ms == Approx(4.0));
  CHECK(result->devices[1].idle_ms == Approx(8.0));
  CHECK(timeline.BusyMs(1) == Approx(4.0));
}

TEST_CASE("BG kernels that divide the gap fill it exactly and never delay FG", "[simulator]") {
  // 1 ms kernels, 4 per BG iteration of 8 samples: the 8 ms gap holds exactly 2 BG iterations.
  const BgIteration bg = UniformBg(4, 1.0, 8);
  for (BgPolicy policy : {BgPolicy::kGreedy, BgPolicy::kFitGaps}) {
    INFO(BgPolicyName(policy));
    StatusOr<MultiplexResult> result =
        SimulateMultiplexing(GapTimeline(), {nullptr, &bg}, Options(policy));
    REQUIRE(result.ok());
    CHECK(result->fg_iteration_ms == Approx(12.0));
    CHECK(result->devices[1].bg_busy_ms == Approx(8.0));
    CHECK(result->devices[1].idle_ms == Approx(0).margin(1e-9));
    CHECK(result->devices[1].bg_samples_per_s == Approx(2 * 8 * 1000.0 / 12.0));
    CHECK(result->bg_samples_per_s == Approx(2 * 8 * 1000.0 / 12.0));
    CHECK(result->devices[0].bg_busy_ms == 0);
  }
}

TEST_CASE("Greedy BG: a started kernel delays the gang step by its remaining time", "[simulator]") {
  // 3 ms kernels in the 8 ms gap [2, 10): they start at 2, 5 and 8; the third ends at 11, so
  // "A bw" (on both devices) starts 1 ms late and every iteration takes 13 ms, with 9 ms of BG.
  const BgIteration bg = UniformBg(1, 3.0, 1);
  StatusOr<MultiplexResult> result =
      SimulateMultiplexing(GapTimeline(), {nullptr, &bg}, Options(BgPolicy::kGreedy));
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(13.0));
  CHECK(result->fg_delay_ms == Approx(1.0));
  CHECK(result->window_ms == Approx(4 * 13.0));
  CHECK(result->devices[1].bg_busy_ms == Approx(9.0));
  CHECK(result->devices[1].bg_samples_per_s == Approx(3 * 1000.0 / 13.0));
  // Device 0 waits for device 1's kernel: it is idle 1 ms per iteration.
  CHECK(result->devices[0].idle_ms == Approx(1.0));
}

TEST_CASE("Fit-gaps BG starts only kernels that end before the next FG step", "[simulator]") {
  // Two 3 ms kernels fit the 8 ms gap, a third would not: FG keeps 12 ms, BG gets 6 ms.
  const BgIteration bg = UniformBg(1, 3.0, 1);
  StatusOr<MultiplexResult> result =
      SimulateMultiplexing(GapTimeline(), {nullptr, &bg}, Options(BgPolicy::kFitGaps));
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(12.0));
  CHECK(result->devices[1].bg_busy_ms == Approx(6.0));
  CHECK(result->devices[1].idle_ms == Approx(2.0));
  CHECK(result->bg_samples_per_s == Approx(2 * 1000.0 / 12.0));
}

TEST_CASE("BG kernels carry over between FG iterations", "[simulator]") {
  // 5 kernels of 2 ms (10 ms per BG iteration) in an 8 ms gap: 4 kernels per FG iteration, so
  // 0.4 BG iterations every 12 ms whatever the phase of the BG iteration.
  const BgIteration bg = UniformBg(5, 2.0, 10);
  StatusOr<MultiplexResult> result =
      SimulateMultiplexing(GapTimeline(), {nullptr, &bg}, Options(BgPolicy::kGreedy, 0, 5));
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(12.0));
  CHECK(result->devices[1].bg_samples_per_s == Approx(0.8 * 10 * 1000.0 / 12.0));
}

TEST_CASE("FG slowdown stretches only steps on devices that host BG", "[simulator]") {
  // BG on device 1 only: "A fw" and "A bw" (on both devices) take 1.5x, "B" (device 0) does not.
  const BgIteration bg = UniformBg(1, 1.0, 1);
  EngineOptions options = Options(BgPolicy::kFitGaps);
  options.interference.fg_slowdown = 1.5;
  StatusOr<MultiplexResult> result = SimulateMultiplexing(GapTimeline(), {nullptr, &bg}, options);
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(3 + 4 + 4 + 3));
  CHECK(result->devices[1].bg_busy_ms == Approx(8.0));

  StatusOr<MultiplexResult> none = SimulateMultiplexing(GapTimeline(), {nullptr, nullptr}, options);
  REQUIRE(none.ok());
  CHECK(none->fg_iteration_ms == Approx(12.0));
}

TEST_CASE("Engine refuses malformed input", "[simulator]") {
  const FgTimeline timeline = GapTimeline();
  CHECK_FALSE(SimulateMultiplexing(timeline, {nullptr}, Options(BgPolicy::kGreedy)).ok());
  EngineOptions slow = Options(BgPolicy::kGreedy);
  slow.interference.fg_slowdown = 0.5;
  CHECK_FALSE(SimulateMultiplexing(timeline, {nullptr, nullptr}, slow).ok());
  CHECK_FALSE(
      SimulateMultiplexing(timeline, {nullptr, nullptr}, Options(BgPolicy::kGreedy, 0, 0)).ok());
  FgTimeline bad = timeline;
  bad.steps[1].devices = {2};
  CHECK_FALSE(SimulateMultiplexing(bad, {nullptr, nullptr}, Options(BgPolicy::kGreedy)).ok());
  BgIteration stuck = UniformBg(2, 1.0, 1);
  stuck.kernels[1].duration_ms = 0;
  CHECK_FALSE(SimulateMultiplexing(timeline, {nullptr, &stuck}, Options(BgPolicy::kGreedy)).ok());
  FgTimeline negative = timeline;
  negative.steps[0].duration_ms = -1;
  CHECK_FALSE(SimulateMultiplexing(negative, {nullptr, nullptr}, Options(BgPolicy::kGreedy)).ok());
  FgTimeline empty = timeline;
  empty.steps.clear();
  CHECK_FALSE(SimulateMultiplexing(empty, {nullptr, nullptr}, Options(BgPolicy::kGreedy)).ok());
}

TEST_CASE("BG iteration: forward in order, backward in reverse, split into pieces", "[simulator]") {
  const Graph graph = TwoLayerChain();
  const FakeProfile profile({{"l1", {1.0, 0.0}}, {"l2", {0.0, 3.0}}});
  StatusOr<BgIteration> whole = BuildBgIteration(graph, profile, 2);
  REQUIRE(whole.ok());
  REQUIRE(whole->kernels.size() == 4);
  CHECK(whole->kernels[0].label == "l1 fw");
  CHECK(whole->kernels[1].label == "l2 fw");
  CHECK(whole->kernels[2].label == "l2 bw");
  CHECK(whole->kernels[3].label == "l1 bw");
  CHECK(whole->iteration_ms() == Approx(2 + 3 + 3 + 2));

  StatusOr<BgIteration> pieces = BuildBgIteration(graph, profile, 2, 1.0);
  REQUIRE(pieces.ok());
  CHECK(pieces->kernels.size() == 10);
  CHECK(pieces->kernels[2].label == "l2 fw 1/3");
  CHECK(pieces->kernels[2].duration_ms == Approx(1.0));
  CHECK(pieces->iteration_ms() == Approx(10.0));

  CHECK_FALSE(BuildBgIteration(graph, profile, 0).ok());
  const FakeProfile partial({{"l1", {1.0, 0.0}}});
  CHECK_FALSE(BuildBgIteration(graph, partial, 2).ok());
}

TEST_CASE("FG timeline of a two-layer chain with one layer on 1 of 2 devices", "[simulator]") {
  const Graph graph = TwoLayerChain();
  const FakeProfile profile({{"l1", {2.0, 0.0}}, {"l2", {0.0, 3.0}}});
  // 1 GB/s and 10 us per message: hand-computable communication.
  const Cluster cluster = TestCluster(2, 1.0, 10.0);
  const CostModel model(graph, profile, cluster, 2);
  StatusOr<Plan> plan = model.Evaluate({2, 1}, 2);
  REQUIRE(plan.ok());
  StatusOr<FgTimeline> timeline = BuildFgTimeline(*plan, model);
  REQUIRE(timeline.ok());

  // Re-split of l1's output (8 floats = 32 bytes per sample): device 1 sends its one sample to
  // device 0, 32 bytes / 1 GB/s + 10 us. All-reduce of l1's 40 parameters (160 bytes) over 2:
  // 2 (g-1)/g x 160 bytes / 1 GB/s + 2 (g-1) x 10 us. l2 on one device has no all-reduce.
  const double resplit_ms = 32e-6 + 0.01;
  const double allreduce_ms = 160e-6 + 0.02;
  const std::vector<std::string> labels = {"l1 fw",       "l1 -> l2 resplit fw", "l2 fw",
                                           "l2 bw",       "l2 -> l1 resplit bw", "l1 bw",
                                           "l1 allreduce"};
  REQUIRE(timeline->steps.size() == labels.size());
  for (size_t i = 0; i < labels.size(); ++i) CHECK(timeline->steps[i].label == labels[i]);
  CHECK(timeline->steps[0].devices == std::vector<int>{0, 1});
  CHECK(timeline->steps[0].duration_ms == Approx(2.0));
  CHECK(timeline->steps[1].devices == std::vector<int>{0, 1});
  CHECK(timeline->steps[1].duration_ms == Approx(resplit_ms));
  CHECK(timeline->steps[2].devices == std::vector<int>{0});
  CHECK(timeline->steps[2].duration_ms == Approx(3.0));
  CHECK(timeline->steps[6].duration_ms == Approx(allreduce_ms));
  CHECK(timeline->iteration_ms() == Approx(plan->totals.iteration_ms));
  CHECK(timeline->iteration_ms() == Approx(2 + 3 + 3 + 2 + 2 * resplit_ms + allreduce_ms));
  // Device 1 sits out l2: idle for exactly its forward and backward, 6 ms.
  CHECK(timeline->iteration_ms() - timeline->BusyMs(1) == Approx(6.0));

  // BG kernels of 1 ms fill that gap with exactly 6 kernels per FG iteration.
  const BgIteration bg = UniformBg(6, 1.0, 3);
  StatusOr<MultiplexResult> result =
      SimulateMultiplexing(*timeline, {nullptr, &bg}, Options(BgPolicy::kGreedy));
  REQUIRE(result.ok());
  CHECK(result->fg_iteration_ms == Approx(plan->totals.iteration_ms));
  CHECK(result->devices[1].bg_busy_ms == Approx(6.0));
  CHECK(result->bg_samples_per_s == Approx(3 * 1000.0 / plan->totals.iteration_ms));
}

TEST_CASE("FG timeline of a batch norm on two devices has its statistics all-reduces",
          "[simulator]") {
  Layer bn;
  bn.name = "bn";
  bn.op = Op::kBatchNorm2d;
  bn.inputs = {"input"};
  StatusOr<Graph> graph = Graph::Create("bn", {3, 2, 2}, {bn});
  REQUIRE(graph.ok());
  const FakeProfile profile({{"bn", {1.0, 0.0}}});
  const Cluster cluster = TestCluster(2, 1.0, 10.0);
  const CostModel model(*graph, profile, cluster, 2);
  StatusOr<Plan> plan = model.Evaluate(std::vector<int>{2}, 2);
  REQUIRE(plan.ok());
  StatusOr<FgTimeline> timeline = BuildFgTimeline(*plan, model);
  REQUIRE(timeline.ok());

  // 3 channels: 7 float64 values (56 bytes) each way; 6 parameters (24 bytes) of gradients.
  const double stats_ms = 56e-6 + 0.02;
  const double allreduce_ms = 24e-6 + 0.02;
  const std::vector<std::string> labels = {"bn fw", "bn bn stats fw", "bn bw", "bn bn stats bw",
                                           "bn allreduce"};
  REQUIRE(timeline->steps.size() == labels.size());
  for (size_t i = 0; i < labels.size(); ++i) CHECK(timeline->steps[i].label == labels[i]);
  CHECK(timeline->steps[1].devices == std::vector<int>{0, 1});
  CHECK(timeline->steps[1].duration_ms == Approx(stats_ms));
  CHECK(timeline->steps[3].duration_ms == Approx(stats_ms));
  CHECK(timeline->steps[4].duration_ms == Approx(allreduce_ms));
  CHECK(timeline->iteration_ms() == Approx(plan->totals.iteration_ms));
  CHECK(timeline->iteration_ms() == Approx(1 + 1 + 2 * stats_ms + allreduce_ms));
}

TEST_CASE("BuildFgTimeline refuses a plan for another graph", "[simulator]") {
  const Graph graph = TwoLayerChain();
  const FakeProfile profile({{"l1", {2.0, 0.0}}, {"l2", {0.0, 3.0}}});
  const Cluster cluster = TestCluster(2, 1.0, 10.0);
  const CostModel model(graph, profile, cluster, 2);
  StatusOr<Plan> plan = model.Evaluate({2, 1}, 2);
  REQUIRE(plan.ok());
  plan->layers.pop_back();
  CHECK_FALSE(BuildFgTimeline(*plan, model).ok());
}

// The chain on 2 devices at B = 2: l1 scales perfectly (2 ms per sample each way), l2 takes
// 3 ms each way whatever its batch. Links are nearly free. Single device: 8 + 6 = 14 ms.
// DP: 4 + 6 = 10 ms on 2 devices (amplification 20/14). At limit 1.2 the BP plan is l1 on 2,
// l2 on 1: also 10 ms but 14 GPU-ms, leaving device 1 idle 6 ms per iteration.
struct ChainSetup {
  Graph graph = TwoLayerChain();
  FakeProfile profile{{{"l1", {2.0, 0.0}}, {"l2", {0.0, 3.0}}}};
  SimRequest request;
  ChainSetup() {
    request.cluster = TestCluster(2, 1e12, 0.0);
    request.fg = {&graph, &profile, 2, 2, 1.2};
    // BG: the same chain at batch 1 (2 + 3 + 3 + 2 = 10 ms), in 1 ms kernels.
    request.bg = {{&graph, &profile, 1}};
    request.engine = Options(BgPolicy::kGreedy);
    request.engine.interference.max_bg_kernel_ms = 1.0;
  }
};

const SimConfigResult& Find(const SimReport& report, const std::string& name) {
  for (const SimConfigResult& config : report.configs) {
    if (config.name == name) return config;
  }
  FAIL("no configuration " << name);
  return report.configs.front();
}

TEST_CASE("SimulateCluster on the chain: DP, BP, BP+BG and static partitions", "[simulator]") {
  ChainSetup setup;
  StatusOr<SimReport> report = SimulateCluster(setup.request);
  REQUIRE(report.ok());
  CHECK(report->single_device_ms == Approx(14.0));
  REQUIRE(report->bg.size() == 1);
  CHECK(report->bg[0].iteration_ms == Approx(10.0));
  CHECK(report->bg[0].kernels == 10);

  std::vector<std::string> names;
  for (const SimConfigResult& config : report->configs) names.push_back(config.name);
  CHECK(names == std::vector<std::string>{"DP", "BP", "BP+BG", "static 1/1 DP", "static 2/0 DP",
                                          "static 1/1 BP", "static 2/0 BP"});

  const SimConfigResult& dp = Find(*report, "DP");
  CHECK(dp.fg_iteration_ms == Approx(10.0));
  CHECK(dp.total_samples_per_s == Approx(200.0));
  CHECK(dp.ratio_to_dp == Approx(1.0));
  CHECK(dp.fg_speedup == Approx(1.4));

  const SimConfigResult& bp = Find(*report, "BP");
  CHECK(bp.fg_iteration_ms == Approx(10.0));
  CHECK(bp.fg_amplification == Approx(1.0));
  CHECK(bp.bg_samples_per_s == 0);

  // Device 1's 6 ms gap holds 6 of the BG job's ten 1 ms kernels: 0.6 samples per 10 ms.
  const SimConfigResult& collocated = Find(*report, "BP+BG");
  CHECK(collocated.fg_iteration_ms == Approx(10.0));
  CHECK(collocated.bg_devices == 2);
  CHECK(collocated.devices[0].bg_busy_ms == Approx(0).margin(1e-6));
  CHECK(collocated.devices[1].bg_busy_ms == Approx(6.0));
  CHECK(collocated.bg_samples_per_s == Approx(60.0));
  CHECK(collocated.total_samples_per_s == Approx(260.0));
  CHECK(collocated.ratio_to_dp == Approx(1.3));

  // 1/1: FG alone on one device (14 ms, 2 samples), BG alone on the other (1 sample / 10 ms).
  const SimConfigResult& split = Find(*report, "static 1/1 DP");
  CHECK(split.fg_iteration_ms == Approx(14.0));
  CHECK(split.fg_speedup == Approx(1.0));
  CHECK(split.bg_devices == 1);
  CHECK(split.bg_samples_per_s == Approx(100.0));
  CHECK(split.total_samples_per_s == Approx(2000.0 / 14.0 + 100.0));
  REQUIRE(split.devices.size() == 2);
  CHECK(split.devices[1].bg_busy_ms == Approx(14.0));

  const SimConfigResult& whole = Find(*report, "static 2/0 DP");
  CHECK(whole.fg_iteration_ms == Approx(dp.fg_iteration_ms));
  CHECK(whole.bg_samples_per_s == 0);
  CHECK(Find(*report, "static 2/0 BP").fg_iteration_ms == Approx(bp.fg_iteration_ms));
  CHECK(Find(*report, "static 1/1 BP").total_samples_per_s == Approx(split.total_samples_per_s));
}

TEST_CASE("SimulateCluster: BG kernels longer than the gap delay FG under greedy only",
          "[simulator]") {
  ChainSetup setup;
  setup.request.engine.interference.max_bg_kernel_ms = 0;  // whole layers: 2, 3, 3, 2 ms
  setup.request.partitions = {2};
  StatusOr<SimReport> greedy = SimulateCluster(setup.request);
  REQUIRE(greedy.ok());
  CHECK(Find(*greedy, "BP+BG").fg_iteration_ms > 10.0 + 1e-6);
  CHECK(Find(*greedy, "BP+BG").fg_delay_ms > 1e-6);

  setup.request.engine.interference.policy = BgPolicy::kFitGaps;
  StatusOr<SimReport> fit = SimulateCluster(setup.request);
  REQUIRE(fit.ok());
  CHECK(Find(*fit, "BP+BG").fg_iteration_ms == Approx(10.0));
  CHECK(Find(*fit, "BP+BG").bg_samples_per_s > 0);
}

TEST_CASE("SimulateCluster refuses bad requests", "[simulator]") {
  ChainSetup setup;
  SimRequest bad = setup.request;
  bad.partitions = {3};
  CHECK_FALSE(SimulateCluster(bad).ok());
  bad = setup.request;
  bad.fg.global_batch = 0;
  CHECK_FALSE(SimulateCluster(bad).ok());
  bad = setup.request;
  bad.bg[0].batch = 0;
  CHECK_FALSE(SimulateCluster(bad).ok());
  bad = setup.request;
  bad.fg.profile = nullptr;
  CHECK_FALSE(SimulateCluster(bad).ok());
}

TEST_CASE("SimulateCluster without BG jobs leaves the BG side empty", "[simulator]") {
  ChainSetup setup;
  setup.request.bg.clear();
  StatusOr<SimReport> report = SimulateCluster(setup.request);
  REQUIRE(report.ok());
  for (const SimConfigResult& config : report->configs) {
    CHECK(config.name != "BP+BG");
    CHECK(config.bg_samples_per_s == 0);
  }
}

// A zoo model as the FG job on 8 A100s at B = 32, limit 2, simulated for 5 iterations with the
// one partition 8/0, and the plan options that ask the planner for the same.
SimRequest ZooRequest(const Graph& graph, const Profile* profile, const Cluster& cluster) {
  SimRequest request;
  request.cluster = cluster;
  request.fg = {&graph, profile, 32, 8, 2.0};
  request.partitions = {8};
  request.engine.iterations = 5;
  return request;
}

PlanOptions ZooOptions() {
  PlanOptions options;
  options.global_batch = 32;
  options.devices = 8;
  options.amplification_limit = 2.0;
  return options;
}

TEST_CASE("Simulated DP and BP equal the plans' predictions on zoo models", "[simulator]") {
  StatusOr<DeviceModel> a100 = DevicePreset("a100");
  REQUIRE(a100.ok());
  const std::unique_ptr<Profile> profile = MakeAnalyticalProfile(*a100);
  StatusOr<Cluster> cluster = ClusterPreset("dgx-a100");
  REQUIRE(cluster.ok());
  for (const char* name : {"vgg16", "inception_v3"}) {
    INFO(name);
    StatusOr<Graph> graph = zoo::BuildModel(name);
    REQUIRE(graph.ok());
    SimRequest request = ZooRequest(*graph, profile.get(), *cluster);
    request.bg = {{&*graph, profile.get(), 32}};
    StatusOr<SimReport> report = SimulateCluster(request);
    REQUIRE(report.ok());

    const PlanOptions options = ZooOptions();
    StatusOr<Plan> dp = PlanDataParallel(*graph, *profile, *cluster, options);
    StatusOr<Plan> bp = PlanBurstParallel(*graph, *profile, *cluster, options);
    REQUIRE(dp.ok());
    REQUIRE(bp.ok());
    // DP is the baseline a user runs: batch norm statistics per device, no all-reduces for them.
    CHECK(Find(*report, "DP").fg_iteration_ms == Approx(dp->data_parallel.iteration_ms));
    if (std::string(name) == "inception_v3") {
      CHECK(dp->data_parallel.iteration_ms < dp->totals.iteration_ms);
    } else {
      CHECK(dp->data_parallel.iteration_ms == Approx(dp->totals.iteration_ms));  // no batch norm
    }
    CHECK(Find(*report, "BP").fg_iteration_ms == Approx(bp->totals.iteration_ms));
    CHECK(report->single_device_ms == Approx(dp->single_device_ms));

    // Every device's FG, BG and idle time add up to the iteration: BG never overlaps FG.
    const SimConfigResult& collocated = Find(*report, "BP+BG");
    CHECK(collocated.fg_iteration_ms >= bp->totals.iteration_ms - 1e-9);
    for (const DeviceUsage& usage : collocated.devices) {
      CHECK(usage.fg_busy_ms + usage.bg_busy_ms + usage.idle_ms ==
            Approx(collocated.fg_iteration_ms));
      CHECK(usage.fg_busy_ms + usage.bg_busy_ms <= collocated.fg_iteration_ms + 1e-6);
    }
  }
}

TEST_CASE("Simulated BP with per-device batch norm is the per-device plan's prediction",
          "[simulator]") {
  const std::unique_ptr<Profile> profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const Cluster cluster = ClusterPreset("dgx-a100").value();
  StatusOr<Graph> graph = zoo::BuildModel("inception_v3");
  REQUIRE(graph.ok());
  SimRequest request = ZooRequest(*graph, profile.get(), cluster);
  request.sync_batch_norm = false;
  StatusOr<SimReport> report = SimulateCluster(request);
  REQUIRE(report.ok());
  PlanOptions options = ZooOptions();
  options.sync_batch_norm = false;
  StatusOr<Plan> bp = PlanBurstParallel(*graph, *profile, cluster, options);
  REQUIRE(bp.ok());
  CHECK(Find(*report, "BP").fg_iteration_ms == Approx(bp->totals.iteration_ms));
  // The per-device plan is never slower than the baseline, which fits the limit here.
  CHECK(Find(*report, "BP").fg_iteration_ms <= Find(*report, "DP").fg_iteration_ms * (1 + 1e-9));
}

TEST_CASE("Simulation report JSON names every configuration", "[simulator]") {
  ChainSetup setup;
  StatusOr<SimReport> report = SimulateCluster(setup.request);
  REQUIRE(report.ok());
  const std::string json = SimReportToJson(*report);
  CHECK(json.find("\"format\": \"deepool.simulation\"") != std::string::npos);
  CHECK(json.find("\"BP+BG\"") != std::string::npos);
  CHECK(json.find("\"static 1/1 BP\"") != std::string::npos);
  CHECK(json.find("\"policy\": \"greedy\"") != std::string::npos);
}

}  // namespace
}  // namespace deepool::planner
