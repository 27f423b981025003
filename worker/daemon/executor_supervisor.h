// Runs the worker's tasks as child processes: a TRAIN task is one deepool-executor per assigned
// rank (the executor contract is in docs/formats.md), a PROFILE task is one deepool-profile run.
// It forwards the executors' progress and log lines to a TaskListener, kills a task's process
// groups on cancel or when one of its ranks fails, and reports every task's end exactly once with
// the last log lines. A crashing executor only ends its own task; the supervisor keeps running.
//
// Files: <work_dir>/tasks/<task_id>/run.json (the run spec), rank-<R>.log (the rank's stderr),
// profile.json (a profile task's output).
//
// Threading: public methods are thread-safe (one mutex guards the task table). Each child has its
// own reader thread (see ChildProcess) that parses its lines; one housekeeping thread
// ("dp-supervisor") escalates SIGTERM to SIGKILL after the grace period and destroys the process
// objects of finished tasks. Listener callbacks run on reader threads, never under the lock, and
// may call back into the supervisor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/path_roots.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "protocol/executor_commands.h"
#include "protocol/executor_events.h"

namespace deepool::worker::daemon {

struct RankAssignment {
  int rank = 0;
  std::string device;  // executor --device value: "cpu" or "cuda:K"
  // The node's device ("cpu:1", "cuda:0"): a rank waits to start while an executor of a task
  // being stopped still runs on it. Empty: `device`.
  std::string node_device;
};

struct TrainTask {
  std::string task_id;
  std::string job_id;
  std::string run_spec_json;  // the deepool.run document, written to run.json
  int world_size = 0;
  std::string store_host;             // where rank 0 hosts the c10d store
  int store_port = 0;                 // 0: rank 0 (then local) binds a free port and reports it
  std::vector<RankAssignment> ranks;  // the ranks this worker runs
  int timeout_s = 0;                  // passed as --timeout-s when > 0
  bool background = false;  // a BG job: its executors run at a lower CPU priority (nice 10)
  std::string owner;        // the job's owner: "{user}" in the path roots (TrainTask.owner)
};

// A BG job run inside rank host_rank of the running FG task host_task_id (docs/formats.md,
// "Executor commands and BG lines"): no process of its own.
struct HostedBackgroundTask {
  std::string task_id;
  std::string job_id;
  std::string host_task_id;
  int host_rank = 0;
  std::string background_json;  // the run spec's "background" object; its job_id names the job
  std::string owner;            // the BG job's owner: "{user}" in the path roots
};

struct ProfileTask {
  std::string task_id;
  std::string job_id;
  // deepool-profile arguments. "{output}" in any of them is replaced by the output file's path,
  // "{graph}" by the path graph_json was written to.
  std::vector<std::string> args;
  std::string graph_json;  // optional: written to graph.json in the task directory
  // The device it measures ("cpu" or "cuda:K"): on a CPU device the profiler gets the
  // executors' --threads, so that it times the layers as the job's ranks will run them.
  std::string device = "cpu";
  // The node's name for that device ("cpu:1", "cuda:0"; "": `device`): the profiler starts once
  // no stopping executor is left there, as a rank does, and a rank waits for a stopping profiler.
  std::string node_device;
};

struct IterationReport {
  int rank = 0;
  int64_t iteration = 0;
  std::optional<double> loss;
  double iteration_ms = 0;
  double samples_per_s = 0;
  double busy_ms = 0;
  double idle_ms = 0;
  double data_ms = 0;            // of busy_ms: waiting for the batch from the data source
  int64_t total_iterations = 0;  // the run's, as the executor counted them (0: not sent)
  // Set when the executor shares its device with a BG job (docs/multiplexing.md, "Metrics").
  std::optional<double> fg_busy_ms;
  std::optional<double> bg_busy_ms;
  double bg_samples_per_s = 0;
  int64_t bg_iterations = 0;
  std::optional<double> bg_loss;
  bool in_fg_executor = false;  // a hosted BG task's progress, from its host's "background" line
};

struct RankExitInfo {
  int rank = 0;  // -1: the profiler
  int exit_code = -1;
  int signal = 0;
  std::string error;                             // the executor's {"event":"error"} message, if any
  StatusCode error_code = StatusCode::kUnknown;  // and its code
  bool started = false;
};

struct TaskResult {
  std::string task_id;
  std::string job_id;
  bool succeeded = false;
  bool cancelled = false;
  std::string message;  // why it failed ("rank 2: exit code 1: out of memory"), or empty
  // The failing rank's error code (protocol::IsPeerFailureCode tells an echo of another rank's
  // failure); UNKNOWN when it left none (killed by a signal, say).
  StatusCode error_code = StatusCode::kUnknown;
  std::vector<std::string> last_log_lines;  // of the failing rank, else of all ranks merged
  int64_t iterations = 0;                   // from the executors' done events (max over ranks)
  std::string checkpoint;                   // from rank 0's done event, if any
  std::vector<double> checkpoint_seconds;   // each rank's time to write its checkpoint
  std::string profile_json;                 // a profile task's output
  std::vector<RankExitInfo> ranks;
  bool host_ended = false;  // a hosted BG task whose FG executor ended before the BG job did
  // Every rank stopped after the periodic checkpoint of this iteration, as asked
  // (StopAtCheckpoint); 0 when the ranks ran to the end.
  int64_t stopped_at = 0;
};

class TaskListener {
 public:
  virtual ~TaskListener() = default;
  // Rank 0 of a task that was given port 0 has its store listening.
  virtual void OnStoreReady(const std::string& task_id, const std::string& host, int port) = 0;
  virtual void OnIteration(const std::string& task_id, const IterationReport& report) = 0;
  // rank is -1 for a profile task.
  virtual void OnLogLine(const std::string& task_id, int rank, const std::string& line) = 0;
  virtual void OnTaskFinished(const TaskResult& result) = 0;
  // A part of a rank's timeline, answering a trace command (SendTraceRequest).
  virtual void OnTrace(const std::string& /*task_id*/, const protocol::TraceEvent& /*trace*/) {}
  // A rank's (rank 0's) evaluation on the held-out set: its "evaluation" line.
  virtual void OnEvaluation(const std::string& /*task_id*/,
                            const protocol::EvaluationEvent& /*event*/) {}
};

struct SupervisorOptions {
  std::string executor_path;  // deepool-executor
  std::string profiler_path;  // deepool-profile
  std::string work_dir;       // tasks/<id>/ is created below it
  // This node's address (the worker's --address): executors on CPU devices bind Gloo to it, so
  // ranks on other hosts can connect whatever the hostname resolves to. Empty: their default.
  std::string address;
  size_t log_tail_lines = 50;
  std::chrono::milliseconds kill_grace{3000};  // SIGTERM -> SIGKILL
  // Executors end themselves when this daemon exits, or is stopped (SIGSTOP) for longer than
  // this (--worker-lease-s): keep it below the coordinator's node timeout less a heartbeat
  // interval, so they are gone before the node is declared DOWN and its devices reused. 0: off.
  std::chrono::milliseconds executor_lease{5000};
  // Intra-op threads of an executor on a CPU device (--threads): the node's cores divided by
  // its CPU devices. 0: the executor's default.
  int cpu_threads_per_device = 0;
  // Where a run spec's checkpoint and data paths may point (--path-roots; "{user}" is the task's
  // owner); a task whose paths lie elsewhere is refused before any executor starts. Empty:
  // anywhere.
  PathRoots path_roots;
};

// PERMISSION_DENIED when a path of the run spec (checkpoint.path, checkpoint.dir, data.path, and
// the background job's data.path and checkpoint.dir) lies outside the roots; INVALID_ARGUMENT when
// it is not JSON. `owner` is the job's owner, for per-user roots ("{user}").
Status CheckRunSpecPaths(const PathRoots& roots, const std::string& run_spec_json,
                         const std::string& owner);
// The same for a hosted BG job's "background" object.
Status CheckBackgroundPaths(const PathRoots& roots, const nlohmann::json& background,
                            const std::string& owner);

// A snapshot of a task the supervisor runs, for re-registration after a coordinator restart.
struct RunningTaskInfo {
  std::string task_id;
  std::string job_id;
  bool profile = false;
  std::vector<int> ranks;
  int64_t last_iteration = -1;
};

class ExecutorSupervisor {
 public:
  ExecutorSupervisor(SupervisorOptions options, TaskListener* listener);
  ~ExecutorSupervisor();  // cancels (kills) everything still running and waits for it
  ExecutorSupervisor(const ExecutorSupervisor&) = delete;
  ExecutorSupervisor& operator=(const ExecutorSupervisor&) = delete;

