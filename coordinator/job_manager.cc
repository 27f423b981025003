#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdio>

#include "common/logging.h"

namespace deepool::coordinator {

JobManager::JobManager(JobStore* store, const Clock* clock) : store_(store), clock_(clock) {}

Status JobManager::Load() {
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->LoadJobs());
  ASSIGN_OR_RETURN(const int64_t reserved, store_->LoadSeqReservation());
  std::lock_guard<std::mutex> lock(mu_);
  // Ids up to the reservation may have been issued to jobs whose records are gone.
  next_seq_ = std::max(next_seq_, reserved);
  for (JobRecord& job : jobs) {
    next_seq_ = std::max(next_seq_, job.seq + 1);
    if (!job.request_id.empty()) job_by_request_id_[job.request_id] = job.id;
    std::string id = job.id;
    jobs_[id] = std::move(job);
  }
  ++version_;
  return Status::Ok();
}

Status JobManager::ReserveSeqLocked() {
  if (next_seq_ < seq_reserved_) return Status::Ok();
  const int64_t bound = next_seq_ + kSeqReservationBlock;
  RETURN_IF_ERROR(store_->ReserveSeqs(bound));
  seq_reserved_ = bound;
  return Status::Ok();
}

StatusOr<JobRecord> JobManager::Submit(const JobSpec& spec, const std::string& request_id,
                                       const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return UnavailableError("coordinator is shutting down");
  if (auto seen = job_by_request_id_.find(request_id);
      !request_id.empty() && seen != job_by_request_id_.end()) {
    const JobRecord& first = jobs_.at(seen->second);
    if (first.owner != owner) {
      return AlreadyExistsError("request_id " + request_id + " was used by another user");
    }
    if (JobSpecToJson(first.spec) != JobSpecToJson(spec)) {
      return AlreadyExistsError("request_id " + request_id + " was used for " + first.id +
                                " with another spec");
    }
    return first;
  }
  RETURN_IF_ERROR(ReserveSeqLocked());
  JobRecord job;
  job.seq = next_seq_;
  char id[32];
  std::snprintf(id, sizeof(id), "job-%06lld", static_cast<long long>(job.seq));
  job.id = id;
  job.spec = spec;
  job.state = JobState::kPending;
  job.reason = "waiting to be scheduled";
  job.reason_code = ReasonCode::kSubmitted;
  job.submitted_ms = clock_->WallMillis();
  job.updated_ms = job.submitted_ms;
  job.progress.iterations = spec.iterations;
  job.history.push_back({JobState::kPending, job.reason, job.submitted_ms, job.reason_code});
  job.request_id = request_id;
  job.owner = owner;
  ASSIGN_OR_RETURN(JobRecord stored, CommitLocked(std::move(job)));
  ++next_seq_;
  if (!request_id.empty()) job_by_request_id_[request_id] = stored.id;
  return stored;
}

StatusOr<JobRecord> JobManager::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("job " + job_id + " not found");
  return it->second;
}

std::vector<JobRecord> JobManager::List(const std::vector<JobState>& states, int limit,
                                        const std::optional<std::string>& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const JobRecord*> selected;
  for (const auto& [id, job] : jobs_) {
    if (owner && job.owner != *owner) continue;
    if (states.empty() || std::find(states.begin(), states.end(), job.state) != states.end()) {
      selected.push_back(&job);
    }
  }
  std::sort(selected.begin(), selected.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->seq > b->seq; });
  if (limit > 0 && selected.size() > static_cast<size_t>(limit)) selected.resize(limit);
  std::vector<JobRecord> out;
  out.reserve(selected.size());
  for (const JobRecord* job : selected) out.push_back(*job);
  return out;
}

std::vector<JobRecord> JobManager::Active() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobRecord> out;
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job.state)) out.push_back(job);
  }
  std::sort(out.begin(), out.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.seq < b.seq; });
  return out;
}

bool JobManager::TransitionAllowed(JobState from, JobState to) {
  if (IsTerminal(from)) return false;
  if (IsTerminal(to)) return true;  // any live job may end (cancel, failure, success)
  switch (to) {
    case JobState::kPending:  // requeue, or a phase to redo after a restart or a lost node
      return true;
    case JobState::kProfiling:
      return from == JobState::kPending;
    case JobState::kPlanning:
      return from == JobState::kPending || from == JobState::kProfiling;
    case JobState::kRunning:
      return from == JobState::kPlanning;
    default:
      return false;
  }
}

