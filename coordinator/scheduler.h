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
// host_task_id); when that rank ends before the BG job, the BG job is requeued and starts again.
// Elsewhere it runs as its own executor process.
//
// Dispatch: plan rank r runs on the job's r-th device (devices fill node by node). Each node gets
// one TRAIN task with its ranks. The rank-0 node's task goes out first with store "HOST:0"; the
// others once that worker reports the c10d store's real address (see proto/deepool/v1/node.proto).
// Commands wait in a per-node outbox that the node's StreamTasks call drains; heartbeats re-send
// what a worker missed and cancel what it runs but should not.
//
// Threading: worker and client calls may come from any thread; state is guarded by mu_ (taken
// before JobManager's own lock, never after). Tick() must be called from one thread at a time
// (the coordinator's control loop; tests call it directly); it plans without holding mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/job_manager.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

struct SchedulerOptions {
  // A command the worker has not acknowledged (listed in a heartbeat) after this long is re-sent.
  Clock::Duration resend_after = std::chrono::seconds(5);
  // How many dispatches a requeued job gets before it fails.
  int max_attempts = 3;
  // --timeout-s for executors (0: none).
  int64_t executor_timeout_s = 0;
};

// How a device is used right now.
struct DeviceUse {
  std::string fg_job;
  std::string bg_job;
  double idle_fraction = 1.0;  // predicted from the FG plan; 1 when no FG job holds it
};

class Scheduler {
 public:
  Scheduler(JobManager* jobs, NodeRegistry* nodes, const PlanningBackend* planner,
            const Clock* clock, SchedulerOptions options = {});

  // Call once after JobManager::Load(): jobs caught mid-profiling or mid-planning go back to
  // PENDING; RUNNING jobs keep their devices and wait (one node timeout) for their workers to
  // report their tasks, else they fail (or are requeued where the spec allows).
  Status Recover();

  // One round: expire silent nodes, settle reconciliation, admit, plan and dispatch.
  void Tick();

  // Client calls.
  StatusOr<JobRecord> Submit(const JobSpec& spec);
  StatusOr<JobRecord> Cancel(const std::string& job_id, const std::string& reason);

  // Worker calls (proto messages of deepool/v1/node.proto).
  struct Registration {
    NodeRecord node;
    std::vector<std::string> cancel_task_ids;
  };
  StatusOr<Registration> RegisterNode(const std::string& name, const std::string& address,
                                      const std::vector<DeviceInfo>& devices,
                                      const std::vector<v1::RunningTask>& running);
  StatusOr<std::vector<v1::TaskCommand>> Heartbeat(const std::string& node_id,
                                                   const std::vector<v1::RunningTask>& running);
  // Returns true when the task is no longer wanted (the worker should stop it).
  StatusOr<bool> ReportProgress(const v1::ReportProgressRequest& report);
  Status ReportTaskExit(const v1::ReportTaskExitRequest& report);
  // Takes the node's queued commands, waiting up to `timeout` for one. NOT_FOUND for a node that
  // is unknown or DOWN; an empty result on timeout or shutdown.
  StatusOr<std::vector<v1::TaskCommand>> WaitForCommands(const std::string& node_id,
                                                         std::chrono::milliseconds timeout);

  // Views for ListNodes.
  std::map<std::pair<std::string, std::string>, DeviceUse> DeviceUses() const;
  std::vector<std::string> TasksOnNode(const std::string& node_id) const;

  // The control loop sleeps here between ticks; woken early by submissions and worker reports.
  void WaitForWork(std::chrono::milliseconds timeout);
  // Wakes every waiter (streams, control loop) for shutdown.
  void Shutdown();

 private:
  using DeviceKey = std::pair<std::string, std::string>;  // (node id, device)

