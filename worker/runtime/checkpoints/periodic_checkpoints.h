// Periodic checkpoints of one executor rank (the run spec's checkpoint.dir, docs/runtime.md
// "Periodic checkpoints and resume"): writing one after an iteration, and resuming from the
// newest whole one at start. The directory layout is checkpoint_dir.h's, the state
// training_state.h's.
// The building blocks below them (one rank's part, the commit, loading a found checkpoint) are
// shared with BG jobs' checkpoints (background_checkpoints.h), which are one-rank checkpoints
// of the same format.
// Threading: the rank's training thread. WriteTrainingCheckpoint and ResumeFromCheckpoint use
// world collectives, so every rank of the job calls them at the same point (between the same
// iterations); the building blocks are plain file I/O.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "common/status.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {

// Fails only when the ranks could not agree (a rank gone: training cannot go on); `written`
// says whether the checkpoint was written whole, `stop` whether every rank stops now.
struct CheckpointOutcome {
  Status written;
  bool stop = false;  // some rank was asked to stop and the checkpoint is whole
};

// Writes `state` as rank `rank`'s part of the checkpoint at `checkpoint_path` (created if
// needed): its file, then its sidecar.
Status WriteRankPart(const std::string& checkpoint_path, int rank, const StateDict& state);

// Rank 0, once every rank's part is written: the manifest, then the pruning of checkpoints older
// than the `keep` newest (a failed pruning is logged, not returned). Returns how many were
// removed.
StatusOr<int> CommitAndPrune(const std::string& checkpoint_path, CheckpointManifest manifest,
                             const protocol::PeriodicCheckpoints& periodic);

// Loads a whole checkpoint's state (every rank's file, merged) into the held `modules` and
// `optimizer`, after checking that it is not past `iterations` (0: no limit) and holds
// `optimizer_name`'s state.
Status LoadFoundCheckpoint(const FoundCheckpoint& found, int64_t iterations,
                           const std::string& optimizer_name, const planner::Graph& graph,
                           const std::map<int, std::shared_ptr<LayerModule>>& modules,
                           torch::optim::Optimizer* optimizer);

// One checkpoint after `done` iterations into spec.checkpoints->dir: each rank writes its layers,
// every rank says whether it succeeded (and whether it was asked to stop), and rank 0 then
// writes the manifest and prunes old ones. A stop asked of any rank stops them all, so that
// ranks that heard of it at different iterations still agree; it waits for a whole checkpoint.
// The manifest records the data position after `done` iterations in a training set of
// `data_samples` samples.
StatusOr<CheckpointOutcome> WriteTrainingCheckpoint(const RunSpec& spec, int rank, int64_t done,
                                                    int64_t data_samples, Executor& executor,
                                                    Communicator& comm, const torch::Device& device,
                                                    bool stop_asked = false);

// The model of a whole checkpoint as one state_dict file at `path` (checkpoint.h's format and
// keys, so torchvision loads it): every rank's parameters and buffers, without the optimizer
// state. Each layer is in exactly one rank's file. Returns how many tensors were written.
StatusOr<int> ExportCheckpointModel(const FoundCheckpoint& found, const std::string& path);

// The mean of `value` over every rank (a world all-reduce): the same number on each.
StatusOr<double> MeanOverRanks(Communicator& comm, const torch::Device& device, double value);

// Where training starts: iteration 0, or the newest whole checkpoint's iteration, whose state is
// then loaded (it may come from another plan and world size). Rank 0 prints the resume as a log
// line on `out`, with the data position (epoch and offset); when the checkpoint's training set
// or global batch differ from this run's (`data_samples`, the plan's), the line says that the
// run goes on from the same iteration but not at the same sample.
StatusOr<int64_t> ResumeFromCheckpoint(const RunSpec& spec, int rank, int64_t data_samples,
                                       Executor& executor, Communicator& comm,
                                       const torch::Device& device, std::ostream& out);

}  // namespace deepool::worker
