#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdio>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <filesystem>
#include <utility>

#include "common/byte_size.h"
#include "common/logging.h"

namespace deepool::coordinator {

namespace {

// A finished job's large documents: in the store, no longer in memory.
void DropDocuments(JobRecord* job) {
  job->spec.graph_json = SharedText();
  job->graph_json = SharedText();
  job->plan_json = SharedText();
}

// A spec's checkpoint.dir as the same directory always reads ("" for none): `a//b/./` is `a/b`.
std::string CheckpointDirKey(const JobSpec& spec) {
  if (spec.checkpoint_dir.empty()) return "";
  std::string key = std::filesystem::path(spec.checkpoint_dir).lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  return key;
}

std::string UserName(const std::string& owner) {
  return owner.empty() ? "user (anonymous: the coordinator authenticates no one)" : "user " + owner;
}

}  // namespace

// A tree that knows each key's rank (libstdc++'s policy-based order statistics). Keys sort as
// Admit looks at jobs: higher priority first, then earlier submission.
struct JobManager::QueueOrders {
  using Key = std::pair<int, int64_t>;  // (-priority, seq)
  using Order =
      __gnu_pbds::tree<Key, __gnu_pbds::null_type, std::less<Key>, __gnu_pbds::rb_tree_tag,
                       __gnu_pbds::tree_order_statistics_node_update>;
  static Key KeyOf(const JobRecord& job) { return {-job.spec.priority, job.seq}; }
  Order fg;
  Order bg;
  Order& of(JobRole role) { return role == JobRole::kBg ? bg : fg; }
};

JobManager::JobManager(JobStore* store, const Clock* clock, JobLimits limits,
                       std::chrono::milliseconds progress_store_interval)
    : store_(store),
      clock_(clock),
      limits_(limits),
      progress_store_interval_(progress_store_interval),
      queues_(std::make_unique<QueueOrders>()) {}

JobManager::~JobManager() = default;

Status JobManager::Load() {
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->LoadJobs());
  ASSIGN_OR_RETURN(const int64_t reserved, store_->LoadSeqReservation());
  std::lock_guard<std::mutex> lock(mu_);
  // Ids up to the reservation may have been issued to jobs whose records are gone.
  next_seq_ = std::max(next_seq_, reserved);
  for (JobRecord& job : jobs) {
    next_seq_ = std::max(next_seq_, job.seq + 1);
    if (!job.request_id.empty()) {
      requests_[job.request_id] = {job.id, job.owner, SpecFingerprint(job.spec)};
    }
    if (IsTerminal(job.state)) DropDocuments(&job);
    CountLocked(job, +1);
    std::string id = job.id;
    IndexLocked(jobs_[id] = Snapshot(std::move(job)));
  }
  ++version_;
  return Status::Ok();
}

Status JobManager::ReserveIdsLocked(std::unique_lock<std::mutex>& lock, int64_t left, bool wait) {
  while (seq_reserved_ - next_seq_ < left) {
    if (shutdown_) return UnavailableError("coordinator is shutting down");
    if (reserving_) {
      if (!wait) return Status::Ok();
      ids_reserved_.wait(lock);
      continue;
    }
    const int64_t bound = std::max(seq_reserved_, next_seq_) + kSeqReservationBlock;
    reserving_ = true;
    lock.unlock();
    const Status reserved = store_->ReserveSeqs(bound);
    lock.lock();
    reserving_ = false;
    ids_reserved_.notify_all();
    RETURN_IF_ERROR(reserved);
    seq_reserved_ = bound;
  }
  return Status::Ok();
}

Status JobManager::ReserveIdsAhead() {
  std::unique_lock<std::mutex> lock(mu_);
  return ReserveIdsLocked(lock, kSeqReservationBlock / 2, /*wait=*/false);
}

void JobManager::CountLocked(const JobRecord& job, int sign) {
  counts_[{job.state, job.spec.role}] += sign;
  Usage& usage = usage_[job.owner];
  if (job.state == JobState::kPending) {
    usage.pending += sign;
    QueueOrders::Order& queue = queues_->of(job.spec.role);
    if (sign > 0) {
      queue.insert(QueueOrders::KeyOf(job));
    } else {
      queue.erase(QueueOrders::KeyOf(job));
    }
  }
  if (!IsTerminal(job.state)) {
    usage.spec_bytes += sign * SpecBytes(job.spec);
    if (const std::string dir = CheckpointDirKey(job.spec); !dir.empty()) {
      if (sign > 0) {
        checkpoint_dirs_.emplace(dir, job.id);  // a second holder (stored before the check) waits
      } else if (auto it = checkpoint_dirs_.find(dir);
                 it != checkpoint_dirs_.end() && it->second == job.id) {
        checkpoint_dirs_.erase(it);
      }
    }
  }
}

