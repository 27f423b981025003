// Scheduler: admits jobs onto devices, plans them, dispatches their tasks to workers, and turns
// worker reports into job transitions.
//
// FG jobs are admitted in priority then submission order, each onto `gpus` devices of one device
// type that no other FG job holds, on UP nodes. A FG job that could fit the cluster but does not
// fit now blocks the FG jobs behind it (no starvation of big jobs). Its layer profile comes from
// the store's cache per (model, device type), from a worker (PROFILE task, state PROFILING) when
// missing, or from the device type's analytical preset when the spec says "profile":"analytical".
// BG jobs take one device each, one BG job per device, preferring the device the FG plans leave
// idlest (a device no FG job holds is idlest; otherwise 1 - predicted busy/iteration time). On a
// device whose FG rank is running, the BG job runs inside that rank's executor (TrainTask.
// host_task_id); when that rank ends before the BG job, the BG job is requeued and resumes from
// its newest periodic checkpoint (or starts again without them). Elsewhere it runs as its own
// executor process.
//
// Dispatch: plan rank r runs on the job's r-th device (devices fill node by node). Each node gets
// one TRAIN task with its ranks. The rank-0 node's task goes out first with store "HOST:0"; the
// others once that worker reports the c10d store's real address (see proto/deepool/v1/node.proto).
// Commands wait in a per-node outbox that the node's StreamTasks call drains; heartbeats re-send
// what a worker missed and cancel what it runs but should not.
//
// Parts: admission.h decides who gets devices (a pure step over a copy of the DeviceLedger);
// dispatch_builder.h turns a placed job into its run spec and tasks; dispatcher.h owns the task
// table, the outboxes, re-sends and reconciliation; job_writes.h carries job changes out of the
// lock; first_cause_window.h chooses the reason a failed job fails with; stopping_holds.h keeps
// the devices of executors still stopping; policy_record.h keeps what status and the metrics
// show of the policy's rounds; speed_curve_book.h plans FG jobs' speed-up curves for it;
// progress_reports.h turns workers' progress reports into job progress and logs. The Scheduler
// ties them together: it decides under mu_ and carries the decisions out.
//
// Threading: worker and client calls may come from any thread; the ledger, reservations, the
// write queue, the first-cause window, the stopping holds and the policy record are guarded by
// mu_ (taken before the Dispatcher's and JobManager's own locks, never after; the Dispatcher
// never holds its lock while it asks the JobManager). No store write happens under mu_: changes
// are decided under it and written after it is released (ApplyWrites). Tick() must be called
// from one thread at a time (the coordinator's control loop; tests call it directly); it plans
// without holding mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/path_roots.h"
#include "common/status.h"
#include "coordinator/admission.h"
#include "coordinator/device_ledger.h"
#include "coordinator/dispatch_builder.h"
#include "coordinator/dispatcher.h"
#include "coordinator/first_cause_window.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_writes.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "coordinator/policy_record.h"
#include "coordinator/policy_standing.h"
#include "coordinator/progress_reports.h"
#include "coordinator/speed_curve_book.h"
#include "coordinator/stopping_holds.h"
#include "deepool/v1/node.pb.h"
#include "protocol/run_spec.h"

