// Streams and the BG stepper for a BG job sharing a device (multiplex_device.h). No CUDA here:
// the CUDA calls sit behind DeviceStreams (device_streams_cuda.cc).
#include "worker/runtime/background/multiplex_device.h"

#include "common/logging.h"
#include "worker/runtime/background/background_checkpoints.h"
#include "worker/runtime/background/background_graph_stepper.h"

namespace deepool::worker {

Status CudaGraphCapturable(const BackgroundSpec& spec) {
  if (!spec.sharing.cuda_graphs) return FailedPreconditionError("cuda_graphs is off");
  if (spec.optimizer.name != "sgd") {
    return FailedPreconditionError(
        "only SGD steps can be captured (Adam and AdamW count steps on the host)");
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

StatusOr<std::shared_ptr<DeviceStreams>> MakeSharingStreams(const torch::Device& device) {
  if (!device.is_cuda()) return std::shared_ptr<DeviceStreams>();
  return MakeCudaDeviceStreams(device.has_index() ? device.index() : 0);
}

StreamPriority SharingStreamPriority(bool foreground, const SharingOptions& options) {
  if (!options.priority_streams) return StreamPriority::kDefault;
  return foreground ? StreamPriority::kHigh : StreamPriority::kLow;
}

StatusOr<std::unique_ptr<ScopedStream>> EnterForegroundStream(
    std::shared_ptr<DeviceStreams> streams, const SharingOptions& options) {
  if (!streams) return std::unique_ptr<ScopedStream>();
  return ScopedStream::Enter(std::move(streams), SharingStreamPriority(true, options));
}

namespace {

StatusOr<std::unique_ptr<GraphStepper>> MakeGraphStepper(const BackgroundSpec& spec,
                                                         torch::Device device,
                                                         std::shared_ptr<DeviceStreams> streams) {
  ASSIGN_OR_RETURN(auto stream, streams->CreateStream(SharingStreamPriority(false, spec.sharing)));
  StatusOr<std::unique_ptr<BackgroundTrainer>> trainer = InternalError("not built");
  {
    // Parameters and optimizer state are made on the BG stream, the only one that uses them.
    ASSIGN_OR_RETURN(auto scope, streams->MakeCurrent(*stream));
    trainer = BackgroundTrainer::Create(spec, device);
  }
  if (!trainer.ok()) {
    // What the failed build queued must finish before its stream goes.
    (void)streams->Synchronize(*stream);
    return trainer.status();
  }
  GraphStepperOptions options;
  Status capturable = CudaGraphCapturable(spec);
  options.capture = capturable.ok();
  options.eager_reason = capturable.message();
  options.eager_units_wait_for_fg_idle = spec.sharing.mode != SharingMode::kConcurrent;
  return std::make_unique<GraphStepper>(std::move(trainer).value(), std::move(streams),
                                        std::move(stream), std::move(options));
}

}  // namespace

StatusOr<std::unique_ptr<BackgroundStepper>> MakeBackgroundStepper(
    const BackgroundSpec& spec, torch::Device device, std::shared_ptr<DeviceStreams> streams,
    const Clock* clock) {
  std::unique_ptr<BackgroundStepper> stepper;
  BackgroundTrainer* trainer = nullptr;
  if (!streams) {
    ASSIGN_OR_RETURN(auto eager, BackgroundTrainer::Create(spec, device));
    trainer = eager.get();
    stepper = std::move(eager);
  } else {
    ASSIGN_OR_RETURN(auto graph, MakeGraphStepper(spec, device, std::move(streams)));
    trainer = &graph->trainer();
    stepper = std::move(graph);
  }
  if (!spec.checkpoints) return stepper;
  return std::unique_ptr<BackgroundStepper>(
      std::make_unique<CheckpointingStepper>(std::move(stepper), trainer, clock));
}

}  // namespace deepool::worker
