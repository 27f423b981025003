// Periodic checkpoints of a training job: a directory of whole-job checkpoints, one
// subdirectory per checkpointed iteration count:
//   DIR/iter-000000000120/rank-0.pt     rank 0's training state (training_state.h)
//                        /rank-0.json   its size and digest, written after it
//                        /...           one pair per rank
//                        /MANIFEST.json written last, by rank 0, once every rank's pair exists
// "iter-K" holds the state after K iterations; training resumes at iteration K. A checkpoint is
// whole once its manifest exists (written through a rename); FindLatestCheckpoint also checks
// every listed file's size and digest, and skips, with a log line, checkpoints that are partial
// or corrupt, newest first. Rank 0 reads the other ranks' sidecars, so every rank's host must
// see the same directory (a shared filesystem for a multi-host job).
// Threading: free functions without shared state (file I/O only); one writer per directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/runtime/layers/loss_scaler.h"

namespace deepool::worker {

struct CheckpointFile {
  std::string name;  // relative to the checkpoint's directory
  int64_t bytes = 0;
  uint64_t digest = 0;  // common/content_digest.h of the contents
};

// Where in the training set a checkpoint stands (data/epoch_order.h): the next row to train is
// row `offset` of epoch `epoch`'s order, in a set of `samples` samples read `global_batch` rows
// an iteration. It follows from the iteration; it is recorded so that a resumed run can tell
// when its data set is no longer the one the checkpoint was trained on.
struct DataPosition {
  int64_t samples = 0;
  int64_t global_batch = 0;
  int64_t epoch = 0;
  int64_t offset = 0;
  bool operator==(const DataPosition& o) const {
    return samples == o.samples && global_batch == o.global_batch && epoch == o.epoch &&
           offset == o.offset;
  }
};

struct CheckpointManifest {
  int64_t iteration = 0;  // iterations trained when it was written
  int world_size = 0;
  std::string job_id;
  std::string optimizer;  // the optimizer whose state the files hold ("sgd", "adam")
  std::vector<CheckpointFile> files;
  // FG runs' checkpoints ("data" in the manifest); absent from BG jobs' and older ones.
  std::optional<DataPosition> data;
  // fp16 runs' loss scaler ("loss_scaling": {"scale","good_steps","skipped_steps"}); absent
  // from other runs' checkpoints.
  std::optional<LossScalerState> loss_scaling;
};

// A checkpoint found on disk.
struct FoundCheckpoint {
  std::string path;  // its directory
  CheckpointManifest manifest;
};

// "DIR/iter-000000000120".
std::string CheckpointPath(const std::string& dir, int64_t iteration);
// "rank-3.pt".
std::string RankFileName(int rank);

// The file's size and digest (NOT_FOUND when it cannot be read).
StatusOr<CheckpointFile> DescribeFile(const std::string& path, const std::string& name);

// After rank `rank` wrote RankFileName(rank) into `checkpoint_path`: records its size and
// digest (`file`, as the writer computed them) beside it ("rank-R.json").
Status WriteRankSidecar(const std::string& checkpoint_path, int rank, const CheckpointFile& file);

// Rank 0, once every rank reported its file written: reads the ranks' sidecars and writes the
// manifest. Fails, writing nothing, when a sidecar is missing or unreadable.
Status CommitCheckpoint(const std::string& checkpoint_path, CheckpointManifest manifest);

// The newest whole checkpoint in `dir`; nullopt when there is none (or no `dir`). Partial or
// corrupt ones are skipped with a warning naming what is wrong.
StatusOr<std::optional<FoundCheckpoint>> FindLatestCheckpoint(const std::string& dir);

// The checkpoint of `iteration` in `dir` when it is whole (NOT_FOUND, or what is wrong with it).
StatusOr<FoundCheckpoint> OpenCheckpoint(const std::string& dir, int64_t iteration);

// Removes every checkpoint older than the `keep` newest whole ones (partial ones included).
// Returns how many were removed.
StatusOr<int> PruneCheckpoints(const std::string& dir, int keep);

}  // namespace deepool::worker
