// Scheduler: admission, planning and dispatch. Worker events and endings: scheduler_events.cc.
#include "coordinator/scheduler.h"

#include <algorithm>
#include <set>

#include "common/logging.h"

namespace deepool::coordinator {

using nlohmann::json;

Scheduler::Scheduler(JobManager* jobs, NodeRegistry* nodes, const PlanningBackend* planner,
                     const Clock* clock, SchedulerOptions options)
    : jobs_(jobs), nodes_(nodes), planner_(planner), clock_(clock), options_(options) {}

StatusOr<JobRecord> Scheduler::Submit(const JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(planner_->CheckModel(spec));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Submit(spec));
  Wake();
  return job;
}

void Scheduler::Tick() {
  std::vector<Reservation> to_plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_pending_ = false;
    ExpireNodesLocked();
    SettleReconciliationLocked();
    for (Reservation& r : ready_to_plan_) to_plan.push_back(std::move(r));
    ready_to_plan_.clear();
    AdmitLocked(&to_plan);
  }
  // Planning can take a while (search over a large graph): it runs without mu_, so heartbeats
  // and status queries are not held up; the reservation is re-checked afterwards.
  for (const Reservation& reservation : to_plan) {
    StatusOr<JobRecord> job = jobs_->Get(reservation.job_id);
    if (!job.ok() || job->state != JobState::kPlanning) continue;
    StatusOr<PlannedJob> planned =
        reservation.background
            ? planner_->PlanBackground(job->spec)
            : planner_->PlanForeground(job->spec, reservation.shape, reservation.profile_json);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reservations_.find(reservation.job_id);
    if (it == reservations_.end()) continue;  // cancelled or failed while planning
    if (!planned.ok()) {
      (void)jobs_->Transition(reservation.job_id, JobState::kFailed,
                              "planning failed: " + planned.status().ToString());
      ReleaseLocked(reservation.job_id);
      continue;
    }
    DispatchLocked(it->second, *planned);
  }
}

void Scheduler::SetPendingReasonLocked(const JobRecord& job, const std::string& reason) {
  if (job.reason == reason) return;
  (void)jobs_->Update(job.id, [&](JobRecord& r) { r.reason = reason; });
}

void Scheduler::AdmitLocked(std::vector<Reservation>* to_plan) {
  std::vector<JobRecord> pending;
  for (JobRecord& job : jobs_->Active()) {
    if (job.state == JobState::kPending) pending.push_back(std::move(job));
  }
  if (pending.empty()) return;
  std::stable_sort(pending.begin(), pending.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.spec.priority > b.spec.priority;  // Active() is already in submission order
  });

  // Devices no FG job holds, per device type, on nodes that take work; and each type's capacity.
  std::map<std::string, std::vector<DeviceKey>> free;
  std::map<std::string, int> capacity;
  for (const NodeRecord& node : nodes_->List()) {
    if (!node.schedulable()) continue;
    for (const DeviceInfo& device : node.devices) {
      ++capacity[device.type];
      DeviceKey key{node.id, device.device};
      if (fg_owner_.count(key) == 0) free[device.type].push_back(key);
    }
  }
  // FG jobs first: BG jobs never hold FG jobs back, and a BG job placed after them sees the
  // devices they just reserved as held.
  std::string blocker;
  for (const JobRecord& job : pending) {
    if (job.spec.role == JobRole::kBg) continue;
    if (!blocker.empty()) {
      SetPendingReasonLocked(job, "queued behind " + blocker);
      continue;
    }
    if (AdmitForegroundLocked(job, &free, to_plan)) continue;
    int best = 0;
    for (const auto& [type, count] : capacity) best = std::max(best, count);
    if (best >= job.spec.gpus) {
      blocker = job.id;
      int most_free = 0;
      for (const auto& [type, keys] : free) most_free = std::max<int>(most_free, keys.size());
      SetPendingReasonLocked(job, "waiting for " + std::to_string(job.spec.gpus) +
                                      " free devices of one type (" + std::to_string(most_free) +
                                      " free)");
    } else {
      SetPendingReasonLocked(job, "needs " + std::to_string(job.spec.gpus) +
                                      " devices of one type; the largest group of schedulable "
                                      "devices has " +
                                      std::to_string(best));
    }
  }
  for (const JobRecord& job : pending) {
    if (job.spec.role == JobRole::kBg) AdmitBackgroundLocked(job, to_plan);
  }
}

