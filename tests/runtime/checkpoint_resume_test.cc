// Periodic checkpoints and exact resume, over real executor processes (Gloo on loopback): a job
// killed mid-run and started again from its checkpoint directory ends with the parameters and
// optimizer state of an uninterrupted run, bit for bit on the same plan and within the
// equivalence tolerance on another plan; partial and corrupt checkpoints are skipped.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/subprocess.h"
#include "executor_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/checkpoints/periodic_checkpoints.h"
#include "worker/runtime/checkpoints/training_state.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using testing::ParamMap;

constexpr int64_t kIterations = 6;

// small_cnn (batch norm, branches) on a burst plan over 3 ranks, or data parallel over 2.
RunSpec Spec(const fs::path& checkpoints, bool burst,
             const OptimizerSpec& optimizer = testing::Sgd()) {
  RunSpec spec;
  spec.job_id = "resume-test";
  spec.graph = std::make_shared<const planner::Graph>(testing::Zoo("small_cnn"));
  spec.plan = burst ? testing::MakePlan(*spec.graph, 8, 3, {0, 1, 2}, testing::SmallCnnBurst())
                    : testing::MakePlan(*spec.graph, 8, 2, {0, 1});
  spec.iterations = kIterations;
  spec.seed = 7;
  spec.optimizer = optimizer;
  spec.checkpoints = PeriodicCheckpoints{checkpoints.string(), 2, 2};
  return spec;
}

struct Run {
  Status status;
  int64_t first_iteration = -1;  // rank 0's first iteration event
};

// Runs the spec's ranks to the end, or until rank 0 reports iteration `kill_after` (then kills
// every rank).
Run Launch(const RunSpec& spec, const fs::path& dir, std::optional<int64_t> kill_after = {}) {
  const std::string path = (dir / "run.json").string();
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = spec.plan.num_devices;
  options.timeout_s = 30;
  auto ranks = RankProcesses::Start(options);
  REQUIRE(ranks.ok());
  Run run;
  run.status = (*ranks)->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (rank != 0 || iteration == nullptr) return;
    if (run.first_iteration < 0) run.first_iteration = iteration->iteration;
    if (kill_after && iteration->iteration == *kill_after) (*ranks)->Kill(0);
  });
  return run;
}

// The state of a whole checkpoint: every rank's file merged.
ParamMap ReadCheckpoint(const std::string& path) {
  ParamMap merged;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.path().extension() != ".pt") continue;
    auto state = LoadCheckpoint(entry.path().string());
    REQUIRE(state.ok());
    for (auto& [key, tensor] : *state) REQUIRE(merged.emplace(key, tensor).second);
  }
  return merged;
}

void RequireSameState(const ParamMap& got, const ParamMap& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (const auto& [key, expected] : want) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    if (tolerance == 0) {
      REQUIRE(torch::equal(got.at(key), expected));
    } else {
      REQUIRE(torch::allclose(got.at(key).to(torch::kFloat64), expected.to(torch::kFloat64),
                              tolerance, tolerance));
    }
  }
}

void FlipByte(const fs::path& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  f.seekp(offset);
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

// The final checkpoint of an uninterrupted run on the burst plan.
ParamMap Uninterrupted(const OptimizerSpec& optimizer) {
  TempDir dir;
  Run run = Launch(Spec(dir.File("ckpt"), /*burst=*/true, optimizer), dir.path());
  INFO(run.status.ToString());
  REQUIRE(run.status.ok());
  auto found = FindLatestCheckpoint(dir.File("ckpt"));
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  REQUIRE((*found)->manifest.iteration == kIterations);
  REQUIRE((*found)->manifest.world_size == 3);
  ParamMap state = ReadCheckpoint((*found)->path);
  return state;
}

// One uninterrupted run with SGD, shared by the test cases.
const ParamMap& Reference() {
  static const ParamMap reference = Uninterrupted(testing::Sgd());
  return reference;
}

// A run killed after 5 iterations: whole checkpoints after 2 and 4 iterations remain.
fs::path Interrupted(const fs::path& dir, const OptimizerSpec& optimizer = testing::Sgd()) {
  const fs::path checkpoints = dir / "ckpt";
  Run run = Launch(Spec(checkpoints, true, optimizer), dir, /*kill_after=*/4);
  REQUIRE_FALSE(run.status.ok());
  REQUIRE(fs::exists(CheckpointPath(checkpoints.string(), 4) + "/MANIFEST.json"));
  REQUIRE(fs::exists(CheckpointPath(checkpoints.string(), 2) + "/MANIFEST.json"));
  return checkpoints;
}

TEST_CASE("a killed job resumed on the same plan ends bit-identical to an uninterrupted run",
          "[checkpoint][resume][process]") {
  const ParamMap& reference = Reference();
  // The checkpoint holds the optimizer's momentum beside every parameter.
  REQUIRE(reference.count("optimizer.fc.weight.momentum_buffer") == 1);
  REQUIRE(reference.count("stem.bn.running_mean") == 1);
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  Run resumed = Launch(Spec(checkpoints, true), dir.path());
  INFO(resumed.status.ToString());
  REQUIRE(resumed.status.ok());
  REQUIRE(resumed.first_iteration == 4);
  RequireSameState(ReadCheckpoint(CheckpointPath(checkpoints.string(), kIterations)), reference, 0);
  // keep = 2: the checkpoints after 4 and 6 iterations.
  REQUIRE_FALSE(fs::exists(CheckpointPath(checkpoints.string(), 2)));
}

TEST_CASE("an adamw job resumed on the same plan ends bit-identical, its moments restored",
          "[checkpoint][resume][process]") {
  const ParamMap reference = Uninterrupted(testing::AdamW());
  REQUIRE(reference.count("optimizer.fc.weight.exp_avg_sq") == 1);
  REQUIRE(reference.count("optimizer.fc.weight.step") == 1);
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path(), testing::AdamW());
  Run resumed = Launch(Spec(checkpoints, true, testing::AdamW()), dir.path());
  INFO(resumed.status.ToString());
  REQUIRE(resumed.status.ok());
  REQUIRE(resumed.first_iteration == 4);
  RequireSameState(ReadCheckpoint(CheckpointPath(checkpoints.string(), kIterations)), reference, 0);
}

