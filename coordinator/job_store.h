// Durable state of the coordinator: job records, their log lines, and cached layer profiles.
// The JobManager writes through the store before it acknowledges a change, so what a client was
// told survives a crash. Three implementations pass one shared test suite
// (tests/service/job_store_test.cc): InMemoryJobStore (tests, --store memory), SQLiteJobStore
// (the default) and PostgresJobStore (--store postgresql://..., a database that outlives the
// coordinator's machine). The SQL ones version their schema (stored_job.h).
// Threading: implementations are safe to call from several threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "coordinator/job.h"

namespace deepool::coordinator {

class LeaderLease;

class JobStore {
 public:
  virtual ~JobStore() = default;
  // Inserts or replaces the whole record (keyed by id).
  virtual Status SaveJob(const JobRecord& job) = 0;
  // SaveJob for a record whose change is progress alone (JobManager::FlushProgress), which may
  // return before the write is flushed to disk: a crash of the store's server may then lose
  // the last such writes (under a second on PostgreSQL, whose asynchronous commit this is),
  // never a later write's, as the store applies its writes in order. Progress is already held
  // back for seconds before it is written, and the executors keep the truth.
  virtual Status SaveProgress(const JobRecord& job) { return SaveJob(job); }
  // SaveProgress of several jobs, a few dozen to a transaction where the store has them (a
  // flush of held-back progress writes hundreds a round, which one by one kept PostgreSQL's
  // connection busy; all in one would hold other writes up for the whole batch). On an error
  // some of them may have been saved.
  virtual Status SaveProgress(const std::vector<JobSnapshot>& jobs) {
    for (const JobSnapshot& job : jobs) RETURN_IF_ERROR(SaveProgress(*job));
    return Status::Ok();
  }
  // Every stored job, in submission (seq) order.
  virtual StatusOr<std::vector<JobRecord>> LoadJobs() = 0;
  // One stored job, whole (the documents of a finished job, which leave the JobManager's
  // memory); NOT_FOUND when it is not stored.
  virtual StatusOr<JobRecord> LoadJob(const std::string& job_id) = 0;
  // Removes jobs whole: records, documents and log lines, in one write (the coordinator's
  // retention of finished jobs, JobManager::ForgetFinished). Ids not stored are skipped.
  virtual Status DeleteJobs(const std::vector<std::string>& job_ids) = 0;
  // Appends lines to a job's log, numbering them from the job's last seq + 1 (sets their seq).
  // Like SaveProgress, it may return before the lines are flushed to disk (PostgreSQL).
  virtual Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) = 0;
  // Lines with seq > after_seq in order, at most `limit` (0: all).
  virtual StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                                    int limit) = 0;
  // The last `count` lines of a job's log, in order.
  virtual StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) = 0;
  // Layer profiles, cached per (model key, device type).
  virtual Status SaveProfile(const std::string& model_key, const std::string& device_type,
                             const std::string& profile_json) = 0;
  virtual StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                           const std::string& device_type) = 0;
  // Job ids come from a sequence. ReserveSeqs records durably that no number at or above `bound`
  // has been issued (the caller reserves before it issues one); LoadSeqReservation returns the
  // last bound recorded (0: none). A job whose record was later lost still counts, so no id is
  // issued twice. SQLite keeps the reservation in its main database file, so it outlives a lost
  // write-ahead log.
  virtual Status ReserveSeqs(int64_t bound) = 0;
  virtual StatusOr<int64_t> LoadSeqReservation() = 0;
  // The lease that decides which coordinator sharing this store leads (leader_lease.h), or
  // nullptr for a store one coordinator has alone (memory, SQLite).
  virtual LeaderLease* lease() { return nullptr; }
};

class InMemoryJobStore final : public JobStore {
 public:
  Status SaveJob(const JobRecord& job) override;
  StatusOr<std::vector<JobRecord>> LoadJobs() override;
  StatusOr<JobRecord> LoadJob(const std::string& job_id) override;
  Status DeleteJobs(const std::vector<std::string>& job_ids) override;
  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override;
  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) override;
  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) override;
  Status SaveProfile(const std::string& model_key, const std::string& device_type,
                     const std::string& profile_json) override;
  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override;
  Status ReserveSeqs(int64_t bound) override;
  StatusOr<int64_t> LoadSeqReservation() override;

 private:
  std::mutex mu_;
  int64_t seq_reservation_ = 0;
  std::map<std::string, JobRecord> jobs_;
  std::map<std::string, std::vector<LogRecord>> logs_;
  std::map<std::pair<std::string, std::string>, std::string> profiles_;
};

struct SQLiteStoreOptions {
  // Open even when acknowledged writes are known or suspected to be gone (see below): log what
  // is lost, loudly, and go on from the database as it is. Off: such a store is refused.
  bool accept_data_loss = false;
};

// Opens (creating if needed) the SQLite database at `path`, in WAL mode. Every write is one
// transaction, committed before the call returns. An existing file of 0 bytes is refused (a
// truncated store must not come back as an empty one).
// Lost commits: every write transaction bumps a commit number kept in the database, and the
// store copies it, after each commit, into a marker file beside it, `<path>.lastcommit`, outside
// SQLite's files. A database whose commit number is behind its marker lost acknowledged writes
// (its write-ahead log `<path>-wal` was deleted, truncated or damaged, or an older copy was put
// in its place): it is refused with DATA_LOSS naming how many writes and which job submissions
// are gone, unless options.accept_data_loss. So is a database that was not closed cleanly and
// whose marker is missing or damaged (nothing can tell what it lost). A cleanly closed database
// needs neither its -wal file nor its marker. One store per file at a time.
StatusOr<std::unique_ptr<JobStore>> OpenSQLiteJobStore(const std::string& path,
                                                       const SQLiteStoreOptions& options = {});

// Whether `store` (the coordinator's --store) is a PostgreSQL URI: postgresql://... or
// postgres://...
bool IsPostgresUri(const std::string& store);

// Connects to the PostgreSQL database `uri` names (libpq's URI form:
// postgresql://[user[:password]@][host][:port][/dbname][?param=value&...]; a host that is a
// directory is a Unix socket's) and brings its schema to this binary's version. UNAVAILABLE
// when it cannot connect; FAILED_PRECONDITION when a newer coordinator's schema is there.
// Messages name the database, host and user, never the password.
StatusOr<std::unique_ptr<JobStore>> OpenPostgresJobStore(const std::string& uri);

}  // namespace deepool::coordinator
