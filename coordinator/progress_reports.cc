#include "coordinator/progress_reports.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "coordinator/job_progress.h"

namespace deepool::coordinator {
namespace {

// The first iterations of an attempt after an earlier one: where it resumed (its first
// iteration's index), recorded once in the history with the iterations lost as far as the
// coordinator knows (those reported; the last report interval's may be missing).
void NoteResumeOnce(const v1::ReportProgressRequest& report, int64_t now_ms, JobRecord* job) {
  if (job->progress.earlier_reached <= 0 || report.iterations().empty()) return;
  int64_t resumed = report.iterations(0).iteration();
  for (const v1::IterationEvent& e : report.iterations())
    resumed = std::min(resumed, e.iteration());
  const int64_t reached = job->progress.earlier_reached;
  const int64_t lost = std::max<int64_t>(0, reached - resumed);
  job->history.push_back({job->state,
                          "training again from iteration " + std::to_string(resumed) +
                              ": the previous attempt had reported " + std::to_string(reached) +
                              " done, " + std::to_string(lost) +
                              " of them lost (it may have run a few more unreported)",
                          now_ms, ReasonCode::kProgress});
  job->progress.earlier_reached = 0;
}

// Whether `rank` of the job runs on another node than `node_id`: that node's to report, not this
// one's (a worker must not write another node's device row, nor rank 0's job-wide numbers).
bool PlacedElsewhere(const JobRecord& job, int rank, const std::string& node_id) {
  const RankPlacement* placed = FindRank(job, rank);
  return placed != nullptr && placed->node_id != node_id;
}

// An update refused because the job ended since it was read (JobManager::Update): the report
// is for a task no longer wanted.
bool EndedMeanwhile(const Status& status) {
  return status.code() == StatusCode::kFailedPrecondition;
}

}  // namespace

Status CheckReportingNode(const std::string& task_id, const std::optional<std::string>& task_node,
                          const std::string& node_id) {
  if (!task_node || *task_node == node_id) return Status::Ok();
  return PermissionDeniedError("task " + task_id + " runs on " + *task_node + ", not on " +
                               node_id + ": a node reports only its own tasks");
}

Status StoreFailure(const std::string& what, const Status& status) {
  DP_LOG_WARN("cannot store {} of a worker report: {}", what, status.ToString());
  return UnavailableError("the coordinator cannot store " + what + " now (" + status.message() +
                          "); send the report again");
}

ProgressReports::ProgressReports(JobManager* jobs, Dispatcher* dispatcher, const Clock* clock,
                                 HoldersOf holders, std::function<void()> wake)
    : jobs_(jobs),
      dispatcher_(dispatcher),
      clock_(clock),
      holders_(std::move(holders)),
      wake_(std::move(wake)) {}

StatusOr<bool> ProgressReports::Report(const v1::ReportProgressRequest& report) {
  RETURN_IF_ERROR(CheckReportingNode(report.task_id(), dispatcher_->NodeOf(report.task_id()),
                                     report.node_id()));
  const std::optional<TaskBrief> task = dispatcher_->OnProgress(report.task_id());
  if (!task) return true;
  const JobSnapshot job = jobs_->Find(task->job_id);
  if (!job || IsTerminal(job->state) || !task->live()) return true;
  // Each part is idempotent, so a report that failed half way is sent again whole by the worker.
  if (!report.store_ready().empty() && task->rank0_node) {
    // Stored first, so a restarted coordinator can still send the other nodes their ranks.
    if (job->store_address != report.store_ready()) {
      StatusOr<JobRecord> stored = jobs_->Update(
          task->job_id, [&](JobRecord& r) { r.store_address = report.store_ready(); });
      if (EndedMeanwhile(stored.status())) return true;
      if (!stored.ok()) return StoreFailure("the c10d store address", stored.status());
    }
    dispatcher_->OnStoreReady(task->job_id, task->attempt, report.store_ready());
  }
  std::vector<Evaluation> evaluated;
  if ((!report.iterations().empty() || !report.evaluations().empty()) && !task->profile) {
    const Status recorded = RecordIterations(*job, report, &evaluated);
    if (EndedMeanwhile(recorded)) return true;
    RETURN_IF_ERROR(recorded);
  }
  if (!report.logs().empty() || !evaluated.empty()) {
    std::vector<LogRecord> lines;
    for (const v1::LogLine& l : report.logs()) {
      lines.push_back({0, l.time_ms() > 0 ? l.time_ms() : clock_->WallMillis(), report.node_id(),
                       l.rank(), l.line()});
    }
    // The coordinator's own line per new evaluation (rank -1, as the worker's notes).
    for (const Evaluation& e : evaluated) {
      lines.push_back({0, e.time_ms, report.node_id(), -1, DescribeEvaluation(e)});
    }
    Status appended = jobs_->AppendLogs(task->job_id, std::move(lines));
    if (!appended.ok()) return StoreFailure("log lines", appended);
  }
  return false;
}

Status ProgressReports::RecordIterations(const JobRecord& job,
                                         const v1::ReportProgressRequest& report,
                                         std::vector<Evaluation>* evaluated) {
  // Who holds the job's own devices, read once (under the Scheduler's lock) before the update.
  const std::map<DeviceKey, DeviceJobs> held = holders_(job.devices);
  // Runs under the job table's lock, which mu_ may not be taken under: a placement that changed
  // since `job` was read (a new attempt) finds no holders, until the next report.
  auto jobs_on_device = [&held](const RankPlacement& p) {
    auto it = held.find(DeviceKey{p.node_id, p.device});
    return it == held.end() ? DeviceJobs{} : it->second;
  };
  const int64_t now_ms = clock_->WallMillis();
  auto apply = [&](JobRecord& r) {
    NoteResumeOnce(report, now_ms, &r);
    for (const v1::IterationEvent& e : report.iterations()) {
      if (PlacedElsewhere(r, e.rank(), report.node_id())) continue;
      ApplyIterationEvent(e, jobs_on_device, now_ms, &r);
    }
    evaluated->clear();
    for (const v1::Evaluation& e : report.evaluations()) {
      if (!ApplyEvaluation(e, now_ms, &r)) continue;
      for (const Evaluation& kept : r.progress.evaluations) {
        if (kept.iteration == e.iteration()) evaluated->push_back(kept);
      }
    }
  };
  // Progress alone may wait for the store; a report that adds to the history (the first after a
  // resume) is stored at once, as every history entry is, and so are evaluations (a few per job,
  // each in the job's log at once).
  StatusOr<JobRecord> updated = job.progress.earlier_reached > 0 || !report.evaluations().empty()
                                    ? jobs_->Update(job.id, apply)
                                    : jobs_->UpdateProgress(job.id, apply);
  if (EndedMeanwhile(updated.status())) return updated.status();
  if (!updated.ok()) return StoreFailure("progress", updated.status());
  // A FG rank's first iteration: a BG job may be waiting to run inside its executor.
  if (updated->spec.role != JobRole::kBg &&
      updated->progress.devices.size() > job.progress.devices.size()) {
    wake_();
  }
  return Status::Ok();
}

}  // namespace deepool::coordinator