namespace deepool::coordinator {

struct SchedulerOptions {
  // A command the worker has not acknowledged (listed in a heartbeat) after this long is re-sent.
  Clock::Duration resend_after = std::chrono::seconds(5);
  // How many dispatches a requeued job gets before it fails.
  int max_attempts = 3;
  // How many dispatches a BG job gets whose FG host rank keeps ending first before it fails:
  // in all, for a job without periodic checkpoints (it restarts from iteration 0 each time); in a
  // row without getting further than before, for one with them (it resumes from its newest).
  int max_hosted_attempts = 20;
  // --timeout-s for executors (0: none).
  int64_t executor_timeout_s = 0;
  // A task failure that reads as the echo of another rank's (a closed connection) waits this
  // long for the job's other tasks to report, so the job fails with the first cause.
  Clock::Duration first_cause_window = std::chrono::seconds(10);
  // Where specs' checkpoint.path, checkpoint.dir and data.path may point, "{user}" standing for
  // the submitter; checked at submission (PERMISSION_DENIED). Empty: anywhere.
  PathRoots path_roots;
  // Cluster defaults for jobs (FG and BG) whose spec asks for no periodic checkpoints (coordinator
  // --checkpoint-root, --checkpoint-every-seconds): they write them to ROOT/JOB_ID every that
  // many seconds, and so resume after a node loss or a resize. Empty root: no default.
  std::string checkpoint_root;
  double checkpoint_every_seconds = 600;
  // Who gets devices (coordinator --policy; coordinator/policy/policy.h): null for "fifo",
  // today's admission. Under "max-min" a running FG job with periodic checkpoints may be asked to
  // stop at its next one and wait again (a preemption), as a resize to its own size.
  std::shared_ptr<const policy::Policy> policy;
  // With a policy: how long one round may spend planning FG jobs' speed-up curves
  // (SpeedCurveBook) before admitting; curves not planned by then are planned in later rounds.
  Clock::Duration curve_planning_budget = std::chrono::milliseconds(200);
  // The options `policy` was made with (under "fifo", those its BG placement reads): status shows
  // when a max-min minimum slice ends.
  policy::PolicyOptions policy_options;
};

class Scheduler {
 public:
  Scheduler(JobManager* jobs, NodeRegistry* nodes, const PlanningBackend* planner,
            const Clock* clock, SchedulerOptions options = {});

  // Call once after JobManager::Load(): jobs caught mid-profiling or mid-planning go back to
  // PENDING; RUNNING jobs keep their devices and wait (one node timeout) for their workers to
  // report their tasks, else they fail (or are requeued where the spec allows).
  Status Recover();

  // One round: retry unwritten job changes, expire silent nodes, settle reconciliation, admit,
  // plan and dispatch, forget finished tasks.
  void Tick();

  // Client calls.
  // See JobManager::Submit for request_id.
  StatusOr<JobRecord> Submit(const JobSpec& spec, const std::string& request_id = "",
                             const std::string& owner = "");
  StatusOr<JobRecord> Cancel(const std::string& job_id, const std::string& reason);
  // A FG job's next attempts run on `gpus` devices (the global batch kept). PENDING: spec.gpus
  // changes now. RUNNING (or PLANNING/PROFILING): resize_to is stored, its ranks are asked to
  // stop after their next periodic checkpoint (StopAtCheckpointWanted), and when they have, the
  // job goes back to PENDING (kResized) with spec.gpus = gpus and resumes from that checkpoint.
  // INVALID_ARGUMENT for gpus out of range; FAILED_PRECONDITION for a BG or terminal job, a
  // started job without periodic checkpoints, or more devices than any device type has.
  StatusOr<JobRecord> Resize(const std::string& job_id, int gpus);
  // Moves the running FG jobs off a node being drained: each with periodic checkpoints stops at
  // its next one (as a resize to its own size) and is requeued (kEvacuated) to be placed on
  // other nodes; the others are left to finish there. One sentence per job, saying which.
  StatusOr<std::vector<std::string>> Evacuate(const std::string& node_id);

