// CUDA streams and CUDA graphs for a BG job sharing a device (multiplex_device.h). Without
// DEEPOOL_HAVE_CUDA only the device-independent parts are compiled: CPU devices need neither.
#include "common/logging.h"
#include "worker/runtime/multiplex_device.h"

#if DEEPOOL_HAVE_CUDA
#include <torch/version.h>

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace deepool::worker {

Status CudaGraphCapturable(const BackgroundSpec& spec) {
  if (!spec.sharing.cuda_graphs) return FailedPreconditionError("cuda_graphs is off");
  if (spec.optimizer.name != "sgd") {
    return FailedPreconditionError("only SGD steps can be captured (Adam counts steps on the host)");
  }
  if (spec.graph) {
    for (const auto& layer : spec.graph->layers()) {
      if (layer.op == planner::Op::kDropout) {
        return FailedPreconditionError("layer " + layer.name +
                                       " is dropout, whose masks are drawn on the host");
      }
    }
  }
  return Status::Ok();
}

#if DEEPOOL_HAVE_CUDA

namespace {

// Holds the calling thread's current stream until destroyed.
class StreamScope {
 public:
  explicit StreamScope(c10::cuda::CUDAStream stream) : guard_(stream) {}

 private:
  c10::cuda::CUDAStreamGuard guard_;
};

// Replays one captured BG iteration per unit. The first kWarmupIterations units run eagerly on
// the BG stream (they allocate gradients and momentum buffers and settle the allocator), the
// next captures the iteration and replays it.
class CudaGraphStepper final : public BackgroundStepper {
 public:
  explicit CudaGraphStepper(std::unique_ptr<BackgroundTrainer> trainer)
      : trainer_(std::move(trainer)) {}

  int64_t batch_size() const override { return trainer_->batch_size(); }

  StatusOr<BgUnitResult> RunUnit() override {
    BgUnitResult result;
    result.iteration = iteration_;
    try {
      ASSIGN_OR_RETURN(Batch batch, trainer_->data().GlobalBatch(iteration_));
      if (!static_inputs_.defined()) {
        static_inputs_ = batch.inputs.to(trainer_->device());
        static_labels_ = batch.labels.to(trainer_->device());
      } else {
        static_inputs_.copy_(batch.inputs);
        static_labels_.copy_(batch.labels);
      }
      if (captured_) {
        graph_.replay();
      } else if (warmups_ < kWarmupIterations) {
        RunIteration();
        ++warmups_;
      } else {
        Capture();
        graph_.replay();
      }
      result.loss = trainer_->loss_tensor().item<double>();  // waits for the BG stream only
    } catch (const std::exception& e) {
      return InternalError("background iteration " + std::to_string(iteration_) +
                           " (CUDA graph): " + e.what());
    }
    result.iteration_done = true;
    ++iteration_;
    return result;
  }

 private:
  static constexpr int kWarmupIterations = 3;

  void RunIteration() {
    trainer_->set_iteration(iteration_);
    trainer_->BeginIteration(Batch{static_inputs_, static_labels_});
    const int n = trainer_->graph().num_layers();
    for (int id = 0; id < n; ++id) trainer_->ForwardLayer(id);
    for (int id = n - 1; id >= 0; --id) trainer_->BackwardLayer(id);
    trainer_->StepOptimizer();
  }

  void Capture() {
    c10::cuda::getCurrentCUDAStream(trainer_->device().index()).synchronize();
    // Gradients are dropped so that backward allocates them inside the graph's memory pool;
    // every replay then overwrites them (no zeroing needed).
    for (auto& module : trainer_->modules()) {
      for (auto& param : module->parameters()) param.mutable_grad() = torch::Tensor();
    }
    // Thread-local capture: the FG thread keeps allocating and synchronising meanwhile.
#if TORCH_VERSION_MAJOR >= 2
    graph_.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
    // Not reached: MakeBackgroundStepper never builds this stepper on libtorch 1.x.
    graph_.capture_begin();
#endif
    RunIteration();
    graph_.capture_end();
    captured_ = true;
    DP_LOG_INFO("background job: iteration captured as a CUDA graph after {} warm-up iterations",
                kWarmupIterations);
  }

  std::unique_ptr<BackgroundTrainer> trainer_;
  at::cuda::CUDAGraph graph_;
  torch::Tensor static_inputs_, static_labels_;
  bool captured_ = false;
  int warmups_ = 0;
  int64_t iteration_ = 0;
};

}  // namespace

std::shared_ptr<void> EnterSharingStream(const torch::Device& device, bool foreground,
                                         const SharingOptions& options) {
  if (!device.is_cuda()) return nullptr;
  bool high_priority = foreground && options.priority_streams;
  auto stream = c10::cuda::getStreamFromPool(high_priority, device.index());
  return std::make_shared<StreamScope>(stream);
}

StatusOr<std::unique_ptr<BackgroundStepper>> MakeBackgroundStepper(
    std::unique_ptr<BackgroundTrainer> trainer, const SharingOptions& options) {
  if (!trainer->device().is_cuda() || !options.cuda_graphs) {
    return std::unique_ptr<BackgroundStepper>(std::move(trainer));
  }
  BackgroundSpec probe = trainer->spec();
  probe.sharing = options;
#if TORCH_VERSION_MAJOR >= 2
  Status capturable = CudaGraphCapturable(probe);
#else
  // libtorch 1.x captures only in global mode, which the FG thread's concurrent allocations and
  // synchronisations would invalidate; its CUDAGraph has no capture-mode argument.
  Status capturable = FailedPreconditionError(
      "CUDA graphs need libtorch >= 2.0 (thread-local capture); this libtorch is " TORCH_VERSION);
#endif
  if (!capturable.ok()) {
    DP_LOG_WARN("background job runs eagerly: {}", capturable.message());
    return std::unique_ptr<BackgroundStepper>(std::move(trainer));
  }
  return std::unique_ptr<BackgroundStepper>(new CudaGraphStepper(std::move(trainer)));
}

#else  // !DEEPOOL_HAVE_CUDA

std::shared_ptr<void> EnterSharingStream(const torch::Device&, bool, const SharingOptions&) {
  // Without CUDA every device is a CPU device (MakeDeviceContext refuses cuda:K).
  return nullptr;
}

StatusOr<std::unique_ptr<BackgroundStepper>> MakeBackgroundStepper(
    std::unique_ptr<BackgroundTrainer> trainer, const SharingOptions&) {
  return std::unique_ptr<BackgroundStepper>(std::move(trainer));
}

#endif

}  // namespace deepool::worker
