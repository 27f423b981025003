// The Scheduler's side of a scheduling policy other than fifo (SchedulerOptions::policy): what the
// policy sees of placed jobs, and its preemptions and growths carried out through checkpoints.
#include <algorithm>
#include <string>
#include <string_view>

#include "common/logging.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {
namespace {

// The job's history note: a growth is carried out as a preemption (through a checkpoint, then a
// later round places the job anew) but is told as what it is for.
std::string MoveNote(std::string_view policy_name, const FgPreemption& moved) {
  const std::string by = " by the " + std::string(policy_name) + " policy";
  if (moved.growth()) {
    return "grown" + by + " from " + std::to_string(moved.from_devices) + " to " +
           std::to_string(moved.grow_to) + " devices: " + moved.message +
           "; it stops at its next checkpoint and resumes on the devices the next round gives it";
  }
  return "preempted" + by + ": " + moved.message +
         (moved.for_job.empty() ? "" : ", for job " + moved.for_job) +
         "; it stops at its next checkpoint";
}

}  // namespace

void Scheduler::DescribePlacedLocked(const std::vector<JobSnapshot>& active,
                                     AdmissionInput* input) {
  input->now_ms = clock_->WallMillis();
  for (const JobSnapshot& job : active) {
    if (job->state == JobState::kPending || job->spec.role == JobRole::kBg) continue;
    input->placed.push_back(job);
    // A reservation lasts while its job is still stopping (RequeueResizedLocked clears it).
    if (job->state == JobState::kRunning && job->resize_to > 0 && !job->grow_onto.empty()) {
      input->growing[job->id] = job->grow_onto;
    }
    // Only a running job can stop at a checkpoint, and one already stopping is left to stop.
    if (job->state != JobState::kRunning || job->resize_to > 0) continue;
    if (builder_.StopsAtCheckpoints(*job)) input->preemptible.insert(job->id);
  }
}

void Scheduler::RefreshCurves() {
  std::vector<JobSnapshot> jobs = jobs_->Active();
  // fifo sizes no FG job by its curve; it only places BG jobs by theirs.
  if (!options_.policy) {
    jobs.erase(
        std::remove_if(jobs.begin(), jobs.end(),
                       [](const JobSnapshot& job) { return job->spec.role != JobRole::kBg; }),
        jobs.end());
  }
  curves_.Refresh(jobs, PoolDeviceTypes(nodes_->List()));
}

void Scheduler::PreemptLocked(const FgPreemption& preempted, Writes* writes) {
  const std::string note = MoveNote(options_.policy->Name(), preempted);
  const int64_t now = clock_->WallMillis();
  // As a resize to its own size: its ranks stop at their next checkpoint (StopAtCheckpointWanted)
  // and it goes back to PENDING (RequeueResizedLocked) to resume from there.
  // A growth's devices are stored with it: reserved for it until it has stopped, across restarts.
  const std::vector<DeviceKey> grow_onto =
      preempted.growth() ? preempted.added : std::vector<DeviceKey>{};
  JobWrite write = UpdateWrite(preempted.job_id, [note, now, grow_onto](JobRecord& r) {
    if (r.state != JobState::kRunning || r.resize_to > 0) return;
    r.resize_to = r.spec.gpus;
    r.grow_onto = grow_onto;
    r.history.push_back({r.state, note, now, ReasonCode::kResized});
  });
  write.retry = true;
  writes->push_back(std::move(write));
  policy_record_.RecordMove(preempted, now, [this](const std::string& job_id) {
    const std::optional<JobBrief> job = jobs_->Brief(job_id);
    return !job || IsTerminal(job->state);
  });
  DP_LOG_INFO("job {}: {}", preempted.job_id, note);
}

Scheduler::PolicyView Scheduler::LastPolicyView() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_record_.View();
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
