#include "worker/runtime/background/background_host.h"

#include <cmath>

#include "common/logging.h"
#include "protocol/executor_events.h"
#include "worker/runtime/background/multiplex_attach.h"
#include "worker/runtime/background/multiplex_communicator.h"
#include "worker/runtime/background/multiplex_device.h"

namespace deepool::worker {
namespace {

protocol::BackgroundEvent ProgressOf(const std::string& job_id, const BackgroundProgress& p) {
  protocol::BackgroundEvent event;
  event.job_id = job_id;
  event.iterations = p.iterations;
  event.samples_per_s = p.samples_per_s;
  if (p.iterations > 0 && std::isfinite(p.last_loss)) event.loss = p.last_loss;
  return event;
}

}  // namespace

std::string BackgroundProgressLine(const std::string& job_id, const BackgroundProgress& p) {
  return protocol::ExecutorEventToJson(ProgressOf(job_id, p));
}

std::string BackgroundDoneLine(const std::string& job_id, protocol::BackgroundEnd status,
                               const BackgroundProgress& p, const std::string& message) {
  protocol::BackgroundDoneEvent event;
  event.progress = ProgressOf(job_id, p);
  event.status = status;
  event.message = message;
  return protocol::ExecutorEventToJson(event);
}

StatusOr<std::unique_ptr<BackgroundHost>> BackgroundHost::Create(
    torch::Device device, SharingOptions options, std::unique_ptr<Communicator>* comm,
    const Clock* clock, std::shared_ptr<DeviceStreams> streams) {
  std::unique_ptr<BackgroundHost> host(new BackgroundHost());
  host->device_ = device;
  host->options_ = options;
  host->clock_ = clock;
  host->gate_ = std::make_unique<DeviceGate>(options.ModeFor(device.is_cuda()), clock,
                                             /*record_events=*/false, GateLimits::From(options));
  if (streams) {
    host->streams_ = std::move(streams);
  } else {
    ASSIGN_OR_RETURN(host->streams_, MakeSharingStreams(device));
  }
  ASSIGN_OR_RETURN(host->fg_stream_, EnterForegroundStream(host->streams_, options));
  *comm = std::make_unique<SharingCommunicator>(std::move(*comm), host->gate_.get());
  return host;
}

BackgroundHost::~BackgroundHost() {
  std::unique_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job = std::move(job_);
  }
  if (job) job->runner->Stop();
}

void BackgroundHost::TraceUnits(SpanRecorder* spans) {
  std::lock_guard<std::mutex> lock(mu_);
  spans_ = spans;
}

Status BackgroundHost::Attach(const BackgroundSpec& spec) {
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return FailedPreconditionError("the FG rank has finished");
    if (job_) {
      return FailedPreconditionError("background job " + job_->spec.job_id +
                                     " is already attached");
    }
  }
  // Built outside the lock: model construction takes a while and the FG thread must not wait.
  auto job = std::make_unique<Job>();
  job->spec = spec;
  // The host's gate mode rules every job it hosts, the eager units' wait for FG idle included.
  BackgroundSpec hosted = spec;
  hosted.sharing.mode = options_.mode;
  ASSIGN_OR_RETURN(BackgroundJobThread thread,
                   BuildBackgroundJobThread(hosted, device_, gate_.get(), clock_, streams_));
  job->stepper = std::move(thread.stepper);
  job->runner = std::move(thread.runner);
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || job_) return FailedPreconditionError("attached or finished meanwhile");
  job->runner->TraceUnits(spans_, "unit of " + spec.job_id);
  job->runner->Start();
  job_ = std::move(job);
  DP_LOG_INFO("background job {} attached on {} ({})", spec.job_id, device_.str(),
              SharingModeName(gate_->mode()));
  return Status::Ok();
}

Status BackgroundHost::Detach(const std::string& job_id) {
  std::unique_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_ || job_->spec.job_id != job_id) {
      return NotFoundError("background job " + job_id + " is not attached");
    }
    job = std::move(job_);
  }
  std::string line = End(*job, protocol::BackgroundEnd::kDetached);
  std::lock_guard<std::mutex> lock(mu_);
  done_lines_.push_back(std::move(line));
  return Status::Ok();
}

void BackgroundHost::Reject(const std::string& job_id, const std::string& message) {
  DP_LOG_WARN("background job {} not attached: {}", job_id, message);
  std::lock_guard<std::mutex> lock(mu_);
  done_lines_.push_back(
      BackgroundDoneLine(job_id, protocol::BackgroundEnd::kError, BackgroundProgress{}, message));
}

std::string BackgroundHost::End(Job& job, protocol::BackgroundEnd why) {
  job.runner->Stop();
  const BackgroundProgress progress = job.runner->progress();
  gate_->Reopen();
  protocol::BackgroundEnd status = why;
  std::string message;
  if (!progress.status.ok()) {
    status = protocol::BackgroundEnd::kError;
    message = progress.status.ToString();
  } else if (job.spec.iterations > 0 && progress.iterations >= job.spec.iterations) {
    status = protocol::BackgroundEnd::kOk;
  }
  DP_LOG_INFO("background job {} ended ({}): {} iterations, {:.1f} samples/s", job.spec.job_id,
              protocol::BackgroundEndName(status), progress.iterations, progress.samples_per_s);
  return BackgroundDoneLine(job.spec.job_id, status, progress, message);
}

std::vector<std::string> BackgroundHost::AfterIteration(const std::string& iteration_line) {
  const SharingWindow window = gate_->TakeWindow();
  std::vector<std::string> lines;
  std::unique_ptr<Job> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job_) {
      lines.push_back(iteration_line);
    } else {
      const BackgroundProgress progress = job_->runner->progress();
      lines.push_back(AddSharingFields(iteration_line, window, progress));
      lines.push_back(BackgroundProgressLine(job_->spec.job_id, progress));
      if (progress.finished) ended = std::move(job_);
    }
  }
  if (ended) lines.push_back(End(*ended, protocol::BackgroundEnd::kOk));
  std::lock_guard<std::mutex> lock(mu_);
  lines.insert(lines.end(), done_lines_.begin(), done_lines_.end());
  done_lines_.clear();
  return lines;
}

std::vector<std::string> BackgroundHost::Finish() {
  std::unique_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    job = std::move(job_);
  }
  std::vector<std::string> lines;
  if (job) lines.push_back(End(*job, protocol::BackgroundEnd::kHostEnded));
  std::lock_guard<std::mutex> lock(mu_);
  lines.insert(lines.begin(), done_lines_.begin(), done_lines_.end());
  done_lines_.clear();
  return lines;
}

}  // namespace deepool::worker