Status JobManager::CheckCheckpointDirLocked(const JobSpec& spec) const {
  const std::string dir = CheckpointDirKey(spec);
  auto held = dir.empty() ? checkpoint_dirs_.end() : checkpoint_dirs_.find(dir);
  if (held == checkpoint_dirs_.end()) return Status::Ok();
  auto holder = jobs_.find(held->second);
  const std::string state =
      holder == jobs_.end() ? "being submitted" : StateName(holder->second->state);
  return FailedPreconditionError(
      "checkpoint.dir " + spec.checkpoint_dir + " is the directory of " + held->second +
      ", which is " + state +
      ": two jobs in one directory prune each other's checkpoints, and one would resume from the "
      "other's; give this job another directory (or none, under the coordinator's "
      "--checkpoint-root), or submit it once " +
      held->second + " has ended");
}

void JobManager::IndexLocked(const JobSnapshot& slot) {
  by_seq_[slot->seq] = &slot;
  by_owner_[slot->owner][slot->seq] = &slot;
  if (IsTerminal(slot->state)) {
    unfinished_.erase(slot->seq);
    finished_by_end_.emplace(slot->updated_ms, slot->seq);
  } else {
    unfinished_[slot->seq] = &slot;
  }
}

Status JobManager::CheckLimitsLocked(const JobSpec& spec, const std::string& owner) const {
  auto it = usage_.find(owner);
  const Usage usage = it == usage_.end() ? Usage() : it->second;
  if (limits_.max_pending_jobs_per_user > 0 && usage.pending >= limits_.max_pending_jobs_per_user) {
    return ResourceExhaustedError(
        UserName(owner) + " already has " + std::to_string(usage.pending) +
        " pending jobs, the most one user may queue (--max-pending-jobs-per-user " +
        std::to_string(limits_.max_pending_jobs_per_user) +
        "); wait for some to start, or cancel some");
  }
  const int64_t bytes = SpecBytes(spec);
  if (limits_.max_spec_bytes_per_user > 0 &&
      usage.spec_bytes + bytes > limits_.max_spec_bytes_per_user) {
    return ResourceExhaustedError(
        UserName(owner) + "'s unfinished jobs hold " +
        FormatBytes(usage.spec_bytes, ByteUnit::kMiB) + " of specs; this one (" +
        FormatBytes(bytes, ByteUnit::kMiB) + ") would pass the " +
        FormatBytes(limits_.max_spec_bytes_per_user, ByteUnit::kMiB) +
        " one user may hold (--max-spec-mib-per-user); wait for some to finish, or cancel "
        "some");
  }
  return Status::Ok();
}