  // ALREADY_EXISTS for a task id already running, INVALID_ARGUMENT for a malformed task,
  // NOT_FOUND / INTERNAL when the executor cannot be started (nothing is left running then).
  Status StartTrain(const TrainTask& train);
  Status StartProfile(const ProfileTask& profile);
  // Attaches a BG job to a running FG rank (an attach_background command on its stdin). Its
  // "background" lines become OnIteration(task_id) reports (rank 0) and its "background_done"
  // line, or the host rank's exit, OnTaskFinished(task_id). NOT_FOUND when the host rank is not
  // running; ALREADY_EXISTS for a task id already running; INVALID_ARGUMENT for bad JSON.
  Status StartHosted(const HostedBackgroundTask& task);
  // Writes a trace command to every running rank of a TRAIN task (FG ranks read commands; a BG
  // task's executors do not, FAILED_PRECONDITION). Their parts come back through OnTrace.
  // NOT_FOUND when the task is not running here.
  Status SendTraceRequest(const std::string& task_id, const protocol::TraceCommand& command);
  // Asks every rank of a FG TRAIN task to stop after its next periodic checkpoint (a
  // "stop_at_checkpoint" command; ranks started later get it when they start). Once per task:
  // repeats do nothing. The task then finishes succeeded with stopped_at set.
  Status StopAtCheckpoint(const std::string& task_id);
  // Starts the ranks that were waiting for the store address (rank 0 runs on another node).
  Status SetStoreAddress(const std::string& task_id, const std::string& host, int port);
  // Kills the task's processes (SIGTERM, SIGKILL after the grace); OnTaskFinished follows with
  // cancelled = true and the message "cancelled: <why>" (who asked, for the job's history).
  // NOT_FOUND if it is not running.
  Status Cancel(const std::string& task_id, const std::string& why);
  std::vector<RunningTaskInfo> RunningTasks() const;
  bool IsRunning(const std::string& task_id) const;
  // Cancels everything and waits until all children are reaped.
  void Shutdown();

