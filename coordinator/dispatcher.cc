#include "coordinator/dispatcher.h"

#include <string_view>
#include <unordered_set>

namespace deepool::coordinator {
namespace {

TaskBrief BriefOf(const Task& task) {
  return {task.job_id, task.attempt, task.phase, task.rank0_node, task.assignment.has_profile()};
}

std::set<std::string> Listed(const std::vector<v1::RunningTask>& running) {
  std::set<std::string> ids;
  for (const v1::RunningTask& task : running) ids.insert(task.task_id());
  return ids;
}

}  // namespace

Dispatcher::Dispatcher(const Clock* clock, Clock::Duration resend_after)
    : clock_(clock), resend_after_(resend_after) {}

void Dispatcher::Add(std::vector<Task> tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Task& task : tasks) {
    task.sent_at = clock_->Now();
    Task& stored = InsertLocked(std::move(task));
    if (stored.phase == TaskPhase::kSent) SendAssignLocked(stored);
  }
}

void Dispatcher::Restore(std::vector<Task> tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Task& task : tasks) {
    task.unconfirmed_after_restart = true;
    task.sent_at = clock_->Now();
    InsertLocked(std::move(task));
  }
}

void Dispatcher::CancelJob(const std::string& job_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, task] : tasks_) {
    if (task.job_id != job_id) continue;
    if (task.phase == TaskPhase::kWaitingForStore) {
      task.phase = TaskPhase::kEnded;  // never sent
      continue;
    }
    if (!task.live()) continue;
    task.phase = TaskPhase::kCancelling;
    task.sent_at = clock_->Now();
    v1::TaskCommand command;
    command.mutable_cancel()->set_task_id(id);
    command.mutable_cancel()->set_reason(reason);
    SendLocked(task.node_id, std::move(command));
  }
}

std::set<std::string> Dispatcher::DropNode(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> jobs;
  for (Task* task : OnNodeLocked(node_id)) {
    if (task->phase == TaskPhase::kEnded) continue;
    if (task->phase != TaskPhase::kCancelling) jobs.insert(task->job_id);
    task->phase = TaskPhase::kEnded;  // its worker is gone; nothing to cancel there
  }
  outbox_.erase(node_id);
  return jobs;
}

std::map<std::string, std::string> Dispatcher::UnconfirmedAfterRestart() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> jobs;
  for (const auto& [id, task] : tasks_) {
    if (task.unconfirmed_after_restart && task.phase != TaskPhase::kEnded) {
      jobs.emplace(task.job_id, id);
    }
  }
  return jobs;
}

std::map<std::string, bool> Dispatcher::AskWanted(const std::vector<v1::RunningTask>& running,
                                                  const JobWanted& wanted) const {
  std::set<std::string> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const v1::RunningTask& listed : running) {
      auto it = tasks_.find(listed.task_id());
      if (it != tasks_.end()) jobs.insert(it->second.job_id);
    }
  }
  std::map<std::string, bool> answers;
  for (const std::string& job_id : jobs) answers.emplace(job_id, wanted(job_id));
  return answers;
}

std::vector<std::string> Dispatcher::ReconcileLocked(const std::string& node_id,
                                                     const std::vector<v1::RunningTask>& running,
                                                     const std::map<std::string, bool>& wanted) {
  std::vector<std::string> cancel;
  std::unordered_set<std::string_view> seen;  // a task listed twice is answered once
  for (const v1::RunningTask& listed : running) {
    if (!seen.insert(listed.task_id()).second) continue;
    auto it = tasks_.find(listed.task_id());
    // A job not asked about is one whose task arrived since AskWanted: wanted, as it is new.
    auto answer = it == tasks_.end() ? wanted.end() : wanted.find(it->second.job_id);
    const bool keep = it != tasks_.end() && it->second.node_id == node_id && it->second.live() &&
                      (answer == wanted.end() || answer->second);
    if (keep) {
      it->second.phase = TaskPhase::kConfirmed;
      it->second.unconfirmed_after_restart = false;
      continue;
    }
    cancel.push_back(listed.task_id());
    if (it == tasks_.end()) {
      Task stray;
      stray.id = listed.task_id();
      stray.job_id = listed.job_id();
      stray.node_id = node_id;
      stray.stray = true;
      it = tasks_.find(InsertLocked(std::move(stray)).id);
    }
    if (it->second.node_id == node_id && it->second.phase != TaskPhase::kCancelling) {
      it->second.phase = TaskPhase::kCancelling;
      it->second.sent_at = clock_->Now();
    }
  }
  return cancel;
}

