// WorkerDaemon's report half: the supervisor's callbacks queue each task's progress and exit,
// and the report thread ("dp-worker-report") sends them to the coordinator (worker_daemon.h).
#include "common/host_port.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "common/utf8.h"
#include "worker/daemon/coordinator_replies.h"
#include "worker/daemon/worker_daemon.h"

namespace deepool::worker::daemon {

bool WorkerDaemon::WaitForReport() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, options_.report_interval, [this] { return stopping_ || exit_queued_; });
  exit_queued_ = false;
  return !stopping_;
}

void WorkerDaemon::OnStoreReady(const std::string& task_id, const std::string& host, int port) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    progress_[task_id].store_ready = FormatHostPort(host, port);
  }
  cv_.notify_all();
}

void WorkerDaemon::OnIteration(const std::string& task_id, const IterationReport& report) {
  metrics_.OnIteration(task_id, report);
  v1::IterationEvent event;
  event.set_rank(report.rank);
  event.set_iteration(report.iteration);
  if (report.loss) event.set_loss(*report.loss);
  event.set_iteration_ms(report.iteration_ms);
  event.set_samples_per_s(report.samples_per_s);
  event.set_busy_ms(report.busy_ms);
  event.set_idle_ms(report.idle_ms);
  if (report.fg_busy_ms) event.set_fg_busy_ms(*report.fg_busy_ms);
  if (report.bg_busy_ms) event.set_bg_busy_ms(*report.bg_busy_ms);
  event.set_bg_samples_per_s(report.bg_samples_per_s);
  event.set_bg_iterations(report.bg_iterations);
  if (report.bg_loss) event.set_bg_loss(*report.bg_loss);
  event.set_in_fg_executor(report.in_fg_executor);
  event.set_total_iterations(report.total_iterations);
  std::lock_guard<std::mutex> lock(mu_);
  auto& iterations = progress_[task_id].iterations;
  iterations.push_back(std::move(event));
  if (iterations.size() > kMaxPendingIterations) iterations.pop_front();
}

void WorkerDaemon::OnLogLine(const std::string& task_id, int rank, const std::string& line) {
  v1::LogLine log;
  log.set_rank(rank);
  log.set_line(ToValidUtf8(line));  // executors may print any bytes; protobuf takes UTF-8
  log.set_time_ms(options_.clock->WallMillis());
  std::lock_guard<std::mutex> lock(mu_);
  auto& pending = progress_[task_id];
  pending.logs.push_back(std::move(log));
  while (pending.logs.size() > options_.max_pending_log_lines) {
    pending.logs.pop_front();
    pending.dropped_logs++;
  }
}