  // Worker calls (proto messages of deepool/v1/node.proto). A report whose logs or progress
  // cannot be stored returns UNAVAILABLE, and the worker sends it again.
  struct Registration {
    NodeRecord node;
    std::vector<std::string> cancel_task_ids;
  };
  // `protocol`: the executor protocol versions the node's worker shares with this coordinator
  // (NegotiateWorkerProtocol; by default all this build speaks).
  StatusOr<Registration> RegisterNode(const std::string& name, const std::string& address,
                                      const std::vector<DeviceInfo>& devices,
                                      const std::vector<v1::RunningTask>& running,
                                      protocol::ProtocolRange protocol = {});
  StatusOr<std::vector<v1::TaskCommand>> Heartbeat(const std::string& node_id,
                                                   const std::vector<v1::RunningTask>& running);
  // Returns true when the task is no longer wanted (the worker should stop it).
  StatusOr<bool> ReportProgress(const v1::ReportProgressRequest& report);
  // The job a known task belongs to.
  std::optional<std::string> JobOfTask(const std::string& task_id) const;
  // Whether the task's job waits for a resize: its executors should stop at their next
  // periodic checkpoint.
  bool StopAtCheckpointWanted(const std::string& task_id) const;
  // A task's end. UNAVAILABLE while a change of its job waits to be stored (the store failed
  // it; it is retried every tick), the exit's included, and again for the same report until it
  // is: the worker keeps the report, lists the task and sends it again, so a coordinator
  // restarted meanwhile learns the end from it rather than finding the task gone.
  Status ReportTaskExit(const v1::ReportTaskExitRequest& report);
  // Takes the node's queued commands, waiting up to `timeout` for one. NOT_FOUND for a node that
  // is unknown or DOWN; an empty result on timeout or shutdown.
  StatusOr<std::vector<v1::TaskCommand>> WaitForCommands(const std::string& node_id,
                                                         std::chrono::milliseconds timeout);

  // Views for ListNodes.
  std::map<DeviceKey, DeviceUse> DeviceUses() const;
  std::vector<std::string> TasksOnNode(const std::string& node_id) const;
  // Tasks in the dispatcher's table, ended ones not yet forgotten included (for tests).
  size_t TaskCount() const { return dispatcher_.size(); }
  // Job changes waiting to be written again (the store failed them).
  size_t UnwrittenCount() const;
  // OK once no change of the job waits to be written again; UNAVAILABLE otherwise.
  Status JobChangesStored(const std::string& job_id) const;
  // What the policy decided last (policy_record.h).
  using PolicyView = coordinator::PolicyView;
  PolicyView LastPolicyView() const;

  // The control loop sleeps here between ticks; woken early by submissions and worker reports.
  void WaitForWork(std::chrono::milliseconds timeout);
  // Wakes every waiter (streams, control loop) for shutdown.
  void Shutdown();

 private:
  // A job holding devices between admission and dispatch.
  struct Reservation {
    std::string job_id;
    std::vector<DeviceKey> devices;
    ClusterShape shape;
    bool background = false;
    std::string profile_json;  // empty: analytical
    std::string profile_task;  // set while PROFILING
    // The PROFILE task that measured profile_json (not the cache): the profile is cached for
    // the model and device type only once a plan was made from it, so one that does not parse
    // fails this job alone, not every later job of the model.
    std::optional<v1::ProfileTask> measured_by;
    // What the job trains at on these devices (jobspec::TrainingPrecision): planned at it and
    // written into its run spec.
    planner::Precision precision = planner::Precision::kFp32;
  };
  using Writes = std::vector<JobWrite>;
  // A planned job on its way to RUNNING: where its ranks go and the tasks that carry them.
  struct Dispatch {
    PlannedJob planned;
    bool background = false;
    int64_t attempt = 0;
    std::vector<DeviceKey> devices;  // rank order
    std::vector<RankPlacement> placements;
    std::vector<Task> tasks;
    std::string hosted_by;  // a BG job inside a FG executor: "job J rank R (task T)"
    planner::Precision precision = planner::Precision::kFp32;
  };

