// JobManager: the coordinator's jobs. Owns the in-memory view of every job and writes each change
// through the JobStore before returning, so an acknowledged change survives a crash.
// Enforces the lifecycle PENDING -> PROFILING -> PLANNING -> RUNNING -> SUCCEEDED | FAILED |
// CANCELLED (and back to PENDING when a job is requeued or a phase must be redone); every
// transition is appended to the job's history with the injected clock's wall time.
//
// Scale: the history may hold 100,000s of finished jobs. Two indexes keep every hot path
// independent of it: all jobs by submission order (a page of List starts where the last one
// ended, newest first) and the unfinished jobs (Active, Queue, and List of live states only
// look at those); counts by state and role are kept as jobs change (Counts), so a metrics
// scrape copies no finished record.
//
// Memory: each job's record is a JobSnapshot that a change replaces, never modifies; Active
// hands out the snapshots themselves (a scheduling round or a scrape copies no record), Get and
// List copy records out, and their large documents (the inline graph, the planned graph and the
// plan) are SharedText, so a copy shares them. A finished job's documents leave memory once its end
// is stored; GetWithDocuments reads them back from the store. Per-user limits (JobLimits) bound
// what one user's unfinished jobs hold.
//
// Threading: all methods are safe to call from any thread. One mutex guards the jobs; it is held
// while a change of an existing job is written (so its writes are stored in order) but never
// while a record is copied out, a progress report's change is made (UpdateProgress), or a new
// job's record is written, so a large submission does not hold up the worker calls
// that read jobs. WaitForChange blocks on a condition variable and is woken by every change and
// by Shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/keyed_condition.h"
#include "common/status.h"
#include "coordinator/job.h"
#include "coordinator/job_store.h"

namespace deepool::coordinator {

// What one user (a job's owner; "" on an open coordinator, where everyone is that one user) may
// hold, checked at submission (RESOURCE_EXHAUSTED naming the limit, its flag and the user).
// 0: no limit.
// One page of List: `limit` jobs at most, newest first, older than `before_seq` when set.
struct JobQuery {
  std::vector<JobState> states;  // empty: all
  int limit = 0;                 // 0: no limit
  std::optional<std::string> owner;
  int64_t before_seq = 0;  // 0: from the newest job
};
struct JobPage {
  std::vector<JobRecord> jobs;
  // The seq to pass as before_seq for the next page; 0 when this page ended the list.
  int64_t next_before_seq = 0;
};

// What the per-heartbeat and per-report paths need of a job, without its record.
struct JobBrief {
  JobState state = JobState::kPending;
  int64_t attempt = 0;
  int resize_to = 0;
};

struct JobLimits {
  int max_pending_jobs_per_user = 0;  // jobs PENDING (queued)
  // SpecBytes of the user's unfinished jobs (their inline graphs stay in memory until they end;
  // the coordinator's flag is in MiB).
  int64_t max_spec_bytes_per_user = 0;
};

class JobManager {
 public:
  // `store` and `clock` must outlive the manager. Call Load() once before use.
  JobManager(JobStore* store, const Clock* clock, JobLimits limits = {},
             std::chrono::milliseconds progress_store_interval = kProgressStoreInterval);
  ~JobManager();
  // How often at most one job's progress alone is written to the store (UpdateProgress).
  static constexpr std::chrono::milliseconds kProgressStoreInterval{5000};

  // Reads every stored job (after a restart).
  Status Load();

  // Stores a new PENDING job; the spec must already be validated. A checkpoint.dir that an
  // unfinished job already uses is FAILED_PRECONDITION: two jobs in one directory prune each
  // other's checkpoints, and one would resume from the other's weights. With a request_id (the
  // client's idempotency key), a submission repeated with the same key and spec returns the job
  // the first one stored (a client that lost the answer may retry without a duplicate); the same
  // key with another spec, or by another owner, is ALREADY_EXISTS (UNAVAILABLE while the first
  // is still being stored). owner: the caller's name. RESOURCE_EXHAUSTED past a JobLimits.
  StatusOr<JobRecord> Submit(const JobSpec& spec, const std::string& request_id = "",
                             const std::string& owner = "");