void WorkerDaemon::OnTrace(const std::string& task_id, const protocol::TraceEvent& trace) {
  v1::TraceChunk chunk;
  chunk.set_request_id(trace.request_id);
  chunk.set_rank(trace.rank);
  chunk.set_first_iteration(trace.first_iteration);
  chunk.set_iterations(trace.iterations);
  chunk.set_last(trace.last);
  for (const TimelineSpan& span : trace.spans) {
    v1::TraceSpan* out = chunk.add_spans();
    out->set_kind(SpanKindName(span.kind));
    out->set_name(span.name);
    out->set_iteration(span.iteration);
    out->set_start_us(span.start_us);
    out->set_duration_us(span.duration_us);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& traces = progress_[task_id].traces;
  // Bounded like the log lines: a trace is a few hundred parts at most, and one the coordinator
  // cannot take for this long has been given up on there.
  if (traces.size() < kMaxPendingTraceChunks) traces.push_back(std::move(chunk));
}

void WorkerDaemon::OnEvaluation(const std::string& task_id,
                                const protocol::EvaluationEvent& event) {
  v1::Evaluation evaluation;
  evaluation.set_iteration(event.iteration);
  evaluation.set_samples(event.samples);
  if (event.loss) evaluation.set_loss(*event.loss);
  evaluation.set_top1(event.top1);
  evaluation.set_top5(event.top5);
  evaluation.set_time_ms(options_.clock->WallMillis());
  std::lock_guard<std::mutex> lock(mu_);
  auto& evaluations = progress_[task_id].evaluations;
  evaluations.push_back(std::move(evaluation));
  if (evaluations.size() > kMaxPendingEvaluations) evaluations.erase(evaluations.begin());
}

void WorkerDaemon::OnTaskFinished(const TaskResult& result) {
  metrics_.OnTaskFinished(result);
  PendingExit exit;
  auto& r = exit.request;
  r.set_task_id(result.task_id);
  r.set_outcome(result.succeeded   ? v1::TASK_OUTCOME_SUCCEEDED
                : result.cancelled ? v1::TASK_OUTCOME_CANCELLED
                                   : v1::TASK_OUTCOME_FAILED);
  if (!result.succeeded) r.set_error(ToValidUtf8(result.message));
  if (result.error_code != StatusCode::kUnknown) {
    r.set_error_code(static_cast<int32_t>(result.error_code));
  }
  r.set_host_ended(result.host_ended);
  r.set_stopped_at_iteration(result.stopped_at);
  for (const auto& rank : result.ranks) {
    auto* proto = r.add_ranks();
    proto->set_rank(rank.rank);
    proto->set_exit_code(rank.signal != 0 ? -1 : rank.exit_code);
    proto->set_signal(rank.signal);
    proto->set_error(ToValidUtf8(rank.error));
    if (!rank.error.empty()) proto->set_error_code(static_cast<int32_t>(rank.error_code));
  }
  for (const auto& line : result.last_log_lines) r.add_last_log_lines(ToValidUtf8(line));
  r.set_checkpoint(result.checkpoint);
  r.set_result_json(result.profile_json);
  {
    std::lock_guard<std::mutex> lock(mu_);
    exits_.push_back(std::move(exit));
    exit_queued_ = true;
  }
  cv_.notify_all();
}

void WorkerDaemon::ReportLoop() {
  SetCurrentThreadName("dp-worker-report");
  while (WaitForReport()) {
    FlushProgress();  // only while registered, and before an exit: its last iterations
    FlushExits();     // also under the previous registration's id
  }
}

void WorkerDaemon::FlushProgress() {
  std::map<std::string, PendingProgress> batch;
  std::string node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (node_id_.empty()) return;
    node = node_id_;
    batch.swap(progress_);
  }
  std::map<std::string, PendingProgress> failed;
  for (auto& [task_id, pending] : batch) {
    if (pending.iterations.empty() && pending.logs.empty() && pending.store_ready.empty() &&
        pending.traces.empty() && pending.evaluations.empty()) {
      continue;
    }
    v1::ReportProgressRequest request;
    request.set_node_id(node);
    request.set_task_id(task_id);
    for (auto& it : pending.iterations) *request.add_iterations() = it;
    if (pending.dropped_logs > 0) {
      auto* note = request.add_logs();
      note->set_rank(-1);
      note->set_line("[worker] " + std::to_string(pending.dropped_logs) +
                     " log lines dropped while the coordinator was unreachable");
      note->set_time_ms(options_.clock->WallMillis());
    }
    for (auto& log : pending.logs) *request.add_logs() = log;
    request.set_store_ready(pending.store_ready);
    for (auto& chunk : pending.traces) *request.add_traces() = chunk;
    for (auto& evaluation : pending.evaluations) *request.add_evaluations() = evaluation;
    v1::ReportProgressResponse response;
    auto context = NewContext();
    grpc::Status status = stub_->ReportProgress(context.get(), request, &response);
    if (status.ok()) {
      if (response.cancel() && supervisor_->IsRunning(task_id)) {
        DP_LOG_INFO("task {}: the coordinator no longer wants it; cancelling", task_id);
        CancelTask(task_id, "the coordinator did not want it when it reported progress");
      }
      if (response.trace().request_id() != 0) ForwardTraceRequest(task_id, response.trace());
      if (response.stop_at_checkpoint()) {
        Status asked = supervisor_->StopAtCheckpoint(task_id);
        if (!asked.ok()) DP_LOG_WARN("task {}: stop at checkpoint: {}", task_id, asked.ToString());
      }
      continue;
    }
    if (AsksToRegisterAgain(*context, status)) {
      // Kept for the coordinator that knows this node again after it registered.
      ForgetRegistration("progress: " + status.error_message());
      failed[task_id] = std::move(pending);
      continue;
    }
    if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
        status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      continue;  // the coordinator will not take it; retrying cannot help
    }
    failed[task_id] = std::move(pending);  // keep it (bounded) for the next attempt
  }
  if (failed.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [task_id, old] : failed) {
    auto& now = progress_[task_id];
    // Older entries go first; the log queue stays bounded.
    old.iterations.insert(old.iterations.end(), now.iterations.begin(), now.iterations.end());
    now.iterations.swap(old.iterations);
    if (now.iterations.size() > kMaxPendingIterations) {
      now.iterations.erase(now.iterations.begin(), now.iterations.end() - kMaxPendingIterations);
    }
    for (auto it = now.logs.begin(); it != now.logs.end(); ++it) old.logs.push_back(*it);
    now.logs.swap(old.logs);
    now.dropped_logs += old.dropped_logs;
    while (now.logs.size() > options_.max_pending_log_lines) {
      now.logs.pop_front();
      now.dropped_logs++;
    }
    if (now.store_ready.empty()) now.store_ready = old.store_ready;
    old.traces.insert(old.traces.end(), now.traces.begin(), now.traces.end());
    if (old.traces.size() > kMaxPendingTraceChunks) old.traces.resize(kMaxPendingTraceChunks);
    now.traces.swap(old.traces);
    old.evaluations.insert(old.evaluations.end(), now.evaluations.begin(), now.evaluations.end());
    if (old.evaluations.size() > kMaxPendingEvaluations) {
      old.evaluations.erase(old.evaluations.begin(),
                            old.evaluations.end() - kMaxPendingEvaluations);
    }
    now.evaluations.swap(old.evaluations);
  }
}

