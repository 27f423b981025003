// End-to-end over real processes: deepool-executor ranks started by the launcher, Gloo over
// loopback; a rank killed mid-run makes the others fail with a clear error within the timeout.
#include "worker/runtime/launcher.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "planner/zoo/zoo.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/executor_process.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/run_spec.h"
#include "worker/runtime/train_launch.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

// Data parallelism of zoo model `model` (4 classes) over `ranks` at `global_batch`.
RunSpec DataParallelSpec(const std::string& model, int ranks, int64_t global_batch) {
  planner::zoo::ModelOptions options;
  options.num_classes = 4;
  auto graph = planner::zoo::BuildModel(model, options);
  REQUIRE(graph.ok());
  RunSpec spec;
  spec.job_id = "launcher-test";
  spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  spec.plan = planner::DataParallelLayout(*spec.graph, global_batch, ranks);
  spec.plan.num_devices = ranks;
  return spec;
}

// Writes `spec` to DIR/run.json and starts its ranks.
std::unique_ptr<RankProcesses> StartRanks(const RunSpec& spec, const fs::path& dir) {
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = (dir / "run.json").string();
  REQUIRE(WriteRunSpecFile(spec, options.run_spec_path).ok());
  options.world_size = spec.plan.num_devices;
  options.timeout_s = 30;
  auto ranks = RankProcesses::Start(options);
  INFO(ranks.status().ToString());
  REQUIRE(ranks.ok());
  return std::move(ranks).value();
}

std::string WriteSpec(int ranks, int64_t iterations, const fs::path& dir,
                      const std::string& model = "mlp", bool sync_batch_norm = true) {
  RunSpec spec = DataParallelSpec(model, ranks, 12);
  spec.sync_batch_norm = sync_batch_norm;
  spec.iterations = iterations;
  std::string path = (dir / "run.json").string();
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  return path;
}

TEST_CASE("three executor processes train and report every iteration", "[launcher][process]") {
  TempDir dir;
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = WriteSpec(3, 4, dir.path());
  options.world_size = 3;
  options.timeout_s = 30;
  auto ranks = RankProcesses::Start(options);
  INFO(ranks.status().ToString());
  REQUIRE(ranks.ok());
  std::map<int, int> iterations;
  std::vector<double> rank0_losses;
  Status status = (*ranks)->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    if (const auto* iteration = std::get_if<protocol::IterationEvent>(&event)) {
      ++iterations[rank];
      if (rank == 0) rank0_losses.push_back(iteration->loss.value());
    }
  });
  INFO(status.ToString());
  REQUIRE(status.ok());
  for (int rank = 0; rank < 3; ++rank) {
    REQUIRE(iterations[rank] == 4);
    REQUIRE((*ranks)->outcomes()[static_cast<size_t>(rank)].done);
  }
  REQUIRE(rank0_losses.size() == 4);
}

TEST_CASE("sharing a GPU between ranks is refused without a CUDA device", "[launcher][process]") {
  TempDir dir;
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = WriteSpec(2, 1, dir.path());
  options.world_size = 2;
  options.share_gpu = true;  // on the default device, "cpu"
  auto ranks = RankProcesses::Start(options);
  REQUIRE(ranks.status().code() == StatusCode::kInvalidArgument);
  // An executor asked for it on a CPU device fails with an error event, before it trains.
  std::ostringstream out;
  ExecutorProcessOptions executor;
  executor.run_spec_path = options.run_spec_path;
  executor.share_gpu = true;
  Status status = RunExecutorProcess(executor, out);
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kInvalidArgument);
  REQUIRE(out.str().find("--share-gpu needs a CUDA device") != std::string::npos);
}

TEST_CASE("an epochs run trains ceil(epochs x samples / batch) iterations on every rank",
          "[launcher][process][epochs]") {
  TempDir dir;
  RunSpec spec = DataParallelSpec("mlp", 2, 96);
  spec.epochs = 2;  // of the synthetic set's 1,024 samples: 2048 / 96 = 21.3 iterations
  std::unique_ptr<RankProcesses> ranks = StartRanks(spec, dir.path());
  std::map<int, int> iterations;
  std::set<int64_t> totals;
  Status status = ranks->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    if (const auto* iteration = std::get_if<protocol::IterationEvent>(&event)) {
      ++iterations[rank];
      totals.insert(iteration->total_iterations);
    }
  });
  INFO(status.ToString());
  REQUIRE(status.ok());
  CHECK(totals == std::set<int64_t>{22});
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(iterations[rank] == 22);
    CHECK(ranks->outcomes()[static_cast<size_t>(rank)].iterations == 22);
  }
}