  enum class TaskPhase { kWaitingForStore, kSent, kConfirmed, kCancelling, kEnded };
  struct Task {
    std::string id;
    std::string job_id;
    std::string node_id;
    int64_t attempt = 0;
    v1::TaskAssignment assignment;
    TaskPhase phase = TaskPhase::kSent;
    Clock::TimePoint sent_at{};
    bool rank0_node = false;
    bool unconfirmed_after_restart = false;
    v1::TaskOutcome outcome = v1::TASK_OUTCOME_UNSPECIFIED;
    std::string checkpoint;
  };
  // A job holding devices between admission and dispatch.
  struct Reservation {
    std::string job_id;
    std::vector<DeviceKey> devices;
    ClusterShape shape;
    bool background = false;
    std::string profile_json;  // empty: analytical
    std::string profile_task;  // set while PROFILING
  };

  // Admission (mu_ held).
  void ExpireNodesLocked();
  void SettleReconciliationLocked();
  void AdmitLocked(std::vector<Reservation>* to_plan);
  bool AdmitForegroundLocked(const JobRecord& job,
                             std::map<std::string, std::vector<DeviceKey>>* free,
                             std::vector<Reservation>* to_plan);
  bool AdmitBackgroundLocked(const JobRecord& job, std::vector<Reservation>* to_plan);
  // A FG job took `key`: the BG job placed there makes way (FG jobs keep priority). It is
  // stopped and goes back to PENDING, to be placed again (e.g. inside that FG job's rank once it
  // runs), restarting from iteration 0.
  void YieldBackgroundLocked(const DeviceKey& key, const std::string& fg_job);
  void SetPendingReasonLocked(const JobRecord& job, const std::string& reason);
  void StartProfilingLocked(const JobRecord& job, Reservation reservation);
  // Dispatch (mu_ held).
  void DispatchLocked(const Reservation& reservation, const PlannedJob& planned);
  std::string RunSpecJson(const JobRecord& job, const std::string& graph_json,
                          const std::string& plan_json) const;
  // One TRAIN task per node holding ranks of `placements` (rank order), the rank-0 node's first,
  // without store addresses.
  std::vector<Task> MakeTrainTasks(const JobRecord& job, int64_t attempt,
                                   const std::vector<RankPlacement>& placements,
                                   const std::string& run_spec, bool background) const;
  void SendLocked(const std::string& node_id, v1::TaskCommand command);
  // A BG job placed on a device whose FG rank is running (it has reported an iteration) runs
  // inside that rank's executor: sets the task's host_task_id, host_rank and background_json
  // and returns "job J rank R (task T)"; "" when it must run as its own process.
  // The rank of the FG job holding `key` when that job is RUNNING and the rank has reported an
  // iteration (its executor runs); -1 otherwise. Fills *fg with the FG job when found.
  int RunningFgRankLocked(const DeviceKey& key, JobRecord* fg = nullptr) const;
  std::string HostInFgExecutorLocked(const JobRecord& bg, const RankPlacement& where,
                                     const std::string& graph_json, Task* task) const;
  // Endings (mu_ held).
  void ReleaseLocked(const std::string& job_id);
  void CancelTasksLocked(const std::string& job_id, const std::string& reason);
  void FailOrRequeueLocked(const JobRecord& job, const std::string& reason);
  void OnTrainExitLocked(Task* task, const v1::ReportTaskExitRequest& report);
  void OnProfileExitLocked(Task* task, const v1::ReportTaskExitRequest& report);
  std::vector<std::string> ReconcileRunningLocked(const std::string& node_id,
                                                  const std::vector<v1::RunningTask>& running);
  void Wake();

  JobManager* jobs_;
  NodeRegistry* nodes_;
  const PlanningBackend* planner_;
  const Clock* clock_;
  const SchedulerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable outbox_ready_;
  std::condition_variable work_ready_;
  bool work_pending_ = true;
  bool shutdown_ = false;
  std::map<std::string, Task> tasks_;
  std::map<std::string, std::deque<v1::TaskCommand>> outbox_;  // by node id
  std::map<DeviceKey, std::string> fg_owner_;
  std::map<DeviceKey, std::string> bg_owner_;
  std::map<DeviceKey, double> idle_fraction_;
  std::map<std::string, Reservation> reservations_;  // jobs PROFILING or PLANNING
  std::vector<Reservation> ready_to_plan_;           // profiled, to plan in the next tick
  std::optional<Clock::TimePoint> reconcile_deadline_;
  int64_t profile_tasks_ = 0;
};

}  // namespace deepool::coordinator