TEST_CASE("a job resumed on another plan and world size ends within the equivalence tolerance",
          "[checkpoint][resume][process]") {
  const ParamMap& reference = Reference();
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  Run resumed = Launch(Spec(checkpoints, /*burst=*/false), dir.path());
  INFO(resumed.status.ToString());
  REQUIRE(resumed.status.ok());
  REQUIRE(resumed.first_iteration == 4);
  RequireSameState(ReadCheckpoint(CheckpointPath(checkpoints.string(), kIterations)), reference,
                   1e-4);
}

TEST_CASE("partial and corrupt checkpoints are skipped, never loaded",
          "[checkpoint][resume][process]") {
  const ParamMap& reference = Reference();
  TempDir dir;
  const fs::path checkpoints = Interrupted(dir.path());
  const std::string newest = CheckpointPath(checkpoints.string(), 4);
  SECTION("a checkpoint without its manifest") { fs::remove(newest + "/MANIFEST.json"); }
  SECTION("a rank file changed after it was written") { FlipByte(newest + "/rank-1.pt", 100); }
  SECTION("a rank file cut short") {
    fs::resize_file(newest + "/rank-2.pt", fs::file_size(newest + "/rank-2.pt") / 2);
  }
  Run resumed = Launch(Spec(checkpoints, true), dir.path());
  INFO(resumed.status.ToString());
  REQUIRE(resumed.status.ok());
  REQUIRE(resumed.first_iteration == 2);
  RequireSameState(ReadCheckpoint(CheckpointPath(checkpoints.string(), kIterations)), reference, 0);
}

TEST_CASE("checkpoints by time are whole: the ranks agree on when, and the same plan resumes",
          "[checkpoint][resume][process]") {
  const ParamMap& reference = Reference();
  TempDir dir;
  const fs::path checkpoints = dir.File("ckpt");
  RunSpec spec = Spec(checkpoints, true);
  spec.checkpoints->every_iterations = 0;
  spec.checkpoints->every_seconds = 1e-6;  // due at every agreement
  spec.checkpoints->keep = 100;
  Run run = Launch(spec, dir.path());
  INFO(run.status.ToString());
  REQUIRE(run.status.ok());
  // The first agreement comes after 3 iterations, the next as many iterations later; each
  // checkpoint is whole (rank 0 committed it after every rank wrote its part).
  for (int64_t done : {3, 6}) {
    INFO("iteration " << done);
    CHECK(fs::exists(CheckpointPath(checkpoints.string(), done) + "/MANIFEST.json"));
  }
  for (int64_t done : {1, 2, 4, 5})
    CHECK_FALSE(fs::exists(CheckpointPath(checkpoints.string(), done)));
  RequireSameState(ReadCheckpoint(CheckpointPath(checkpoints.string(), kIterations)), reference, 0);
}

TEST_CASE("deepool-export writes a checkpoint's model as one file without the optimizer state",
          "[checkpoint][export][process]") {
  const ParamMap& reference = Reference();
  TempDir dir;
  const fs::path checkpoints =
      Interrupted(dir.path());  // whole checkpoints after 2 and 4 iterations
  Run resumed = Launch(Spec(checkpoints, true), dir.path());
  REQUIRE(resumed.status.ok());
  ParamMap model;
  for (const auto& [key, tensor] : reference) {
    if (key.rfind(kOptimizerKeyPrefix, 0) != 0) model.emplace(key, tensor);
  }
  REQUIRE(model.size() < reference.size());
  const std::string exported = dir.File("model.pt");
  const std::string command = SiblingExecutable("deepool-export") + " --checkpoint-dir " +
                              checkpoints.string() + " -o " + exported + " > " +
                              dir.File("export.out") + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream out(dir.File("export.out"));
  const std::string said((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  CHECK_THAT(said, Catch::Contains("tensors from " + CheckpointPath(checkpoints.string(), 6) +
                                   " (iteration 6, written by 3 rank(s))"));
  // The newest checkpoint's model, every layer once, bit for bit.
  StatusOr<StateDict> file = LoadCheckpoint(exported);
  REQUIRE(file.ok());
  ParamMap got;
  for (auto& [key, tensor] : *file) REQUIRE(got.emplace(key, tensor).second);
  RequireSameState(got, model, 0);
  // An older one by its iteration; one that is not there is refused.
  StatusOr<FoundCheckpoint> older = OpenCheckpoint(checkpoints.string(), 4);
  REQUIRE(older.ok());
  StatusOr<int> written = ExportCheckpointModel(*older, dir.File("model-4.pt"));
  REQUIRE(written.ok());
  CHECK(*written == static_cast<int>(model.size()));
  CHECK(OpenCheckpoint(checkpoints.string(), 3).status().code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace deepool::worker
