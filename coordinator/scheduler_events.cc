// Scheduler: worker reports, cancellation, lost nodes, and recovery after a restart.
#include <algorithm>
#include <set>

#include "common/logging.h"
#include "coordinator/job_progress.h"
#include "coordinator/scheduler.h"

namespace deepool::coordinator {

Status Scheduler::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  bool any_running = false;
  for (const JobRecord& job : jobs_->Active()) {
    if (job.state == JobState::kProfiling || job.state == JobState::kPlanning) {
      RETURN_IF_ERROR(jobs_
                          ->Transition(job.id, JobState::kPending,
                                       std::string("coordinator restarted during ") +
                                           StateName(job.state) + "; rescheduling")
                          .status());
      continue;
    }
    if (job.state != JobState::kRunning) continue;
    any_running = true;
    for (const RankPlacement& p : job.devices) {
      DeviceKey key{p.node_id, p.device};
      if (job.spec.role == JobRole::kBg) {
        bg_owner_[key] = job.id;
      } else {
        fg_owner_[key] = job.id;
        idle_fraction_[key] = 0;  // unknown until re-planned; assume busy
      }
    }
    // Rebuild the job's tasks from its record. The rank-0 node's task must be reported by its
    // worker; the others are sent again if the store address is known (their worker may never
    // have received them), or wait for the rank-0 worker to report the store.
    std::vector<Task> tasks = MakeTrainTasks(job, job.attempt, job.devices,
                                             RunSpecJson(job, job.graph_json, job.plan_json),
                                             job.spec.role == JobRole::kBg);
    for (Task& task : tasks) {
      task.unconfirmed_after_restart = true;
      task.sent_at = clock_->Now();
      if (!task.rank0_node) {
        if (job.store_address.empty()) {
          task.phase = TaskPhase::kWaitingForStore;
        } else {
          task.phase = TaskPhase::kSent;
          task.assignment.mutable_train()->set_store_address(job.store_address);
        }
      }
      const std::string id = task.id;
      tasks_[id] = std::move(task);
    }
  }
  if (any_running) reconcile_deadline_ = clock_->Now() + nodes_->node_timeout();
  return Status::Ok();
}

void Scheduler::SettleReconciliationLocked() {
  if (!reconcile_deadline_ || clock_->Now() < *reconcile_deadline_) return;
  reconcile_deadline_.reset();
  std::map<std::string, std::string> lost;  // job -> a task nobody reported
  for (const auto& [id, task] : tasks_) {
    if (task.unconfirmed_after_restart && task.phase != TaskPhase::kEnded) {
      lost.emplace(task.job_id, id);
    }
  }
  for (const auto& [job_id, task_id] : lost) {
    StatusOr<JobRecord> job = jobs_->Get(job_id);
    if (!job.ok() || IsTerminal(job->state)) continue;
    FailOrRequeueLocked(*job, "no worker reported task " + task_id +
                                  " within the node timeout after the coordinator restarted");
  }
}

void Scheduler::ExpireNodesLocked() {
  for (const NodeRecord& node : nodes_->ExpireSilent()) {
    std::set<std::string> affected;
    for (const auto& [key, job] : fg_owner_) {
      if (key.first == node.id) affected.insert(job);
    }
    for (const auto& [key, job] : bg_owner_) {
      if (key.first == node.id) affected.insert(job);
    }
    for (auto& [id, task] : tasks_) {
      if (task.node_id != node.id || task.phase == TaskPhase::kEnded) continue;
      affected.insert(task.job_id);
      task.phase = TaskPhase::kEnded;  // its worker is gone; nothing to cancel there
    }
    outbox_.erase(node.id);
    const auto timeout_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(nodes_->node_timeout()).count();
    for (const std::string& job_id : affected) {
      StatusOr<JobRecord> job = jobs_->Get(job_id);
      if (!job.ok() || IsTerminal(job->state)) continue;
      FailOrRequeueLocked(*job, "node " + node.name + " stopped heartbeating (silent for over " +
                                    std::to_string(timeout_ms) + " ms)");
    }
  }
}

