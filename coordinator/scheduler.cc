// Scheduler: admission, planning and dispatch. Worker events and endings: scheduler_events.cc.
#include "coordinator/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "common/byte_size.h"
#include "common/logging.h"
#include "coordinator/policy/fifo_policy.h"
#include "coordinator/profile_cache_key.h"
#include "planner/profile.h"
#include "protocol/run_spec.h"

namespace deepool::coordinator {

using nlohmann::json;

Scheduler::Scheduler(JobManager* jobs, NodeRegistry* nodes, const PlanningBackend* planner,
                     const Clock* clock, SchedulerOptions options)
    : jobs_(jobs),
      nodes_(nodes),
      planner_(planner),
      clock_(clock),
      options_(options),
      builder_(nodes, {options.executor_timeout_s, options.checkpoint_root,
                       options.checkpoint_every_seconds}),
      dispatcher_(clock, options.resend_after),
      failures_(clock, options.first_cause_window),
      stopping_(&ledger_),
      policy_record_(options.policy, options.policy_options),
      curves_(
          planner,
          [jobs](const std::string& model_key, const std::string& device_type) {
            return jobs->store()->LoadProfile(model_key, device_type);
          },
          clock, options.curve_planning_budget),
      progress_(
          jobs, &dispatcher_, clock,
          [this](const std::vector<RankPlacement>& devices) {
            // Who holds the job's own devices only: a copy of the whole ledger per report would
            // cost every report the pool's size.
            std::map<DeviceKey, DeviceJobs> held;
            std::lock_guard<std::mutex> lock(mu_);
            for (const RankPlacement& p : devices) {
              const DeviceKey key{p.node_id, p.device};
              held[key] = {ledger_.ForegroundOf(key).value_or(""),
                           ledger_.BackgroundOf(key).value_or("")};
            }
            return held;
          },
          [this] { Wake(); }) {}

StatusOr<JobRecord> Scheduler::Submit(const JobSpec& spec, const std::string& request_id,
                                      const std::string& owner) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(CheckRequestId(request_id));
  RETURN_IF_ERROR(options_.path_roots.Check("checkpoint.path", spec.checkpoint_path, owner));
  RETURN_IF_ERROR(options_.path_roots.Check("checkpoint.dir", spec.checkpoint_dir, owner));
  RETURN_IF_ERROR(options_.path_roots.Check("data.path", spec.data.path, owner));
  if (spec.eval) {
    RETURN_IF_ERROR(options_.path_roots.Check("eval.data.path", spec.eval->data.path, owner));
  }
  // Before the coordinator reads it (CheckModel checks the file against the graph).
  RETURN_IF_ERROR(options_.path_roots.Check("init.path", spec.init_path, owner));
  RETURN_IF_ERROR(planner_->CheckModel(spec));
  RETURN_IF_ERROR(CheckFitsRegisteredDevices(spec));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Submit(spec, request_id, owner));
  Wake();
  return job;
}

Status Scheduler::CheckFitsRegisteredDevices(const JobSpec& spec) const {
  const std::optional<NodeRegistry::LargestDevice> largest = nodes_->LargestSchedulableDevice();
  // No device registered yet, or none whose memory is known: nothing to hold the job against.
  if (!largest) return Status::Ok();
  // The job's most devices (a policy may give it fewer, never more), each of the largest memory,
  // at the precision that needs the least of it there (16 bits where the type has them): if no
  // plan fits even so, none will wherever the job is placed.
  ClusterShape shape;
  shape.device_type = largest->device.type;
  shape.devices = shape.devices_per_node = spec.gpus;
  shape.device_memory_bytes = largest->memory_bytes;
  JobSpec at_least = spec;
  at_least.precision = jobspec::TrainingPrecision(spec, shape.device_type, true);
  Status fits = planner_->CheckMemoryCanFit(at_least, shape);
  if (fits.code() != StatusCode::kResourceExhausted) return fits;
  return Status(fits.code(),
                "the job cannot fit even the largest registered device, " + largest->device.device +
                    " on " + largest->node_name + " (" + shape.device_type + ", " +
                    FormatBytes(shape.device_memory_bytes, ByteUnit::kGiB) + "), on its " +
                    std::to_string(spec.gpus) + " gpus: " + fits.message());
}