// Two mlp ranks (data parallel) train one iteration from `init` at a learning rate too small to
// move any weight, exporting the model to DIR/out.pt. Returns the run's status.
Status TrainFromInit(const fs::path& dir, const std::string& init) {
  RunSpec spec = DataParallelSpec("mlp", 2, 8);
  spec.iterations = 1;
  spec.optimizer.lr = 1e-30;
  spec.init_path = init;
  spec.checkpoint_path = (dir / "out.pt").string();
  return StartRanks(spec, dir)->Wait([](int, const protocol::ExecutorEvent&) {});
}

// The mlp's state with every tensor set to values no initialisation draws.
StateDict DistinctMlpState() {
  planner::zoo::ModelOptions model;
  model.num_classes = 4;
  auto graph = planner::zoo::BuildModel("mlp", model);
  REQUIRE(graph.ok());
  std::vector<std::shared_ptr<LayerModule>> modules;
  for (int id = 0; id < graph->num_layers(); ++id) {
    auto module = BuildLayerModule(*graph, id, 0);
    REQUIRE(module.ok());
    modules.push_back(*module);
  }
  auto state = CollectStateDict(*graph, modules);
  REQUIRE(state.ok());
  StateDict distinct;
  float base = 0.25f;
  for (const auto& [key, tensor] : *state) {
    distinct.emplace_back(key, torch::full_like(tensor, base));
    base += 0.125f;
  }
  return distinct;
}

TEST_CASE("a run starts from the weights of its init file and refuses one that lacks a key",
          "[launcher][process][init]") {
  TempDir dir;
  const StateDict init = DistinctMlpState();
  REQUIRE(SaveCheckpoint(dir.File("init.pt"), init).ok());
  Status status = TrainFromInit(dir.path(), dir.File("init.pt"));
  INFO(status.ToString());
  REQUIRE(status.ok());
  auto trained = LoadCheckpoint(dir.File("out.pt"));
  REQUIRE(trained.ok());
  REQUIRE(trained->size() == init.size());
  for (size_t k = 0; k < init.size(); ++k) {
    INFO(init[k].first);
    CHECK((*trained)[k].first == init[k].first);
    CHECK((*trained)[k].second.equal(init[k].second));
  }
  StateDict lacking(init.begin() + 1, init.end());
  REQUIRE(SaveCheckpoint(dir.File("lacking.pt"), lacking).ok());
  status = TrainFromInit(dir.path(), dir.File("lacking.pt"));
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.ToString(), Catch::Contains(init[0].first));
  CHECK_THAT(status.ToString(), Catch::Contains("lacking.pt"));
}

// Rank 0's losses of a two-rank data-parallel run of small_cnn (batch norm on both ranks).
std::vector<double> TwoRankLosses(bool sync_batch_norm) {
  TempDir dir;
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = WriteSpec(2, 2, dir.path(), "small_cnn", sync_batch_norm);
  options.world_size = 2;
  options.timeout_s = 30;
  auto ranks = RankProcesses::Start(options);
  INFO(ranks.status().ToString());
  REQUIRE(ranks.ok());
  std::vector<double> losses;
  Status status = (*ranks)->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (rank == 0 && iteration != nullptr) losses.push_back(iteration->loss.value());
  });
  INFO(status.ToString());
  REQUIRE(status.ok());
  return losses;
}

TEST_CASE("a run spec's per-device batch norm reaches the executor ranks", "[launcher][process]") {
  // Same weights, data and batch: only the statistics differ, each rank's half against the
  // whole batch's, so the very first loss already differs.
  const std::vector<double> synced = TwoRankLosses(true);
  const std::vector<double> per_device = TwoRankLosses(false);
  REQUIRE(synced.size() == 2);
  REQUIRE(per_device.size() == 2);
  CHECK(std::abs(synced[0] - per_device[0]) > 1e-4 * std::abs(synced[0]));
}