  // Admission (mu_ held): grants become reservations and PLANNING / PROFILING writes.
  void AdmitLocked(Writes* writes);
  void ReserveForegroundLocked(const ForegroundGrant& grant, const JobRecord& job, Writes* writes);
  void ReserveBackgroundLocked(const BackgroundGrant& grant, const JobRecord& job, Writes* writes);
  // Keeps the reservation and plans the job once `write` (its move to PLANNING) is stored.
  void PlanOnceStoredLocked(Reservation reservation, JobWrite write, Writes* writes);
  void StartProfilingLocked(const JobRecord& job, Reservation reservation, Writes* writes);
  void DisplaceBackgroundLocked(const Displacement& displaced, Writes* writes);
  // What a policy other than fifo weighs (scheduler_policy.cc): the placed jobs, which of them
  // may be preempted, the time now, the FG jobs' speed-up curves known.
  // Also the devices reserved for grown jobs still stopping (their records' grow_onto).
  void DescribePlacedLocked(const std::vector<JobSnapshot>& active, AdmissionInput* input);
  // Plans the speed-up curves the active jobs miss (scheduler_policy.cc; under fifo only BG jobs'),
  // without mu_, before the round that uses them.
  void RefreshCurves();
  // A policy's preemption or growth of a running FG job: it stops at its next checkpoint, then
  // waits again (a grown job is placed anew on the devices then free).
  void PreemptLocked(const FgPreemption& preempted, Writes* writes);
  // Whether a grant's devices are free in the ledger: a preempted job holds its devices until it
  // has stopped, and the job granted them waits until then.
  bool GrantFreeLocked(const ForegroundGrant& grant, Writes* writes) const;
  // Planning and dispatch.
  void PlanReserved(const std::vector<Reservation>& to_plan);
  void DispatchLocked(const Reservation& reservation, const PlannedJob& planned, Writes* writes);
  // The plan's ranks onto the reservation's first world_size devices; the rest are freed.
  void PlaceRanksLocked(const Reservation& reservation, Dispatch* dispatch);
  // The move to RUNNING; once stored, OnDispatchStoredLocked sends the tasks.
  JobWrite RunningWrite(const std::string& job_id, Dispatch dispatch);
  void OnDispatchStoredLocked(const std::string& job_id, const Dispatch& dispatch);
  // A BG job placed on a device whose FG rank is running (it has reported an iteration) runs
  // inside that rank's executor: sets the task's host_task_id, host_rank and background_json
  // and returns "job J rank R (task T)"; "" when it must run as its own process.
  std::string HostInFgExecutorLocked(const JobRecord& bg, planner::Precision precision,
                                     const RankPlacement& where, const std::string& graph_json,
                                     Task* task) const;
  // The rank of the FG job holding `key` when that job is RUNNING and the rank has reported an
  // iteration (its executor runs); -1 otherwise. Fills *fg with the FG job when found.
  int RunningFgRankLocked(const DeviceKey& key, JobRecord* fg = nullptr) const;
  // The same, of a RUNNING FG job already read.
  static int RunningRankOn(const JobRecord& fg, const DeviceKey& key);
  std::set<DeviceKey> RunningFgRanksLocked() const;
  // Endings (mu_ held). The job's devices are freed and its tasks cancelled at once; its new
  // state is written after the lock is released, retried until stored.
  void ReleaseLocked(const std::string& job_id);
  // ReleaseLocked, except that the devices the job's still-running executors use stay held (as
  // "JOB (stopping)") until its tasks have ended: stopped by their workers, or their node lost.
  void ReleaseAfterStopLocked(const JobRecord& job);
  void ReleaseStoppedLocked();
  // FAILED with `reason`, or PENDING (kRequeued) where the spec asks and attempts remain.
  void FailOrRequeueLocked(const JobRecord& job, const Reason& reason, Writes* writes);
  // Makes `write` stop its job's tasks once it is stored (or refused), never before: a stop sent
  // ahead of the job's new state would, were the coordinator to crash between the two, end a
  // task of a job its successor still has RUNNING, and fail that job "cancelled".
  void StopTasksOnceStored(JobWrite* write, const std::string& why);
  void ExpireNodesLocked(Writes* writes);
  void SettleReconciliationLocked(Writes* writes);
  void FailLostJobsLocked(const std::set<std::string>& job_ids, const Reason& reason,
                          Writes* writes);
  void OnTrainExitLocked(const Task& task, const v1::ReportTaskExitRequest& report, Writes* writes);
  // A hosted BG job's FG executor ended first: back to PENDING, or FAILED once it stalls.
  // Drain with evacuate, for one BG job on the node: requeued when it keeps checkpoints. Returns
  // the outcome line. Takes mu_.
  std::string EvacuateBackground(const JobRecord& job, const std::string& node_name,
                                 Writes* writes);
  void RequeueHostEndedLocked(const JobRecord& job, const std::string& error, Writes* writes);
  // Every task of a job being resized stopped at a checkpoint: back to PENDING at the new size.
  void RequeueResizedLocked(const JobRecord& job, int64_t stopped_at, Writes* writes);
  // RESOURCE_EXHAUSTED (the planner's message, naming the device) when no plan of the job on
  // its gpus devices of the largest registered device's memory fits
  // (PlanningBackend::CheckMemoryCanFit); OK when no device's memory is known.
  Status CheckFitsRegisteredDevices(const JobSpec& spec) const;
  // The largest number of schedulable devices one device type has (UP nodes).
  int LargestDeviceGroup() const;
  void OnProfileExitLocked(const Task& task, const v1::ReportTaskExitRequest& report,
                           Writes* writes);
  // Fails the jobs whose wait for a first cause is over.
  void SettleFailuresLocked(Writes* writes);
  // Caches a measured profile (before the task's exit is handled; no lock held).
  void CacheProfile(const JobSpec& spec, const v1::ProfileTask& measured_by,
                    const std::string& profile_json);
  // Whether a job still wants its tasks (worker registrations and heartbeats).
  bool JobWantsTasks(const std::string& job_id) const;
  // Store writes, without mu_: each write's follow-up runs under mu_ again; writes that may pass
  // later are queued for the next tick.
  void ApplyWrites(Writes writes);
  // Wakes the control loop; takes only wake_mu_, so a submission does not wait for a round.
  void Wake();

