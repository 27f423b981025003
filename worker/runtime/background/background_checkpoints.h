// A BG job's periodic checkpoints (BackgroundSpec::checkpoints): the whole job as a one-rank
// checkpoint in periodic_checkpoints.h's format (rank-0.pt holds every layer and the optimizer
// state, the manifest says world size 1), so that a BG job hosted in a FG executor and the same
// job run by an executor of its own resume each other's checkpoints, and deepool-export reads
// them.
//
// ResumeBackgroundTrainer loads the newest whole checkpoint into a trainer as it is built.
// CheckpointingStepper wraps the job's stepper: after an iteration that its schedule calls for
// (checkpoint_schedule.h; one rank, so the elapsed time needs no agreement), it copies the
// state into host memory within that unit, while the gate lets BG work run, and writes the
// files in AfterUnit, outside the gate, so the FG rank never waits for the disk. A failed write
// is logged and training goes on; the job would then resume from the checkpoint before.
//
// Threading: ResumeBackgroundTrainer on the thread that builds the trainer; the stepper on the
// BG thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "common/status.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_schedule.h"

namespace deepool::worker {

// The iteration training starts at: 0 when trainer.spec().checkpoints->dir holds no whole
// checkpoint, else the newest one's, whose state is loaded into the trainer (logged).
StatusOr<int64_t> ResumeBackgroundTrainer(BackgroundTrainer& trainer);

class CheckpointingStepper final : public BackgroundStepper {
 public:
  // `trainer` is the one `inner` steps (the stepper itself, or the trainer a GraphStepper
  // owns), with spec().checkpoints set; `clock` measures the seconds between checkpoints. Both
  // must outlive the stepper.
  CheckpointingStepper(std::unique_ptr<BackgroundStepper> inner, BackgroundTrainer* trainer,
                       const Clock* clock);

  std::shared_ptr<void> EnterThread() override { return inner_->EnterThread(); }
  StatusOr<BgUnitResult> RunUnit() override;
  void AfterUnit() override;
  bool NextUnitNeedsFgIdle() const override { return inner_->NextUnitNeedsFgIdle(); }
  int64_t batch_size() const override { return inner_->batch_size(); }
  int64_t first_iteration() const override { return inner_->first_iteration(); }
  Status SetMicroBatches(int64_t count) override { return inner_->SetMicroBatches(count); }
  int64_t micro_batches() const override { return inner_->micro_batches(); }

  BackgroundStepper& inner() { return *inner_; }
  int64_t checkpoints_written() const { return written_; }

 private:
  struct Snapshot {
    int64_t done = 0;  // iterations trained
    StateDict state;   // in host memory
  };
  double Seconds() const;
  bool Due(int64_t done);
  StatusOr<StateDict> CopyState() const;
  Status Write(const Snapshot& snapshot) const;

  std::unique_ptr<BackgroundStepper> inner_;
  BackgroundTrainer* trainer_;
  const Clock* clock_;
  CheckpointSchedule schedule_;
  std::optional<Snapshot> pending_;
  int64_t written_ = 0;
};

}  // namespace deepool::worker
