// BG jobs' periodic checkpoints (background_checkpoints.h): a BG job stopped and built again
// resumes from its newest checkpoint and ends exactly where an uninterrupted one does; its
// checkpoints are one-rank checkpoints that a standalone executor resumes from too.
#include <catch2/catch.hpp>
#include <filesystem>

#include "executor_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/background/background_checkpoints.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/multiplex_device.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using testing::ParamMap;

constexpr int64_t kIterations = 8;
constexpr int64_t kBatch = 8;

// small_cnn (batch norm, branches) with SGD momentum: the optimizer state matters on resume.
BackgroundSpec Spec(std::optional<fs::path> checkpoints) {
  BackgroundSpec spec;
  spec.job_id = "bg-ckpt";
  spec.graph = std::make_shared<const planner::Graph>(testing::Zoo("small_cnn"));
  spec.batch_size = kBatch;
  spec.iterations = kIterations;
  spec.seed = 7;
  spec.optimizer = testing::Sgd();
  spec.data = DataSpec{"synthetic", 3, ""};
  if (checkpoints) spec.checkpoints = PeriodicCheckpoints{checkpoints->string(), 3, 2};
  return spec;
}

// Steps until `target` iterations are done, as a BackgroundRunner would (AfterUnit after each).
void TrainTo(BackgroundStepper& stepper, int64_t target) {
  int64_t done = stepper.first_iteration();
  while (done < target) {
    auto unit = stepper.RunUnit();
    REQUIRE(unit.ok());
    stepper.AfterUnit();
    if (unit->iteration_done) done = unit->iteration + 1;
  }
}

BackgroundTrainer& TrainerOf(BackgroundStepper& stepper) {
  auto* checkpointing = dynamic_cast<CheckpointingStepper*>(&stepper);
  REQUIRE(checkpointing != nullptr);
  auto* trainer = dynamic_cast<BackgroundTrainer*>(&checkpointing->inner());
  REQUIRE(trainer != nullptr);
  return *trainer;
}

const ParamMap& Reference() {
  static const ParamMap reference = [] {
    auto stepper =
        MakeBackgroundStepper(Spec(std::nullopt), torch::kCPU, nullptr, SystemClock::Get());
    REQUIRE(stepper.ok());
    TrainTo(**stepper, kIterations);
    auto* trainer = dynamic_cast<BackgroundTrainer*>(stepper->get());
    REQUIRE(trainer != nullptr);
    ParamMap params;
    for (auto& [name, tensor] : trainer->NamedParameters()) params[name] = tensor.detach().clone();
    return params;
  }();
  return reference;
}

// A BG job stopped after 5 iterations: its checkpoint of iteration 3 remains.
fs::path Interrupted(const fs::path& dir) {
  const fs::path checkpoints = dir / "ckpt";
  auto first = MakeBackgroundStepper(Spec(checkpoints), torch::kCPU, nullptr, SystemClock::Get());
  REQUIRE(first.ok());
  REQUIRE((*first)->first_iteration() == 0);
  TrainTo(**first, 5);
  REQUIRE(dynamic_cast<CheckpointingStepper&>(**first).checkpoints_written() == 1);
  auto found = FindLatestCheckpoint(checkpoints.string());
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->manifest.iteration == 3);
  CHECK((*found)->manifest.world_size == 1);
  CHECK((*found)->manifest.job_id == "bg-ckpt");
  return checkpoints;
}

TEST_CASE("a checkpointing BG stepper passes micro-batch requests to its trainer", "[multiplex]") {
  TempDir dir;
  auto stepper = MakeBackgroundStepper(Spec(dir.path()), torch::kCPU, nullptr, SystemClock::Get());
  REQUIRE(stepper.ok());
  // The trainer's answer (small_cnn has batch norm), not the default "runs whole batches".
  REQUIRE((*stepper)->SetMicroBatches(2).code() == StatusCode::kFailedPrecondition);
  REQUIRE((*stepper)->SetMicroBatches(1).ok());
  REQUIRE((*stepper)->micro_batches() == 1);
}

