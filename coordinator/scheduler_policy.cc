// The Scheduler's side of a scheduling policy other than fifo (SchedulerOptions::policy): what the
// policy sees of placed jobs, and its preemptions carried out through checkpoints.
#include "common/logging.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {

void Scheduler::DescribePlacedLocked(const std::vector<JobSnapshot>& active,
                                     AdmissionInput* input) const {
  input->now_ms = clock_->WallMillis();
  input->curves = curves_.Curves();
  for (const JobSnapshot& job : active) {
    if (job->state == JobState::kPending || job->spec.role == JobRole::kBg) continue;
    input->placed.push_back(job);
    // Only a running job can stop at a checkpoint, and one already stopping is left to stop.
    if (job->state != JobState::kRunning || job->resize_to > 0) continue;
    if (builder_.StopsAtCheckpoints(*job)) input->preemptible.insert(job->id);
  }
}

void Scheduler::RefreshCurves() {
  if (!options_.policy) return;  // fifo weighs no curves
  curves_.Refresh(jobs_->Active(), PoolDeviceTypes(nodes_->List()));
}

void Scheduler::PreemptLocked(const FgPreemption& preempted, Writes* writes) {
  const std::string note = "preempted by the " + std::string(options_.policy->Name()) +
                           " policy: " + preempted.message +
                           (preempted.for_job.empty() ? "" : ", for job " + preempted.for_job) +
                           "; it stops at its next checkpoint";
  const int64_t now = clock_->WallMillis();
  // As a resize to its own size: its ranks stop at their next checkpoint (StopAtCheckpointWanted)
  // and it goes back to PENDING (RequeueResizedLocked) to resume from there.
  JobWrite write = UpdateWrite(preempted.job_id, [note, now](JobRecord& r) {
    if (r.state != JobState::kRunning || r.resize_to > 0) return;
    r.resize_to = r.spec.gpus;
    r.history.push_back({r.state, note, now, ReasonCode::kResized});
  });
  write.retry = true;
  writes->push_back(std::move(write));
  ++policy_view_.preemptions;
  // Copied on write: views handed out keep the map they were given.
  auto notes =
      policy_view_.preempted
          ? std::make_shared<std::map<std::string, PreemptionNote>>(*policy_view_.preempted)
          : std::make_shared<std::map<std::string, PreemptionNote>>();
  (*notes)[preempted.job_id] = {std::string(options_.policy->Name()), preempted.for_job,
                                preempted.message, now};
  policy_view_.preempted = std::move(notes);
  DP_LOG_INFO("job {}: {}", preempted.job_id, note);
}

Scheduler::PolicyView Scheduler::LastPolicyView() const {
  std::lock_guard<std::mutex> lock(mu_);
  PolicyView view = policy_view_;
  if (options_.policy) {
    view.policy = std::string(options_.policy->Name());
    view.min_slice_s = options_.policy_options.min_slice_s;
  }
  return view;
}

void Scheduler::RecordRoundLocked(const Admission& admission, int64_t fg_granted) {
  policy_view_.round = admission.round;
  auto& counts = policy_view_.decisions;
  counts[{"grant", "fg"}] += fg_granted;
  counts[{"grant", "bg"}] += static_cast<int64_t>(admission.background.size());
  counts[{"preemption", "fg"}] += static_cast<int64_t>(admission.preempted.size());
  counts[{"preemption", "bg"}] += static_cast<int64_t>(admission.displaced.size());
  if (!admission.round) return;
  for (const auto& [job_id, code] : admission.round->waits) {
    ++counts[{"wait", std::string(WaitCodeName(code))}];
  }
}

bool Scheduler::GrantFreeLocked(const ForegroundGrant& grant, Writes* writes) const {
  for (const DeviceKey& key : grant.devices) {
    const std::optional<std::string> holder = ledger_.ForegroundOf(key);
    if (!holder) continue;
    const std::string message =
        "waiting for job " + *holder + " to stop at its next checkpoint (preempted for this job)";
    writes->push_back(AdviceWrite(grant.job_id, [message](JobRecord& r) {
      r.reason = message;
      r.reason_code = ReasonCode::kWaitingForDevices;
    }));
    return false;
  }
  return true;
}

}  // namespace deepool::coordinator
