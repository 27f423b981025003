// Scheduler: worker reports, cancellation, lost nodes, and recovery after a restart.
#include <algorithm>
#include <set>

#include "common/logging.h"
#include "coordinator/first_cause_window.h"
#include "coordinator/profile_cache_key.h"
#include "coordinator/progress_reports.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {
namespace {

// The dispatches a job was given because it was resized or evacuated: they do not count as
// retries.
int64_t Resizes(const JobRecord& job) {
  return std::count_if(job.history.begin(), job.history.end(), [](const StateChange& change) {
    return change.state == JobState::kPending &&
           (change.code == ReasonCode::kResized || change.code == ReasonCode::kEvacuated);
  });
}

bool RunsOn(const JobRecord& job, const std::string& node_id) {
  return std::any_of(job.devices.begin(), job.devices.end(),
                     [&](const RankPlacement& p) { return p.node_id == node_id; });
}

}  // namespace

Status Scheduler::Recover() {
  for (const JobSnapshot& snapshot : jobs_->Active()) {
    const JobRecord& job = *snapshot;
    if (job.state != JobState::kProfiling && job.state != JobState::kPlanning) continue;
    RETURN_IF_ERROR(jobs_
                        ->Transition(job.id, JobState::kPending,
                                     {ReasonCode::kCoordinatorRestarted,
                                      std::string("coordinator restarted during ") +
                                          StateName(job.state) + "; rescheduling"})
                        .status());
  }
  std::lock_guard<std::mutex> lock(mu_);
  bool any_running = false;
  for (const JobSnapshot& snapshot : jobs_->Active()) {
    const JobRecord& job = *snapshot;
    if (job.state != JobState::kRunning) continue;
    any_running = true;
    for (const RankPlacement& p : job.devices) {
      const DeviceKey key{p.node_id, p.device};
      if (job.spec.role == JobRole::kBg) {
        ledger_.HoldBackground(key, job.id);
      } else {
        ledger_.HoldForeground(key, job.id);  // idleness unknown until re-planned: busy
      }
    }
    // Rebuild the job's tasks from its record. The rank-0 node's task must be reported by its
    // worker once it had started (reported the store); before that it may never have arrived
    // and is sent again. The others are sent again if the store address is known (their worker
    // may never have received them), or wait for the rank-0 worker to report the store.
    std::vector<Task> tasks = builder_.MakeTrainTasks(
        job, job.attempt, job.devices,
        builder_.RunSpecJson(job, job.precision, job.graph_json, job.plan_json),
        job.spec.role == JobRole::kBg);
    for (Task& task : tasks) {
      if (task.rank0_node) {
        task.started_before_restart = !job.store_address.empty();
        continue;
      }
      if (job.store_address.empty()) {
        task.phase = TaskPhase::kWaitingForStore;
      } else {
        task.phase = TaskPhase::kSent;
        task.assignment.mutable_train()->set_store_address(job.store_address);
      }
    }
    dispatcher_.Restore(std::move(tasks));
  }
  if (any_running) reconcile_deadline_ = clock_->Now() + nodes_->node_timeout();
  return Status::Ok();
}

void Scheduler::SettleReconciliationLocked(Writes* writes) {
  if (!reconcile_deadline_ || clock_->Now() < *reconcile_deadline_) return;
  reconcile_deadline_.reset();
  for (const auto& [job_id, task_id] : dispatcher_.UnconfirmedAfterRestart()) {
    FailLostJobsLocked(
        {job_id},
        {ReasonCode::kNodeLost, "no worker reported task " + task_id +
                                    " within the node timeout after the coordinator restarted"},
        writes);
  }
}