void WorkerDaemon::ForwardTraceRequest(const std::string& task_id,
                                       const v1::TraceRequest& request) {
  protocol::TraceCommand command;
  command.request_id = request.request_id();
  command.first_iteration = request.first_iteration();
  command.iterations = request.iterations();
  Status sent = supervisor_->SendTraceRequest(task_id, command);
  if (!sent.ok()) {
    DP_LOG_WARN("task {}: trace request {}: {}", task_id, command.request_id, sent.ToString());
  }
}

void WorkerDaemon::FlushExits() {
  while (true) {
    PendingExit exit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string& node = node_id_.empty() ? last_node_id_ : node_id_;
      if (exits_.empty() || node.empty()) return;
      exit = exits_.front();
      exit.request.set_node_id(node);
    }
    v1::ReportTaskExitResponse response;
    auto context = NewContext();
    grpc::Status status = stub_->ReportTaskExit(context.get(), exit.request, &response);
    bool drop = status.ok() || status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
    if (AsksToRegisterAgain(*context, status)) {
      // Unknown node (the coordinator restarted): register again and retry.
      ForgetRegistration("task exit: " + status.error_message());
      drop = false;
    } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      drop = ++exit.not_found_replies >= 5;  // unknown task: give up after a few tries
    }
    if (status.ok()) {
      DP_LOG_INFO("task {}: exit reported ({})", exit.request.task_id(),
                  v1::TaskOutcome_Name(exit.request.outcome()));
    } else if (drop) {
      DP_LOG_WARN("task {}: the coordinator refused its exit report: {}", exit.request.task_id(),
                  FromGrpc(status).ToString());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (exits_.empty() || exits_.front().request.task_id() != exit.request.task_id()) return;
    if (drop) {
      exits_.pop_front();
      continue;
    }
    exits_.front().not_found_replies = exit.not_found_replies;
    return;  // try again on the next flush
  }
}

}  // namespace deepool::worker::daemon