void Scheduler::ReleaseLocked(const std::string& job_id) {
  for (auto it = fg_owner_.begin(); it != fg_owner_.end();) {
    if (it->second == job_id) {
      idle_fraction_.erase(it->first);
      it = fg_owner_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = bg_owner_.begin(); it != bg_owner_.end();) {
    it = it->second == job_id ? bg_owner_.erase(it) : std::next(it);
  }
  reservations_.erase(job_id);
  ready_to_plan_.erase(std::remove_if(ready_to_plan_.begin(), ready_to_plan_.end(),
                                      [&](const Reservation& r) { return r.job_id == job_id; }),
                       ready_to_plan_.end());
  work_pending_ = true;
  work_ready_.notify_all();
}

void Scheduler::CancelTasksLocked(const std::string& job_id, const std::string& reason) {
  for (auto& [id, task] : tasks_) {
    if (task.job_id != job_id) continue;
    if (task.phase == TaskPhase::kEnded || task.phase == TaskPhase::kCancelling) continue;
    if (task.phase == TaskPhase::kWaitingForStore) {
      task.phase = TaskPhase::kEnded;  // never sent
      continue;
    }
    task.phase = TaskPhase::kCancelling;
    task.sent_at = clock_->Now();
    v1::TaskCommand command;
    command.mutable_cancel()->set_task_id(id);
    command.mutable_cancel()->set_reason(reason);
    SendLocked(task.node_id, std::move(command));
  }
}

void Scheduler::FailOrRequeueLocked(const JobRecord& job, const std::string& reason) {
  CancelTasksLocked(job.id, reason);
  ReleaseLocked(job.id);
  if (job.spec.requeue_on_failure && job.attempt < options_.max_attempts) {
    (void)jobs_->Transition(job.id, JobState::kPending, "requeued: " + reason);
  } else {
    (void)jobs_->Transition(job.id, JobState::kFailed, reason);
  }
}

void Scheduler::YieldBackgroundLocked(const DeviceKey& key, const std::string& fg_job) {
  auto owner = bg_owner_.find(key);
  if (owner == bg_owner_.end()) return;
  StatusOr<JobRecord> bg = jobs_->Get(owner->second);
  if (!bg.ok() || IsTerminal(bg->state)) return;
  const std::string why = "FG job " + fg_job + " took " + key.first + "/" + key.second;
  CancelTasksLocked(bg->id, why);
  ReleaseLocked(bg->id);
  // Not counted against max_attempts: the job did nothing wrong.
  (void)jobs_->Transition(bg->id, JobState::kPending,
                          "requeued: " + why +
                              "; BG jobs make way for FG jobs and are not "
                              "checkpointed, it starts again");
}

StatusOr<JobRecord> Scheduler::Cancel(const std::string& job_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(job_id));
  if (IsTerminal(job.state)) {
    return FailedPreconditionError("job " + job_id + " is already " + StateName(job.state));
  }
  const std::string why = reason.empty() ? "cancelled by user" : reason;
  ASSIGN_OR_RETURN(JobRecord cancelled, jobs_->Transition(job_id, JobState::kCancelled, why));
  CancelTasksLocked(job_id, why);
  ReleaseLocked(job_id);
  return cancelled;
}

std::vector<std::string> Scheduler::ReconcileRunningLocked(
    const std::string& node_id, const std::vector<v1::RunningTask>& running) {
  std::vector<std::string> cancel;
  for (const v1::RunningTask& rt : running) {
    auto it = tasks_.find(rt.task_id());
    bool wanted = false;
    if (it != tasks_.end() && it->second.node_id == node_id &&
        (it->second.phase == TaskPhase::kSent || it->second.phase == TaskPhase::kConfirmed)) {
      StatusOr<JobRecord> job = jobs_->Get(it->second.job_id);
      wanted = job.ok() && !IsTerminal(job->state);
    }
    if (wanted) {
      it->second.phase = TaskPhase::kConfirmed;
      it->second.unconfirmed_after_restart = false;
    } else {
      cancel.push_back(rt.task_id());
    }
  }
  return cancel;
}

