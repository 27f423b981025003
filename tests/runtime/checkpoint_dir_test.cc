// The checkpoint directory's bookkeeping without training: which checkpoint is whole, what is
// skipped, what pruning removes.
#include "worker/runtime/checkpoints/checkpoint_dir.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  std::string pattern = (fs::temp_directory_path() / "deepool-ckdir-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

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
  const fs::path dir = TempDir();
  WriteCheckpoint(dir, 10, 1);  // no position: as BG jobs and older executors write them
  CHECK_FALSE(LatestManifest(dir).data.has_value());
  CheckpointManifest positioned;
  positioned.data = DataPosition{1000, 96, 1, 920};  // 20 x 96 = 1920 rows: epoch 1, row 920
  WriteCheckpoint(dir, 20, 1, positioned);
  const CheckpointManifest read = LatestManifest(dir);
  REQUIRE(read.data.has_value());
  CHECK(*read.data == DataPosition{1000, 96, 1, 920});
  CHECK_FALSE(read.loss_scaling.has_value());
  fs::remove_all(dir);
}

TEST_CASE("a manifest keeps an fp16 run's loss scaler", "[checkpoint][precision]") {
  const fs::path dir = TempDir();
  CheckpointManifest scaled;
  scaled.loss_scaling = LossScalerState{16384, 27, 3};
  WriteCheckpoint(dir, 30, 1, scaled);
  const CheckpointManifest read = LatestManifest(dir);
  REQUIRE(read.loss_scaling.has_value());
  CHECK(*read.loss_scaling == LossScalerState{16384, 27, 3});
  // A scaler restored from it goes on where the run stopped.
  LossScaler scaler;
  scaler.Restore(*read.loss_scaling);
  CHECK(scaler.scale() == 16384);
  CHECK(scaler.skipped_steps() == 3);
  CHECK(scaler.state() == LossScalerState{16384, 27, 3});
  fs::remove_all(dir);
}

TEST_CASE("the newest whole checkpoint is found and odd entries are ignored", "[checkpoint]") {
  const fs::path dir = TempDir();
  CHECK(Latest(dir / "missing") == -1);
  CHECK(Latest(dir) == -1);
  WriteCheckpoint(dir, 10, 2);
  WriteCheckpoint(dir, 20, 2);
  // Not checkpoints: a name too long for a count, other names, a file.
  fs::create_directories(dir / "iter-9999999999999999999999");
  fs::create_directories(dir / "iter-abc");
  fs::create_directories(dir / "other");
  std::ofstream(dir / "iter-000000000099") << "a file, not a directory";
  CHECK(Latest(dir) == 20);
  // A newer one without its manifest (a crash before the commit) is skipped.
  fs::create_directories(CheckpointPath(dir.string(), 30));
  CHECK(Latest(dir) == 20);
  // A commit that cannot see every rank's sidecar writes no manifest.
  CheckpointManifest three;
  three.iteration = 30;
  three.world_size = 3;
  CHECK_THAT(CommitCheckpoint(CheckpointPath(dir.string(), 30), three).message(),
             Catch::Contains("share the checkpoint directory"));
  CHECK(Latest(dir) == 20);
  // A damaged manifest is skipped too, whatever its fields hold (it used to throw).
  for (const char* damaged : {R"({"format": 7})", R"([1, 2])", R"({"format": "deepool.checkpoint",
                                "iteration": "thirty"})",
                              "not json"}) {
    INFO(damaged);
    std::ofstream(CheckpointPath(dir.string(), 30) + "/MANIFEST.json") << damaged;
    CHECK(Latest(dir) == 20);
  }
  fs::remove_all(dir);
}

TEST_CASE("pruning keeps the newest whole checkpoints and a newer partial one", "[checkpoint]") {
  const fs::path dir = TempDir();
  for (int64_t i : {5, 10, 15, 20}) WriteCheckpoint(dir, i, 1);
  fs::create_directories(CheckpointPath(dir.string(), 25));  // being written
  auto removed = PruneCheckpoints(dir.string(), 2);
  REQUIRE(removed.ok());
  CHECK(*removed == 2);
  CHECK_FALSE(fs::exists(CheckpointPath(dir.string(), 5)));
  CHECK_FALSE(fs::exists(CheckpointPath(dir.string(), 10)));
  CHECK(fs::exists(CheckpointPath(dir.string(), 15)));
  CHECK(fs::exists(CheckpointPath(dir.string(), 20)));
  CHECK(fs::exists(CheckpointPath(dir.string(), 25)));
  CHECK_FALSE(PruneCheckpoints(dir.string(), 0).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepool::worker