Dispatcher::Registration Dispatcher::OnRegister(const std::string& node_id,
                                                const std::string& node_host,
                                                const std::vector<v1::RunningTask>& running,
                                                const JobWanted& wanted) {
  const std::map<std::string, bool> answers = AskWanted(running, wanted);
  std::lock_guard<std::mutex> lock(mu_);
  Registration registration;
  registration.cancel_task_ids = ReconcileLocked(node_id, running, answers);
  const std::set<std::string> listed = Listed(running);
  // Tasks this node should run but does not list: confirmed ones died with the old worker, and
  // so did a rank-0 task from before a coordinator restart that had started (its store is
  // gone); the others may never have reached the worker and are sent again.
  for (Task* node_task : OnNodeLocked(node_id)) {
    Task& task = *node_task;
    if (listed.count(task.id)) continue;
    if (task.phase == TaskPhase::kConfirmed ||
        (task.phase == TaskPhase::kSent && task.unconfirmed_after_restart && task.rank0_node &&
         task.started_before_restart)) {
      task.phase = TaskPhase::kEnded;
      registration.lost_jobs.insert(task.job_id);
    } else if (task.phase == TaskPhase::kSent) {
      // A rank-0 task rebuilt after a coordinator restart has no store address (it is not in
      // the job's record): rank 0 binds a free port on this node, as at its first dispatch.
      if (task.rank0_node && task.assignment.has_train() &&
          task.assignment.train().store_address().empty()) {
        task.assignment.mutable_train()->set_store_address(node_host + ":0");
      }
      SendAssignLocked(task);
    } else if (task.phase == TaskPhase::kCancelling) {
      task.phase = TaskPhase::kEnded;
    }
  }
  return registration;
}

std::vector<v1::TaskCommand> Dispatcher::OnHeartbeat(const std::string& node_id,
                                                     const std::vector<v1::RunningTask>& running,
                                                     const JobWanted& wanted) {
  const std::map<std::string, bool> answers = AskWanted(running, wanted);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::TaskCommand> commands;
  for (const std::string& id : ReconcileLocked(node_id, running, answers)) {
    v1::TaskCommand command;
    command.mutable_cancel()->set_task_id(id);
    command.mutable_cancel()->set_reason("the coordinator no longer wants this task");
    commands.push_back(std::move(command));
  }
  const std::set<std::string> listed = Listed(running);
  const Clock::TimePoint now = clock_->Now();
  for (Task* node_task : OnNodeLocked(node_id)) {
    Task& task = *node_task;
    if (listed.count(task.id)) continue;
    if (task.phase == TaskPhase::kCancelling) {
      task.phase = TaskPhase::kEnded;  // the worker no longer runs it
    } else if (task.phase == TaskPhase::kSent && !task.unconfirmed_after_restart &&
               now - task.sent_at >= resend_after_) {
      task.sent_at = now;
      v1::TaskCommand command;
      *command.mutable_assign() = task.assignment;
      commands.push_back(std::move(command));
    }
  }
  return commands;
}

std::optional<Task> Dispatcher::Find(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Dispatcher::NodeOf(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  return it->second.node_id;
}

std::optional<TaskBrief> Dispatcher::Brief(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  return BriefOf(it->second);
}

std::optional<TaskBrief> Dispatcher::OnProgress(const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  if (it->second.phase == TaskPhase::kSent) it->second.phase = TaskPhase::kConfirmed;
  it->second.unconfirmed_after_restart = false;
  return BriefOf(it->second);
}

void Dispatcher::OnStoreReady(const std::string& job_id, int64_t attempt,
                              const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, task] : tasks_) {
    if (task.job_id != job_id || task.attempt != attempt ||
        task.phase != TaskPhase::kWaitingForStore) {
      continue;
    }
    task.assignment.mutable_train()->set_store_address(address);
    task.phase = TaskPhase::kSent;
    SendAssignLocked(task);
  }
}

std::optional<Task> Dispatcher::OnExit(const std::string& task_id, v1::TaskOutcome outcome,
                                       const std::string& checkpoint, int64_t stopped_at) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || it->second.phase == TaskPhase::kEnded) return std::nullopt;
  Task before = it->second;
  it->second.phase = TaskPhase::kEnded;
  it->second.outcome = outcome;
  it->second.checkpoint = checkpoint;
  it->second.stopped_at = stopped_at;
  return before;
}