StatusOr<Scheduler::Registration> Scheduler::RegisterNode(
    const std::string& name, const std::string& address, const std::vector<DeviceInfo>& devices,
    const std::vector<v1::RunningTask>& running) {
  ASSIGN_OR_RETURN(NodeRecord node, nodes_->Register(name, address, devices));
  std::lock_guard<std::mutex> lock(mu_);
  Registration registration;
  registration.node = node;
  registration.cancel_task_ids = ReconcileRunningLocked(node.id, running);
  std::set<std::string> listed;
  for (const v1::RunningTask& rt : running) listed.insert(rt.task_id());
  // Tasks this node should run but does not list: confirmed ones died with the old worker, and
  // so did a rank-0 task from before a coordinator restart (its store is gone); the others may
  // never have reached the worker and are sent again.
  std::set<std::string> lost_jobs;
  for (auto& [id, task] : tasks_) {
    if (task.node_id != node.id || listed.count(id)) continue;
    if (task.phase == TaskPhase::kConfirmed ||
        (task.phase == TaskPhase::kSent && task.unconfirmed_after_restart && task.rank0_node)) {
      task.phase = TaskPhase::kEnded;
      lost_jobs.insert(task.job_id);
    } else if (task.phase == TaskPhase::kSent && task.assignment.task_id() == id) {
      task.sent_at = clock_->Now();
      v1::TaskCommand command;
      *command.mutable_assign() = task.assignment;
      SendLocked(node.id, std::move(command));
    } else if (task.phase == TaskPhase::kCancelling) {
      task.phase = TaskPhase::kEnded;
    }
  }
  for (const std::string& job_id : lost_jobs) {
    StatusOr<JobRecord> job = jobs_->Get(job_id);
    if (!job.ok() || IsTerminal(job->state)) continue;
    FailOrRequeueLocked(*job, "worker on node " + node.name + " restarted and lost the job's task");
  }
  work_pending_ = true;
  work_ready_.notify_all();
  return registration;
}

StatusOr<std::vector<v1::TaskCommand>> Scheduler::Heartbeat(
    const std::string& node_id, const std::vector<v1::RunningTask>& running) {
  RETURN_IF_ERROR(nodes_->Heartbeat(node_id));
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::TaskCommand> commands;
  for (const std::string& id : ReconcileRunningLocked(node_id, running)) {
    v1::TaskCommand command;
    command.mutable_cancel()->set_task_id(id);
    command.mutable_cancel()->set_reason("the coordinator no longer wants this task");
    commands.push_back(std::move(command));
  }
  std::set<std::string> listed;
  for (const v1::RunningTask& rt : running) listed.insert(rt.task_id());
  const Clock::TimePoint now = clock_->Now();
  for (auto& [id, task] : tasks_) {
    if (task.node_id != node_id) continue;
    if (task.phase == TaskPhase::kCancelling && !listed.count(id)) {
      task.phase = TaskPhase::kEnded;
      continue;
    }
    if (task.phase == TaskPhase::kSent && !listed.count(id) && !task.unconfirmed_after_restart &&
        task.assignment.task_id() == id && now - task.sent_at >= options_.resend_after) {
      task.sent_at = now;
      v1::TaskCommand command;
      *command.mutable_assign() = task.assignment;
      commands.push_back(std::move(command));
    }
  }
  return commands;
}

