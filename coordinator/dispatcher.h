// Dispatcher: the coordinator's task table and the per-node outboxes. It knows every task it sent
// (TRAIN and PROFILE), in which phase each is, and what each worker has confirmed; it queues
// commands per node for StreamTasks, re-sends what a worker missed, cancels what a worker runs but
// should not, and forgets tasks once they ended and their job is done with them.
//
// Task phases: WAITING_FOR_STORE (a non-rank-0 node's TRAIN task, held until rank 0's worker
// reports the c10d store) -> SENT -> CONFIRMED (a worker listed or reported it) -> ENDED; or
// SENT/CONFIRMED -> CANCELLING (a cancel was sent) -> ENDED (the worker no longer lists it).
// Tasks rebuilt after a coordinator restart are "unconfirmed" until a worker reports them.
//
// The dispatcher decides nothing about jobs: callers pass whether a job still wants its tasks
// and act on the jobs it names (lost, ended).
// Scale: a node's tasks are indexed, so a heartbeat costs the tasks its node runs, not the pool's.
// Threading: every method is safe from any thread (one mutex, never held while calling out: the
// `wanted` and `done` predicates read the job table, whose lock a heartbeat must not wait for
// while holding every other worker call up; they are asked first, and a job whose task arrived
// meanwhile counts as wanted). WaitForCommands blocks on a condition variable, woken by new
// commands and Shutdown.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/keyed_condition.h"
#include "common/status.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

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
  // Restored after a restart, known to have run: its rank 0 had reported the c10d store. Such a
  // task missing from its worker died with it; one not known to have run may never have arrived.
  bool started_before_restart = false;
  v1::TaskOutcome outcome = v1::TASK_OUTCOME_UNSPECIFIED;
  std::string checkpoint;
  int64_t stopped_at = 0;  // ended at a checkpoint as asked (resize): its iteration
  // Listed by a worker but not sent by this coordinator (or already given up, e.g. with its
  // node): tracked in phase CANCELLING only until the worker stops it. No assignment.
  bool stray = false;

  bool live() const { return phase == TaskPhase::kSent || phase == TaskPhase::kConfirmed; }
};

// What the per-report paths need of a task: no assignment, which carries the whole run spec.
struct TaskBrief {
  std::string job_id;
  int64_t attempt = 0;
  TaskPhase phase = TaskPhase::kSent;
  bool rank0_node = false;
  bool profile = false;  // a PROFILE task

  bool live() const { return phase == TaskPhase::kSent || phase == TaskPhase::kConfirmed; }
};

class Dispatcher {
 public:
  // Whether a job still wants its tasks to run (it is not terminal).
  using JobWanted = std::function<bool(const std::string& job_id)>;
  // Whether a job is done with its ended tasks of `attempt` (terminal, or on a later attempt).
  using JobDone = std::function<bool(const std::string& job_id, int64_t attempt)>;

  // A command a worker has not acknowledged after `resend_after` is sent again. `clock` must
  // outlive the dispatcher.
  Dispatcher(const Clock* clock, Clock::Duration resend_after);

  // New tasks; those in phase SENT go to their node's outbox now.
  void Add(std::vector<Task> tasks);
  // Tasks rebuilt from the store after a coordinator restart: marked unconfirmed, nothing sent
  // (a node's SENT tasks go out when it registers again).
  void Restore(std::vector<Task> tasks);

  // Cancels the job's tasks: a cancel to each sent one (CANCELLING); unsent ones just end.
  void CancelJob(const std::string& job_id, const std::string& reason);
  // The node is gone: its tasks end (nothing to cancel there) and its outbox is dropped.
  // Returns the jobs of the tasks that were still live or waiting.
  std::set<std::string> DropNode(const std::string& node_id);
  // Jobs with a task no worker has reported since the restart, with one such task each.
  std::map<std::string, std::string> UnconfirmedAfterRestart() const;