StatusOr<JobRecord> JobManager::Submit(const JobSpec& spec, const std::string& request_id,
                                       const std::string& owner) {
  // Outside the lock: a digest of up to 8 MiB of graph.
  const uint64_t fingerprint = request_id.empty() ? 0 : SpecFingerprint(spec);
  JobRecord job;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // First, as it may release the lock: what follows is decided under one holding of it.
    RETURN_IF_ERROR(ReserveIdsLocked(lock, 1, /*wait=*/true));
    if (shutdown_) return UnavailableError("coordinator is shutting down");
    if (auto seen = requests_.find(request_id); !request_id.empty() && seen != requests_.end()) {
      const Request& first = seen->second;
      if (first.owner != owner) {
        return AlreadyExistsError("request_id " + request_id + " was used by another user");
      }
      if (first.fingerprint != fingerprint) {
        return AlreadyExistsError("request_id " + request_id + " was used for " + first.job_id +
                                  " with another spec");
      }
      auto stored = jobs_.find(first.job_id);
      if (stored == jobs_.end()) {
        return UnavailableError("the submission with request_id " + request_id +
                                " is still being stored; send it again");
      }
      return *stored->second;
    }
    RETURN_IF_ERROR(CheckLimitsLocked(spec, owner));
    RETURN_IF_ERROR(CheckCheckpointDirLocked(spec));
    job.seq = next_seq_++;
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
    // Held for it while it is written, so concurrent submissions count it.
    CountLocked(job, +1);
    if (!request_id.empty()) requests_[request_id] = {job.id, owner, fingerprint};
  }
  // Without the lock: nobody else knows the new id yet, and writing a spec with a large graph
  // takes a while that worker calls reading other jobs must not wait for.
  const Status saved = store_->SaveJob(job);
  if (!saved.ok()) {
    // The write may have landed all the same (a COMMIT whose answer was lost with the
    // connection): such a record would load at the next start as a job nobody was told of, and
    // run beside the client's retry. Removed without the lock (a database that does not answer
    // must not hold up the job table) and before the id may be issued again below.
    if (Status removed = store_->DeleteJobs({job.id}); !removed.ok()) {
      DP_LOG_WARN(
          "job {}: its failed submission may be stored all the same ({}); the next job "
          "given its id replaces it",
          job.id, removed.ToString());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!saved.ok()) {
    CountLocked(job, -1);
    if (!request_id.empty()) requests_.erase(request_id);
    if (next_seq_ == job.seq + 1) next_seq_ = job.seq;  // unused, unless a later one was issued
    return saved;
  }
  job_versions_[job.id] = ++version_;
  JobSnapshot& slot = jobs_[job.id];  // before the move below empties job.id
  slot = Snapshot(std::move(job));
  IndexLocked(slot);
  NotifyChangeLocked(slot->id);
  return *slot;
}

void JobManager::NotifyChangeLocked(const std::string& job_id) {
  changed_.notify_all();
  job_changed_.Notify(job_id);
}

StatusOr<JobRecord> JobManager::Get(const std::string& job_id) const {
  JobSnapshot job = Find(job_id);
  if (!job) return NotFoundError("job " + job_id + " not found");
  return *job;  // copied without the lock
}

JobSnapshot JobManager::Find(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::optional<JobBrief> JobManager::Brief(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  const JobRecord& job = *it->second;
  return JobBrief{job.state, job.attempt, job.resize_to};
}

StatusOr<JobRecord> JobManager::GetWithDocuments(const std::string& job_id) const {
  ASSIGN_OR_RETURN(JobRecord job, Get(job_id));
  if (!IsTerminal(job.state)) return job;
  StatusOr<JobRecord> stored = store_->LoadJob(job_id);
  if (!stored.ok()) return stored.status().WithContext("reading job " + job_id + " from the store");
  return stored;
}

std::vector<JobRecord> JobManager::List(const std::vector<JobState>& states, int limit,
                                        const std::optional<std::string>& owner) const {
  return ListPage({states, limit, owner, 0}).jobs;
}

JobPage JobManager::ListPage(const JobQuery& query) const {
  const bool live_only =
      !query.states.empty() && std::none_of(query.states.begin(), query.states.end(), IsTerminal);
  auto wanted = [&](const JobRecord& job) {
    return (!query.owner || job.owner == *query.owner) &&
           (query.states.empty() ||
            std::find(query.states.begin(), query.states.end(), job.state) != query.states.end());
  };
  JobPage page;
  std::vector<JobSnapshot> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    static const std::map<int64_t, const JobSnapshot*> kNone;
    const std::map<int64_t, const JobSnapshot*>* index = live_only ? &unfinished_ : &by_seq_;
    if (!live_only && query.owner) {
      auto mine = by_owner_.find(*query.owner);
      index = mine == by_owner_.end() ? &kNone : &mine->second;
    }
    // Newest first: walk down from the first seq below the page's start.
    auto it = query.before_seq > 0 ? index->lower_bound(query.before_seq) : index->end();
    while (it != index->begin()) {
      --it;
      const JobSnapshot& job = *it->second;
      if (!wanted(*job)) continue;
      if (query.limit > 0 && found.size() == static_cast<size_t>(query.limit)) {
        page.next_before_seq = found.back()->seq;
        break;
      }
      found.push_back(job);
    }
  }
  // Copied without the lock.
  page.jobs.reserve(found.size());
  for (const JobSnapshot& job : found) page.jobs.push_back(*job);
  return page;
}

