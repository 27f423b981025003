#include "worker/runtime/background/multiplex_attach.h"

#include "common/logging.h"
#include "worker/runtime/background/multiplex_communicator.h"
#include "worker/runtime/background/multiplex_device.h"

namespace deepool::worker {

StatusOr<BackgroundJobThread> BuildBackgroundJobThread(const BackgroundSpec& spec,
                                                       torch::Device device, DeviceGate* gate,
                                                       const Clock* clock,
                                                       std::shared_ptr<DeviceStreams> streams) {
  BackgroundJobThread job;
  ASSIGN_OR_RETURN(job.stepper, MakeBackgroundStepper(spec, device, std::move(streams), clock));
  std::function<std::shared_ptr<void>()> thread_init;
  if (spec.sharing.idle_thread_priority) {
    thread_init = []() -> std::shared_ptr<void> {
      Status demoted = DemoteCurrentThreadToIdle();
      if (!demoted.ok()) DP_LOG_WARN("background thread keeps its priority: {}", demoted.message());
      return nullptr;
    };
  }
  job.runner = std::make_unique<BackgroundRunner>(job.stepper.get(), gate, clock, spec.iterations,
                                                  std::move(thread_init));
  if (spec.sharing.split_units) job.runner->KeepUnitsUnderBound();
  if (!device.is_cuda()) job.runner->TimeUnitsWith(ThreadCpuClock::Get());
  return job;
}

StatusOr<std::unique_ptr<DeviceSharing>> DeviceSharing::Attach(
    const BackgroundSpec& spec, torch::Device device, std::unique_ptr<Communicator>* comm,
    const Clock* clock, bool record_events, std::shared_ptr<DeviceStreams> streams) {
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  if (!streams) {
    ASSIGN_OR_RETURN(streams, MakeSharingStreams(device));
  }
  std::unique_ptr<DeviceSharing> sharing(new DeviceSharing());
  const SharingOptions options = spec.sharing;
  SharingMode mode = options.ModeFor(device.is_cuda());
  sharing->gate_ =
      std::make_unique<DeviceGate>(mode, clock, record_events, GateLimits::From(options));
  ASSIGN_OR_RETURN(sharing->fg_stream_, EnterForegroundStream(streams, options));
  ASSIGN_OR_RETURN(
      BackgroundJobThread job,
      BuildBackgroundJobThread(spec, device, sharing->gate_.get(), clock, std::move(streams)));
  sharing->stepper_ = std::move(job.stepper);
  sharing->runner_ = std::move(job.runner);
  sharing->job_id_ = spec.job_id;
  *comm = std::make_unique<SharingCommunicator>(std::move(*comm), sharing->gate_.get());
  DP_LOG_INFO("background job {} shares {} ({})", spec.job_id, device.str(), SharingModeName(mode));
  return sharing;
}

DeviceSharing::~DeviceSharing() {
  if (runner_) runner_->Stop();
}

void DeviceSharing::TraceUnits(SpanRecorder* spans) {
  runner_->TraceUnits(spans, "unit of " + job_id_);
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
