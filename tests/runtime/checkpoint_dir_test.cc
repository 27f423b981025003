// The checkpoint directory's bookkeeping without training: which checkpoint is whole, what is
// skipped, what pruning removes.
#include "worker/runtime/checkpoints/checkpoint_dir.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/temp_dir.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

// A whole checkpoint of `ranks` files, as the executor writes one; its manifest is `manifest`
// with the iteration, world size and optimizer filled in.
void WriteCheckpoint(const fs::path& dir, int64_t iteration, int ranks,
                     CheckpointManifest manifest = {}) {
  const std::string path = CheckpointPath(dir.string(), iteration);
  fs::create_directories(path);
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string name = RankFileName(rank);
    std::ofstream(path + "/" + name) << "state of rank " << rank << " at " << iteration;
    auto file = DescribeFile(path + "/" + name, name);
    REQUIRE(file.ok());
    REQUIRE(WriteRankSidecar(path, rank, *file).ok());
  }
  manifest.iteration = iteration;
  manifest.world_size = ranks;
  manifest.optimizer = "sgd";
  REQUIRE(CommitCheckpoint(path, manifest).ok());
}

// The manifest FindLatestCheckpoint reads back from `dir`'s newest checkpoint.
CheckpointManifest LatestManifest(const fs::path& dir) {
  auto found = FindLatestCheckpoint(dir.string());
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  return (*found)->manifest;
}

int64_t Latest(const fs::path& dir) {
  auto found = FindLatestCheckpoint(dir.string());
  REQUIRE(found.ok());
  return found->has_value() ? (*found)->manifest.iteration : -1;
}

TEST_CASE("a manifest keeps its data position and reads one without it", "[checkpoint][epochs]") {
  TempDir dir;
  WriteCheckpoint(dir.path(), 10, 1);  // no position: as BG jobs and older executors write them
  CHECK_FALSE(LatestManifest(dir.path()).data.has_value());
  CheckpointManifest positioned;
  positioned.data = DataPosition{1000, 96, 1, 920};  // 20 x 96 = 1920 rows: epoch 1, row 920
  WriteCheckpoint(dir.path(), 20, 1, positioned);
  const CheckpointManifest read = LatestManifest(dir.path());
  REQUIRE(read.data.has_value());
  CHECK(*read.data == DataPosition{1000, 96, 1, 920});
  CHECK_FALSE(read.loss_scaling.has_value());
}

TEST_CASE("a manifest keeps an fp16 run's loss scaler", "[checkpoint][precision]") {
  TempDir dir;
  CheckpointManifest scaled;
  scaled.loss_scaling = LossScalerState{16384, 27, 3};
  WriteCheckpoint(dir.path(), 30, 1, scaled);
  const CheckpointManifest read = LatestManifest(dir.path());
  REQUIRE(read.loss_scaling.has_value());
  CHECK(*read.loss_scaling == LossScalerState{16384, 27, 3});
  // A scaler restored from it goes on where the run stopped.
  LossScaler scaler;
  scaler.Restore(*read.loss_scaling);
  CHECK(scaler.scale() == 16384);
  CHECK(scaler.skipped_steps() == 3);
  CHECK(scaler.state() == LossScalerState{16384, 27, 3});
}

TEST_CASE("the newest whole checkpoint is found and odd entries are ignored", "[checkpoint]") {
  TempDir dir;
  CHECK(Latest(dir.File("missing")) == -1);
  CHECK(Latest(dir.path()) == -1);
  WriteCheckpoint(dir.path(), 10, 2);
  WriteCheckpoint(dir.path(), 20, 2);
  // Not checkpoints: a name too long for a count, other names, a file.
  fs::create_directories(dir.File("iter-9999999999999999999999"));
  fs::create_directories(dir.File("iter-abc"));
  fs::create_directories(dir.File("other"));
  std::ofstream(dir.File("iter-000000000099")) << "a file, not a directory";
  CHECK(Latest(dir.path()) == 20);
  // A newer one without its manifest (a crash before the commit) is skipped.
  fs::create_directories(CheckpointPath(dir.path(), 30));
  CHECK(Latest(dir.path()) == 20);
  // A commit that cannot see every rank's sidecar writes no manifest.
  CheckpointManifest three;
  three.iteration = 30;
  three.world_size = 3;
  CHECK_THAT(CommitCheckpoint(CheckpointPath(dir.path(), 30), three).message(),
             Catch::Contains("share the checkpoint directory"));
  CHECK(Latest(dir.path()) == 20);
  // A damaged manifest is skipped too, whatever its fields hold (it used to throw).
  for (const char* damaged : {R"({"format": 7})", R"([1, 2])", R"({"format": "deepool.checkpoint",
                                "iteration": "thirty"})",
                              "not json"}) {
    INFO(damaged);
    std::ofstream(CheckpointPath(dir.path(), 30) + "/MANIFEST.json") << damaged;
    CHECK(Latest(dir.path()) == 20);
  }
}

TEST_CASE("pruning keeps the newest whole checkpoints and a newer partial one", "[checkpoint]") {
  TempDir dir;
  for (int64_t i : {5, 10, 15, 20}) WriteCheckpoint(dir.path(), i, 1);
  fs::create_directories(CheckpointPath(dir.path(), 25));  // being written
  auto removed = PruneCheckpoints(dir.path(), 2);
  REQUIRE(removed.ok());
  CHECK(*removed == 2);
  CHECK_FALSE(fs::exists(CheckpointPath(dir.path(), 5)));
  CHECK_FALSE(fs::exists(CheckpointPath(dir.path(), 10)));
  CHECK(fs::exists(CheckpointPath(dir.path(), 15)));
  CHECK(fs::exists(CheckpointPath(dir.path(), 20)));
  CHECK(fs::exists(CheckpointPath(dir.path(), 25)));
  CHECK_FALSE(PruneCheckpoints(dir.path(), 0).ok());
}

}  // namespace
}  // namespace deepool::worker