void Scheduler::ExpireNodesLocked(Writes* writes) {
  const auto timeout_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(nodes_->node_timeout()).count();
  for (const NodeRecord& node : nodes_->ExpireSilent()) {
    std::set<std::string> affected = ledger_.JobsOnNode(node.id);
    for (const std::string& job : dispatcher_.DropNode(node.id)) affected.insert(job);
    FailLostJobsLocked(
        affected,
        {ReasonCode::kNodeLost, "node " + node.name + " stopped heartbeating (silent for over " +
                                    std::to_string(timeout_ms) + " ms)"},
        writes);
  }
}

void Scheduler::FailLostJobsLocked(const std::set<std::string>& job_ids, const Reason& reason,
                                   Writes* writes) {
  for (const std::string& job_id : job_ids) {
    StatusOr<JobRecord> job = jobs_->Get(job_id);
    if (!job.ok() || IsTerminal(job->state)) continue;
    FailOrRequeueLocked(*job, reason, writes);
  }
}

void Scheduler::ReleaseLocked(const std::string& job_id) {
  ledger_.Release(job_id);
  reservations_.erase(job_id);
  ready_to_plan_.erase(std::remove_if(ready_to_plan_.begin(), ready_to_plan_.end(),
                                      [&](const Reservation& r) { return r.job_id == job_id; }),
                       ready_to_plan_.end());
  Wake();
}

void Scheduler::ReleaseAfterStopLocked(const JobRecord& job) {
  const std::vector<DeviceKey> held = ledger_.DevicesOf(job.id);
  ReleaseLocked(job.id);
  // Its executors may still run until their workers stop them.
  if (!dispatcher_.NoneLive(job.task_ids)) stopping_.HoldForJob(job.id, held, job.task_ids);
}

void Scheduler::ReleaseStoppedLocked() {
  if (stopping_.ReleaseEnded(
          [this](const std::vector<std::string>& ids) { return dispatcher_.NoneLive(ids); })) {
    Wake();
  }
}

void Scheduler::StopTasksOnceStored(JobWrite* write, const std::string& why) {
  auto written = std::move(write->on_written);
  write->on_written = [this, why, written](const JobRecord& stored) {
    dispatcher_.CancelJob(stored.id, why);
    if (written) written(stored);
  };
  auto refused = std::move(write->on_refused);
  write->on_refused = [this, id = write->job_id, why, refused](const Status& status) {
    dispatcher_.CancelJob(id, why);  // refused: the job ended otherwise meanwhile
    if (refused) refused(status);
  };
}

void Scheduler::FailOrRequeueLocked(const JobRecord& job, const Reason& reason, Writes* writes) {
  ReleaseAfterStopLocked(job);  // its devices stay held until its tasks have stopped
  // Retried until stored: a job left RUNNING with its devices freed would never end.
  if (RequeuesOnFailure(job.spec) && job.attempt - Resizes(job) < options_.max_attempts) {
    JobWrite write = TransitionWrite(job.id, JobState::kPending,
                                     {ReasonCode::kRequeued, "requeued: " + reason.message},
                                     /*retry=*/true);
    if (job.resize_to > 0) {  // the next attempt takes the size asked for
      write.mutate = [](JobRecord& r) {
        r.spec.gpus = r.resize_to;
        r.resize_to = 0;
        r.evacuate_from.clear();
        r.grow_onto.clear();
      };
    }
    StopTasksOnceStored(&write, reason.message);
    writes->push_back(std::move(write));
  } else {
    JobWrite write = TransitionWrite(job.id, JobState::kFailed, reason, /*retry=*/true);
    StopTasksOnceStored(&write, reason.message);
    writes->push_back(std::move(write));
  }
}

StatusOr<JobRecord> Scheduler::Cancel(const std::string& job_id, const std::string& reason) {
  RETURN_IF_ERROR(CheckReason(reason));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(job_id));
  if (IsTerminal(job.state)) {
    return FailedPreconditionError("job " + job_id + " is already " + StateName(job.state));
  }
  const std::string why = reason.empty() ? "cancelled by user" : reason;
  // Stored first, so the client hears of a failed write; then nothing of the job may go out.
  ASSIGN_OR_RETURN(JobRecord cancelled,
                   jobs_->Transition(job_id, JobState::kCancelled, {ReasonCode::kCancelled, why}));
  std::lock_guard<std::mutex> lock(mu_);
  dispatcher_.CancelJob(job_id, why);
  ReleaseAfterStopLocked(cancelled);
  return cancelled;
}