 private:
  struct RankProcess {
    int rank = -1;
    std::string device;
    std::string node_device;
    // Set while the rank waits for a stopping task's executor to leave its device: the store
    // address it starts with then.
    std::string deferred_store;
    std::unique_ptr<ChildProcess> child;  // null while waiting for the store address
    std::shared_ptr<LogTail> tail;
    std::optional<ProcessExit> exit;
    bool done_event = false;
    std::string error_event;
    StatusCode error_code = StatusCode::kUnknown;
    int64_t iterations = 0;
    std::string checkpoint;
    std::optional<double> checkpoint_ms;  // from the done event
    bool stopped = false;                 // its done event said "stopped"
  };
  struct Hosted {
    HostedBackgroundTask task;
    std::string bg_job_id;  // the background object's job_id, as the executor names it
    bool cancelled = false;
    std::string cancel_reason;  // Cancel's `why`
  };
  struct Task {
    std::string task_id;
    std::string job_id;
    bool profile = false;
    std::string dir;
    TrainTask train;  // for TRAIN tasks
    std::vector<RankProcess> ranks;
    bool cancelled = false;
    std::string cancel_reason;  // Cancel's `why`
    bool failing = false;       // a rank failed; the rest are being stopped
    std::string failure;        // the first failure's message
    StatusCode failure_code = StatusCode::kUnknown;
    std::vector<std::string> failure_tail;
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    int64_t last_iteration = -1;
    std::string profile_output_path;
    bool stop_asked = false;  // StopAtCheckpoint was called
    // A PROFILE task's profiler while it waits for a stopping executor to leave its device.
    std::optional<ProcessSpec> deferred_profiler;
  };