bool Dispatcher::NoneLive(const std::vector<std::string>& task_ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::none_of(task_ids.begin(), task_ids.end(), [&](const std::string& id) {
    auto it = tasks_.find(id);
    return it != tasks_.end() && (it->second.live() || it->second.phase == TaskPhase::kCancelling);
  });
}

bool Dispatcher::AllSucceeded(const std::vector<std::string>& task_ids, std::string* checkpoint,
                              int64_t* stopped_at) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : task_ids) {
    auto it = tasks_.find(id);
    if (it == tasks_.end() || it->second.phase != TaskPhase::kEnded ||
        it->second.outcome != v1::TASK_OUTCOME_SUCCEEDED) {
      return false;
    }
    if (!it->second.checkpoint.empty()) *checkpoint = it->second.checkpoint;
    if (stopped_at) *stopped_at = std::max(*stopped_at, it->second.stopped_at);
  }
  return true;
}

std::optional<std::string> Dispatcher::LiveTaskOn(const std::string& job_id, int64_t attempt,
                                                  const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Task* task : OnNodeLocked(node_id)) {
    if (task->job_id == job_id && task->attempt == attempt && task->live()) return task->id;
  }
  return std::nullopt;
}

std::vector<std::string> Dispatcher::TasksOnNode(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  for (const Task* task : OnNodeLocked(node_id)) {
    if (task->phase != TaskPhase::kEnded) ids.push_back(task->id);
  }
  return ids;
}

size_t Dispatcher::DropEnded(const JobDone& done) {
  // Asked without mu_ held, as AskWanted: `done` reads the job table.
  std::set<std::pair<std::string, int64_t>> ended;  // (job, attempt)
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, task] : tasks_) {
      if (task.phase == TaskPhase::kEnded) ended.emplace(task.job_id, task.attempt);
    }
  }
  if (ended.empty()) return 0;
  std::set<std::pair<std::string, int64_t>> finished;
  for (const auto& [job_id, attempt] : ended) {
    if (done(job_id, attempt)) finished.emplace(job_id, attempt);
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t dropped = 0;
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    const Task& task = it->second;
    if (task.phase == TaskPhase::kEnded && finished.count({task.job_id, task.attempt}) > 0) {
      auto on_node = node_tasks_.find(task.node_id);
      on_node->second.erase(task.id);
      if (on_node->second.empty()) node_tasks_.erase(on_node);
      it = tasks_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

size_t Dispatcher::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

std::vector<v1::TaskCommand> Dispatcher::WaitForCommands(const std::string& node_id,
                                                         std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  outbox_ready_.WaitFor(lock, node_id, timeout, [&] {
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

void Dispatcher::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  outbox_ready_.NotifyAll();
}

Task& Dispatcher::InsertLocked(Task task) {
  auto [it, inserted] = tasks_.try_emplace(task.id);
  if (!inserted && it->second.node_id != task.node_id) {
    node_tasks_[it->second.node_id].erase(task.id);
  }
  node_tasks_[task.node_id].insert(task.id);
  it->second = std::move(task);
  return it->second;
}

std::vector<Task*> Dispatcher::OnNodeLocked(const std::string& node_id) {
  std::vector<Task*> found;
  auto ids = node_tasks_.find(node_id);
  if (ids == node_tasks_.end()) return found;
  for (const std::string& id : ids->second) found.push_back(&tasks_.at(id));
  return found;
}

std::vector<const Task*> Dispatcher::OnNodeLocked(const std::string& node_id) const {
  std::vector<const Task*> found;
  auto ids = node_tasks_.find(node_id);
  if (ids == node_tasks_.end()) return found;
  for (const std::string& id : ids->second) found.push_back(&tasks_.at(id));
  return found;
}

void Dispatcher::SendLocked(const std::string& node_id, v1::TaskCommand command) {
  outbox_[node_id].push_back(std::move(command));
  outbox_ready_.Notify(node_id);
}

void Dispatcher::SendAssignLocked(Task& task) {
  task.sent_at = clock_->Now();
  v1::TaskCommand command;
  *command.mutable_assign() = task.assignment;
  SendLocked(task.node_id, std::move(command));
}

}  // namespace deepool::coordinator