StatusOr<JobRecord> Scheduler::Resize(const std::string& job_id, int gpus) {
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(job_id));
  if (IsTerminal(job.state)) {
    return FailedPreconditionError("job " + job_id + " is already " + StateName(job.state));
  }
  if (job.spec.role == JobRole::kBg) {
    return FailedPreconditionError("job " + job_id + " is a BG job: it runs on one device");
  }
  JobSpec resized = job.spec;
  resized.gpus = gpus;
  RETURN_IF_ERROR(ValidateJobSpec(resized));  // names the field: gpus in range, <= global batch
  const int largest = LargestDeviceGroup();
  if (gpus > largest) {
    return FailedPreconditionError("no device type has " + std::to_string(gpus) +
                                   " schedulable devices (the largest group has " +
                                   std::to_string(largest) + ")");
  }
  const std::string current = std::to_string(job.spec.gpus);
  if (job.state == JobState::kPending) {
    return jobs_->Update(job_id, [gpus](JobRecord& r) { r.spec.gpus = gpus; });
  }
  if (!builder_.StopsAtCheckpoints(job)) {
    return FailedPreconditionError(
        "job " + job_id +
        " writes no periodic checkpoints (checkpoint.dir with "
        "checkpoint.every_iterations or every_seconds in its spec, or a coordinator "
        "--checkpoint-root): a running job is resized at a checkpoint");
  }
  if (gpus == job.spec.gpus) {
    if (job.resize_to == 0) return job;  // nothing to change
    // Back to its size before it stopped: the resize is withdrawn. Ranks that already heard
    // of it stop all the same, and the job then runs again at this size.
    return jobs_->Update(job_id, [&](JobRecord& r) {
      r.resize_to = 0;
      r.evacuate_from.clear();
      r.grow_onto.clear();
      r.history.push_back({r.state, "resize to " + std::to_string(job.resize_to) + " withdrawn",
                           clock_->WallMillis(), ReasonCode::kResized});
    });
  }
  const std::string note = "resize to " + std::to_string(gpus) + " devices (from " + current +
                           ") asked for: it stops at its next checkpoint";
  ASSIGN_OR_RETURN(JobRecord asked, jobs_->Update(job_id, [&](JobRecord& r) {
    r.resize_to = gpus;
    r.grow_onto.clear();  // the user's size replaces a policy's growth
    r.history.push_back({r.state, note, clock_->WallMillis(), ReasonCode::kResized});
  }));
  DP_LOG_INFO("job {}: {}", job_id, note);
  Wake();
  return asked;
}

StatusOr<std::vector<std::string>> Scheduler::Evacuate(const std::string& node_id) {
  ASSIGN_OR_RETURN(NodeRecord node, nodes_->Get(node_id));
  std::vector<std::string> outcomes;
  Writes writes;
  for (const JobSnapshot& snapshot : jobs_->Active()) {
    const JobRecord& job = *snapshot;
    if (job.state != JobState::kRunning || !RunsOn(job, node.id)) continue;
    if (job.spec.role == JobRole::kBg) {
      outcomes.push_back(EvacuateBackground(job, node.name, &writes));
      continue;
    }
    if (!builder_.StopsAtCheckpoints(job)) {
      outcomes.push_back(job.id + " is left to finish: it writes no periodic checkpoints");
      continue;
    }
    const std::string note =
        "evacuating draining node " + node.name + ": it stops at its next checkpoint";
    StatusOr<JobRecord> asked = jobs_->Update(job.id, [&](JobRecord& r) {
      if (r.resize_to == 0) r.resize_to = r.spec.gpus;
      r.evacuate_from = node.name;
      r.grow_onto.clear();  // it resumes elsewhere, sized by the next round
      r.history.push_back({r.state, note, clock_->WallMillis(), ReasonCode::kEvacuated});
    });
    if (!asked.ok()) return asked.status().WithContext("job " + job.id);
    DP_LOG_INFO("job {}: {}", job.id, note);
    outcomes.push_back(job.id + " stops at its next checkpoint and resumes on other nodes");
  }
  ApplyWrites(std::move(writes));
  Wake();
  return outcomes;
}

