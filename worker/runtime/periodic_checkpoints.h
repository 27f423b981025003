// Periodic checkpoints of one executor rank (the run spec's checkpoint.dir, docs/runtime.md
// "Periodic checkpoints and resume"): writing one after an iteration, and resuming from the
// newest whole one at start. The directory layout is checkpoint_dir.h's, the state
// training_state.h's.
// Threading: the rank's training thread. Both use world collectives, so every rank of the job
// calls them at the same point (between the same iterations).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <ostream>

#include "common/status.h"
#include "worker/runtime/checkpoint_dir.h"
#include "worker/runtime/communicator.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {

// Fails only when the ranks could not agree (a rank gone: training cannot go on); `written`
// says whether the checkpoint was written whole, `stop` whether every rank stops now.
struct CheckpointOutcome {
  Status written;
  bool stop = false;  // some rank was asked to stop and the checkpoint is whole
};

// One checkpoint after `done` iterations into spec.checkpoints->dir: each rank writes its layers,
// every rank says whether it succeeded (and whether it was asked to stop), and rank 0 then
// writes the manifest and prunes old ones. A stop asked of any rank stops them all, so that
// ranks that heard of it at different iterations still agree; it waits for a whole checkpoint.
StatusOr<CheckpointOutcome> WriteTrainingCheckpoint(const RunSpec& spec, int rank, int64_t done,
                                                    Executor& executor, Communicator& comm,
                                                    const torch::Device& device,
                                                    bool stop_asked = false);

// The model of a whole checkpoint as one state_dict file at `path` (checkpoint.h's format and
// keys, so torchvision loads it): every rank's parameters and buffers, without the optimizer
// state. Each layer is in exactly one rank's file. Returns how many tensors were written.
StatusOr<int> ExportCheckpointModel(const FoundCheckpoint& found, const std::string& path);

// The mean of `value` over every rank (a world all-reduce): the same number on each.
StatusOr<double> MeanOverRanks(Communicator& comm, const torch::Device& device, double value);

// Where training starts: iteration 0, or the newest whole checkpoint's iteration, whose state is
// then loaded (it may come from another plan and world size). Rank 0 prints the resume as a log
// line on `out`.
StatusOr<int64_t> ResumeFromCheckpoint(const RunSpec& spec, int rank, Executor& executor,
                                       Communicator& comm, const torch::Device& device,
                                       std::ostream& out);

}  // namespace deepool::worker
