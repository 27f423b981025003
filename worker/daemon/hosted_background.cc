// ExecutorSupervisor: BG tasks run inside a running FG executor rank (TrainTask.host_task_id in
// node.proto). The worker attaches them with a command on the host's stdin and turns the host's
// "background" / "background_done" lines into the BG task's progress and end.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "common/logging.h"
#include "protocol/executor_commands.h"
#include "worker/daemon/executor_supervisor.h"

namespace deepool::worker::daemon {
namespace {

using nlohmann::json;

TaskResult HostedResult(const HostedBackgroundTask& task, bool succeeded, bool cancelled,
                        bool host_ended, int64_t iterations, const std::string& message) {
  TaskResult r;
  r.task_id = task.task_id;
  r.job_id = task.job_id;
  r.succeeded = succeeded;
  r.cancelled = cancelled;
  r.host_ended = host_ended;
  r.iterations = iterations;
  r.message = message;
  RankExitInfo rank;
  rank.rank = 0;
  rank.started = true;
  rank.exit_code = succeeded ? 0 : 1;
  if (!succeeded && !cancelled) rank.error = message;
  r.ranks.push_back(rank);
  return r;
}

std::string HostName(const HostedBackgroundTask& task) {
  return "task " + task.host_task_id + " rank " + std::to_string(task.host_rank);
}

}  // namespace

Status ExecutorSupervisor::StartHosted(const HostedBackgroundTask& task) {
  ASSIGN_OR_RETURN(const json background, ParseJson(task.background_json, "background_json"));
  if (!background.is_object() || !background.contains("job_id") ||
      !background["job_id"].is_string()) {
    return InvalidArgumentError("background_json: not an object with a string job_id");
  }
  RETURN_IF_ERROR(CheckBackgroundPaths(options_.path_roots, background, task.owner));
  // Forwarded as the coordinator wrote it: the host rank validates it (ParseExecutorCommand).
  const std::string command = protocol::AttachBackgroundCommandJson(background) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return UnavailableError("the worker is shutting down");
  if (tasks_.count(task.task_id) || hosted_.count(task.task_id)) {
    return AlreadyExistsError("task " + task.task_id + " is already running");
  }
  auto host = tasks_.find(task.host_task_id);
  RankProcess* rank = nullptr;
  if (host != tasks_.end() && !host->second->cancelled && !host->second->failing) {
    for (auto& p : host->second->ranks) {
      if (p.rank == task.host_rank && p.child && !p.exit) rank = &p;
    }
  }
  if (!rank) return NotFoundError(HostName(task) + " is not running here");
  for (const auto& [id, other] : hosted_) {
    if (other.task.host_task_id == task.host_task_id && other.task.host_rank == task.host_rank) {
      return FailedPreconditionError(HostName(task) + " already hosts task " + id);
    }
  }
  RETURN_IF_ERROR(rank->child->WriteStdin(command));
  hosted_[task.task_id] = Hosted{task, background["job_id"].get<std::string>(), false, ""};
  DP_LOG_INFO("task {} (job {}): attached to {}", task.task_id, task.job_id, HostName(task));
  return Status::Ok();
}

void ExecutorSupervisor::OnHostedLine(const std::string& host_task_id, int host_rank,
                                      const protocol::BackgroundEvent& progress,
                                      const protocol::BackgroundDoneEvent* ended) {
  const std::string& bg_job = progress.job_id;
  const int64_t iterations = progress.iterations;
  std::optional<std::pair<std::string, IterationReport>> report;
  std::optional<TaskResult> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(hosted_.begin(), hosted_.end(), [&](const auto& kv) {
      return kv.second.task.host_task_id == host_task_id && kv.second.task.host_rank == host_rank &&
             kv.second.bg_job_id == bg_job;
    });
    if (it == hosted_.end()) return;
    if (iterations > 0) {
      IterationReport r;
      r.rank = 0;
      r.iteration = iterations - 1;
      r.samples_per_s = progress.samples_per_s;
      r.loss = progress.loss;
      r.in_fg_executor = true;
      report.emplace(it->first, r);
    }
    if (ended) {
      const Hosted& hosted = it->second;
      const bool ok = ended->status == protocol::BackgroundEnd::kOk;
      const bool cancelled = !ok && hosted.cancelled;
      const bool host_ended =
          !ok && !cancelled && ended->status == protocol::BackgroundEnd::kHostEnded;
      std::string message;
      if (cancelled) {
        message = "cancelled: " + hosted.cancel_reason;
      } else if (host_ended) {
        message =
            "the FG executor it ran in (" + HostName(hosted.task) + ") finished before the BG job";
      } else if (!ok) {
        message = std::string("background job ") + protocol::BackgroundEndName(ended->status) +
                  ": " + ended->message;
      }
      result = HostedResult(hosted.task, ok, cancelled, host_ended, iterations, message);
      hosted_.erase(it);
    }
  }
  if (report) listener_->OnIteration(report->first, report->second);
  if (result) {
    DP_LOG_INFO("task {}: finished inside {}: {}", result->task_id, host_task_id,
                result->succeeded ? "succeeded" : result->message);
    listener_->OnTaskFinished(*result);
  }
}

void ExecutorSupervisor::OnHostExit(const std::string& host_task_id, int host_rank) {
  std::vector<TaskResult> results;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = hosted_.begin(); it != hosted_.end();) {
      const Hosted& h = it->second;
      if (h.task.host_task_id != host_task_id || h.task.host_rank != host_rank) {
        ++it;
        continue;
      }
      results.push_back(HostedResult(
          h.task, false, h.cancelled, !h.cancelled, 0,
          h.cancelled ? "cancelled: " + h.cancel_reason
                      : "the FG executor it ran in (" + HostName(h.task) + ") ended first"));
      it = hosted_.erase(it);
    }
  }
  for (const TaskResult& r : results) listener_->OnTaskFinished(r);
}

bool ExecutorSupervisor::CancelHosted(const std::string& task_id, const std::string& why) {
  std::optional<TaskResult> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hosted_.find(task_id);
    if (it == hosted_.end()) return false;
    Hosted& h = it->second;
    if (h.cancelled) return true;
    h.cancelled = true;
    h.cancel_reason = why;
    Status sent = NotFoundError("host not running");
    auto host = tasks_.find(h.task.host_task_id);
    if (host != tasks_.end()) {
      for (auto& p : host->second->ranks) {
        if (p.rank == h.task.host_rank && p.child && !p.exit) {
          protocol::ExecutorCommand detach;
          detach.kind = protocol::ExecutorCommand::Kind::kDetachBackground;
          detach.job_id = h.bg_job_id;
          sent = p.child->WriteStdin(protocol::ExecutorCommandToJson(detach) + "\n");
        }
      }
    }
    if (sent.ok()) {
      DP_LOG_INFO("task {}: detaching from {}", task_id, HostName(h.task));
      return true;  // ends with the host's background_done line (or its exit)
    }
    result = HostedResult(h.task, false, true, false, 0, "cancelled: " + why);
    hosted_.erase(it);
  }
  listener_->OnTaskFinished(*result);
  return true;
}

}  // namespace deepool::worker::daemon