// A BG job stops at once (it has no checkpoint boundary the coordinator can ask for): with
// checkpoints it goes back to PENDING and resumes from its newest elsewhere, losing the
// iterations after it, as when a FG job takes its device.
std::string Scheduler::EvacuateBackground(const JobRecord& job, const std::string& node_name,
                                          Writes* writes) {
  if (!builder_.PeriodicCheckpointsOf(job)) {
    return job.id + " (BG) is left to finish: it keeps no checkpoints";
  }
  const std::string why = "evacuated from draining node " + node_name;
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(job.id);
  // Not counted against max_attempts, as a displacement by a FG job is not.
  JobWrite write = TransitionWrite(
      job.id, JobState::kPending,
      {ReasonCode::kEvacuated, why + ": it resumes from its newest checkpoint elsewhere"},
      /*retry=*/true);
  StopTasksOnceStored(&write, why);
  writes->push_back(std::move(write));
  return job.id + " (BG) stops now and resumes from its newest checkpoint elsewhere";
}

int Scheduler::LargestDeviceGroup() const {
  std::map<std::string, int> per_type;
  for (const NodeRecord& node : nodes_->List()) {
    if (!node.schedulable()) continue;
    for (const DeviceInfo& device : node.devices) ++per_type[device.type];
  }
  int largest = 0;
  for (const auto& [type, count] : per_type) largest = std::max(largest, count);
  return largest;
}

bool Scheduler::StopAtCheckpointWanted(const std::string& task_id) const {
  std::optional<TaskBrief> task = dispatcher_.Brief(task_id);
  if (!task) return false;
  std::optional<JobBrief> job = jobs_->Brief(task->job_id);
  return job && job->resize_to > 0 && job->attempt == task->attempt;
}

StatusOr<Scheduler::Registration> Scheduler::RegisterNode(
    const std::string& name, const std::string& address, const std::vector<DeviceInfo>& devices,
    const std::vector<v1::RunningTask>& running, protocol::ProtocolRange protocol) {
  ASSIGN_OR_RETURN(NodeRecord node, nodes_->Register(name, address, devices, protocol));
  Registration registration;
  registration.node = node;
  Writes writes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Dispatcher::Registration outcome =
        dispatcher_.OnRegister(node.id, node.host(), running,
                               [this](const std::string& job_id) { return JobWantsTasks(job_id); });
    registration.cancel_task_ids = std::move(outcome.cancel_task_ids);
    stopping_.HoldForNode(node, registration.cancel_task_ids);
    FailLostJobsLocked(outcome.lost_jobs,
                       {ReasonCode::kNodeLost,
                        "worker on node " + node.name + " restarted and lost the job's task"},
                       &writes);
    Wake();
  }
  ApplyWrites(std::move(writes));
  return registration;
}

bool Scheduler::JobWantsTasks(const std::string& job_id) const {
  std::optional<JobBrief> job = jobs_->Brief(job_id);
  return job && !IsTerminal(job->state);
}

StatusOr<std::vector<v1::TaskCommand>> Scheduler::Heartbeat(
    const std::string& node_id, const std::vector<v1::RunningTask>& running) {
  RETURN_IF_ERROR(nodes_->Heartbeat(node_id));
  return dispatcher_.OnHeartbeat(
      node_id, running, [this](const std::string& job_id) { return JobWantsTasks(job_id); });
}