StatusOr<JobRecord> JobManager::Transition(const std::string& job_id, JobState state,
                                           const Reason& reason,
                                           const std::function<void(JobRecord&)>& mutate) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("job " + job_id + " not found");
  const JobRecord& current = it->second;
  if (state == JobState::kSucceeded && current.state != JobState::kRunning) {
    return FailedPreconditionError("job " + job_id + " is " + StateName(current.state) +
                                   ", not RUNNING");
  }
  if (!TransitionAllowed(current.state, state)) {
    return FailedPreconditionError("job " + job_id + " is " + StateName(current.state) +
                                   "; cannot move to " + StateName(state));
  }
  JobRecord updated = current;
  updated.state = state;
  updated.reason = reason.message;
  updated.reason_code = reason.code;
  if (mutate) mutate(updated);
  updated.state = state;  // the mutator may not change the state behind the lifecycle's back
  updated.updated_ms = clock_->WallMillis();
  updated.history.push_back({state, reason.message, updated.updated_ms, reason.code});
  const JobState from = current.state;
  const JobRecord before = observer_ ? current : JobRecord();
  ASSIGN_OR_RETURN(JobRecord stored, CommitLocked(std::move(updated)));
  if (observer_) observer_(before, stored);
  DP_LOG_INFO("job {}: {} -> {}{}{}", job_id, StateName(from), StateName(state),
              reason.message.empty() ? "" : ": ", reason.message);
  return stored;
}

void JobManager::SetTransitionObserver(TransitionObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(observer);
}

StatusOr<JobRecord> JobManager::Update(const std::string& job_id,
                                       const std::function<void(JobRecord&)>& mutate) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("job " + job_id + " not found");
  JobRecord updated = it->second;
  JobState state = updated.state;
  mutate(updated);
  updated.state = state;
  updated.updated_ms = clock_->WallMillis();
  return CommitLocked(std::move(updated));
}

StatusOr<JobRecord> JobManager::CommitLocked(JobRecord updated) {
  RETURN_IF_ERROR(store_->SaveJob(updated));
  JobRecord& slot = jobs_[updated.id];
  job_versions_[updated.id] = ++version_;
  slot = std::move(updated);
  changed_.notify_all();
  return slot;
}

Status JobManager::AppendLogs(const std::string& job_id, std::vector<LogRecord> lines) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.count(job_id) == 0) return NotFoundError("job " + job_id + " not found");
  }
  RETURN_IF_ERROR(store_->AppendLogs(job_id, &lines));
  std::lock_guard<std::mutex> lock(mu_);
  job_versions_[job_id] = ++version_;
  changed_.notify_all();
  return Status::Ok();
}

StatusOr<std::vector<LogRecord>> JobManager::ReadLogs(const std::string& job_id, int64_t after_seq,
                                                      int limit) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.count(job_id) == 0) return NotFoundError("job " + job_id + " not found");
  }
  return store_->ReadLogs(job_id, after_seq, limit);
}

StatusOr<std::vector<LogRecord>> JobManager::TailLogs(const std::string& job_id, int count) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.count(job_id) == 0) return NotFoundError("job " + job_id + " not found");
  }
  return store_->TailLogs(job_id, count);
}

uint64_t JobManager::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

uint64_t JobManager::WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return version_ > seen || shutdown_; });
  return version_;
}

uint64_t JobManager::JobVersion(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_versions_.find(job_id);
  return it == job_versions_.end() ? 0 : it->second;
}

uint64_t JobManager::WaitForJobChange(const std::string& job_id, uint64_t seen,
                                      std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto version = [&] {
    auto it = job_versions_.find(job_id);
    return it == job_versions_.end() ? uint64_t{0} : it->second;
  };
  changed_.wait_for(lock, timeout, [&] { return version() > seen || shutdown_; });
  return version();
}

void JobManager::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;
  shutdown_ = true;
  changed_.notify_all();
  // A clean stop hands the unused part of the reservation back, so the next start goes on from
  // the next id rather than the next block; after a crash the ids of one block are skipped.
  if (seq_reserved_ > next_seq_) {
    if (Status s = store_->ReserveSeqs(next_seq_); !s.ok()) {
      DP_LOG_WARN("job id reservation kept at {}: {}", seq_reserved_, s.ToString());
    }
  }
}

bool JobManager::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_;
}

}  // namespace deepool::coordinator