bool Scheduler::AdmitForegroundLocked(const JobRecord& job,
                                      std::map<std::string, std::vector<DeviceKey>>* free,
                                      std::vector<Reservation>* to_plan) {
  const int gpus = job.spec.gpus;
  for (auto& [type, keys] : *free) {
    if (static_cast<int>(keys.size()) < gpus) continue;
    // Fewest nodes: take from the nodes with the most free devices first.
    std::map<std::string, std::vector<DeviceKey>> by_node;
    for (const DeviceKey& key : keys) by_node[key.first].push_back(key);
    std::vector<std::vector<DeviceKey>> groups;
    for (auto& [node, node_keys] : by_node) {
      // Within a node, devices without a BG job first: fewer BG jobs have to make way.
      std::stable_sort(node_keys.begin(), node_keys.end(), [&](const auto& a, const auto& b) {
        return bg_owner_.count(a) < bg_owner_.count(b);
      });
      groups.push_back(std::move(node_keys));
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    Reservation reservation;
    reservation.job_id = job.id;
    reservation.shape.device_type = type;
    reservation.shape.devices = gpus;
    for (const auto& group : groups) {
      if (static_cast<int>(reservation.devices.size()) == gpus) break;
      int take = std::min<int>(group.size(), gpus - static_cast<int>(reservation.devices.size()));
      reservation.shape.devices_per_node = std::max(reservation.shape.devices_per_node, take);
      reservation.devices.insert(reservation.devices.end(), group.begin(), group.begin() + take);
    }
    reservation.shape.nodes =
        (gpus + reservation.shape.devices_per_node - 1) / reservation.shape.devices_per_node;
    for (const DeviceKey& key : reservation.devices) {
      fg_owner_[key] = job.id;
      keys.erase(std::find(keys.begin(), keys.end(), key));
    }
    for (const DeviceKey& key : reservation.devices) YieldBackgroundLocked(key, job.id);

    // The profile: analytical when asked and available, else cached, else measured.
    if (job.spec.profile == "analytical" && planner_->HasAnalyticalPreset(type)) {
      reservation.profile_json.clear();
    } else {
      StatusOr<std::optional<std::string>> cached =
          jobs_->store()->LoadProfile(planner_->ModelKey(job.spec), type);
      if (!cached.ok() || !cached->has_value()) {
        StartProfilingLocked(job, std::move(reservation));
        return true;
      }
      reservation.profile_json = **cached;
    }
    StatusOr<JobRecord> moved =
        jobs_->Transition(job.id, JobState::kPlanning,
                          "planning on " + std::to_string(gpus) + " " + type + " devices",
                          [&](JobRecord& r) { r.device_type = type; });
    if (!moved.ok()) {
      for (const DeviceKey& key : reservation.devices) fg_owner_.erase(key);
      return true;
    }
    reservations_[job.id] = reservation;
    to_plan->push_back(std::move(reservation));
    return true;
  }
  return false;
}

bool Scheduler::AdmitBackgroundLocked(const JobRecord& job, std::vector<Reservation>* to_plan) {
  // The idlest device; at equal idleness one the job can use now (no FG job, or a running FG
  // rank to run inside) before one whose FG rank has yet to start.
  std::optional<DeviceKey> best;
  double best_idle = -1;
  bool best_ready = false;
  for (const NodeRecord& node : nodes_->List()) {
    if (!node.schedulable()) continue;
    for (const DeviceInfo& device : node.devices) {
      DeviceKey key{node.id, device.device};
      if (bg_owner_.count(key)) continue;
      double idle = 1.0;
      bool ready = true;
      if (fg_owner_.count(key)) {
        // Reserved by a FG job not yet planned: held, and no idleness is known yet.
        auto it = idle_fraction_.find(key);
        idle = it == idle_fraction_.end() ? 0.0 : it->second;
        ready = RunningFgRankLocked(key) >= 0;
      }
      if (idle > best_idle || (idle == best_idle && ready && !best_ready)) {
        best_idle = idle;
        best = key;
        best_ready = ready;
      }
    }
  }
  if (!best) {
    SetPendingReasonLocked(job, "waiting for a device without a bg job");
    return false;
  }
  char idle_text[32];
  std::snprintf(idle_text, sizeof(idle_text), "%.0f%%", best_idle * 100);
  if (!best_ready) {
    // As its own process it would compete with the FG rank for the device; inside the FG
    // executor the gate gives the FG rank priority. So it waits for that executor.
    SetPendingReasonLocked(job, "waiting for FG job " + fg_owner_.at(*best) + "'s rank on " +
                                    best->first + "/" + best->second +
                                    " to start (to run inside it) or to end (predicted idle " +
                                    idle_text + ")");
    return false;
  }
  Reservation reservation;
  reservation.job_id = job.id;
  reservation.background = true;
  reservation.devices = {*best};
  bg_owner_[*best] = job.id;
  StatusOr<JobRecord> moved = jobs_->Transition(
      job.id, JobState::kPlanning,
      "bg on " + best->first + "/" + best->second + " (predicted idle " + idle_text + ")");
  if (!moved.ok()) {
    bg_owner_.erase(*best);
    return false;
  }
  reservations_[job.id] = reservation;
  to_plan->push_back(std::move(reservation));
  return true;
}

void Scheduler::StartProfilingLocked(const JobRecord& job, Reservation reservation) {
  const DeviceKey& where = reservation.devices.front();
  const std::string type = reservation.shape.device_type;
  // The worker measures the very graph the job will be planned with, never the model's defaults.
  StatusOr<std::string> graph_json = planner_->ProfileGraphJson(job.spec);
  if (!graph_json.ok()) {
    for (const DeviceKey& key : reservation.devices) fg_owner_.erase(key);
    (void)jobs_->Transition(job.id, JobState::kFailed,
                            "cannot build the graph to profile: " + graph_json.status().message());
    return;
  }
  reservation.profile_task = job.id + ".profile." + std::to_string(++profile_tasks_);
  v1::TaskAssignment assignment;
  assignment.set_task_id(reservation.profile_task);
  assignment.set_job_id(job.id);
  assignment.set_kind(v1::TASK_KIND_PROFILE);
  v1::ProfileTask* profile = assignment.mutable_profile();
  profile->set_model(job.spec.model);
  profile->set_graph_json(*std::move(graph_json));
  profile->set_device(where.second);
  profile->set_device_type(type);
  for (int64_t batch : planner_->ProfileBatchSizes(job.spec)) profile->add_batch_sizes(batch);

  StatusOr<JobRecord> moved =
      jobs_->Transition(job.id, JobState::kProfiling,
                        "measuring the layer profile on " + where.first + "/" + where.second,
                        [&](JobRecord& r) { r.device_type = type; });
  if (!moved.ok()) {
    for (const DeviceKey& key : reservation.devices) fg_owner_.erase(key);
    return;
  }
  Task task;
  task.id = reservation.profile_task;
  task.job_id = job.id;
  task.node_id = where.first;
  task.assignment = assignment;
  tasks_[task.id] = task;
  v1::TaskCommand command;
  *command.mutable_assign() = assignment;
  SendLocked(where.first, std::move(command));
  reservations_[job.id] = std::move(reservation);
}

std::string Scheduler::RunSpecJson(const JobRecord& job, const std::string& graph_json,
                                   const std::string& plan_json) const {
  json spec = {{"format", "deepool.run"},
               {"version", 1},
               {"job_id", job.id},
               {"graph", json::parse(graph_json, nullptr, false)},
               {"plan", json::parse(plan_json, nullptr, false)},
               {"iterations", job.spec.iterations},
               {"seed", job.spec.seed},
               {"optimizer", OptimizerToRunSpecJson(job.spec.optimizer)},
               {"data", DataToRunSpecJson(job.spec.data)}};
  if (!job.spec.checkpoint_path.empty()) {
    spec["checkpoint"] = {{"path", job.spec.checkpoint_path}};
  }
  return spec.dump();
}

std::string Scheduler::HostInFgExecutorLocked(const JobRecord& bg, const RankPlacement& where,
                                              const std::string& graph_json, Task* task) const {
  JobRecord fg_job;
  const int host_rank = RunningFgRankLocked({where.node_id, where.device}, &fg_job);
  if (host_rank < 0) return "";
  const JobRecord* fg = &fg_job;
  for (const auto& [id, t] : tasks_) {
    if (t.job_id != fg->id || t.attempt != fg->attempt || t.node_id != where.node_id ||
        (t.phase != TaskPhase::kSent && t.phase != TaskPhase::kConfirmed)) {
      continue;
    }
    json background = {{"job_id", bg.id},
                       {"graph", json::parse(graph_json, nullptr, false)},
                       {"batch_size", bg.spec.global_batch},
                       {"iterations", bg.spec.iterations},
                       {"seed", bg.spec.seed},
                       {"optimizer", OptimizerToRunSpecJson(bg.spec.optimizer)},
                       {"data", DataToRunSpecJson(bg.spec.data)}};
    v1::TrainTask* train = task->assignment.mutable_train();
    train->set_host_task_id(id);
    train->set_host_rank(host_rank);
    train->set_background_json(background.dump());
    return "job " + fg->id + " rank " + std::to_string(host_rank) + " (task " + id + ")";
  }
  return "";
}

int Scheduler::RunningFgRankLocked(const DeviceKey& key, JobRecord* fg_out) const {
  auto owner = fg_owner_.find(key);
  if (owner == fg_owner_.end()) return -1;
  StatusOr<JobRecord> fg = jobs_->Get(owner->second);
  if (!fg.ok() || fg->state != JobState::kRunning) return -1;
  // Only a rank that has reported an iteration surely has a running executor to attach to; one
  // that completed all its iterations is ending (its job waits for the other ranks), and a BG
  // job sent there would only be told that its host ended.
  int rank = -1;
  for (const DeviceProgress& row : fg->progress.devices) {
    if (row.node_id == key.first && row.device == key.second &&
        row.iteration < fg->spec.iterations) {
      rank = row.rank;
    }
  }
  if (rank >= 0 && fg_out) *fg_out = *fg;
  return rank;
}

void Scheduler::DispatchLocked(const Reservation& reservation, const PlannedJob& planned) {
  StatusOr<JobRecord> job = jobs_->Get(reservation.job_id);
  if (!job.ok()) return;
  if (planned.world_size < 1 || planned.world_size > static_cast<int>(reservation.devices.size())) {
    (void)jobs_->Transition(job->id, JobState::kFailed,
                            "plan needs " + std::to_string(planned.world_size) +
                                " ranks; the job holds " +
                                std::to_string(reservation.devices.size()) + " devices");
    ReleaseLocked(job->id);
    return;
  }
  const int64_t attempt = job->attempt + 1;
  // Devices beyond the plan's ranks go back to the pool.
  std::vector<DeviceKey> used(reservation.devices.begin(),
                              reservation.devices.begin() + planned.world_size);
  for (size_t i = used.size(); i < reservation.devices.size(); ++i) {
    fg_owner_.erase(reservation.devices[i]);
  }
  std::vector<RankPlacement> placements;
  for (int rank = 0; rank < planned.world_size; ++rank) {
    const DeviceKey& key = used[static_cast<size_t>(rank)];
    StatusOr<NodeRecord> node = nodes_->Get(key.first);
    placements.push_back({rank, key.first, node.ok() ? node->name : key.first, key.second});
  }
  StatusOr<NodeRecord> rank0_node = nodes_->Get(placements.front().node_id);
  if (!rank0_node.ok()) {
    FailOrRequeueLocked(*job, "node " + placements.front().node_id + " vanished before dispatch");
    return;
  }
  std::vector<Task> new_tasks = MakeTrainTasks(
      *job, attempt, placements, RunSpecJson(*job, planned.graph_json, planned.plan_json),
      reservation.background);
  new_tasks.front().assignment.mutable_train()->set_store_address(rank0_node->host() + ":0");
  std::string hosted_by;
  if (reservation.background) {
    hosted_by =
        HostInFgExecutorLocked(*job, placements.front(), planned.graph_json, &new_tasks.front());
  }
  std::set<std::string> nodes_used;
  for (const RankPlacement& p : placements) nodes_used.insert(p.node_id);

  std::vector<std::string> task_ids;
  for (const Task& t : new_tasks) task_ids.push_back(t.id);
  StatusOr<JobRecord> running = jobs_->Transition(
      job->id, JobState::kRunning,
      hosted_by.empty() ? "dispatched " + std::to_string(planned.world_size) + " ranks to " +
                              std::to_string(nodes_used.size()) + " node(s)"
                        : "dispatched inside the executor of " + hosted_by,
      [&](JobRecord& r) {
        r.attempt = attempt;
        r.devices = placements;
        r.task_ids = task_ids;
        r.graph_json = planned.graph_json;
        r.plan_json = planned.plan_json;
        r.predicted_iteration_ms = planned.iteration_ms;
        r.progress = JobProgress{};
        r.progress.iterations = r.spec.iterations;
        r.store_address.clear();
      });
  if (!running.ok()) {
    DP_LOG_ERROR("job {}: cannot record dispatch: {}", job->id, running.status().ToString());
    ReleaseLocked(job->id);
    return;
  }
  reservations_.erase(job->id);
  if (!reservation.background) {
    for (int rank = 0; rank < planned.world_size; ++rank) {
      double idle = 0;
      if (planned.iteration_ms > 0 && static_cast<size_t>(rank) < planned.rank_busy_ms.size()) {
        idle = std::clamp(
            1.0 - planned.rank_busy_ms[static_cast<size_t>(rank)] / planned.iteration_ms, 0.0, 1.0);
      }
      idle_fraction_[used[static_cast<size_t>(rank)]] = idle;
    }
    // The predicted idleness is known now: BG jobs may pick another device next round.
    work_pending_ = true;
  }
  for (Task& task : new_tasks) {
    task.sent_at = clock_->Now();
    const std::string id = task.id;
    const bool send = task.phase == TaskPhase::kSent;
    tasks_[id] = std::move(task);
    if (send) {
      v1::TaskCommand command;
      *command.mutable_assign() = tasks_[id].assignment;
      SendLocked(tasks_[id].node_id, std::move(command));
    }
  }
}

std::vector<Scheduler::Task> Scheduler::MakeTrainTasks(const JobRecord& job, int64_t attempt,
                                                       const std::vector<RankPlacement>& placements,
                                                       const std::string& run_spec,
                                                       bool background) const {
  std::vector<Task> tasks;
  std::map<std::string, size_t> index_of;  // node id -> index in tasks
  for (const RankPlacement& p : placements) {
    auto it = index_of.find(p.node_id);
    if (it == index_of.end()) {
      Task task;
      task.id = job.id + ".a" + std::to_string(attempt) + "." + p.node_id;
      task.job_id = job.id;
      task.node_id = p.node_id;
      task.attempt = attempt;
      task.rank0_node = tasks.empty();
      task.phase = task.rank0_node ? TaskPhase::kSent : TaskPhase::kWaitingForStore;
      v1::TaskAssignment& a = task.assignment;
      a.set_task_id(task.id);
      a.set_job_id(job.id);
      a.set_kind(v1::TASK_KIND_TRAIN);
      v1::TrainTask* train = a.mutable_train();
      train->set_run_spec_json(run_spec);
      train->set_world_size(static_cast<int>(placements.size()));
      train->set_background(background);
      train->set_timeout_s(options_.executor_timeout_s);
      it = index_of.emplace(p.node_id, tasks.size()).first;
      tasks.push_back(std::move(task));
    }
    v1::RankDevice* rd = tasks[it->second].assignment.mutable_train()->add_ranks();
    rd->set_rank(p.rank);
    rd->set_device(p.device);
  }
  return tasks;
}

void Scheduler::SendLocked(const std::string& node_id, v1::TaskCommand command) {
  outbox_[node_id].push_back(std::move(command));
  outbox_ready_.notify_all();
}

void Scheduler::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  work_pending_ = true;
  work_ready_.notify_all();
}