StatusOr<bool> Scheduler::ReportProgress(const v1::ReportProgressRequest& report) {
  return progress_.Report(report);
}

std::optional<std::string> Scheduler::JobOfTask(const std::string& task_id) const {
  std::optional<TaskBrief> task = dispatcher_.Brief(task_id);
  if (!task) return std::nullopt;
  return task->job_id;
}

Status Scheduler::ReportTaskExit(const v1::ReportTaskExitRequest& report) {
  std::optional<Task> known = dispatcher_.Find(report.task_id());
  // Unknown or long forgotten: nothing to do. A repeated report: answered once what it
  // decided is stored.
  if (!known) return Status::Ok();
  if (known->phase == TaskPhase::kEnded) return JobChangesStored(known->job_id);
  RETURN_IF_ERROR(CheckReportingNode(known->id, known->node_id, report.node_id()));
  if (known->stray) {  // no job of this coordinator's wants it: only its devices wait for it
    std::lock_guard<std::mutex> lock(mu_);
    dispatcher_.OnExit(report.task_id(), report.outcome(), report.checkpoint());
    ReleaseStoppedLocked();
    return Status::Ok();
  }
  if (!report.last_log_lines().empty()) {
    std::vector<LogRecord> lines;
    for (const std::string& line : report.last_log_lines()) {
      lines.push_back({0, clock_->WallMillis(), report.node_id(), -1, "[exit] " + line});
    }
    // Before the task ends here, so the worker's retry of this report still counts.
    Status appended = jobs_->AppendLogs(known->job_id, std::move(lines));
    if (!appended.ok()) return StoreFailure("the exit's log lines", appended);
  }
  Writes writes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::optional<Task> task = dispatcher_.OnExit(
        report.task_id(), report.outcome(), report.checkpoint(), report.stopped_at_iteration());
    if (!task) return Status::Ok();  // a concurrent copy of this report got here first
    ReleaseStoppedLocked();          // a stopped task may free a cancelled job's devices
    if (task->assignment.has_profile()) {
      OnProfileExitLocked(*task, report, &writes);
    } else {
      OnTrainExitLocked(*task, report, &writes);
    }
  }
  ApplyWrites(std::move(writes));
  return JobChangesStored(known->job_id);
}

void Scheduler::OnTrainExitLocked(const Task& task, const v1::ReportTaskExitRequest& report,
                                  Writes* writes) {
  StatusOr<JobRecord> job = jobs_->Get(task.job_id);
  if (!job.ok() || IsTerminal(job->state) || job->attempt != task.attempt) return;
  if (task.phase == TaskPhase::kCancelling) return;
  if (report.outcome() == v1::TASK_OUTCOME_SUCCEEDED) {
    std::string checkpoint;
    int64_t stopped_at = 0;
    if (!dispatcher_.AllSucceeded(job->task_ids, &checkpoint, &stopped_at)) {
      // Others still running, or one failed with an echo and this was the last to report.
      if (failures_.Waiting(job->id) && dispatcher_.NoneLive(job->task_ids)) {
        if (std::optional<Reason> first = failures_.EndNow(job->id, job->attempt)) {
          FailOrRequeueLocked(*job, *first, writes);
        }
      }
      return;
    }
    if (stopped_at > 0) {
      RequeueResizedLocked(*job, stopped_at, writes);
      return;
    }
    JobWrite write = TransitionWrite(
        job->id, JobState::kSucceeded,
        {ReasonCode::kProgress, "all " + std::to_string(job->devices.size()) + " ranks finished"},
        /*retry=*/true);
    write.mutate = [checkpoint](JobRecord& r) {
      r.checkpoint = checkpoint;
      // The total: an epochs job's as its executors counted it (0 if none ever reported).
      if (r.progress.iterations > 0) r.progress.iteration = r.progress.iterations;
    };
    // The devices stay held until SUCCEEDED is stored: until then the job is RUNNING.
    write.on_written = [this](const JobRecord& stored) { ReleaseLocked(stored.id); };
    write.on_refused = [this, id = job->id](const Status&) { ReleaseLocked(id); };
    writes->push_back(std::move(write));
    return;
  }
  if (report.host_ended() && job->spec.role == JobRole::kBg) {
    RequeueHostEndedLocked(*job, report.error(), writes);
    return;
  }
  // Failed: now, or once the first cause is known (first_cause_window).
  if (std::optional<Reason> reason = failures_.OnFailure(
          job->id, job->attempt, {ReasonCode::kTaskFailed, TaskExitReason(task, report)},
          ReportsPeerFailure(report), !dispatcher_.NoneLive(job->task_ids))) {
    FailOrRequeueLocked(*job, *reason, writes);
  }
}