void Scheduler::Tick() {
  Writes writes;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    work_pending_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    writes.swap(unwritten_);
    ExpireNodesLocked(&writes);
    SettleReconciliationLocked(&writes);
    SettleFailuresLocked(&writes);
    ReleaseStoppedLocked();
  }
  // Retried and ending writes first: a job freed by them may be admitted in this round.
  ApplyWrites(std::move(writes));
  RefreshCurves();
  {
    std::lock_guard<std::mutex> lock(mu_);
    AdmitLocked(&writes);
  }
  ApplyWrites(std::move(writes));
  std::vector<Reservation> to_plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_plan.swap(ready_to_plan_);
  }
  PlanReserved(to_plan);
  dispatcher_.DropEnded([this](const std::string& job_id, int64_t attempt) {
    std::optional<JobBrief> job = jobs_->Brief(job_id);
    return !job || IsTerminal(job->state) || attempt < job->attempt;
  });
}

void Scheduler::PlanReserved(const std::vector<Reservation>& to_plan) {
  // Planning can take a while (search over a large graph): it runs without mu_, so heartbeats
  // and status queries are not held up; the reservation is re-checked afterwards.
  for (const Reservation& reservation : to_plan) {
    StatusOr<JobRecord> job = jobs_->Get(reservation.job_id);
    if (!job.ok() || job->state != JobState::kPlanning) continue;
    // Planned at the precision chosen for these devices, which a default spec leaves open; a
    // default that comes to fp32 plans as before (the device type's preset at its default
    // precision: TF32 math on Ampere and later, what workers before protocol 6 train at).
    JobSpec spec = job->spec;
    if (spec.precision || reservation.precision != planner::Precision::kFp32) {
      spec.precision = reservation.precision;
    }
    StatusOr<PlannedJob> planned =
        reservation.background
            ? planner_->PlanBackground(spec, reservation.shape)
            : planner_->PlanForeground(spec, reservation.shape, reservation.profile_json);
    Writes writes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = reservations_.find(reservation.job_id);
      if (it == reservations_.end()) continue;  // cancelled or failed while planning
      if (planned.ok()) {
        DispatchLocked(it->second, *planned, &writes);
      } else {
        ReleaseLocked(reservation.job_id);
        writes.push_back(TransitionWrite(
            reservation.job_id, JobState::kFailed,
            {ReasonCode::kPlanningFailed, "planning failed: " + planned.status().ToString()},
            /*retry=*/true));
      }
    }
    ApplyWrites(std::move(writes));
    if (planned.ok() && reservation.measured_by) {
      CacheProfile(job->spec, *reservation.measured_by, reservation.profile_json);
    }
  }
}

