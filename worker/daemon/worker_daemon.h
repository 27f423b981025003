// The worker daemon's conversation with the coordinator (proto/deepool/v1/node.proto): register
// the node's devices, heartbeat, take task commands from the StreamTasks stream (and from
// heartbeat replies), run them through the ExecutorSupervisor, and report progress, log lines
// and task exits. When the coordinator goes away it keeps the tasks running, retries, and on
// NOT_FOUND registers again listing its running tasks so the coordinator can reconcile them.
// Task exits are kept until the coordinator acknowledges them, so none is lost to a restart.
//
// Threading: Start() launches three threads: "dp-worker-ctl" (register + heartbeat),
// "dp-worker-tasks" (the StreamTasks stream) and "dp-worker-report" (flushes batched progress
// and exits). Supervisor callbacks (TaskListener) run on child reader threads and only queue
// reports. One mutex guards the node id, the report queues, the known-task sets and the lease.
//
// The lease: a worker the coordinator has not answered for `coordinator_lease` stops its tasks
// (the control thread does it). By then the coordinator has declared the node DOWN and failed or
// requeued their jobs, so executors cut off by a partition do not train on beside a rerun of
// their own job. The cost: a coordinator outage longer than the lease also ends every task.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "deepool/v1/node.grpc.pb.h"
#include "worker/daemon/devices.h"
#include "worker/daemon/executor_supervisor.h"
#include "worker/daemon/worker_metrics.h"

namespace deepool::worker::daemon {

struct WorkerOptions {
  std::string name;     // stable node name (the node id follows it)
  std::string address;  // host other nodes reach this node at (its host part names the store)
  std::vector<LocalDevice> devices;
  std::string version = "0.1.0";
  std::chrono::milliseconds retry_interval{500};  // between failed register / stream attempts
  // Progress batching; a task's exit is reported at once (it frees the task's devices).
  std::chrono::milliseconds report_interval{200};
  std::chrono::milliseconds rpc_timeout{5000};
  size_t max_pending_log_lines = 2000;  // per task, between flushes; older lines are dropped
  // --coordinator-lease-s. Nullopt: the coordinator's node timeout (sent at registration) less
  // one heartbeat interval, so the tasks stop before the node is declared DOWN. 0: never stop
  // them (they run through partitions and coordinator outages alike).
  std::optional<std::chrono::milliseconds> coordinator_lease;
  const Clock* clock = SystemClock::Get();  // the lease, and wall time on log lines
};

class WorkerDaemon final : public TaskListener {
 public:
  // `stub` talks to the coordinator's NodeService; `supervisor_options` configures the
  // executors (the daemon owns the supervisor and is its listener).
  WorkerDaemon(WorkerOptions options, std::unique_ptr<v1::NodeService::StubInterface> stub,
               SupervisorOptions supervisor_options);
  ~WorkerDaemon() override;
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  void Start();
  // Kills running executors (within the kill grace, whatever the coordinator does), stops the
  // threads and makes a last attempt to report the exits.
  void Stop();
  // Once stopping, no call to the coordinator waits longer than this.
  static constexpr std::chrono::milliseconds kStoppingRpcTimeout{1000};

  // The node id of the current registration, or "" while unregistered.
  std::string node_id() const;
  int registrations() const { return registrations_.load(); }
  ExecutorSupervisor& supervisor() { return *supervisor_; }
  // The /metrics document (worker_metrics.h).
  std::string MetricsText() const;

  // TaskListener (called by the supervisor on child reader threads).
  void OnStoreReady(const std::string& task_id, const std::string& host, int port) override;
  void OnIteration(const std::string& task_id, const IterationReport& report) override;
  void OnLogLine(const std::string& task_id, int rank, const std::string& line) override;
  void OnTrace(const std::string& task_id, const protocol::TraceEvent& trace) override;
  void OnEvaluation(const std::string& task_id, const protocol::EvaluationEvent& event) override;
  void OnTaskFinished(const TaskResult& result) override;

 private:
  struct PendingProgress {
    std::deque<v1::IterationEvent> iterations;  // at most kMaxPendingIterations, the newest
    std::deque<v1::LogLine> logs;
    size_t dropped_logs = 0;
    std::string store_ready;
    std::vector<v1::TraceChunk> traces;
    std::vector<v1::Evaluation> evaluations;  // at most kMaxPendingEvaluations, the newest
  };

  // Hands the coordinator's trace request to the task's executors (logged when it cannot).
  void ForwardTraceRequest(const std::string& task_id, const v1::TraceRequest& request);
  // Iterations held while the coordinator cannot take them (unregistered, or reports failing):
  // it shows the newest, so older ones may go.
  static constexpr size_t kMaxPendingIterations = 1000;
  static constexpr size_t kMaxPendingTraceChunks = 1000;
  static constexpr size_t kMaxPendingEvaluations = 100;  // the coordinator keeps no more