// Its FG executor ended first: the BG job is placed again, from iteration 0 or, with periodic
// checkpoints, from its newest one, until it stalls (max_hosted_attempts).
void Scheduler::RequeueHostEndedLocked(const JobRecord& job, const std::string& error,
                                       Writes* writes) {
  const bool checkpointed = builder_.PeriodicCheckpointsOf(job).has_value();
  const bool advanced = job.progress.iteration > job.best_reached;
  const int stalls = advanced ? 0 : job.hosted_stalls + 1;
  const int64_t best = std::max(job.best_reached, job.progress.iteration);
  const bool give_up = checkpointed ? stalls >= options_.max_hosted_attempts
                                    : job.attempt >= options_.max_hosted_attempts;
  if (give_up) {
    const std::string why =
        checkpointed
            ? "its FG host ended first on " + std::to_string(stalls) +
                  " dispatches in a row, none of which got past iteration " + std::to_string(best) +
                  "; it was given up (fewer iterations between its "
                  "checkpoints would keep more of each dispatch)"
            : "its FG host ended before it finished on each of its " + std::to_string(job.attempt) +
                  " dispatches; BG jobs without checkpoints restart from iteration 0, so it was "
                  "given up (fewer iterations finish inside one FG job)";
    FailOrRequeueLocked(job, {ReasonCode::kTaskFailed, why}, writes);
    return;
  }
  ReleaseLocked(job.id);
  JobWrite write = TransitionWrite(
      job.id, JobState::kPending,
      {ReasonCode::kRequeued, "requeued: " + (error.empty() ? "its FG executor ended" : error) +
                                  (checkpointed ? "; it resumes from its newest checkpoint"
                                                : "; it has no checkpoints and starts again")},
      /*retry=*/true);
  write.mutate = [stalls, best](JobRecord& r) {
    r.hosted_stalls = stalls;
    r.best_reached = best;
  };
  writes->push_back(std::move(write));
}

void Scheduler::RequeueResizedLocked(const JobRecord& job, int64_t stopped_at, Writes* writes) {
  // Without a pending resize (asked for, then the job was resized meanwhile) it runs again at
  // its size: the ranks stopped, so the job must go on from their checkpoint either way.
  const int to = job.resize_to > 0 ? job.resize_to : job.spec.gpus;
  const std::string where =
      "stopped at the checkpoint of iteration " + std::to_string(stopped_at) + ", it resumes ";
  const bool preempted = job.evacuate_from.empty() && to == job.spec.gpus &&
                         static_cast<size_t>(to) == job.devices.size();
  // Grown by the policy (PreemptLocked; only "deepool" grows jobs, and the record says so after a
  // restart under another policy): `to` is its request, not the size the policy grew it to.
  const bool grown = to == job.spec.gpus && !job.grow_onto.empty();
  const Reason reason =
      !job.evacuate_from.empty()
          ? Reason{ReasonCode::kEvacuated, "evacuated from draining node " + job.evacuate_from +
                                               ": " + where + "on other nodes"}
      : grown
          ? Reason{ReasonCode::kResized,
                   "grown by the deepool policy from " + std::to_string(job.devices.size()) +
                       " to " + std::to_string(job.devices.size() + job.grow_onto.size()) +
                       " devices: " + where + "from there on the devices the next round gives it"}
      : preempted  // by the scheduling policy (PreemptLocked): it waits for its turn again
          ? Reason{ReasonCode::kResized, "preempted to make way for other jobs: " + where +
                                             "from there when the policy places it again"}
          : Reason{ReasonCode::kResized, "resized from " + std::to_string(job.devices.size()) +
                                             " to " + std::to_string(to) + " devices: " + where +
                                             "from there"};
  ReleaseLocked(job.id);
  JobWrite write = TransitionWrite(job.id, JobState::kPending, reason, /*retry=*/true);
  write.mutate = [to](JobRecord& r) {
    r.spec.gpus = to;
    r.resize_to = 0;
    r.evacuate_from.clear();
    r.grow_onto.clear();
  };
  writes->push_back(std::move(write));
}