JobCounts JobManager::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  JobCounts counts;
  for (const auto& [key, count] : counts_) {
    if (count != 0) counts.emplace(key, count);
  }
  return counts;
}

std::vector<JobSnapshot> JobManager::Active() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobSnapshot> out;
  out.reserve(unfinished_.size());
  for (const auto& [seq, job] : unfinished_) out.push_back(*job);
  return out;
}

std::optional<int> JobManager::QueuePosition(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second->state != JobState::kPending) return std::nullopt;
  const JobRecord& job = *it->second;
  return static_cast<int>(queues_->of(job.spec.role).order_of_key(QueueOrders::KeyOf(job))) + 1;
}

std::vector<QueuedJob> JobManager::Queue() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<QueuedJob> out;
  for (const auto& [seq, slot] : unfinished_) {
    const JobRecord& job = **slot;
    if (job.state == JobState::kPending) out.push_back({job.id, job.spec.priority, job.spec.role});
  }
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
  JobSnapshot before;
  JobSnapshot stored;
  {
    std::unique_lock<std::mutex> lock(mu_);
    AwaitProgressWriteLocked(lock, job_id);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return NotFoundError("job " + job_id + " not found");
    before = it->second;
    if (state == JobState::kSucceeded && before->state != JobState::kRunning) {
      return FailedPreconditionError("job " + job_id + " is " + StateName(before->state) +
                                     ", not RUNNING");
    }
    if (!TransitionAllowed(before->state, state)) {
      return FailedPreconditionError("job " + job_id + " is " + StateName(before->state) +
                                     "; cannot move to " + StateName(state));
    }
    JobRecord updated = *before;
    updated.state = state;
    updated.reason = reason.message;
    updated.reason_code = reason.code;
    if (mutate) mutate(updated);
    updated.state = state;  // the mutator may not change the state behind the lifecycle's back
    updated.updated_ms = clock_->WallMillis();
    updated.history.push_back({state, reason.message, updated.updated_ms, reason.code});
    ASSIGN_OR_RETURN(stored, CommitLocked(std::move(updated)));
    if (observer_) observer_(*before, *stored);
  }
  DP_LOG_INFO("job {}: {} -> {}{}{}", job_id, StateName(before->state), StateName(state),
              reason.message.empty() ? "" : ": ", reason.message);
  return *stored;  // copied without the lock
}

void JobManager::SetTransitionObserver(TransitionObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(observer);
}

StatusOr<JobRecord> JobManager::Update(const std::string& job_id,
                                       const std::function<void(JobRecord&)>& mutate) {
  JobSnapshot stored;
  {
    std::unique_lock<std::mutex> lock(mu_);
    AwaitProgressWriteLocked(lock, job_id);
    ASSIGN_OR_RETURN(stored, ChangeLocked(job_id, mutate, Store::kNow));
  }
  return *stored;
}

StatusOr<JobRecord> JobManager::UpdateProgress(const std::string& job_id,
                                               const std::function<void(JobRecord&)>& mutate) {
  // A thousand reports a second share the job table's lock with every other call: the record is
  // copied and changed without it, and put in place under it only if nobody changed the job
  // meanwhile (else again, from the newer record).
  while (true) {
    const JobSnapshot base = Find(job_id);
    if (!base) return NotFoundError("job " + job_id + " not found");
    if (IsTerminal(base->state)) {
      return FailedPreconditionError("job " + job_id + " is already " + StateName(base->state));
    }
    JobRecord updated = *base;
    mutate(updated);
    updated.state = base->state;
    JobSnapshot stored;
    {
      // With no interval every report is stored before it is answered, in order.
      const bool write_through = progress_store_interval_.count() == 0;
      std::unique_lock<std::mutex> lock(mu_);
      if (write_through) AwaitProgressWriteLocked(lock, job_id);
      auto it = jobs_.find(job_id);
      if (it == jobs_.end() || it->second != base) continue;
      updated.updated_ms = clock_->WallMillis();
      ASSIGN_OR_RETURN(stored,
                       ReplaceLocked(it, std::move(updated),
                                     write_through ? Store::kProgressNow : Store::kHeldBack));
    }
    return *stored;
  }
}

StatusOr<JobRecord> JobManager::UpdateAdvice(const std::string& job_id,
                                             const std::function<void(JobRecord&)>& mutate) {
  JobSnapshot stored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(stored, ChangeLocked(job_id, mutate, Store::kWithNextWrite));
  }
  return *stored;
}