  // Worker calls. Each returns the ids of tasks the worker lists that must be cancelled; those
  // stay CANCELLING (NoneLive is false for them) until the worker no longer lists them or
  // reports their exit, so their devices can be kept from other jobs meanwhile.
  struct Registration {
    std::vector<std::string> cancel_task_ids;
    // Jobs whose task on this node died with the previous worker process.
    std::set<std::string> lost_jobs;
  };
  // node_host: where the node's rank 0 binds its store when a rank-0 task is sent again.
  Registration OnRegister(const std::string& node_id, const std::string& node_host,
                          const std::vector<v1::RunningTask>& running, const JobWanted& wanted);
  // Cancels for listed tasks nobody wants, and re-sends of SENT tasks not listed in time.
  std::vector<v1::TaskCommand> OnHeartbeat(const std::string& node_id,
                                           const std::vector<v1::RunningTask>& running,
                                           const JobWanted& wanted);
  // The task as it is now; nullopt for an unknown (or forgotten) task.
  std::optional<Task> Find(const std::string& task_id) const;
  // The same, without the assignment (each progress report asks).
  std::optional<TaskBrief> Brief(const std::string& task_id) const;
  // The node the task was sent to, without copying the task (a progress report's check).
  std::optional<std::string> NodeOf(const std::string& task_id) const;
  // A progress report: the task is confirmed. Nullopt for an unknown task.
  std::optional<TaskBrief> OnProgress(const std::string& task_id);
  // Rank 0's worker reported the job's c10d store: the attempt's waiting tasks go out.
  void OnStoreReady(const std::string& job_id, int64_t attempt, const std::string& address);
  // A task exited: it ends with its outcome. Returns it as it was before (its phase tells
  // whether it was being cancelled); nullopt for an unknown or already ended task. stopped_at:
  // the iteration whose checkpoint it stopped at (a resize), 0 when it ran to the end.
  std::optional<Task> OnExit(const std::string& task_id, v1::TaskOutcome outcome,
                             const std::string& checkpoint, int64_t stopped_at = 0);

  // Whether none of the listed tasks is still running or on its way (sent, confirmed, cancelling).
  bool NoneLive(const std::vector<std::string>& task_ids) const;
  // Whether every listed task ended successfully; *checkpoint gets a reported checkpoint and
  // *stopped_at the largest iteration a task stopped at (0: none stopped early).
  bool AllSucceeded(const std::vector<std::string>& task_ids, std::string* checkpoint,
                    int64_t* stopped_at = nullptr) const;
  // The live TRAIN task of the job's attempt on the node, if any.
  std::optional<std::string> LiveTaskOn(const std::string& job_id, int64_t attempt,
                                        const std::string& node_id) const;
  // Tasks on the node that have not ended.
  std::vector<std::string> TasksOnNode(const std::string& node_id) const;
  // Forgets ended tasks of jobs done with them. Returns how many were dropped.
  size_t DropEnded(const JobDone& done);
  size_t size() const;

  // Takes the node's queued commands, waiting up to `timeout` for one; empty on timeout or
  // shutdown.
  std::vector<v1::TaskCommand> WaitForCommands(const std::string& node_id,
                                               std::chrono::milliseconds timeout);
  void Shutdown();

 private:
  void SendLocked(const std::string& node_id, v1::TaskCommand command);
  void SendAssignLocked(Task& task);
  // Whether each listed task's job still wants its tasks, by job id (mu_ not held).
  std::map<std::string, bool> AskWanted(const std::vector<v1::RunningTask>& running,
                                        const JobWanted& wanted) const;
  // Confirms listed tasks that are wanted; returns the listed ones to cancel.
  std::vector<std::string> ReconcileLocked(const std::string& node_id,
                                           const std::vector<v1::RunningTask>& running,
                                           const std::map<std::string, bool>& wanted);
  // Adds (or replaces) a task in tasks_ and node_tasks_.
  Task& InsertLocked(Task task);
  // The node's tasks, ended ones included.
  std::vector<Task*> OnNodeLocked(const std::string& node_id);
  std::vector<const Task*> OnNodeLocked(const std::string& node_id) const;

  const Clock* clock_;
  const Clock::Duration resend_after_;
  mutable std::mutex mu_;
  KeyedCondition outbox_ready_;  // by node id: a node's stream wakes for its own commands
  bool shutdown_ = false;
  std::map<std::string, Task> tasks_;
  std::map<std::string, std::set<std::string>> node_tasks_;    // task ids by node id
  std::map<std::string, std::deque<v1::TaskCommand>> outbox_;  // by node id
};

}  // namespace deepool::coordinator