  JobManager* jobs_;
  NodeRegistry* nodes_;
  const PlanningBackend* planner_;
  const Clock* clock_;
  const SchedulerOptions options_;
  const DispatchBuilder builder_;
  Dispatcher dispatcher_;

  mutable std::mutex mu_;
  // The control loop's wake-up, apart from mu_ (which a round holds while it admits): taken
  // after mu_ when both are, never before.
  std::mutex wake_mu_;
  std::condition_variable work_ready_;
  bool work_pending_ = true;
  bool shutdown_ = false;
  DeviceLedger ledger_;
  std::map<std::string, Reservation> reservations_;  // jobs PROFILING or PLANNING
  std::vector<Reservation> ready_to_plan_;           // profiled, to plan in the next tick
  Writes unwritten_;                                 // failed writes to retry, in order
  std::optional<Clock::TimePoint> reconcile_deadline_;
  // When a policy that moves running jobs was last asked in a round with no job waiting: such
  // rounds run at most every kIdleRoundInterval, not every tick (a growth waits a minimum slice
  // anyway, and a round reads every placed job).
  static constexpr std::chrono::seconds kIdleRoundInterval{10};
  std::optional<Clock::TimePoint> last_idle_round_;
  FirstCauseWindow failures_;   // jobs whose failure waits for its first cause
  StoppingHolds stopping_;      // devices of executors still stopping (changes ledger_)
  PolicyRecord policy_record_;  // what status and the metrics show of the policy
  SpeedCurveBook curves_;       // FG jobs' speed-up curves for the policy (its own lock)
  ProgressReports progress_;    // workers' progress reports (no state; takes mu_ to read holders)
};

}  // namespace deepool::coordinator