void Scheduler::AdmitLocked(Writes* writes) {
  // Held here while the grants and reasons are applied: by_id points into them.
  std::vector<JobSnapshot> active = jobs_->Active();
  std::vector<JobSnapshot> pending;
  for (const JobSnapshot& job : active) {
    if (job->state == JobState::kPending) pending.push_back(job);
  }
  // A policy that grows running jobs is asked even when none waits (every kIdleRoundInterval):
  // devices a job freed may go to a running one.
  if (pending.empty()) {
    const bool moves_running = options_.policy && options_.policy->MovesRunningJobs();
    const Clock::TimePoint now = clock_->Now();
    if (!moves_running || (last_idle_round_ && now - *last_idle_round_ < kIdleRoundInterval)) {
      return;
    }
    last_idle_round_ = now;
  }
  AdmissionInput input;
  input.pending = pending;
  input.nodes = nodes_->List();
  input.ledger = ledger_;
  // Only BG jobs ask where FG ranks run (every FG job's record read): skipped when none waits.
  if (std::any_of(pending.begin(), pending.end(),
                  [](const JobSnapshot& job) { return job->spec.role == JobRole::kBg; })) {
    input.running_fg_ranks = RunningFgRanksLocked();
  }
  input.curves = curves_.Curves();
  std::unordered_map<std::string_view, const JobRecord*> by_id;
  by_id.reserve(pending.size());
  for (const JobSnapshot& job : pending) by_id.emplace(job->id, job.get());

  if (options_.policy) DescribePlacedLocked(active, &input);
  const Admission admission = options_.policy
                                  ? Admit(input, *options_.policy)
                                  : Admit(input, policy::FifoPolicy(options_.policy_options));
  for (const FgPreemption& preempted : admission.preempted) PreemptLocked(preempted, writes);
  // A grant of devices a preempted job still holds waits for it to stop, and displaces nobody.
  std::set<std::string> granted;
  for (const ForegroundGrant& grant : admission.foreground) {
    if (GrantFreeLocked(grant, writes)) granted.insert(grant.job_id);
  }
  // Status shows the last round with waiting jobs (or one that moved a job).
  if (!pending.empty() || !admission.preempted.empty()) {
    policy_record_.RecordRound(admission, static_cast<int64_t>(granted.size()));
  }
  for (const Displacement& displaced : admission.displaced) {
    if (granted.count(displaced.fg_job)) DisplaceBackgroundLocked(displaced, writes);
  }
  for (const ForegroundGrant& grant : admission.foreground) {
    if (granted.count(grant.job_id))
      ReserveForegroundLocked(grant, *by_id.at(grant.job_id), writes);
  }
  for (const BackgroundGrant& grant : admission.background) {
    ReserveBackgroundLocked(grant, *by_id.at(grant.job_id), writes);
  }
  for (const PendingReason& waiting : admission.pending) {
    const JobRecord& job = *by_id.at(waiting.job_id);
    if (job.reason == waiting.message && job.reason_code == waiting.code) continue;
    // A reason is advice, recomputed every round: kept in memory, stored with the job's next
    // change (10,000 queued jobs' new reasons cost no store writes).
    writes->push_back(AdviceWrite(waiting.job_id, [waiting](JobRecord& r) {
      r.reason = waiting.message;
      r.reason_code = waiting.code;
    }));
  }
}

void Scheduler::ReserveForegroundLocked(const ForegroundGrant& grant, const JobRecord& job,
                                        Writes* writes) {
  Reservation reservation;
  reservation.job_id = job.id;
  reservation.devices = grant.devices;
  reservation.shape = grant.shape;
  for (const DeviceKey& key : grant.devices) ledger_.HoldForeground(key, job.id);
  const std::string& type = grant.shape.device_type;
  reservation.precision = builder_.PrecisionOn(job, grant.devices);
  const char* precision = planner::PrecisionName(reservation.precision);
  // A PROFILE task measures a 16-bit job at its precision where the worker of its first device
  // can (ProfilePrecisionOn), elsewhere fp32: there a 16-bit job is planned with a cached profile
  // recorded at its precision or, lacking one, the device type's analytical model at it.
  StatusOr<NodeRecord> first_node = nodes_->Get(grant.devices.front().first);
  const bool measurable =
      planner::MayBeUnrecordedPrecision(reservation.precision) ||
      (first_node.ok() && ProfilePrecisionOn(*first_node, reservation.precision).has_value()) ||
      !planner_->HasAnalyticalPreset(type);

  // The profile: analytical when asked and available, else cached, else measured.
  if (job.spec.profile != "analytical" || !planner_->HasAnalyticalPreset(type)) {
    StatusOr<std::optional<std::string>> cached = jobs_->store()->LoadProfile(
        ProfileCacheKey(*planner_, job.spec, reservation.precision), type);
    if (!cached.ok()) {
      DP_LOG_WARN("job {}: cannot read the profile cache ({}); measuring", job.id,
                  cached.status().ToString());
    }
    if (measurable && (!cached.ok() || !cached->has_value())) {
      StartProfilingLocked(job, std::move(reservation), writes);
      return;
    }
    if (cached.ok() && cached->has_value()) reservation.profile_json = **cached;
  }
  JobWrite write = TransitionWrite(
      job.id, JobState::kPlanning,
      {ReasonCode::kProgress,
       "planning on " + std::to_string(grant.shape.devices) + " " + type + " devices at " +
           precision +
           (grant.shape.devices >= job.spec.gpus ? ""
            : options_.policy
                ? " (" + std::to_string(grant.shape.devices) + " of the " +
                      std::to_string(job.spec.gpus) + " asked for: the " +
                      std::string(options_.policy->Name()) + " policy's size)"
                : " (re-planned from " + std::to_string(job.spec.gpus) + ": only " +
                      std::to_string(grant.shape.devices) + " schedulable after a node loss)")});
  write.mutate = [type](JobRecord& r) { r.device_type = type; };
  PlanOnceStoredLocked(std::move(reservation), std::move(write), writes);
}

