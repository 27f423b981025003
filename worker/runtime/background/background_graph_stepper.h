// The BG stepper on a device with streams (CUDA; a fake in tests): the BG job's work on its own
// dedicated stream, replayed as one captured graph per unit where the model allows it.
//
// States, in order:
//   warm-up  kWarmupIterations iterations run eagerly in layer units (they allocate gradients and
//            momentum buffers and settle the allocator and the kernels' workspaces);
//   capture  one unit: the batch is copied into static input/label tensors, the stream is
//            synchronised, gradients are dropped (backward then allocates them in the graph's
//            memory pool, and every replay overwrites them), and the iteration on the static
//            tensors is captured, then replayed once for this batch;
//   replay   one unit per iteration: copy the batch into the static tensors, replay, read the
//            loss (which waits for the BG stream only, on the BG thread);
//   eager    from the start when capture is off or refused (CudaGraphCapturable), or for the rest
//            of the job after a capture failed (an exception inside it, or a failed begin/end):
//            the capture is ended and discarded, the reason logged, and the job goes on in
//            layer units.
//
// Why an eager job waits for the FG rank to be idle: libtorch's autograd engine runs all CUDA
// backward work of a device on one device thread, shared by every thread that calls backward.
// An eager BG backward therefore queues on the same CPU thread as the FG rank's backward, and
// the BG thread's low CPU priority (SCHED_IDLE) and low stream priority do not cover it. So in
// the eager state every unit asks the gate for an FG idle period, as on a CPU device
// (NextUnitNeedsFgIdle), and the FG rank waits for at most one such unit; an eager job beside an
// FG rank that never waits (a one-rank FG job) runs only once that rank is done. Replays launch
// the captured graph from the BG thread alone, never through autograd, and run concurrently.
// The warm-up and capture units run concurrently too: they overlap the FG rank's backward on
// the device thread for a bounded start-up (warmup_iterations + 1 iterations), and gating them
// would keep a capturable job from ever starting beside an FG rank that never waits. A sharing
// mode set explicitly to "concurrent" (the naive collocation baseline) makes no unit wait.
//
// Teardown: the destructor synchronises the BG stream before it frees the graph, the static
// tensors and the trainer (parameters, gradients, optimizer state), and only then destroys the
// stream; the scope from EnterThread synchronises it too when the BG thread ends.
//
// Threading: one thread drives the stepper (the BG thread): it calls EnterThread first and keeps
// the result while it calls RunUnit. The destructor may run on another thread once that thread
// has ended.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/devices/device_streams.h"

namespace deepool::worker {

struct GraphStepperOptions {
  bool capture = true;                       // false: eager from the start
  std::string eager_reason;                  // why not captured (logged), when capture is false
  bool eager_units_wait_for_fg_idle = true;  // in the eager state (see above)
  int warmup_iterations = 3;
};

class GraphStepper final : public BackgroundStepper {
 public:
  enum class Mode { kWarmup, kCapture, kReplay, kEager };

  // `trainer` must have been built with `stream` current (its device work is on that stream).
  GraphStepper(std::unique_ptr<BackgroundTrainer> trainer, std::shared_ptr<DeviceStreams> streams,
               std::unique_ptr<DeviceStream> stream, GraphStepperOptions options);
  ~GraphStepper() override;

  std::shared_ptr<void> EnterThread() override;
  StatusOr<BgUnitResult> RunUnit() override;
  bool NextUnitNeedsFgIdle() const override;
  int64_t batch_size() const override { return trainer_->batch_size(); }
  int64_t first_iteration() const override { return trainer_->first_iteration(); }

  Mode mode() const { return mode_; }
  int warmups_done() const { return warmups_; }
  const Status& fallback_reason() const { return fallback_; }  // why eager after a failure
  const torch::Tensor& static_inputs() const { return static_inputs_; }
  const torch::Tensor& static_labels() const { return static_labels_; }
  BackgroundTrainer& trainer() { return *trainer_; }

 private:
  StatusOr<BgUnitResult> EagerUnit();
  StatusOr<BgUnitResult> CaptureUnit();
  StatusOr<BgUnitResult> ReplayUnit();
  Status StageBatch();          // the batch of iteration_ into the static tensors
  Status Capture();             // graph_ holds a replayable graph when OK
  Status RunStaticIteration();  // one whole iteration on the static tensors, exceptions caught
  StatusOr<BgUnitResult> ReplayStaged();
  void FallBackToEager(const Status& why);
  void DropGradients();

  // Destroyed last: everything below may have work queued on it.
  std::shared_ptr<DeviceStreams> streams_;
  std::unique_ptr<DeviceStream> stream_;
  std::unique_ptr<BackgroundTrainer> trainer_;
  std::unique_ptr<DeviceGraph> graph_;
  torch::Tensor static_inputs_, static_labels_;
  const GraphStepperOptions options_;
  Mode mode_ = Mode::kWarmup;
  Status fallback_;
  Status thread_error_;  // EnterThread's failure
  bool entered_ = false;
  int warmups_ = 0;
  int64_t iteration_ = 0;  // the next iteration to finish
};

}  // namespace deepool::worker