TEST_CASE("a rank killed mid-run makes the others fail with an error", "[launcher][process]") {
  TempDir dir;
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = WriteSpec(3, 100000, dir.path());
  options.world_size = 3;
  options.timeout_s = 5;
  options.stop_on_failure = false;  // let ranks 0 and 2 find out on their own
  options.silence_limit_s = 60;     // a hang fails the test instead of blocking it
  auto ranks = RankProcesses::Start(options);
  REQUIRE(ranks.ok());
  bool killed = false;
  Status status = (*ranks)->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (!killed && rank == 1 && iteration && iteration->iteration == 3) {
      (*ranks)->Kill(1);
      killed = true;
    }
  });
  REQUIRE(killed);
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kAborted);
  REQUIRE_THAT(status.message(), Catch::Contains("rank 1 failed (killed by signal 9)"));
  const auto& outcomes = (*ranks)->outcomes();
  for (int rank : {0, 2}) {
    const RankOutcome& outcome = outcomes[static_cast<size_t>(rank)];
    INFO("rank " << rank << ": " << outcome.Describe());
    REQUIRE(outcome.exited);
    REQUIRE(outcome.exit_code == 1);
    REQUIRE_FALSE(outcome.done);
    REQUIRE(outcome.error.has_value());
  }
}

TEST_CASE("a missing executor binary is reported", "[launcher]") {
  LaunchOptions options;
  options.executor_path = "/nonexistent/deepool-executor";
  options.run_spec_path = "/nonexistent/run.json";
  REQUIRE(RankProcesses::Start(options).status().code() == StatusCode::kNotFound);
}

TEST_CASE("an invalid run spec becomes an error event and a failed launch", "[launcher][process]") {
  TempDir dir;
  std::string path = dir.File("run.json");
  {
    std::ofstream out(path);
    out << R"({"format":"deepool.run","version":1})";
  }
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = 1;
  auto ranks = RankProcesses::Start(options);
  // Rank 0 fails before its store is up: either Start or Wait reports it.
  if (ranks.ok()) {
    Status status = (*ranks)->Wait();
    REQUIRE(status.code() == StatusCode::kAborted);
    REQUIRE_THAT(status.message(), Catch::Contains("graph"));
  } else {
    REQUIRE_THAT(ranks.status().message(), Catch::Contains("graph"));
  }
}

namespace accumulation {

// deepool-train's body (RunTraining) on 2 mlp ranks, data parallel, 3 iterations of 32 samples;
// rank 0's iteration losses from its event lines.
std::vector<double> TrainLosses(int64_t accumulation_steps, const std::string& gradient_precision) {
  TrainOptions options;
  options.model = "mlp";
  options.ranks = 2;
  options.iterations = 3;
  options.global_batch = 32;
  options.accumulation_steps = accumulation_steps;
  options.gradient_precision = gradient_precision;
  options.json_events = true;
  options.timeout_s = 30;
  std::ostringstream out;
  Status status = RunTraining(options, out);
  INFO(status.ToString() << "\n" << out.str());
  REQUIRE(status.ok());
  std::vector<double> losses;
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) {
    const auto event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_object() && event.value("event", "") == "iteration" && event["rank"] == 0) {
      losses.push_back(event["loss"].get<double>());
    }
  }
  return losses;
}

TEST_CASE(
    "deepool-train with --accumulation-steps 4 and --gradient-precision bf16 trains the "
    "same batches",
    "[launcher][process][accumulation]") {
  const std::vector<double> plain = TrainLosses(1, "fp32");
  const std::vector<double> accumulated = TrainLosses(4, "bf16");
  REQUIRE(plain.size() == 3);
  REQUIRE(accumulated.size() == 3);
  // The first loss is before any step: the same 32 samples' mean loss, in 4 passes of 8.
  CHECK(accumulated[0] == Approx(plain[0]).epsilon(1e-5));
  // After steps whose gradients were summed in bf16: close, not equal.
  for (size_t i = 1; i < 3; ++i) CHECK(accumulated[i] == Approx(plain[i]).epsilon(1e-2));
}

TEST_CASE("deepool-train refuses a global batch that the accumulation steps do not divide",
          "[launcher][accumulation]") {
  TrainOptions options;
  options.model = "mlp";
  options.global_batch = 30;
  options.accumulation_steps = 4;
  std::ostringstream out;
  Status status = RunTraining(options, out);
  CHECK(status.message() ==
        "--global-batch 30 does not split into --accumulation-steps 4 micro-batches of equal "
        "size");
}

}  // namespace accumulation

}  // namespace
}  // namespace deepool::worker
