// Exact training under plans made by the planner (issue 11, points 4 and 7): the burst-parallel
// search's own plans for small_cnn, a residual block and an Inception-style block, each with
// batch norm layers split over several ranks, train over the NCCL-rules fake exactly like one
// device (parameters, running statistics, losses) with SGD with momentum and with Adam; a model
// with dropout under a hand-written burst plan does too; and small_cnn trained on a generated
// CIFAR-10-format file under a 4-rank burst plan follows one device's loss curve down.
//
// Every batch-norm equivalence test also trains with synchronisation off
// (ExecutorOptions::sync_batch_norm = false) and requires a clear mismatch, so it can fail.
// Setting DEEPOOL_TEST_BN_SYNC_OFF=1 runs the equivalence checks themselves without
// synchronisation, to see how they fail.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/runtime/image_files.h"
#include "tests/temp_dir.h"

namespace deepool::worker::testing {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using planner::zoo::ConvSpec;
using planner::zoo::LayerListBuilder;
using planner::zoo::Sq;

// As executor_batchnorm_test.cc: |got - want| <= kAtol + kRtol |want| in float64. Measured
// with the seeds below: at most 0.17 of this tolerance (SGD at most 0.05), while unsynchronised
// batch norm misses by 1e-2 to 9e-2 absolute.
//
// Adam needs its seeds chosen: its first steps move every entry by about lr whatever the size of
// its gradient, so an entry whose gradient is rounding noise (near cancellation) takes a sign
// that any change of summation order can flip. With lr 0.01, seeds 1 to 6 (data seeds 51 to 56)
// and the synthetic dataset of 2026-11-28 (docs/formats.md, "Data"), under the plans below:
// small_cnn's seeds 3 and 5 miss (1.8 x and 2700 x the tolerance), the others stay within 0.55
// of it; the residual block's all within 0.57; the Inception-style block's all but seed 5
// (5.8 x) within 0.06. Under SGD every seed stays within 0.1. A change of the data re-draws
// these odds: scan the seeds again before blaming the executor.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

// The planner's plan for `graph`, as `deepool plan --device cpu --cluster cpu-G` makes it, but
// with the analytical cpu preset's peak lowered to `peak_tflops`: at the preset's 1.28 TFLOPS
// these tiny graphs are all dispatch and transfer latency, so every plan is one device. Requires
// a burst plan: layers on at least two distinct device sets.
planner::Plan PlannedBurst(const planner::Graph& graph, int64_t global_batch, int devices,
                           double amplification_limit, double peak_tflops,
                           bool concurrent_branches = false) {
  auto device = planner::DevicePreset("cpu");
  REQUIRE(device.ok());
  device->peak_tflops = peak_tflops;
  auto profile = planner::MakeAnalyticalProfile(*device);
  auto cluster = planner::ClusterPreset("cpu-" + std::to_string(devices));
  REQUIRE(cluster.ok());
  planner::PlanOptions options;
  options.global_batch = global_batch;
  options.devices = devices;
  options.amplification_limit = amplification_limit;
  options.concurrent_branches = concurrent_branches;
  auto plan = planner::PlanBurstParallel(graph, *profile, *cluster, options);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  std::set<std::vector<int>> device_sets;
  std::string layout;
  for (const auto& placement : plan->layers) {
    device_sets.insert(placement.devices);
    layout += " " + placement.layer + ":" + std::to_string(placement.devices.front()) + "+" +
              std::to_string(placement.devices.size());
  }
  INFO("plan (layer:first rank+count):" << layout);
  REQUIRE(device_sets.size() >= 2);
  return std::move(plan).value();
}

// The number of batch-norm layers `plan` splits over more than one rank.
int SplitBatchNormLayers(const planner::Graph& graph, const planner::Plan& plan) {
  int split = 0;
  for (const auto& placement : plan.layers) {
    auto id = graph.FindLayer(placement.layer);
    REQUIRE(id.has_value());
    if (graph.layer(*id).op == planner::Op::kBatchNorm2d && placement.devices.size() > 1) ++split;
  }
  return split;
}

// The largest |got - want| over the reference's parameters and buffers (lowest rank holding
// each), for the unsynchronised runs that must miss.
double LargestDifference(const std::vector<RankRun>& runs, const TrainResult& reference) {
  double largest = 0;
  for (const ParamMap* tensors : {&reference.params, &reference.buffers}) {
    for (const auto& [name, want] : *tensors) {
      for (const auto& run : runs) {
        const ParamMap& held =
            reference.params.count(name) ? run.result.params : run.result.buffers;
        auto found = held.find(name);
        if (found == held.end()) continue;
        double diff = (found->second.to(torch::kFloat64) - want.to(torch::kFloat64))
                          .abs()
                          .max()
                          .item<double>();
        largest = std::max(largest, diff);
        break;
      }
    }
  }
  return largest;
}

// Synchronised: equal to single-device training within kRtol/kAtol. Unsynchronised: more than
// 100 x kAtol away somewhere, so the first check can fail.
void RequirePlannedEquivalence(const planner::Graph& graph, const planner::Plan& plan,
                               const OptimizerSpec& optimizer, uint64_t seed, uint64_t data_seed) {
  constexpr int kIterations = 5;
  REQUIRE(SplitBatchNormLayers(graph, plan) >= 1);
  auto reference =
      TrainSingleDevice(graph, plan.global_batch, kIterations, optimizer, seed, data_seed);
  RankOptions synced;
  synced.sync_batch_norm = SyncInEquivalenceRuns();
  auto runs = RunRanks(graph, plan, kIterations, optimizer, seed, data_seed,
                       FakeComms(plan.num_devices), synced);
  RequireMatchesReference(runs, reference, kRtol, kAtol);

  RankOptions unsynced;
  unsynced.sync_batch_norm = false;
  auto local = RunRanks(graph, plan, kIterations, optimizer, seed, data_seed,
                        FakeComms(plan.num_devices), unsynced);
  for (const auto& run : local) REQUIRE(run.status.ok());
  REQUIRE(LargestDifference(local, reference) > 100 * kAtol);
}

planner::Graph SmallCnn(int64_t num_classes, int64_t image_size = 0) {
  planner::zoo::ModelOptions options;
  options.num_classes = num_classes;
  options.image_size = image_size;
  auto graph = planner::zoo::BuildModel("small_cnn", options);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// The planner's small_cnn plan: batch 8 on 3 devices, the stem (with stem.bn) on 2 ranks (4/4),
// the branches and the residual block (with res.bn) on 3 (3/3/2), the head on 1.
planner::Plan SmallCnnPlan(const planner::Graph& graph) {
  return PlannedBurst(graph, 8, 3, 1.2, 0.001);
}

// The planner's residual block plan: batch 9 on 3 devices, the block (bn1, bn2) on 2 ranks (5/4).
planner::Plan ResidualPlan(const planner::Graph& graph) {
  return PlannedBurst(graph, 9, 3, 1.2, 0.001);
}

// The planner's Inception-style plan: batch 8 on 4 devices, the stem (with stem.bn), t2's
// reduction and the pool tower on 2 ranks (4/4), the rest (t2.bn included) on 1.
planner::Plan InceptionPlan(const planner::Graph& graph) {
  return PlannedBurst(graph, 8, 4, 1.2, 0.001);
}

TEST_CASE("planner's small_cnn burst plan with SGD equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = SmallCnn(5);
  RequirePlannedEquivalence(graph, SmallCnnPlan(graph), Sgd(), 2, 52);
}

TEST_CASE("planner's small_cnn burst plan with Adam equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = SmallCnn(5);
  RequirePlannedEquivalence(graph, SmallCnnPlan(graph), Adam(), 2, 52);
}

TEST_CASE("planner's residual block burst plan with SGD equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  RequirePlannedEquivalence(graph, ResidualPlan(graph), Sgd(), 1, 51);
}

TEST_CASE("planner's residual block burst plan with Adam equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  RequirePlannedEquivalence(graph, ResidualPlan(graph), Adam(), 4, 54);
}

TEST_CASE("planner's Inception-style block burst plan with SGD equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/true);
  RequirePlannedEquivalence(graph, InceptionPlan(graph), Sgd(), 6, 56);
}

TEST_CASE("planner's Inception-style block burst plan with Adam equals one device, buffers too",
          "[executor][planned]") {
  torch::set_num_threads(1);
  auto graph = InceptionBlock(/*batch_norm=*/true);
  RequirePlannedEquivalence(graph, InceptionPlan(graph), Adam(), 4, 54);
}

// An MLP with two dropout layers (p 0.3 and 0.5).
planner::Graph DropoutMlp() {
  LayerListBuilder b;
  std::string x = b.Linear("fc1", "input", 32, 64);
  x = b.Relu("relu1", x);
  x = b.Dropout("drop1", x, 0.3);
  x = b.Linear("fc2", x, 64, 64);
  x = b.Relu("relu2", x);
  x = b.Dropout("drop2", x, 0.5);
  x = b.Linear("fc3", x, 64, 5);
  return BuildGraph("dropout_mlp", {32}, std::move(b), x);
}

TEST_CASE("an MLP with dropout under a 3-rank burst plan equals one device",
          "[executor][planned][dropout]") {
  torch::set_num_threads(1);
  auto graph = DropoutMlp();
  // Batch 10: each dropout layer on another set than its input (drop1 on 3 ranks, 4/3/3, after
  // relu1 on 2; drop2 on ranks 1 and 2, 5/5, after relu2 on 0 and 1), so a mask drawn per local row
  // would differ from one device's.
  auto plan = MakePlan(graph, 10, 3, {0},
                       {{"fc1", {0, 1, 2}},
                        {"relu1", {1, 2}},
                        {"drop1", {0, 1, 2}},
                        {"fc2", {2}},
                        {"relu2", {0, 1}},
                        {"drop2", {1, 2}},
                        {"fc3", {0, 2}}});
  for (const OptimizerSpec& optimizer : {Sgd(), Adam(), AdamW()}) {
    INFO(optimizer.name);
    auto reference = TrainSingleDevice(graph, 10, 5, optimizer, 21, 22);
    auto runs = RunRanks(graph, plan, 5, optimizer, 21, 22, FakeComms(3));
    RequireMatchesReference(runs, reference, kRtol, kAtol);
  }
}

// A CIFAR-10 binary batch file of `records` records (1 label byte + 3x32x32 pixel bytes,
// channel-major) with a learnable pattern: label k sets the mean of the red channel to
// 20 + 23k and of the green channel to 227 - 23k; blue and per-pixel noise are random.
void WriteCifar10(const fs::path& path, int records, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> label_of(0, 9), noise(-40, 40), blue(0, 255);
  std::ofstream out(path, std::ios::binary);
  std::vector<unsigned char> record(1 + 3 * 32 * 32);
  for (int i = 0; i < records; ++i) {
    const int label = label_of(gen);
    record[0] = static_cast<unsigned char>(label);
    for (int pixel = 0; pixel < 32 * 32; ++pixel) {
      record[1 + pixel] =
          static_cast<unsigned char>(std::clamp(20 + 23 * label + noise(gen), 0, 255));
      record[1 + 1024 + pixel] =
          static_cast<unsigned char>(std::clamp(227 - 23 * label + noise(gen), 0, 255));
      record[1 + 2048 + pixel] = static_cast<unsigned char>(blue(gen));
    }
    out.write(reinterpret_cast<const char*>(record.data()),
              static_cast<std::streamsize>(record.size()));
  }
  REQUIRE(out.good());
}

double Mean(const std::vector<double>& values, size_t first, size_t count) {
  double sum = 0;
  for (size_t i = first; i < first + count; ++i) sum += values.at(i);
  return sum / static_cast<double>(count);
}

// Trains `plan` over four fake-communicator ranks and one device on `data` (SGD, lr 0.05):
// every rank's loss is one device's within 1e-4 relative (or `margin` absolute) at every
// iteration, and the loss of the last 5 iterations is below 0.7 of the first 5's.
void RequireLossesFollowAndFall(const planner::Graph& graph, const planner::Plan& plan,
                                const DataSpec& data, int iterations, double margin) {
  OptimizerSpec optimizer = Sgd();
  optimizer.lr = 0.05;
  auto reference = TrainSingleDevice(graph, plan.global_batch, iterations, optimizer, 23, data);
  RankOptions options;
  options.sync_batch_norm = SyncInEquivalenceRuns();
  options.data = data;
  auto runs =
      RunRanks(graph, plan, iterations, optimizer, 23, 0, FakeComms(plan.num_devices), options);
  REQUIRE(reference.losses.size() == static_cast<size_t>(iterations));
  for (size_t r = 0; r < runs.size(); ++r) {
    INFO("rank " << r << ": " << runs[r].status.ToString());
    REQUIRE(runs[r].status.ok());
    REQUIRE(runs[r].result.losses.size() == static_cast<size_t>(iterations));
    for (size_t i = 0; i < static_cast<size_t>(iterations); ++i) {
      INFO("iteration " << i);
      REQUIRE(runs[r].result.losses[i] == Approx(reference.losses[i]).epsilon(1e-4).margin(margin));
    }
  }
  const double first = Mean(reference.losses, 0, 5);
  const double last = Mean(reference.losses, static_cast<size_t>(iterations) - 5, 5);
  INFO("mean loss of the first 5 iterations " << first << ", of the last 5 " << last);
  REQUIRE(last < 0.7 * first);
}

TEST_CASE(
    "small_cnn on a generated CIFAR-10 file under a 4-rank burst plan follows one device's "
    "falling loss",
    "[executor][planned][cifar10]") {
  torch::set_num_threads(1);
  constexpr int kIterations = 40;
  constexpr int64_t kBatch = 16;
  TempDir dir;
  const fs::path file = dir.File("data_batch_1.bin");
  WriteCifar10(file, 320, 17);  // 20 batches of 16: two epochs
  const DataSpec data{"cifar10", 0, file.string()};

  auto graph = SmallCnn(10, 32);
  // The planner's plan: every layer on ranks 0-1 but the 1x1 branch, which runs on ranks 2-3
  // beside the 3x3 branch (concurrent branches, planner/branch_packing.h); without packing the
  // 3x3 branch went to 4 ranks. With the gradient all-reduces overlapped with backward
  // (docs/planner.md), burst plans of this graph are rare: at peaks 0.01 and 0.02 every layer
  // gets one device set.
  auto plan = PlannedBurst(graph, kBatch, 4, 1.2, 0.015, /*concurrent_branches=*/true);
  REQUIRE(plan.num_devices == 4);
  REQUIRE(plan.Find("branch1x1.conv")->devices == std::vector<int>{2, 3});
  REQUIRE(plan.Find("branch3x3.conv")->devices == std::vector<int>{0, 1});
  REQUIRE(SplitBatchNormLayers(graph, plan) >= 1);

  // Losses agree to 2.2e-6 relative here. Longer runs drift apart by rounding, as one device
  // does from itself: at 60 iterations one device on 1 and on 2 intra-op threads differs by up to
  // 8e-5 relative, the plan by 1.1e-4.
  RequireLossesFollowAndFall(graph, plan, data, kIterations, 0);
}

TEST_CASE("small_cnn on an image folder under a 4-rank burst plan equals one device and learns",
          "[executor][planned][images]") {
  // Each rank decodes and augments only its own rows of PNG files; the rows must be exactly
  // the ones one device trains on, so the losses agree as on CIFAR-10 above.
  torch::set_num_threads(1);
  constexpr int kIterations = 30;
  constexpr int64_t kBatch = 16;
  TempDir dir;
  WriteLearnableFolder(dir.path(), 3, 40, 40, 5);  // 120 images of 40x40: four epochs
  const DataSpec data{"image_folder", 9, dir.path()};

  auto graph = SmallCnn(10, 32);
  auto plan = PlannedBurst(graph, kBatch, 4, 1.2, 0.015, /*concurrent_branches=*/true);
  REQUIRE(plan.num_devices == 4);
  // The colours separate the classes quickly: once the loss is near 0, 1e-6 absolute.
  RequireLossesFollowAndFall(graph, plan, data, kIterations, 1e-6);
}

}  // namespace
}  // namespace deepool::worker::testing