StatusOr<JobSnapshot> JobManager::ChangeLocked(const std::string& job_id,
                                               const std::function<void(JobRecord&)>& mutate,
                                               Store store) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("job " + job_id + " not found");
  if (IsTerminal(it->second->state)) {
    return FailedPreconditionError("job " + job_id + " is already " + StateName(it->second->state));
  }
  JobRecord updated = *it->second;
  JobState state = updated.state;
  mutate(updated);
  updated.state = state;
  updated.updated_ms = clock_->WallMillis();
  return ReplaceLocked(it, std::move(updated), store);
}

StatusOr<JobSnapshot> JobManager::ReplaceLocked(std::map<std::string, JobSnapshot>::iterator it,
                                                JobRecord updated, Store store) {
  if (store == Store::kNow || store == Store::kProgressNow) {
    return CommitLocked(std::move(updated), store == Store::kProgressNow);
  }
  // The same record for every reader; the store's copy older until it is written.
  if (store == Store::kHeldBack) unstored_since_ms_.emplace(it->first, updated.updated_ms);
  CountLocked(*it->second, -1);
  CountLocked(updated, +1);
  it->second = Snapshot(std::move(updated));
  job_versions_[it->first] = ++version_;
  NotifyChangeLocked(it->first);
  return it->second;
}

Status JobManager::FlushProgress(bool all) {
  std::vector<JobSnapshot> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& job_id :
         DueProgressLocked(all, clock_->WallMillis(), kMaxProgressWritesPerFlush)) {
      auto it = jobs_.find(job_id);
      if (it == jobs_.end()) {
        unstored_since_ms_.erase(job_id);
        continue;
      }
      records.push_back(it->second);
      writing_progress_.insert(job_id);
    }
  }
  if (records.empty()) return Status::Ok();
  // Without the lock, in one store call: on PostgreSQL a write is a round trip, and a thousand
  // reports and heartbeats a second need the table meanwhile. A store write of one of these
  // jobs' next change waits for this one (AwaitProgressWriteLocked), so the store never goes
  // back to it.
  const Status saved = store_->SaveProgress(records);
  std::lock_guard<std::mutex> lock(mu_);
  for (const JobSnapshot& record : records) writing_progress_.erase(record->id);
  progress_written_.notify_all();
  if (!saved.ok()) {
    return saved.WithContext("storing the progress of " + std::to_string(records.size()) + " jobs");
  }
  const int64_t now_ms = clock_->WallMillis();
  for (const JobSnapshot& record : records) {
    stored_ms_[record->id] = now_ms;
    // Progress that came after `record` stays held back, for the next flush.
    auto it = jobs_.find(record->id);
    if (it == jobs_.end() || it->second == record) unstored_since_ms_.erase(record->id);
  }
  return Status::Ok();
}

void JobManager::AwaitProgressWriteLocked(std::unique_lock<std::mutex>& lock,
                                          const std::string& job_id) const {
  progress_written_.wait(lock, [&] { return writing_progress_.count(job_id) == 0; });
}

std::vector<std::string> JobManager::DueProgressLocked(bool all, int64_t now_ms,
                                                       size_t limit) const {
  std::vector<std::string> due;
  for (const auto& [job_id, since_ms] : unstored_since_ms_) {
    if (due.size() >= limit) break;
    auto stored = stored_ms_.find(job_id);
    if (all || stored == stored_ms_.end() ||
        now_ms - stored->second >= progress_store_interval_.count()) {
      due.push_back(job_id);
    }
  }
  return due;
}

Status JobManager::StoreHeldBackLocked(const std::string& job_id, int64_t now_ms) {
  if (unstored_since_ms_.count(job_id) == 0) return Status::Ok();  // written meanwhile
  auto job = jobs_.find(job_id);
  if (job == jobs_.end()) {
    unstored_since_ms_.erase(job_id);
    return Status::Ok();
  }
  Status saved = store_->SaveProgress(*job->second);
  if (!saved.ok()) return saved.WithContext("storing progress of " + job_id);
  stored_ms_[job_id] = now_ms;
  unstored_since_ms_.erase(job_id);
  return Status::Ok();
}