void Scheduler::PlanOnceStoredLocked(Reservation reservation, JobWrite write, Writes* writes) {
  const std::string id = reservation.job_id;
  write.on_written = [this, id](const JobRecord&) {
    auto it = reservations_.find(id);  // gone when cancelled meanwhile
    if (it != reservations_.end()) ready_to_plan_.push_back(it->second);
  };
  write.on_refused = [this, id](const Status&) { ReleaseLocked(id); };
  reservations_[id] = std::move(reservation);
  writes->push_back(std::move(write));
}

void Scheduler::ReserveBackgroundLocked(const BackgroundGrant& grant, const JobRecord& job,
                                        Writes* writes) {
  Reservation reservation;
  reservation.job_id = grant.job_id;
  reservation.background = true;
  reservation.devices = {grant.device};
  reservation.shape = grant.shape;
  reservation.precision = builder_.PrecisionOn(job, {grant.device});
  ledger_.HoldBackground(grant.device, grant.job_id);
  PlanOnceStoredLocked(
      std::move(reservation),
      TransitionWrite(grant.job_id, JobState::kPlanning,
                      {ReasonCode::kProgress, "bg on " + grant.device.first + "/" +
                                                  grant.device.second + " (predicted idle " +
                                                  IdlePercent(grant.idle_fraction) + ")"}),
      writes);
}

void Scheduler::DisplaceBackgroundLocked(const Displacement& displaced, Writes* writes) {
  StatusOr<JobRecord> bg = jobs_->Get(displaced.bg_job);
  if (!bg.ok() || IsTerminal(bg->state)) return;
  const std::string why = "FG job " + displaced.fg_job + " took " + displaced.device.first + "/" +
                          displaced.device.second;
  ReleaseLocked(bg->id);
  const std::string resumes = builder_.PeriodicCheckpointsOf(*bg)
                                  ? "it resumes from its newest checkpoint"
                                  : "it has no checkpoints and starts again";
  // Not counted against max_attempts: the job did nothing wrong.
  JobWrite write = TransitionWrite(
      bg->id, JobState::kPending,
      {ReasonCode::kDisplaced, "requeued: " + why + "; BG jobs make way for FG jobs, " + resumes},
      /*retry=*/true);
  StopTasksOnceStored(&write, why);
  writes->push_back(std::move(write));
}

void Scheduler::StartProfilingLocked(const JobRecord& job, Reservation reservation,
                                     Writes* writes) {
  const DeviceKey where = reservation.devices.front();
  const std::string type = reservation.shape.device_type;
  // The worker measures the very graph the job will be planned with, never the model's defaults.
  StatusOr<std::string> graph_json = planner_->ProfileGraphJson(job.spec);
  if (!graph_json.ok()) {
    ReleaseLocked(job.id);
    writes->push_back(
        TransitionWrite(job.id, JobState::kFailed,
                        {ReasonCode::kProfilingFailed,
                         "cannot build the graph to profile: " + graph_json.status().message()},
                        /*retry=*/true));
    return;
  }
  // Numbered by the job's stored PROFILING steps, not a counter of this process: a worker may
  // still run a profile sent before a coordinator restart, and its exit must never be taken for
  // the new task's (it would fail the job "cancelled").
  const auto profiled = std::count_if(job.history.begin(), job.history.end(), [](const auto& h) {
    return h.state == JobState::kProfiling;
  });
  reservation.profile_task = job.id + ".profile." + std::to_string(profiled + 1);
  StatusOr<NodeRecord> node = nodes_->Get(where.first);
  const std::optional<planner::Precision> measured_at =
      node.ok() ? ProfilePrecisionOn(*node, reservation.precision) : std::nullopt;
  const Task task =
      builder_.MakeProfileTask(job, {reservation.profile_task, where, type, *std::move(graph_json),
                                     planner_->ProfileBatchSizes(job.spec), measured_at});
  reservations_[job.id] = std::move(reservation);
  // The task goes out only once PROFILING is stored: a restarted coordinator never finds a
  // profile running for a job it believes PENDING.
  JobWrite write =
      TransitionWrite(job.id, JobState::kProfiling,
                      {ReasonCode::kProgress,
                       "measuring the layer profile on " + where.first + "/" + where.second +
                           (measured_at ? std::string(" at ") + planner::PrecisionName(*measured_at)
                                        : std::string())});
  write.mutate = [type](JobRecord& r) { r.device_type = type; };
  write.on_written = [this, task](const JobRecord&) {
    if (reservations_.count(task.job_id) != 0) dispatcher_.Add({task});
  };
  write.on_refused = [this, id = job.id](const Status&) { ReleaseLocked(id); };
  writes->push_back(std::move(write));
}

