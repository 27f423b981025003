// Multi-rank CUDA paths on ONE GPU (label "gpu"; each test returns early with a warning where no
// GPU is visible): real deepool-executor processes, every rank on cuda:0, communicating over Gloo
// through host buffers (LaunchOptions::share_gpu, communicator_staged.h), since NCCL refuses two
// ranks on one device. They run the executor's CUDA side of several ranks (streams and events,
// stream-ordered waits, gradient buckets and synchronised batch norm posted from autograd's device
// thread, re-splits, the loss sum, checkpoints of device tensors) on a one-GPU machine:
//   - a burst plan with re-splits between every pair of device sets (3 ranks) and an uneven
//     data-parallel plan with synchronised batch norm (2 ranks) end with the parameters, buffers
//     and per-iteration losses of the same job on one rank;
//   - a job killed mid-run and resumed from its periodic checkpoint ends as an uninterrupted run.
// Tolerance: fp32 with TF32 off (run spec precision fp32), |got - want| <= 1e-5 + 1e-4 |want|.
// The CPU equivalence tests hold 1e-5 relative with one kernel library; here cuDNN picks its
// convolution algorithms per shape, so a rank's batch of 2 or 4 rows sums in another order than
// the reference's 7 or 8; a gradient lost or counted twice moves parameters by 1e-2 and more.
// scripts/gpu-node-test.sh runs them (ctest -L gpu). Never yet run on a GPU (docs/runtime.md).
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include "executor_test_util.h"
#include "tests/runtime/gpu_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/checkpoints/periodic_checkpoints.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using testing::HaveGpus;
using testing::ParamMap;

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

struct Launched {
  Status status;
  std::map<int, std::vector<double>> losses;  // by rank, per iteration reported
  int64_t first_iteration = -1;               // rank 0's first iteration event
};

// Runs the spec's ranks on cuda:0: `world` ranks sharing it over the staging communicator, or one
// rank over NCCL (a world of one). With `kill_after`, kills rank 0 once it reported that iteration.
Launched Launch(const RunSpec& spec, const fs::path& dir, std::optional<int64_t> kill_after = {}) {
  const int world = spec.plan.num_devices;
  const std::string path = (dir / (spec.job_id + ".json")).string();
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = world;
  options.device = "cuda";
  options.share_gpu = world > 1;
  options.timeout_s = 60;
  options.silence_limit_s = 180;
  auto ranks = RankProcesses::Start(options);
  INFO(ranks.status().ToString());
  REQUIRE(ranks.ok());
  Launched run;
  run.status = (*ranks)->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (iteration == nullptr) return;
    if (iteration->loss) run.losses[rank].push_back(*iteration->loss);
    if (rank != 0) return;
    if (run.first_iteration < 0) run.first_iteration = iteration->iteration;
    if (kill_after && iteration->iteration == *kill_after) (*ranks)->Kill(0);
  });
  return run;
}

// The whole model's state from the checkpoint files the ranks wrote at the end (a rank's file
// holds its layers; every copy of a layer must agree).
ParamMap ReadFinalCheckpoints(const std::string& base, int world) {
  ParamMap merged;
  for (int rank = 0; rank < world; ++rank) {
    std::string path = base + ".rank" + std::to_string(rank);
    if (!fs::exists(path)) path = base;
    auto state = LoadCheckpoint(path);
    INFO(path << ": " << state.status().ToString());
    REQUIRE(state.ok());
    for (auto& [key, tensor] : *state) {
      auto [found, added] = merged.emplace(key, tensor);
      if (!added) {
        INFO("copies of " << key << " differ");
        REQUIRE(torch::allclose(found->second, tensor, kRtol, kAtol));
      }
    }
  }
  return merged;
}

// A periodic checkpoint's state: every rank's file merged.
ParamMap ReadPeriodicCheckpoint(const std::string& path) {
  ParamMap merged;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.path().extension() != ".pt") continue;
    auto state = LoadCheckpoint(entry.path().string());
    REQUIRE(state.ok());
    for (auto& [key, tensor] : *state) merged.emplace(key, tensor);
  }
  return merged;
}

void RequireClose(const ParamMap& got, const ParamMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [key, expected] : want) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    const torch::Tensor a = got.at(key).to(torch::kFloat64);
    const torch::Tensor b = expected.to(torch::kFloat64);
    INFO("max diff " << (a - b).abs().max().item<double>());
    REQUIRE(torch::allclose(a, b, kRtol, kAtol));
  }
}