  // A finished job comes without its documents (spec.graph_json, graph_json, plan_json).
  StatusOr<JobRecord> Get(const std::string& job_id) const;
  // The job as it is now, without copying its record; null for an unknown job.
  JobSnapshot Find(const std::string& job_id) const;
  // A job's JobBrief without copying its record (every heartbeat asks); nullopt for an unknown
  // job.
  std::optional<JobBrief> Brief(const std::string& job_id) const;
  // The job with its documents; a finished job's are read from the store.
  StatusOr<JobRecord> GetWithDocuments(const std::string& job_id) const;
  // Newest first; empty `states` means all; limit 0 means no limit; with owner, only their jobs.
  std::vector<JobRecord> List(const std::vector<JobState>& states, int limit,
                              const std::optional<std::string>& owner = std::nullopt) const;
  // The same, a page at a time; a page of live states reads only the unfinished jobs.
  JobPage ListPage(const JobQuery& query) const;
  JobCounts Counts() const;
  // Non-terminal jobs in submission order, as they are now (no record copied).
  std::vector<JobSnapshot> Active() const;
  // The PENDING jobs in submission order, as the queue order reads them (no record copied).
  std::vector<QueuedJob> Queue() const;
  // A PENDING job's place in its role's queue, as QueuePositions(Queue()) gives it, read from an
  // order kept as jobs change (every submission's answer carries it: O(log n), not a walk of
  // 10,000 queued jobs); nullopt for a job that is not PENDING.
  std::optional<int> QueuePosition(const std::string& job_id) const;

  // Moves a job to `state` (validating the transition), applies `mutate` to the record in the
  // same write, and records the change in its history. FAILED_PRECONDITION for a transition the
  // lifecycle forbids (e.g. out of a terminal state).
  StatusOr<JobRecord> Transition(const std::string& job_id, JobState state, const Reason& reason,
                                 const std::function<void(JobRecord&)>& mutate = nullptr);
  // Changes fields without changing the state (the reason of a PENDING job, progress, ...).
  // A reason change alone is not recorded in the history. FAILED_PRECONDITION for a finished
  // job: its record is final (and its documents are no longer in memory to write back).
  StatusOr<JobRecord> Update(const std::string& job_id,
                             const std::function<void(JobRecord&)>& mutate);

  // Update for progress (iteration reports: many a second per job). The change is in memory at
  // once, for every reader and watcher; it is written to the store with the job's next other
  // change, or by FlushProgress once progress_store_interval has passed since the job was last
  // written, or at Shutdown. So a thousand reporting tasks make no store write on their way, and
  // a crash loses about that interval of progress shown (the interval and the control loop's
  // next round); with an interval of 0 each change is stored before UpdateProgress returns; states,
  // placements and checkpoints are always written through. `mutate` runs without the job table's
  // lock, and again on the newer record when the job changed meanwhile: it must change only the
  // record.
  StatusOr<JobRecord> UpdateProgress(const std::string& job_id,
                                     const std::function<void(JobRecord&)>& mutate);
  // Update for advice the scheduler recomputes every round (a PENDING job's reason): in memory
  // at once, stored only with the job's next written change. A restarted coordinator recomputes
  // it in its first round, so 10,000 queued jobs whose reason changed cost no store writes.
  StatusOr<JobRecord> UpdateAdvice(const std::string& job_id,
                                   const std::function<void(JobRecord&)>& mutate);
  // Writes progress held back longer than the interval (all of it with `all`), at most
  // kMaxProgressWritesPerFlush jobs a call, in one JobStore::SaveProgress (one transaction) and
  // without the lock (a store write of one of the jobs' next change waits for it, so none is
  // overtaken by an older record). The control loop calls it every round; one caller at a time.
  // A failed write is kept to be tried again.
  Status FlushProgress(bool all = false);
  static constexpr int kMaxProgressWritesPerFlush = 256;
  // Reserves the next block of job ids once fewer than half a block are left, so that
  // submissions rarely wait for the store's reservation. The control loop calls it every round.
  Status ReserveIdsAhead();
  // Ids are reserved a block at a time: a crash skips the unused ids of one block. Submissions
  // find ids reserved ahead unless they come faster than half a block a round.
  static constexpr int64_t kSeqReservationBlock = 1000;