std::string Scheduler::HostInFgExecutorLocked(const JobRecord& bg, planner::Precision precision,
                                              const RankPlacement& where,
                                              const std::string& graph_json, Task* task) const {
  JobRecord fg_job;
  const int host_rank = RunningFgRankLocked({where.node_id, where.device}, &fg_job);
  if (host_rank < 0) return "";
  const JobRecord* fg = &fg_job;
  if (std::optional<std::string> id = dispatcher_.LiveTaskOn(fg->id, fg->attempt, where.node_id)) {
    v1::TrainTask* train = task->assignment.mutable_train();
    train->set_host_task_id(*id);
    train->set_host_rank(host_rank);
    train->set_background_json(builder_.BackgroundJson(bg, precision, graph_json));
    return "job " + fg->id + " rank " + std::to_string(host_rank) + " (task " + *id + ")";
  }
  return "";
}

int Scheduler::RunningFgRankLocked(const DeviceKey& key, JobRecord* fg_out) const {
  const std::optional<std::string> owner = ledger_.ForegroundOf(key);
  if (!owner) return -1;
  StatusOr<JobRecord> fg = jobs_->Get(*owner);
  if (!fg.ok() || fg->state != JobState::kRunning) return -1;
  const int rank = RunningRankOn(*fg, key);
  if (rank >= 0 && fg_out) *fg_out = *fg;
  return rank;
}

int Scheduler::RunningRankOn(const JobRecord& fg, const DeviceKey& key) {
  // Only a rank that has reported an iteration surely has a running executor to attach to; one
  // that completed all its iterations is ending (its job waits for the other ranks), and a BG
  // job sent there would only be told that its host ended. So is every rank of a job asked to
  // stop at its next checkpoint (a resize, a policy's preemption or growth, an evacuation).
  if (fg.resize_to > 0) return -1;
  int rank = -1;
  for (const DeviceProgress& row : fg.progress.devices) {
    if (row.node_id == key.first && row.device == key.second &&
        (fg.progress.iterations == 0 || row.iteration < fg.progress.iterations)) {
      rank = row.rank;
    }
  }
  return rank;
}

std::set<DeviceKey> Scheduler::RunningFgRanksLocked() const {
  // Each FG job's record read once, not once per device it holds.
  std::map<std::string, std::vector<DeviceKey>> by_job;
  for (const auto& [key, use] : ledger_.Uses()) {
    if (!use.fg_job.empty()) by_job[use.fg_job].push_back(key);
  }
  std::set<DeviceKey> running;
  for (const auto& [job_id, keys] : by_job) {
    StatusOr<JobRecord> fg = jobs_->Get(job_id);
    if (!fg.ok() || fg->state != JobState::kRunning) continue;
    for (const DeviceKey& key : keys) {
      if (RunningRankOn(*fg, key) >= 0) running.insert(key);
    }
  }
  return running;
}