StatusOr<bool> Scheduler::ReportProgress(const v1::ReportProgressRequest& report) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(report.task_id());
  if (it == tasks_.end()) return true;
  Task& task = it->second;
  if (task.phase == TaskPhase::kSent) task.phase = TaskPhase::kConfirmed;
  task.unconfirmed_after_restart = false;
  StatusOr<JobRecord> job = jobs_->Get(task.job_id);
  if (!job.ok() || IsTerminal(job->state) || task.phase == TaskPhase::kCancelling ||
      task.phase == TaskPhase::kEnded) {
    return true;
  }
  if (!report.logs().empty()) {
    std::vector<LogRecord> lines;
    for (const v1::LogLine& l : report.logs()) {
      lines.push_back({0, l.time_ms() > 0 ? l.time_ms() : clock_->WallMillis(), report.node_id(),
                       l.rank(), l.line()});
    }
    (void)jobs_->AppendLogs(task.job_id, std::move(lines));
  }
  if (!report.iterations().empty() && task.assignment.kind() != v1::TASK_KIND_PROFILE) {
    auto jobs_on_device = [this](const RankPlacement& p) {
      const DeviceKey key{p.node_id, p.device};
      DeviceJobs on_device;
      if (auto f = fg_owner_.find(key); f != fg_owner_.end()) on_device.fg_job = f->second;
      if (auto b = bg_owner_.find(key); b != bg_owner_.end()) on_device.bg_job = b->second;
      return on_device;
    };
    const int64_t now_ms = clock_->WallMillis();
    StatusOr<JobRecord> updated = jobs_->Update(task.job_id, [&](JobRecord& r) {
      for (const v1::IterationEvent& e : report.iterations()) {
        ApplyIterationEvent(e, jobs_on_device, now_ms, &r);
      }
    });
    // A FG rank's first iteration: a BG job may be waiting to run inside its executor.
    if (updated.ok() && updated->spec.role != JobRole::kBg &&
        updated->progress.devices.size() > job->progress.devices.size()) {
      work_pending_ = true;
      work_ready_.notify_all();
    }
  }
  if (!report.store_ready().empty() && task.rank0_node) {
    // Persisted first, so a restarted coordinator can still send the other nodes their ranks.
    if (job->store_address != report.store_ready()) {
      (void)jobs_->Update(task.job_id,
                          [&](JobRecord& r) { r.store_address = report.store_ready(); });
    }
    for (auto& [id, other] : tasks_) {
      if (other.job_id != task.job_id || other.attempt != task.attempt ||
          other.phase != TaskPhase::kWaitingForStore) {
        continue;
      }
      other.assignment.mutable_train()->set_store_address(report.store_ready());
      other.phase = TaskPhase::kSent;
      other.sent_at = clock_->Now();
      v1::TaskCommand command;
      *command.mutable_assign() = other.assignment;
      SendLocked(other.node_id, std::move(command));
    }
  }
  return false;
}

Status Scheduler::ReportTaskExit(const v1::ReportTaskExitRequest& report) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(report.task_id());
  if (it == tasks_.end()) return Status::Ok();  // unknown or long forgotten: nothing to do
  Task& task = it->second;
  if (task.phase == TaskPhase::kEnded) return Status::Ok();  // a repeated report
  if (!report.last_log_lines().empty()) {
    std::vector<LogRecord> lines;
    for (const std::string& line : report.last_log_lines()) {
      lines.push_back({0, clock_->WallMillis(), report.node_id(), -1, "[exit] " + line});
    }
    (void)jobs_->AppendLogs(task.job_id, std::move(lines));
  }
  if (task.assignment.kind() == v1::TASK_KIND_PROFILE) {
    OnProfileExitLocked(&task, report);
  } else {
    OnTrainExitLocked(&task, report);
  }
  return Status::Ok();
}