void Scheduler::SettleFailuresLocked(Writes* writes) {
  for (const std::string& job_id : failures_.WaitingJobs()) {
    StatusOr<JobRecord> job = jobs_->Get(job_id);
    const std::optional<int64_t> current_attempt =
        job.ok() && !IsTerminal(job->state) ? std::optional<int64_t>(job->attempt) : std::nullopt;
    if (std::optional<Reason> first = failures_.EndIfDue(job_id, current_attempt)) {
      FailOrRequeueLocked(*job, *first, writes);
    }
  }
}

void Scheduler::OnProfileExitLocked(const Task& task, const v1::ReportTaskExitRequest& report,
                                    Writes* writes) {
  auto res = std::find_if(reservations_.begin(), reservations_.end(),
                          [&](const auto& kv) { return kv.second.profile_task == task.id; });
  if (res == reservations_.end()) return;  // the job was cancelled meanwhile
  if (report.outcome() != v1::TASK_OUTCOME_SUCCEEDED || report.result_json().empty()) {
    std::string reason = "profiling on " + task.node_id + " failed";
    if (!report.error().empty()) reason += ": " + report.error();
    ReleaseLocked(task.job_id);
    writes->push_back(TransitionWrite(task.job_id, JobState::kFailed,
                                      {ReasonCode::kProfilingFailed, reason}, /*retry=*/true));
    return;
  }
  res->second.profile_json = report.result_json();
  res->second.measured_by = task.assignment.profile();
  res->second.profile_task.clear();
  Reservation reservation = res->second;
  reservations_.erase(res);
  // Retried until stored: the job holds its devices and the measured profile meanwhile.
  PlanOnceStoredLocked(
      std::move(reservation),
      TransitionWrite(task.job_id, JobState::kPlanning,
                      {ReasonCode::kProgress, "profile measured on " + task.node_id + "; planning"},
                      /*retry=*/true),
      writes);
}

void Scheduler::CacheProfile(const JobSpec& spec, const v1::ProfileTask& measured_by,
                             const std::string& profile_json) {
  // The cache saves a measurement next time; a failed save costs that, not the job.
  // Under the precision the task measured at (fp32 when it names none).
  const StatusOr<planner::Precision> measured_at = planner::ParsePrecision(measured_by.precision());
  const std::string model_key =
      ProfileCacheKey(*planner_, spec, measured_at.ok() ? *measured_at : planner::Precision::kFp32);
  const std::string& device_type = measured_by.device_type();
  Status saved = jobs_->store()->SaveProfile(model_key, device_type, profile_json);
  if (!saved.ok()) DP_LOG_WARN("cannot cache the profile of {}: {}", model_key, saved.ToString());
  // Curves of the model on this type were made without it (the preset's, or an older profile).
  if (saved.ok()) curves_.ProfileChanged(model_key, device_type);
}

}  // namespace deepool::coordinator