  // The coordinator's retention of finished jobs: removes up to `limit` jobs that ended before
  // `ended_before_ms` (wall time, oldest end first) from the store (JobStore::DeleteJobs: their
  // records and log lines, in one write) and then from memory; from then on they are unknown
  // (NOT_FOUND), their request ids free. Returns how many went. Unfinished jobs are never
  // removed. The store write runs without the lock (a finished record never changes); the
  // control loop calls it every round, one caller at a time.
  StatusOr<size_t> ForgetFinished(int64_t ended_before_ms, size_t limit);
  static constexpr size_t kMaxForgottenPerRound = 256;

  // Log lines of a job (seq is set on the stored copies).
  Status AppendLogs(const std::string& job_id, std::vector<LogRecord> lines);
  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) const;
  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) const;

  // A counter that grows with every change of any job (state, progress, logs).
  uint64_t version() const;
  // Blocks until version() > seen, the deadline passes, or Shutdown(); returns version().
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;
  // The version of one job's last change (state, progress or logs); 0 for an unknown job.
  uint64_t JobVersion(const std::string& job_id) const;
  // Blocks until that job's version exceeds `seen`, the timeout passes, or Shutdown(); returns
  // the job's version. Only this job's changes wake it.
  uint64_t WaitForJobChange(const std::string& job_id, uint64_t seen,
                            std::chrono::milliseconds timeout) const;
  // Wakes every waiter; later waits return at once.
  void Shutdown();
  bool shutting_down() const;

  JobStore* store() const { return store_; }

  // Called after every committed transition with the job before and after it (metrics). Runs
  // under the manager's lock: it must not call back into the manager. Set it before use.
  using TransitionObserver = std::function<void(const JobRecord& before, const JobRecord& after)>;
  void SetTransitionObserver(TransitionObserver observer);

 private:
  static bool TransitionAllowed(JobState from, JobState to);
  StatusOr<JobSnapshot> CommitLocked(JobRecord updated, bool progress_only = false);
  // What each user's jobs hold, against JobLimits: kept as records are stored and loaded.
  struct Usage {
    int pending = 0;
    int64_t spec_bytes = 0;  // of unfinished jobs
  };
  // Keeps usage_, counts_ and queues_ in step with a record entering (+1) or leaving (-1).
  void CountLocked(const JobRecord& job, int sign);
  // How a change reaches the store: now; now as progress alone (JobStore::SaveProgress); held
  // back (FlushProgress); or with the next write.
  enum class Store { kNow, kProgressNow, kHeldBack, kWithNextWrite };
  // Waits (releasing `lock`) until no progress write of the job is in flight: a write of its
  // record under the lock must not be overtaken by an older one.
  void AwaitProgressWriteLocked(std::unique_lock<std::mutex>& lock,
                                const std::string& job_id) const;
  StatusOr<JobSnapshot> ChangeLocked(const std::string& job_id,
                                     const std::function<void(JobRecord&)>& mutate, Store store);
  // Puts a changed record in the job's place, reaching the store as `store` says.
  StatusOr<JobSnapshot> ReplaceLocked(std::map<std::string, JobSnapshot>::iterator it,
                                      JobRecord updated, Store store);
  // The held-back jobs due for a write at now_ms (all of them with `all`), at most `limit`.
  std::vector<std::string> DueProgressLocked(bool all, int64_t now_ms, size_t limit) const;
  Status StoreHeldBackLocked(const std::string& job_id, int64_t now_ms);
  // Wakes the waiters for any change and those for this job's.
  void NotifyChangeLocked(const std::string& job_id);
  // Indexes the job in its slot of jobs_ (by_seq_, unfinished_, by_owner_, finished_by_end_).
  void IndexLocked(const JobSnapshot& slot);
  // Removes a finished job from memory: its slot, indexes, counts and request id.
  void ForgetLocked(const std::string& job_id);
  Status CheckLimitsLocked(const JobSpec& spec, const std::string& owner) const;
  // FAILED_PRECONDITION when an unfinished job already has the spec's checkpoint.dir.
  Status CheckCheckpointDirLocked(const JobSpec& spec) const;
  // A submission's request id: its job, whose it is, and its spec's fingerprint.
  struct Request {
    std::string job_id;
    std::string owner;
    uint64_t fingerprint = 0;
  };
  // Until at least `left` ids from next_seq_ on are covered by a durable reservation
  // (JobStore::ReserveSeqs), reserves the next block. The store call runs without the lock (on
  // SQLite it syncs the main file); one at a time: with `wait`, a call finding another in flight
  // waits for it, else it returns.
  Status ReserveIdsLocked(std::unique_lock<std::mutex>& lock, int64_t left, bool wait);

  JobStore* store_;
  const Clock* clock_;
  const JobLimits limits_;
  const std::chrono::milliseconds progress_store_interval_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;  // any change (WaitForChange)
  mutable KeyedCondition job_changed_;       // by job id (WaitForJobChange: watchers)
  std::map<std::string, JobSnapshot> jobs_;  // never null
  std::map<std::string, Request> requests_;  // by request id
  std::map<std::string, Usage> usage_;       // by owner
  // The unfinished jobs' checkpoint directories (normalised): which job writes each.
  std::map<std::string, std::string> checkpoint_dirs_;
  // Pointers to slots of jobs_ (whose nodes never move): every stored job, and the unfinished
  // ones.
  std::map<int64_t, const JobSnapshot*> by_seq_;
  std::map<int64_t, const JobSnapshot*> unfinished_;
  // Every stored job by owner: a user's listing walks their own history, not everyone's.
  std::map<std::string, std::map<int64_t, const JobSnapshot*>> by_owner_;
  // The finished jobs by (end time, seq), oldest end first (a finished record never changes).
  std::set<std::pair<int64_t, int64_t>> finished_by_end_;
  JobCounts counts_;
  // The PENDING jobs of each role in Admit's order, each one's rank at hand (job_manager.cc).
  struct QueueOrders;
  std::unique_ptr<QueueOrders> queues_;
  // Jobs whose record in memory is newer than the stored one (UpdateProgress), and when each
  // job was last written.
  std::map<std::string, int64_t> unstored_since_ms_;
  std::map<std::string, int64_t> stored_ms_;
  // Jobs whose held-back progress FlushProgress is writing without the lock, and the condition
  // their end is signalled on.
  std::set<std::string> writing_progress_;
  mutable std::condition_variable progress_written_;
  int64_t next_seq_ = 1;
  int64_t seq_reserved_ = 0;  // ids below this are durably reserved
  bool reserving_ = false;    // a ReserveSeqs call is in flight, without the lock
  mutable std::condition_variable ids_reserved_;  // its end
  uint64_t version_ = 0;
  std::map<std::string, uint64_t> job_versions_;
  // Set under mu_ (the waits' predicates read it there); read without it by shutting_down(),
  // which every node stream asks each time it wakes.
  std::atomic<bool> shutdown_{false};
  TransitionObserver observer_;
};

}  // namespace deepool::coordinator