void Scheduler::DispatchLocked(const Reservation& reservation, const PlannedJob& planned,
                               Writes* writes) {
  StatusOr<JobRecord> job = jobs_->Get(reservation.job_id);
  if (!job.ok()) return;
  if (planned.world_size < 1 || planned.world_size > static_cast<int>(reservation.devices.size())) {
    ReleaseLocked(job->id);
    writes->push_back(TransitionWrite(
        job->id, JobState::kFailed,
        {ReasonCode::kPlanningFailed, "plan needs " + std::to_string(planned.world_size) +
                                          " ranks; the job holds " +
                                          std::to_string(reservation.devices.size()) + " devices"},
        /*retry=*/true));
    return;
  }
  Dispatch dispatch;
  dispatch.planned = planned;
  dispatch.background = reservation.background;
  dispatch.attempt = job->attempt + 1;
  dispatch.precision = reservation.precision;
  PlaceRanksLocked(reservation, &dispatch);
  StatusOr<NodeRecord> rank0_node = nodes_->Get(dispatch.placements.front().node_id);
  if (!rank0_node.ok()) {
    FailOrRequeueLocked(*job,
                        {ReasonCode::kNodeLost, "node " + dispatch.placements.front().node_id +
                                                    " vanished before dispatch"},
                        writes);
    return;
  }
  dispatch.tasks = builder_.MakeTrainTasks(
      *job, dispatch.attempt, dispatch.placements,
      builder_.RunSpecJson(*job, reservation.precision, planned.graph_json, planned.plan_json),
      reservation.background);
  dispatch.tasks.front().assignment.mutable_train()->set_store_address(rank0_node->host() + ":0");
  if (reservation.background) {
    dispatch.hosted_by =
        HostInFgExecutorLocked(*job, reservation.precision, dispatch.placements.front(),
                               planned.graph_json, &dispatch.tasks.front());
    const DeviceKey& where = dispatch.devices.front();
    const std::optional<std::string> fg = ledger_.ForegroundOf(where);
    if (dispatch.hosted_by.empty() && fg) {
      // Admitted to run inside a FG rank that has since ended (or is ending) while its FG job
      // still holds the device: as its own process it would run beside that job. It waits again.
      ReleaseLocked(job->id);
      writes->push_back(TransitionWrite(
          job->id, JobState::kPending,
          {ReasonCode::kWaitingForFgRank, "waiting again: the rank of FG job " + *fg + " on " +
                                              where.first + "/" + where.second +
                                              " it was to run inside ended while it was planned"},
          /*retry=*/true));
      return;
    }
  }
  writes->push_back(RunningWrite(job->id, std::move(dispatch)));
}

void Scheduler::PlaceRanksLocked(const Reservation& reservation, Dispatch* dispatch) {
  const size_t ranks = static_cast<size_t>(dispatch->planned.world_size);
  dispatch->devices.assign(reservation.devices.begin(), reservation.devices.begin() + ranks);
  // Devices beyond the plan's ranks go back to the pool.
  for (size_t i = ranks; i < reservation.devices.size(); ++i) {
    ledger_.ReleaseForeground(reservation.devices[i]);
  }
  dispatch->placements = builder_.PlaceRanks(dispatch->devices);
}

JobWrite Scheduler::RunningWrite(const std::string& job_id, Dispatch dispatch) {
  std::set<std::string> nodes_used;
  for (const RankPlacement& p : dispatch.placements) nodes_used.insert(p.node_id);
  std::vector<std::string> task_ids;
  for (const Task& t : dispatch.tasks) task_ids.push_back(t.id);
  const std::string what = dispatch.hosted_by.empty()
                               ? "dispatched " + std::to_string(dispatch.planned.world_size) +
                                     " ranks to " + std::to_string(nodes_used.size()) + " node(s)"
                               : "dispatched inside the executor of " + dispatch.hosted_by;
  // The tasks go out once RUNNING is stored, so a restarted coordinator knows every task a
  // worker may run. A refused write (cancelled meanwhile) frees the devices; a failed one puts
  // the job back in the queue.
  JobWrite write = TransitionWrite(job_id, JobState::kRunning, {ReasonCode::kProgress, what});
  write.mutate = [task_ids, d = dispatch](JobRecord& r) {
    r.attempt = d.attempt;
    r.devices = d.placements;
    r.task_ids = task_ids;
    r.graph_json = d.planned.graph_json;
    r.plan_json = d.planned.plan_json;
    r.predicted_iteration_ms = d.planned.iteration_ms;
    r.precision = d.precision;
    const int64_t reached = std::max(r.progress.iteration, r.progress.earlier_reached);
    std::vector<Evaluation> evaluations = std::move(r.progress.evaluations);  // still true
    // An epochs job's total, once an earlier attempt counted it (0 until then).
    const int64_t total = r.spec.epochs > 0 ? r.progress.iterations : r.spec.iterations;
    r.progress = JobProgress{};
    r.progress.iterations = total;
    r.progress.earlier_reached = reached;
    r.progress.evaluations = std::move(evaluations);
    r.store_address.clear();
  };
  write.on_written = [this, d = std::move(dispatch)](const JobRecord& stored) {
    OnDispatchStoredLocked(stored.id, d);
  };
  write.on_refused = [this, job_id](const Status& status) {
    DP_LOG_ERROR("job {}: cannot record dispatch: {}", job_id, status.ToString());
    ReleaseLocked(job_id);
    if (MayPass(status)) {
      unwritten_.push_back(
          TransitionWrite(job_id, JobState::kPending,
                          {ReasonCode::kRequeued,
                           "requeued: the dispatch could not be stored (" + status.message() + ")"},
                          /*retry=*/true));
    }
  };
  return write;
}