TEST_CASE("a BG job built again resumes from its checkpoint and ends bit-identical",
          "[multiplex][checkpoint]") {
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  auto resumed = MakeBackgroundStepper(Spec(checkpoints), torch::kCPU, nullptr, SystemClock::Get());
  REQUIRE(resumed.ok());
  REQUIRE((*resumed)->first_iteration() == 3);
  // Run by a runner, which counts from the checkpoint and stops at the job's iterations.
  DeviceGate gate(SharingMode::kConcurrent, SystemClock::Get());
  BackgroundRunner runner(resumed->get(), &gate, SystemClock::Get(), kIterations);
  runner.Start();
  runner.Join();
  const BackgroundProgress progress = runner.progress();
  REQUIRE(progress.status.ok());
  CHECK(progress.iterations == kIterations);
  CHECK(progress.samples == (kIterations - 3) * kBatch);
  const auto params = TrainerOf(**resumed).NamedParameters();
  REQUIRE(params.size() == Reference().size());
  for (const auto& [name, expected] : Reference()) {
    INFO(name);
    REQUIRE(torch::equal(params.at(name), expected));
  }
  // Checkpoints after 6 and 8 (the last iteration) iterations; keep = 2 pruned the one of 3.
  CHECK(fs::exists(CheckpointPath(checkpoints.string(), kIterations) + "/MANIFEST.json"));
  CHECK(fs::exists(CheckpointPath(checkpoints.string(), 6) + "/MANIFEST.json"));
  CHECK_FALSE(fs::exists(CheckpointPath(checkpoints.string(), 3)));
  // Built once more, it has nothing left to train: the runner ends without a unit.
  auto done = MakeBackgroundStepper(Spec(checkpoints), torch::kCPU, nullptr, SystemClock::Get());
  REQUIRE(done.ok());
  BackgroundRunner idle(done->get(), &gate, SystemClock::Get(), kIterations);
  idle.Start();
  idle.Join();
  CHECK(idle.progress().units == 0);
  CHECK(idle.progress().iterations == kIterations);
}

TEST_CASE("a BG job's checkpoint with another optimizer's state is refused, not loaded",
          "[multiplex][checkpoint]") {
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  BackgroundSpec adam = Spec(checkpoints);
  adam.optimizer = testing::Adam();
  auto refused = MakeBackgroundStepper(adam, torch::kCPU, nullptr, SystemClock::Get());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("holds sgd state"));
}

TEST_CASE("a standalone one-rank executor resumes a hosted BG job's checkpoint",
          "[multiplex][checkpoint][process]") {
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  const BackgroundSpec bg = Spec(checkpoints);
  // The run spec the coordinator writes for the same BG job placed on a device of its own.
  RunSpec spec;
  spec.job_id = bg.job_id;
  spec.graph = bg.graph;
  spec.plan = testing::MakePlan(*bg.graph, kBatch, 1, {0});
  spec.iterations = kIterations;
  spec.seed = bg.seed;
  spec.optimizer = bg.optimizer;
  spec.data = bg.data;
  spec.checkpoints = bg.checkpoints;
  const std::string path = dir.File("run.json");
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = 1;
  options.timeout_s = 30;
  auto ranks = RankProcesses::Start(options);
  REQUIRE(ranks.ok());
  int64_t first = -1;
  Status status = (*ranks)->Wait([&](int, const protocol::ExecutorEvent& event) {
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (iteration != nullptr && first < 0) first = iteration->iteration;
  });
  INFO(status.ToString());
  REQUIRE(status.ok());
  CHECK(first == 3);
  auto state = LoadCheckpoint(CheckpointPath(checkpoints.string(), kIterations) + "/rank-0.pt");
  REQUIRE(state.ok());
  ParamMap got(state->begin(), state->end());
  // The executor sums gradients in another order than the BG trainer's layer units.
  for (const auto& [name, expected] : Reference()) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    REQUIRE(torch::allclose(got.at(name), expected, 1e-4, 1e-5));
  }
}

}  // namespace
}  // namespace deepool::worker
