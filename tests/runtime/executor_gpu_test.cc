// GPU tests of the executor through real deepool-executor processes (label "gpu"; each test
// returns early with a warning where it does not see the GPUs it needs):
//   - one GPU: a FG job with a BG job attached trains both (priority streams, CUDA graphs);
//   - two or more GPUs: a burst plan whose branches sit on different device sets, over NCCL,
//     ends with the same parameters as the same job on one GPU;
//   - two or more GPUs: a rank killed mid-run makes the others fail with an error, not a hang.
// scripts/gpu-node-test.sh runs them on a GPU node.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>

#include "planner/zoo/zoo.h"
#include "tests/runtime/gpu_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

using deepool::testing::TempDir;
using testing::HaveGpus;
using testing::VisibleGpus;

std::shared_ptr<const planner::Graph> Model(const std::string& name) {
  planner::zoo::ModelOptions options;
  options.num_classes = 10;
  auto graph = planner::zoo::BuildModel(name, options);
  REQUIRE(graph.ok());
  return std::make_shared<const planner::Graph>(std::move(graph).value());
}

// Every layer on all `world` devices, except the named ones.
planner::Plan Plan(const planner::Graph& graph, int64_t batch, int world,
                   const std::map<std::string, std::vector<int>>& devices = {}) {
  planner::Plan plan;
  plan.model = graph.name();
  plan.global_batch = batch;
  plan.num_devices = world;
  std::vector<int> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
  for (const auto& layer : graph.layers()) {
    planner::LayerPlacement placement;
    placement.layer = layer.name;
    auto found = devices.find(layer.name);
    placement.devices = found != devices.end() ? found->second : all;
    placement.samples = planner::NearEqualShares(batch, static_cast<int>(placement.devices.size()));
    plan.layers.push_back(placement);
  }
  return plan;
}

struct Launched {
  Status status;
  std::map<int, protocol::IterationEvent> last_iteration;  // by rank
  std::unique_ptr<RankProcesses> ranks;
};

Launched Launch(
    const RunSpec& spec, int world, const fs::path& dir,
    const std::function<void(RankProcesses&, int, const protocol::ExecutorEvent&)>& hook = {},
    int timeout_s = 60) {
  std::string path = (dir / (spec.job_id + ".json")).string();
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = world;
  options.device = "cuda";
  options.timeout_s = timeout_s;
  options.stop_on_failure = false;
  options.silence_limit_s = 3 * timeout_s;
  auto started = RankProcesses::Start(options);
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  Launched launched;
  launched.ranks = std::move(started).value();
  RankProcesses* ranks = launched.ranks.get();
  launched.status = ranks->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    if (const auto* iteration = std::get_if<protocol::IterationEvent>(&event)) {
      launched.last_iteration[rank] = *iteration;
    }
    if (hook) hook(*ranks, rank, event);
  });
  return launched;
}

// The whole model's parameters from the checkpoint files the ranks wrote (a rank's file holds
// its layers; every copy of a layer must agree).
std::map<std::string, torch::Tensor> ReadCheckpoints(const std::string& base, int world) {
  std::map<std::string, torch::Tensor> merged;
  for (int rank = 0; rank < world; ++rank) {
    std::string path = base + ".rank" + std::to_string(rank);
    if (!fs::exists(path)) path = base;
    auto state = LoadCheckpoint(path);
    INFO(path << ": " << state.status().ToString());
    REQUIRE(state.ok());
    for (auto& [key, tensor] : *state) merged.emplace(key, tensor);
  }
  return merged;
}