void Scheduler::WaitForWork(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  work_ready_.wait_for(lock, timeout, [&] { return work_pending_ || shutdown_; });
}

void Scheduler::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  outbox_ready_.notify_all();
  work_ready_.notify_all();
}

StatusOr<std::vector<v1::TaskCommand>> Scheduler::WaitForCommands(
    const std::string& node_id, std::chrono::milliseconds timeout) {
  StatusOr<NodeRecord> node = nodes_->Get(node_id);
  if (!node.ok()) return node.status();
  if (node->state == NodeState::kDown) {
    return NotFoundError("node " + node_id + " was marked down; register again");
  }
  std::unique_lock<std::mutex> lock(mu_);
  outbox_ready_.wait_for(lock, timeout, [&] {
    auto it = outbox_.find(node_id);
    return shutdown_ || (it != outbox_.end() && !it->second.empty());
  });
  std::vector<v1::TaskCommand> out;
  auto it = outbox_.find(node_id);
  if (it != outbox_.end()) {
    out.assign(it->second.begin(), it->second.end());
    it->second.clear();
  }
  return out;
}

std::map<std::pair<std::string, std::string>, DeviceUse> Scheduler::DeviceUses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<DeviceKey, DeviceUse> out;
  for (const auto& [key, job] : fg_owner_) {
    out[key].fg_job = job;
    auto it = idle_fraction_.find(key);
    out[key].idle_fraction = it == idle_fraction_.end() ? 0.0 : it->second;
  }
  for (const auto& [key, job] : bg_owner_) out[key].bg_job = job;
  return out;
}

std::vector<std::string> Scheduler::TasksOnNode(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, task] : tasks_) {
    if (task.node_id == node_id && task.phase != TaskPhase::kEnded) out.push_back(id);
  }
  return out;
}

}  // namespace deepool::coordinator
