#include "worker/runtime/multiplex_attach.h"

#include "common/logging.h"
#include "worker/runtime/multiplex_communicator.h"
#include "worker/runtime/multiplex_device.h"

namespace deepool::worker {

StatusOr<std::unique_ptr<DeviceSharing>> DeviceSharing::Attach(const BackgroundSpec& spec,
                                                               torch::Device device,
                                                               std::unique_ptr<Communicator>* comm,
                                                               const Clock* clock,
                                                               bool record_events) {
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  std::unique_ptr<DeviceSharing> sharing(new DeviceSharing());
  const SharingOptions options = spec.sharing;
  SharingMode mode = options.ModeFor(device.is_cuda());
  sharing->gate_ = std::make_unique<DeviceGate>(mode, clock, record_events);
  sharing->fg_stream_ = EnterSharingStream(device, /*foreground=*/true, options);
  ASSIGN_OR_RETURN(auto trainer, BackgroundTrainer::Create(spec, device));
  ASSIGN_OR_RETURN(sharing->stepper_, MakeBackgroundStepper(std::move(trainer), options));
  sharing->runner_ = std::make_unique<BackgroundRunner>(
      sharing->stepper_.get(), sharing->gate_.get(), clock, spec.iterations,
      [device, options] {
        if (options.idle_thread_priority) {
          Status demoted = DemoteCurrentThreadToIdle();
          if (!demoted.ok()) DP_LOG_WARN("background thread keeps its priority: {}", demoted.message());
        }
        return EnterSharingStream(device, /*foreground=*/false, options);
      });
  *comm = std::make_unique<SharingCommunicator>(std::move(*comm), sharing->gate_.get());
  DP_LOG_INFO("background job {} shares {} ({})", spec.job_id, device.str(),
              SharingModeName(mode));
  return sharing;
}

DeviceSharing::~DeviceSharing() {
  if (runner_) runner_->Stop();
}

void DeviceSharing::Start() {
  gate_->TakeWindow();
  runner_->Start();
}

std::string DeviceSharing::Decorate(const std::string& iteration_line) {
  return AddSharingFields(iteration_line, gate_->TakeWindow(), runner_->progress());
}

BackgroundProgress DeviceSharing::Finish() {
  runner_->Stop();
  BackgroundProgress progress = runner_->progress();
  if (!progress.status.ok()) {
    DP_LOG_WARN("background job failed: {}", progress.status.ToString());
  } else {
    DP_LOG_INFO("background job: {} iterations, {:.1f} samples/s", progress.iterations,
                progress.samples_per_s);
  }
  return progress;
}

}  // namespace deepool::worker
