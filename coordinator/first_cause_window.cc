#include "coordinator/first_cause_window.h"

#include "common/logging.h"
#include "protocol/executor_events.h"

namespace deepool::coordinator {

std::string TaskExitReason(const Task& task, const v1::ReportTaskExitRequest& report) {
  std::string reason = "task " + task.id + " on " + task.node_id;
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
  return reason;
}

bool ReportsPeerFailure(const v1::ReportTaskExitRequest& report) {
  const int32_t code = report.error_code();
  if (code <= 0 || code > static_cast<int32_t>(StatusCode::kUnauthenticated)) return false;
  return protocol::IsPeerFailureCode(static_cast<StatusCode>(code));
}

FirstCauseWindow::FirstCauseWindow(const Clock* clock, Clock::Duration window)
    : clock_(clock), window_(window) {}

std::optional<Reason> FirstCauseWindow::OnFailure(const std::string& job_id, int64_t attempt,
                                                  const Reason& cause, bool echo,
                                                  bool others_live) {
  auto wait = waits_.find(job_id);
  if (wait != waits_.end() && wait->second.attempt != attempt) {
    waits_.erase(wait);
    wait = waits_.end();
  }
  if (echo && others_live) {
    // Another rank may have failed first: wait for its report (or the window) before failing.
    if (wait == waits_.end()) {
      waits_.emplace(job_id, Wait{attempt, cause, clock_->Now() + window_});
      DP_LOG_INFO("job {}: {}; waiting up to {} ms for the first cause", job_id, cause.message,
                  std::chrono::duration_cast<std::chrono::milliseconds>(window_).count());
    }
    return std::nullopt;
  }
  // A cause of its own wins over an echo reported first; of two echoes, the first stands.
  const Reason chosen = echo && wait != waits_.end() ? wait->second.reason : cause;
  if (wait != waits_.end()) waits_.erase(wait);
  return chosen;
}

bool FirstCauseWindow::Waiting(const std::string& job_id) const {
  return waits_.count(job_id) != 0;
}

std::optional<Reason> FirstCauseWindow::EndNow(const std::string& job_id,
                                               std::optional<int64_t> current_attempt) {
  auto wait = waits_.find(job_id);
  if (wait == waits_.end()) return std::nullopt;
  const Reason reason = wait->second.reason;
  const bool current = current_attempt == wait->second.attempt;
  waits_.erase(wait);
  return current ? std::optional<Reason>(reason) : std::nullopt;
}

std::optional<Reason> FirstCauseWindow::EndIfDue(const std::string& job_id,
                                                 std::optional<int64_t> current_attempt) {
  auto wait = waits_.find(job_id);
  if (wait == waits_.end()) return std::nullopt;
  const bool current = current_attempt == wait->second.attempt;
  if (current && clock_->Now() < wait->second.deadline) return std::nullopt;
  return EndNow(job_id, current_attempt);
}

std::vector<std::string> FirstCauseWindow::WaitingJobs() const {
  std::vector<std::string> jobs;
  for (const auto& [job_id, wait] : waits_) jobs.push_back(job_id);
  return jobs;
}

}  // namespace deepool::coordinator