  // A running FG TRAIN task (NOT_FOUND, or FAILED_PRECONDITION for a profile or BG task).
  StatusOr<Task*> ForegroundTrainTaskLocked(const std::string& task_id);
  // Writes `line` to the stdin of each of the task's ranks that runs.
  static Status WriteToRunningRanksLocked(const Task& task, const std::string& line);
  static std::string StopCommandLine();
  // UNAVAILABLE when shutting down, ALREADY_EXISTS when the id runs. Takes mu_.
  Status CheckNewTask(const std::string& task_id) const;
  Status StartRankLocked(Task& task, RankProcess& rank, const std::string& store);
  // Starts a PROFILE task's profiler (its one process, rank -1). Requires mu_.
  Status StartProfilerLocked(Task& task, const ProcessSpec& spec);
  // Starts the rank, or defers it while another task that is being stopped (cancelled, or
  // failing) still has an executor on the rank's device: a displaced BG job's process must not
  // run beside the FG rank that took its device, not even for the kill grace. Requires mu_.
  Status StartOrDeferRankLocked(Task& task, RankProcess& rank, const std::string& store);
  // The id of a task being stopped with an executor still alive on `node_device`, or "".
  std::string StoppingTaskOnLocked(const std::string& node_device) const;
  // Starts deferred ranks whose devices are clear now; returns the results of tasks that failed
  // to start one (stopped, and collected if done). Requires mu_.
  std::vector<TaskResult> StartDeferredLocked();
  // A task that could not start a rank: fails and stops. Its result when it is done.
  std::optional<TaskResult> FailStartLocked(Task& task, const Status& status);
  void OnRankLine(const std::string& task_id, int rank, const std::string& line, bool is_stdout);
  void OnRankExit(const std::string& task_id, int rank, const ProcessExit& exit);
  // Sends SIGTERM to every started rank and arms the SIGKILL deadline. Requires mu_.
  void StopTaskLocked(Task& task);
  // When every rank of the task has exited (or will never start), moves it to finished_ and
  // returns its result for the caller to report after unlocking. Requires mu_.
  std::optional<TaskResult> CollectIfDoneLocked(const std::string& task_id);
  void HousekeepingLoop();
  std::string TaskDir(const std::string& task_id) const;
  // hosted_background.cc. The host's "background" (ended == nullptr) / "background_done"
  // lines, and its exit.
  void OnHostedLine(const std::string& host_task_id, int host_rank,
                    const protocol::BackgroundEvent& progress,
                    const protocol::BackgroundDoneEvent* ended);
  void OnHostExit(const std::string& host_task_id, int host_rank);
  // Cancel of a hosted task: a detach_background command. Returns false if `task_id` is not a
  // hosted task. Takes mu_.
  bool CancelHosted(const std::string& task_id, const std::string& why);

  const SupervisorOptions options_;
  TaskListener* const listener_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Task>> tasks_;  // running, guarded by mu_
  std::map<std::string, Hosted> hosted_;                // hosted BG tasks, guarded by mu_
  std::vector<std::unique_ptr<Task>> finished_;         // to destroy, guarded by mu_
  bool shutting_down_ = false;
  std::thread housekeeping_;
};

}  // namespace deepool::worker::daemon