void Scheduler::OnTrainExitLocked(Task* task, const v1::ReportTaskExitRequest& report) {
  const TaskPhase before = task->phase;
  task->phase = TaskPhase::kEnded;
  task->outcome = report.outcome();
  task->checkpoint = report.checkpoint();
  StatusOr<JobRecord> job = jobs_->Get(task->job_id);
  if (!job.ok() || IsTerminal(job->state) || job->attempt != task->attempt) return;
  if (before == TaskPhase::kCancelling) return;
  if (report.outcome() == v1::TASK_OUTCOME_SUCCEEDED) {
    std::string checkpoint;
    for (const std::string& id : job->task_ids) {
      auto t = tasks_.find(id);
      if (t == tasks_.end() || t->second.phase != TaskPhase::kEnded ||
          t->second.outcome != v1::TASK_OUTCOME_SUCCEEDED) {
        return;  // others still running
      }
      if (!t->second.checkpoint.empty()) checkpoint = t->second.checkpoint;
    }
    (void)jobs_->Transition(job->id, JobState::kSucceeded,
                            "all " + std::to_string(job->devices.size()) + " ranks finished",
                            [&](JobRecord& r) {
                              r.checkpoint = checkpoint;
                              r.progress.iteration = r.spec.iterations;
                            });
    ReleaseLocked(job->id);
    return;
  }
  if (report.host_ended() && job->spec.role == JobRole::kBg) {
    // Its FG executor ended first. BG jobs keep no checkpoint: it is placed again and restarts.
    ReleaseLocked(job->id);
    (void)jobs_->Transition(
        job->id, JobState::kPending,
        "requeued: " + (report.error().empty() ? "its FG executor ended" : report.error()) +
            "; BG jobs are not checkpointed, it starts again");
    return;
  }
  std::string reason = "task " + task->id + " on " + task->node_id;
  reason +=
      report.outcome() == v1::TASK_OUTCOME_CANCELLED ? " was stopped by its worker" : " failed";
  std::string detail = report.error();
  for (const v1::RankExit& r : report.ranks()) {
    if (detail.empty() && !r.error().empty()) {
      detail = "rank " + std::to_string(r.rank()) + ": " + r.error();
    }
  }
  if (detail.empty() && !report.last_log_lines().empty()) {
    detail = "last log line: " + report.last_log_lines(report.last_log_lines_size() - 1);
  }
  if (!detail.empty()) reason += ": " + detail;
  FailOrRequeueLocked(*job, reason);
}

void Scheduler::OnProfileExitLocked(Task* task, const v1::ReportTaskExitRequest& report) {
  task->phase = TaskPhase::kEnded;
  task->outcome = report.outcome();
  auto res = std::find_if(reservations_.begin(), reservations_.end(),
                          [&](const auto& kv) { return kv.second.profile_task == task->id; });
  if (res == reservations_.end()) return;  // the job was cancelled meanwhile
  Reservation reservation = res->second;
  if (report.outcome() == v1::TASK_OUTCOME_SUCCEEDED && !report.result_json().empty()) {
    StatusOr<JobRecord> job = jobs_->Get(task->job_id);
    if (!job.ok()) return;
    Status saved = jobs_->store()->SaveProfile(planner_->ModelKey(job->spec),
                                               reservation.shape.device_type, report.result_json());
    if (!saved.ok()) DP_LOG_WARN("cannot cache profile: {}", saved.ToString());
    StatusOr<JobRecord> moved = jobs_->Transition(
        task->job_id, JobState::kPlanning, "profile measured on " + task->node_id + "; planning");
    if (!moved.ok()) return;
    reservation.profile_json = report.result_json();
    reservation.profile_task.clear();
    reservations_[task->job_id] = reservation;
    ready_to_plan_.push_back(reservation);
    work_pending_ = true;
    work_ready_.notify_all();
    return;
  }
  std::string reason = "profiling on " + task->node_id + " failed";
  if (!report.error().empty()) reason += ": " + report.error();
  ReleaseLocked(task->job_id);
  (void)jobs_->Transition(task->job_id, JobState::kFailed, reason);
}

}  // namespace deepool::coordinator