void Scheduler::OnDispatchStoredLocked(const std::string& job_id, const Dispatch& dispatch) {
  // Cancelled between the write and now: its devices are free again, nothing goes out.
  if (reservations_.erase(job_id) == 0) return;
  if (!dispatch.background) {
    const PlannedJob& planned = dispatch.planned;
    for (size_t rank = 0; rank < dispatch.devices.size(); ++rank) {
      double idle = 0;
      if (planned.iteration_ms > 0 && rank < planned.rank_busy_ms.size()) {
        idle = 1.0 - planned.rank_busy_ms[rank] / planned.iteration_ms;
      }
      ledger_.SetIdleFraction(dispatch.devices[rank], idle);
    }
    // The predicted idleness is known now: BG jobs may pick another device next round.
    Wake();
  }
  dispatcher_.Add(dispatch.tasks);
}

void Scheduler::ApplyWrites(Writes writes) {
  if (writes.empty()) return;
  std::vector<JobWriteResult> results = ApplyJobWrites(jobs_, std::move(writes));
  std::lock_guard<std::mutex> lock(mu_);
  for (JobWriteResult& result : results) {
    JobWrite& write = result.write;
    if (result.stored.ok()) {
      if (write.on_written) write.on_written(*result.stored);
    } else if (result.retry_later) {
      DP_LOG_WARN("job {}: cannot store \"{}\" yet ({}); retrying on the next tick", write.job_id,
                  write.state ? StateName(*write.state) : "update",
                  result.stored.status().ToString());
      unwritten_.push_back(std::move(write));
    } else {
      if (write.state) {
        DP_LOG_WARN("job {}: {} not stored: {}", write.job_id, StateName(*write.state),
                    result.stored.status().ToString());
      }
      if (write.on_refused) write.on_refused(result.stored.status());
    }
  }
  Wake();
}

size_t Scheduler::UnwrittenCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unwritten_.size();
}

Status Scheduler::JobChangesStored(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const JobWrite& write : unwritten_) {
    if (write.job_id == job_id) {
      return UnavailableError("job " + job_id +
                              ": its change is not stored yet (the store failed it; retried "
                              "every round); report again");
    }
  }
  return Status::Ok();
}

void Scheduler::Wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  work_pending_ = true;
  work_ready_.notify_all();
}

void Scheduler::WaitForWork(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  work_ready_.wait_for(lock, timeout, [&] { return work_pending_ || shutdown_; });
}

void Scheduler::Shutdown() {
  dispatcher_.Shutdown();
  std::lock_guard<std::mutex> lock(wake_mu_);
  shutdown_ = true;
  work_ready_.notify_all();
}

StatusOr<std::vector<v1::TaskCommand>> Scheduler::WaitForCommands(
    const std::string& node_id, std::chrono::milliseconds timeout) {
  StatusOr<NodeRecord> node = nodes_->Get(node_id);
  if (!node.ok()) return node.status();
  if (node->state == NodeState::kDown) {
    return NotFoundError("node " + node_id + " was marked down; register again");
  }
  return dispatcher_.WaitForCommands(node_id, timeout);
}

std::map<DeviceKey, DeviceUse> Scheduler::DeviceUses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.Uses();
}

std::vector<std::string> Scheduler::TasksOnNode(const std::string& node_id) const {
  return dispatcher_.TasksOnNode(node_id);
}

}  // namespace deepool::coordinator