TEST_CASE("one GPU: a FG job with a BG job attached trains both", "[gpu][multiplex]") {
  if (!HaveGpus(1)) return;
  TempDir dir;
  RunSpec spec;
  spec.job_id = "fg-with-bg";
  spec.graph = Model("small_cnn");
  spec.plan = Plan(*spec.graph, 32, 1);
  spec.iterations = 40;
  BackgroundSpec bg;
  bg.job_id = "bg";
  bg.graph = Model("small_cnn");
  bg.batch_size = 16;
  bg.seed = 3;
  spec.background = bg;  // defaults on CUDA: concurrent, priority streams, CUDA graphs
  Launched run = Launch(spec, 1, dir.path());
  INFO(run.status.ToString());
  REQUIRE(run.status.ok());
  const protocol::IterationEvent& last = run.last_iteration.at(0);
  INFO(protocol::ExecutorEventToJson(last));
  REQUIRE(last.loss.has_value());
  REQUIRE(last.sharing.has_value());
  REQUIRE(last.sharing->bg_iterations > 0);
}

TEST_CASE("several GPUs: a branchy burst plan over NCCL equals the same job on one GPU",
          "[gpu][executor]") {
  if (!HaveGpus(2)) return;
  const int world = std::min(VisibleGpus(), 4);
  TempDir dir;
  auto graph = Model("small_cnn");
  // Branches, the concat and the residual add on different device sets, so transfers run both
  // ways between the same pairs (the case NCCL's first-in first-out matching punishes).
  const int last = world - 1;
  std::map<std::string, std::vector<int>> burst = {
      {"branch1x1.conv", {0}}, {"branch3x3.conv", {last}},
      {"concat", {0, last}},   {"res.conv", {last}},
      {"res.add", {0}},        {"avgpool", {last}},
      {"flatten", {0, last}},  {"fc", {0}}};
  RunSpec spec;
  spec.graph = graph;
  spec.iterations = 5;
  spec.seed = 11;
  spec.optimizer.momentum = 0.9;
  spec.job_id = "one-gpu";
  spec.plan = Plan(*graph, 16, 1);
  spec.checkpoint_path = dir.File("one.pt");
  Launched one = Launch(spec, 1, dir.path());
  INFO(one.status.ToString());
  REQUIRE(one.status.ok());
  spec.job_id = "burst";
  spec.plan = Plan(*graph, 16, world, burst);
  spec.checkpoint_path = dir.File("burst.pt");
  Launched many = Launch(spec, world, dir.path());
  INFO(many.status.ToString());
  REQUIRE(many.status.ok());
  auto reference = ReadCheckpoints(dir.File("one.pt"), 1);
  auto burst_params = ReadCheckpoints(dir.File("burst.pt"), world);
  REQUIRE(burst_params.size() == reference.size());
  for (const auto& [key, expected] : reference) {
    INFO(key);
    REQUIRE(burst_params.count(key) == 1);
    // cuDNN may use TF32 and other algorithms per batch size: a loose fp32 tolerance.
    REQUIRE(torch::allclose(burst_params.at(key).to(torch::kFloat32), expected.to(torch::kFloat32),
                            2e-3, 2e-4));
  }
}

TEST_CASE("several GPUs: a killed NCCL rank makes the others fail with an error",
          "[gpu][executor]") {
  if (!HaveGpus(2)) return;
  TempDir dir;
  RunSpec spec;
  spec.job_id = "killed";
  spec.graph = Model("mlp");
  spec.plan = Plan(*spec.graph, 16, 2);
  spec.iterations = 100000;
  bool killed = false;
  Launched run = Launch(
      spec, 2, dir.path(),
      [&](RankProcesses& ranks, int rank, const protocol::ExecutorEvent& event) {
        const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
        if (!killed && rank == 1 && iteration && iteration->iteration == 3) {
          ranks.Kill(1);
          killed = true;
        }
      },
      /*timeout_s=*/10);
  REQUIRE(killed);
  INFO(run.status.ToString());
  REQUIRE_FALSE(run.status.ok());
  const RankOutcome& survivor = run.ranks->outcomes()[0];
  INFO(survivor.Describe());
  REQUIRE(survivor.exited);
  REQUIRE_FALSE(survivor.done);
  REQUIRE(survivor.error.has_value());
}

}  // namespace
}  // namespace deepool::worker
