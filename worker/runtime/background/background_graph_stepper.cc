#include "worker/runtime/background/background_graph_stepper.h"

#include "common/logging.h"

namespace deepool::worker {
namespace {

std::string FirstLine(const std::exception& e) {
  std::string message = e.what();
  if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
  return message;
}

// The BG thread's hold on the BG stream: when the thread stops, the stream's remaining work is
// waited for there (not on whichever thread later destroys the stepper), then the thread leaves.
class ThreadScope {
 public:
  ThreadScope(DeviceStreams* streams, DeviceStream* stream, std::unique_ptr<StreamScope> scope,
              bool* entered)
      : streams_(streams), stream_(stream), scope_(std::move(scope)), entered_(entered) {}
  ~ThreadScope() {
    Status synced = streams_->Synchronize(*stream_);
    if (!synced.ok()) DP_LOG_WARN("background stream at thread exit: {}", synced.message());
    scope_.reset();
    *entered_ = false;
  }

 private:
  DeviceStreams* streams_;
  DeviceStream* stream_;
  std::unique_ptr<StreamScope> scope_;
  bool* entered_;
};

}  // namespace

GraphStepper::GraphStepper(std::unique_ptr<BackgroundTrainer> trainer,
                           std::shared_ptr<DeviceStreams> streams,
                           std::unique_ptr<DeviceStream> stream, GraphStepperOptions options)
    : streams_(std::move(streams)),
      stream_(std::move(stream)),
      trainer_(std::move(trainer)),
      options_(std::move(options)),
      iteration_(trainer_->iteration()) {
  if (!options_.capture) {
    mode_ = Mode::kEager;
    DP_LOG_INFO("background job runs eagerly: {}", options_.eager_reason);
  } else if (options_.warmup_iterations <= 0) {
    mode_ = Mode::kCapture;
  }
}

GraphStepper::~GraphStepper() {
  // Kernels of the last units may still read the parameters, the static tensors and the graph's
  // pool: wait for them before any of it is freed.
  Status synced = streams_->Synchronize(*stream_);
  if (!synced.ok()) DP_LOG_WARN("background stream at teardown: {}", synced.message());
  graph_.reset();
  static_inputs_ = torch::Tensor();
  static_labels_ = torch::Tensor();
  trainer_.reset();
  stream_.reset();
}

std::shared_ptr<void> GraphStepper::EnterThread() {
  auto scope = streams_->MakeCurrent(*stream_);
  if (!scope.ok()) {
    thread_error_ = scope.status();  // RunUnit reports it
    return nullptr;
  }
  entered_ = true;
  return std::make_shared<ThreadScope>(streams_.get(), stream_.get(), std::move(scope).value(),
                                       &entered_);
}

bool GraphStepper::NextUnitNeedsFgIdle() const {
  return options_.eager_units_wait_for_fg_idle && mode_ == Mode::kEager;
}

StatusOr<BgUnitResult> GraphStepper::RunUnit() {
  if (!entered_) {
    return FailedPreconditionError(
        "background stepper: the BG stream is not current on this thread" +
        (thread_error_.ok() ? std::string(" (EnterThread)") : ": " + thread_error_.message()));
  }
  switch (mode_) {
    case Mode::kWarmup:
    case Mode::kEager:
      return EagerUnit();
    case Mode::kCapture:
      return CaptureUnit();
    case Mode::kReplay:
      return ReplayUnit();
  }
  return InternalError("background stepper: unknown mode");
}

StatusOr<BgUnitResult> GraphStepper::EagerUnit() {
  ASSIGN_OR_RETURN(BgUnitResult result, trainer_->RunUnit());
  if (!result.iteration_done) return result;
  iteration_ = result.iteration + 1;
  if (mode_ == Mode::kWarmup && ++warmups_ >= options_.warmup_iterations) mode_ = Mode::kCapture;
  return result;
}

StatusOr<BgUnitResult> GraphStepper::CaptureUnit() {
  RETURN_IF_ERROR(StageBatch());
  Status captured = Capture();
  if (!captured.ok()) {
    FallBackToEager(captured);
    return BgUnitResult{false, iteration_, 0};  // the iteration starts over, eagerly
  }
  mode_ = Mode::kReplay;
  DP_LOG_INFO("background job: iteration captured as a graph after {} warm-up iterations",
              warmups_);
  return ReplayStaged();
}

StatusOr<BgUnitResult> GraphStepper::ReplayUnit() {
  RETURN_IF_ERROR(StageBatch());
  return ReplayStaged();
}

Status GraphStepper::StageBatch() {
  const std::string where = "background iteration " + std::to_string(iteration_);
  try {
    auto batch = trainer_->data().GlobalBatch(iteration_);
    if (!batch.ok()) return batch.status().WithContext(where);
    if (!static_inputs_.defined()) {
      // Allocated once, outside the graph's pool: the captured graph reads these addresses.
      const torch::Device device = trainer_->device();
      static_inputs_ = torch::empty(batch->inputs.sizes(), batch->inputs.options().device(device));
      static_labels_ = torch::empty(batch->labels.sizes(), batch->labels.options().device(device));
    }
    static_inputs_.copy_(batch->inputs);
    static_labels_.copy_(batch->labels);
  } catch (const std::exception& e) {
    return InternalError(where + ": staging the batch: " + FirstLine(e));
  }
  return Status::Ok();
}

Status GraphStepper::Capture() {
  // The warm-ups' work finishes first, so the allocator has nothing pending from before.
  RETURN_IF_ERROR(streams_->Synchronize(*stream_));
  DropGradients();
  ASSIGN_OR_RETURN(graph_, streams_->BeginCapture(*stream_));
  Status ran = RunStaticIteration();
  Status ended = streams_->EndCapture(*graph_);  // also after a failure inside the capture
  if (ran.ok() && ended.ok()) return Status::Ok();
  graph_.reset();
  if (ran.ok()) return ended;
  return InternalError("the captured iteration failed: " + ran.message() +
                       (ended.ok() ? "" : "; " + ended.message()));
}

Status GraphStepper::RunStaticIteration() {
  try {
    trainer_->set_iteration(iteration_);
    trainer_->BeginIteration(Batch{static_inputs_, static_labels_});
    const int n = trainer_->graph().num_layers();
    for (int id = 0; id < n; ++id) trainer_->ForwardLayer(id);
    for (int id = n - 1; id >= 0; --id) trainer_->BackwardLayer(id);
    trainer_->StepOptimizer();
  } catch (const std::exception& e) {
    return InternalError(FirstLine(e));
  }
  return Status::Ok();
}

StatusOr<BgUnitResult> GraphStepper::ReplayStaged() {
  const std::string where = "background iteration " + std::to_string(iteration_);
  Status replayed = streams_->Replay(*graph_, *stream_);
  if (!replayed.ok()) return replayed.WithContext(where);
  BgUnitResult result{true, iteration_, 0};
  try {
    result.loss = trainer_->loss_tensor().item<double>();  // waits for the BG stream only
  } catch (const std::exception& e) {
    return InternalError(where + " (replayed graph): " + FirstLine(e));
  }
  trainer_->set_iteration(++iteration_);
  return result;
}

void GraphStepper::FallBackToEager(const Status& why) {
  DP_LOG_WARN("background job: graph capture failed, running eagerly from iteration {}: {}",
              iteration_, why.message());
  fallback_ = why;
  graph_.reset();
  static_inputs_ = torch::Tensor();
  static_labels_ = torch::Tensor();
  // Gradients allocated in the discarded capture live in its pool; eager backward makes new ones.
  DropGradients();
  trainer_->set_iteration(iteration_);
  mode_ = Mode::kEager;
}

void GraphStepper::DropGradients() {
  for (auto& module : trainer_->modules()) {
    for (auto& param : module->parameters()) param.mutable_grad() = torch::Tensor();
  }
}

}  // namespace deepool::worker