// Runs `spec` on one rank (over NCCL) and on its plan's ranks sharing the GPU, and requires the
// same final state and, on every rank, the same losses (each the sum of the ranks' parts).
void RequireSharedEqualsOneRank(RunSpec spec, const planner::Plan& shared_plan) {
  TempDir dir;
  const int world = shared_plan.num_devices;
  spec.job_id = "one-rank";
  spec.plan = testing::MakePlan(*spec.graph, shared_plan.global_batch, 1, {0});
  spec.checkpoint_path = dir.File("one.pt");
  Launched one = Launch(spec, dir.path());
  INFO(one.status.ToString());
  REQUIRE(one.status.ok());
  spec.job_id = "shared";
  spec.plan = shared_plan;
  spec.checkpoint_path = dir.File("shared.pt");
  Launched shared = Launch(spec, dir.path());
  INFO(shared.status.ToString());
  REQUIRE(shared.status.ok());
  RequireClose(ReadFinalCheckpoints(dir.File("shared.pt"), world),
               ReadFinalCheckpoints(dir.File("one.pt"), 1));
  const std::vector<double>& want = one.losses.at(0);
  REQUIRE(want.size() == static_cast<size_t>(spec.iterations));
  for (int rank = 0; rank < world; ++rank) {
    INFO("rank " << rank);
    const std::vector<double>& got = shared.losses.at(rank);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      REQUIRE(std::abs(got[i] - want[i]) <= kAtol + kRtol * std::abs(want[i]));
    }
  }
}

RunSpec SmallCnnSpec() {
  RunSpec spec;
  spec.graph = std::make_shared<const planner::Graph>(testing::Zoo("small_cnn"));
  spec.iterations = 5;
  spec.seed = 7;
  spec.optimizer = testing::Sgd();
  spec.precision = planner::Precision::kFp32;  // TF32 off
  return spec;
}

TEST_CASE("one GPU: a burst plan with re-splits over 3 ranks sharing it equals one rank",
          "[gpu][executor]") {
  if (!HaveGpus(1)) return;
  RunSpec spec = SmallCnnSpec();
  RequireSharedEqualsOneRank(
      spec, testing::MakePlan(*spec.graph, 8, 3, {0, 1, 2}, testing::SmallCnnBurst()));
}

TEST_CASE(
    "one GPU: 2 ranks sharing it on uneven shares with synchronised batch norm equal one rank",
    "[gpu][executor][batchnorm]") {
  if (!HaveGpus(1)) return;
  RunSpec spec = SmallCnnSpec();
  spec.sync_batch_norm = true;
  // Batch 7 over 2 ranks: shares 4 and 3, batch norm's statistics summed over both.
  RequireSharedEqualsOneRank(spec, testing::MakePlan(*spec.graph, 7, 2, {0, 1}));
}

TEST_CASE("one GPU: ranks sharing it resume a killed job from its checkpoint as if uninterrupted",
          "[gpu][checkpoint][resume]") {
  if (!HaveGpus(1)) return;
  constexpr int64_t kIterations = 6;
  RunSpec spec = SmallCnnSpec();
  spec.job_id = "resume";
  spec.iterations = kIterations;
  spec.plan = testing::MakePlan(*spec.graph, 8, 3, {0, 1, 2}, testing::SmallCnnBurst());
  TempDir dir;

  spec.checkpoints = PeriodicCheckpoints{dir.File("uninterrupted"), 2, 2};
  Launched whole = Launch(spec, dir.path());
  INFO(whole.status.ToString());
  REQUIRE(whole.status.ok());
  const ParamMap reference =
      ReadPeriodicCheckpoint(CheckpointPath(dir.File("uninterrupted"), kIterations));
  // Parameters, batch norm's running statistics and the optimizer's momentum.
  REQUIRE(reference.count("optimizer.fc.weight.momentum_buffer") == 1);
  REQUIRE(reference.count("stem.bn.running_mean") == 1);

  const std::string checkpoints = dir.File("interrupted");
  spec.checkpoints = PeriodicCheckpoints{checkpoints, 2, 2};
  Launched killed = Launch(spec, dir.path(), /*kill_after=*/4);
  REQUIRE_FALSE(killed.status.ok());
  REQUIRE(fs::exists(CheckpointPath(checkpoints, 4) + "/MANIFEST.json"));
  Launched resumed = Launch(spec, dir.path());
  INFO(resumed.status.ToString());
  REQUIRE(resumed.status.ok());
  REQUIRE(resumed.first_iteration == 4);
  // The same plan and kernels: equal but for cuDNN's nondeterministic weight-gradient
  // algorithms, hence the tolerance rather than bit equality.
  RequireClose(ReadPeriodicCheckpoint(CheckpointPath(checkpoints, kIterations)), reference);
}

}  // namespace
}  // namespace deepool::worker