StatusOr<JobSnapshot> JobManager::CommitLocked(JobRecord updated, bool progress_only) {
  RETURN_IF_ERROR(progress_only ? store_->SaveProgress(updated) : store_->SaveJob(updated));
  // The whole record went: any progress held back with it.
  unstored_since_ms_.erase(updated.id);
  if (IsTerminal(updated.state)) {
    stored_ms_.erase(updated.id);
  } else {
    stored_ms_[updated.id] = clock_->WallMillis();
  }
  JobSnapshot& slot = jobs_[updated.id];
  job_versions_[updated.id] = ++version_;
  if (slot) CountLocked(*slot, -1);
  CountLocked(updated, +1);
  if (IsTerminal(updated.state)) DropDocuments(&updated);  // they stay in the store
  slot = Snapshot(std::move(updated));
  IndexLocked(slot);
  NotifyChangeLocked(slot->id);
  return slot;
}

StatusOr<size_t> JobManager::ForgetFinished(int64_t ended_before_ms, size_t limit) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = finished_by_end_.begin();
         it != finished_by_end_.end() && it->first < ended_before_ms && ids.size() < limit; ++it) {
      ids.push_back((*by_seq_.at(it->second))->id);
    }
  }
  if (ids.empty()) return size_t{0};
  RETURN_IF_ERROR(store_->DeleteJobs(ids).WithContext("removing finished jobs"));
  std::lock_guard<std::mutex> lock(mu_);
  ++version_;
  for (const std::string& id : ids) ForgetLocked(id);
  return ids.size();
}

void JobManager::ForgetLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  const JobRecord& job = *it->second;
  CountLocked(job, -1);
  finished_by_end_.erase({job.updated_ms, job.seq});
  by_seq_.erase(job.seq);
  if (auto owner = by_owner_.find(job.owner); owner != by_owner_.end()) {
    owner->second.erase(job.seq);
    if (owner->second.empty()) by_owner_.erase(owner);
  }
  if (auto usage = usage_.find(job.owner);
      usage != usage_.end() && usage->second.pending == 0 && usage->second.spec_bytes == 0) {
    usage_.erase(usage);
  }
  if (auto request = requests_.find(job.request_id);
      request != requests_.end() && request->second.job_id == job_id) {
    requests_.erase(request);
  }
  job_versions_.erase(job_id);
  stored_ms_.erase(job_id);
  unstored_since_ms_.erase(job_id);
  NotifyChangeLocked(job_id);
  jobs_.erase(it);
}

Status JobManager::AppendLogs(const std::string& job_id, std::vector<LogRecord> lines) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.count(job_id) == 0) return NotFoundError("job " + job_id + " not found");
  }
  RETURN_IF_ERROR(store_->AppendLogs(job_id, &lines));
  std::lock_guard<std::mutex> lock(mu_);
  job_versions_[job_id] = ++version_;
  NotifyChangeLocked(job_id);
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
  job_changed_.WaitFor(lock, job_id, timeout, [&] { return version() > seen || shutdown_; });
  return version();
}

void JobManager::Shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_) return;
  // No write of a job's progress, and no id reservation (whose bound the one below must not
  // be overtaken by), may be in flight; either wait lets the other start, so both are checked
  // after each.
  while (!writing_progress_.empty() || reserving_) {
    if (!writing_progress_.empty()) {
      progress_written_.wait(lock);
    } else {
      ids_reserved_.wait(lock);
    }
  }
  shutdown_ = true;
  changed_.notify_all();
  job_changed_.NotifyAll();
  const int64_t now_ms = clock_->WallMillis();
  for (const std::string& job_id :
       DueProgressLocked(/*all=*/true, now_ms, unstored_since_ms_.size())) {
    if (Status s = StoreHeldBackLocked(job_id, now_ms); !s.ok()) {
      DP_LOG_WARN("progress held back is lost: {}", s.ToString());
    }
  }
  // A clean stop hands the unused part of the reservation back, so the next start goes on from
  // the next id rather than the next block; after a crash the ids of one block are skipped.
  if (seq_reserved_ > next_seq_) {
    if (Status s = store_->ReserveSeqs(next_seq_); !s.ok()) {
      DP_LOG_WARN("job id reservation kept at {}: {}", seq_reserved_, s.ToString());
    }
  }
}

bool JobManager::shutting_down() const { return shutdown_.load(); }

}  // namespace deepool::coordinator