  void ControlLoop();
  void StreamLoop();
  void ReportLoop();
  bool Register();
  void Heartbeat();
  // The lease: renewed by every answer from the coordinator; when it runs out, the running
  // tasks are cancelled (once per outage) with a line saying why.
  void RenewLease(const v1::RegisterNodeResponse* registration);
  // An answer of a coordinator that is still starting (UNAVAILABLE with
  // protocol::kCoordinatorStartingKey): the coordinator is there, so the lease holds; true when
  // `status` was one.
  bool OnStartingAnswer(const grpc::ClientContext& context, const grpc::Status& status);
  void EnforceLease();
  // How long the heartbeat may wait: the RPC timeout, cut to what is left of a running lease.
  std::chrono::milliseconds HeartbeatTimeout() const;
  void HandleCommand(const v1::TaskCommand& command);
  // Cancels a task of this node (a task no longer running is no error), saying why.
  void CancelTask(const std::string& task_id, const std::string& why);
  void HandleAssignment(const v1::TaskAssignment& assignment);
  // False when the task id was seen before (commands are delivered at least once).
  bool RememberTask(const std::string& task_id);
  const LocalDevice* FindDevice(const std::string& name) const;
  void StartProfileTask(const v1::TaskAssignment& assignment);
  void StartHostedTask(const v1::TaskAssignment& assignment);
  void StartTrainTask(const v1::TaskAssignment& assignment);
  // Adds one of the worker's own lines (rank -1) to the task's next progress report.
  void AddWorkerLogLine(const std::string& task_id, const std::string& line);
  // Reports a task that could not start as FAILED with `error` (host_ended: a hosted BG task
  // whose FG rank is gone, which the coordinator requeues).
  void QueueStartFailure(const v1::TaskAssignment& assignment, const std::string& error,
                         bool host_ended = false);
  void FlushProgress();
  void FlushExits();
  std::vector<v1::RunningTask> RunningTaskProtos() const;
  // Marks the registration lost: the control thread registers again.
  void ForgetRegistration(const std::string& why);
  // Waits on cv_ up to `d`; false when stopping.
  bool SleepFor(std::chrono::milliseconds d);
  // The report loop's wait: up to report_interval, or until an exit is queued; false when
  // stopping.
  bool WaitForReport();
  // A call's context: its deadline `timeout` away (options_.rpc_timeout by default), at most
  // kStoppingRpcTimeout once stopping.
  std::unique_ptr<grpc::ClientContext> NewContext() const;
  std::unique_ptr<grpc::ClientContext> NewContext(std::chrono::milliseconds timeout) const;

  const WorkerOptions options_;
  std::unique_ptr<v1::NodeService::StubInterface> stub_;
  // Before the supervisor: its reader threads report into it until the supervisor is gone.
  WorkerMetrics metrics_;
  std::unique_ptr<ExecutorSupervisor> supervisor_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::string node_id_;    // guarded by mu_
  // The id of the last registration, kept while re-registering: task exits are still reported
  // under it, so the coordinator learns of tasks that ended while it was away before it
  // reconciles the new registration's running tasks. Guarded by mu_.
  std::string last_node_id_;
  std::chrono::milliseconds heartbeat_interval_{1000};  // guarded by mu_
  std::chrono::milliseconds lease_{0};                  // in force; 0: none. Guarded by mu_
  std::optional<Clock::TimePoint> last_answer_;         // from the coordinator, guarded by mu_
  bool lease_lost_ = false;            // tasks were stopped for this outage, guarded by mu_
  bool coordinator_starting_ = false;  // its last answer was "starting", guarded by mu_
  std::map<std::string, PendingProgress> progress_;  // guarded by mu_
  struct PendingExit {
    v1::ReportTaskExitRequest request;
    int not_found_replies = 0;  // dropped after a few: the coordinator no longer knows the task
  };
  std::deque<PendingExit> exits_;  // guarded by mu_
  // An exit was queued since the report loop last woke: report it now, not an interval later
  // (a failed report waits for the next interval). Guarded by mu_.
  bool exit_queued_ = false;
  std::set<std::string> known_tasks_;              // every task id ever assigned, guarded by mu_
  std::deque<std::string> known_order_;            // bounds known_tasks_, guarded by mu_
  grpc::ClientContext* stream_context_ = nullptr;  // guarded by mu_, for cancellation
  std::atomic<int> registrations_{0};

  std::thread control_thread_;
  std::thread stream_thread_;
  std::thread report_thread_;
};

}  // namespace deepool::worker::daemon
