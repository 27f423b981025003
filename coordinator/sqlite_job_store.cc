// SQLiteJobStore: one database file, WAL journal, synchronous=NORMAL (a committed transaction
// survives a crash of this process; see docs/coordinator.md for the power-loss trade-off).
// Job records are stored as JSON next to the columns queries need; a job's graph and plan
// documents (large, written once per dispatch) live in their own table and are rewritten only
// when they change, so the frequent progress updates stay small writes.
// Job id reservations (see JobStore::ReserveSeqs) are checkpointed into the main file at once.
// The schema is versioned (stored_job.h): meta(schema_version) is the last step applied.
// Lost commits (job_store.h): meta(commit_seq) counts write transactions; after each commit the
// count, with the newest job saved, is copied into `<db>.lastcommit` (the marker). At open a
// database behind its marker is refused: SQLite itself replays whatever valid prefix of the
// write-ahead log it finds and says nothing of a missing or damaged tail. meta(closed_clean) is 1
// only between a clean close and the next open, so a cleanly closed file may travel alone.
// Checkpoints (copying the log into the main file, which syncs it) run on a second connection
// and thread (SQLiteCheckpointer), not inside a writer's commit unless the writers have not
// paused for 8,000 pages (sqlite_checkpointer.h).
// Threading: one connection for reads and writes, guarded by mu_; the checkpointer's own.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/durable_file.h"
#include "common/logging.h"
#include "coordinator/job_store.h"
#include "coordinator/sqlite_checkpointer.h"
#include "coordinator/stored_job.h"

namespace deepool::coordinator {
namespace {

// Created first, outside the versioned steps: it records their number.
constexpr const char* kMetaTable =
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)";

// The schema, step by step (stored_job.h). Never edit a step that shipped: add one.
const std::vector<SchemaStep>& SchemaSteps() {
  static const std::vector<SchemaStep> steps = {
      {1, "jobs, plans, inline graphs, logs and profiles", R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  seq INTEGER NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_seq ON jobs(seq);
CREATE TABLE IF NOT EXISTS plans (
  job_id TEXT PRIMARY KEY,
  graph TEXT NOT NULL,
  plan TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spec_graphs (
  job_id TEXT PRIMARY KEY,
  graph TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS logs (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  node_id TEXT NOT NULL,
  rank INTEGER NOT NULL,
  line TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS profiles (
  model_key TEXT NOT NULL,
  device_type TEXT NOT NULL,
  profile TEXT NOT NULL,
  PRIMARY KEY (model_key, device_type)
);
)sql"}};
  return steps;
}

// What the marker file records: the commit number of the last write transaction the store
// committed, and the newest job (highest seq) it had saved by then.
struct CommitMark {
  int64_t commit = 0;
  int64_t job_seq = 0;
  std::string job_id;  // "" when no job was saved
};

// The marker is one fixed-size line of text (readable with cat), so that each commit overwrites
// it in place with a single pwrite: a process killed mid-call leaves the old line or the new one,
// never a mix, and it costs one system call instead of the four of write-temp-and-rename.
constexpr size_t kMarkBytes = 128;
constexpr size_t kMarkIdChars = 48;  // longer job ids are cut (the id is only for messages)
constexpr const char* kMarkFormat =
    "deepool-commit-marker v1 commit=%020" PRId64 " job_seq=%020" PRId64 " job_id=%s";

std::string FormatMark(const CommitMark& mark) {
  const std::string id = mark.job_id.empty() ? "-" : mark.job_id.substr(0, kMarkIdChars);
  char line[kMarkBytes + 1];
  std::snprintf(line, sizeof(line), kMarkFormat, mark.commit, mark.job_seq, id.c_str());
  std::string text(line);
  text.resize(kMarkBytes - 1, ' ');
  return text + "\n";
}

// nullopt: there is no marker. DATA_LOSS: there is one, but it is not a whole marker line.
StatusOr<std::optional<CommitMark>> ReadMark(const std::string& mark_path) {
  std::error_code ec;
  if (!std::filesystem::exists(mark_path, ec) && !ec) return std::optional<CommitMark>();
  std::ifstream in(mark_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return UnavailableError("cannot read " + mark_path);
  const std::string line = text.str();
  CommitMark mark;
  char id[kMarkIdChars + 1] = {};
  int consumed = 0;
  if (line.size() != kMarkBytes || line.back() != '\n' ||
      std::sscanf(line.c_str(),
                  "deepool-commit-marker v1 commit=%20" SCNd64 " job_seq=%20" SCNd64
                  " job_id=%48s%n",
                  &mark.commit, &mark.job_seq, id, &consumed) != 3 ||
      line.find_first_not_of(' ', static_cast<size_t>(consumed)) != kMarkBytes - 1) {
    return DataLossError("its commit marker " + mark_path + " is damaged (" +
                         std::to_string(line.size()) + " bytes, not one marker line)");
  }
  if (std::string(id) != "-") mark.job_id = id;
  return std::optional<CommitMark>(mark);
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Replaces the marker whole and durably (temp file, fsync, rename, fsync of the directory): used
// when the store opens, where the marker may be missing, damaged or stale.
Status WriteMarkAtomically(const std::string& mark_path, const CommitMark& mark) {
  Status written = ReplaceFileDurably(mark_path, FormatMark(mark));
  // A marker that cannot be written is a disk that fails now, not writes lost: nothing may read
  // it as the DATA_LOSS of lost commits.
  if (written.code() == StatusCode::kDataLoss) return UnavailableError(written.message());
  return written;
}

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  std::string Text(int col) {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

class SQLiteJobStore final : public JobStore {
 public:
  // `lock_fd`: the store's lock file, held (flock) until the store closes.
  SQLiteJobStore(sqlite3* db, std::string path, int lock_fd)
      : db_(db), path_(std::move(path)), lock_fd_(lock_fd) {}
  // A clean close: closed_clean is set, and SQLite checkpoints the log into the main file and
  // deletes it, so the file alone holds every write.
  ~SQLiteJobStore() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (mark_fd_ >= 0) {
        Status closed = InTransaction([&] { return SetMeta("closed_clean", 1); });
        if (!closed.ok()) DP_LOG_WARN("job store {}: clean close: {}", path_, closed.ToString());
      }
    }
    // Closed first: the writer's connection, closing last, checkpoints and removes the log.
    checkpointer_.reset();
    bump_.reset();  // finalized before the connection closes
    sqlite3_close_v2(db_);
    if (mark_fd_ >= 0) ::close(mark_fd_);
    ::close(lock_fd_);  // last: another coordinator may open the store from now on
  }

  // Brings the schema to its newest step: the missing steps and their number in one transaction.
  // Not a counted commit (it acknowledges nothing to a client), so it cannot hide lost ones.
  Status Migrate() {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec(kMetaTable));
    StatusOr<std::optional<int64_t>> current = GetMeta("schema_version");
    RETURN_IF_ERROR(Damaged(current.status()));
    ASSIGN_OR_RETURN(const std::vector<SchemaStep> steps,
                     SchemaStepsToApply("the job store", current->value_or(0), SchemaSteps()));
    if (steps.empty()) return Status::Ok();
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status status = Status::Ok();
    for (const SchemaStep& step : steps) {
      status = Exec(step.sql);
      if (!status.ok()) break;
      DP_LOG_INFO("job store {}: schema step {} ({})", path_, step.version, step.what);
    }
    if (status.ok()) status = SetMeta("schema_version", steps.back().version);
    if (status.ok()) status = Exec("COMMIT");
    if (!status.ok() && !sqlite3_get_autocommit(db_)) {
      Status rolled_back = Exec("ROLLBACK");
      if (!rolled_back.ok()) DP_LOG_ERROR("sqlite: rollback failed: {}", rolled_back.ToString());
    }
    return status;
  }

  // Compares the database with its marker (see job_store.h), then marks the file open and
  // rewrites the marker. Called once, before any other call.
  Status CheckCommitsAndMarkOpen(const SQLiteStoreOptions& options, bool wal_existed) {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<std::optional<int64_t>> commit = GetMeta("commit_seq");
    RETURN_IF_ERROR(Damaged(commit.status()));
    StatusOr<std::optional<int64_t>> clean = GetMeta("closed_clean");
    RETURN_IF_ERROR(Damaged(clean.status()));
    RETURN_IF_ERROR(Damaged(LoadNewestJob()));
    mark_.commit = commit->value_or(0);
    const std::string lost =
        DescribeLostCommits(commit->has_value() && clean->value_or(0) != 1, wal_existed);
    if (!lost.empty()) {
      if (!options.accept_data_loss) {
        // Leave the files as found: closing would checkpoint what SQLite read and delete the
        // log, damaged tail and all, which someone may still want to look at or put back.
        sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
        return DataLossError(lost +
                             ". Start with --accept-data-loss to go on without them, or "
                             "put back the files that were lost");
      }
      DP_LOG_ERROR(
          "{}. Starting from the database as it is (--accept-data-loss); "
          "its marker is reset to it",
          lost);
    }
    // Open from here on, and the main file says so at once: a copy of it alone, taken while the
    // store runs, must not pass for a cleanly closed one.
    RETURN_IF_ERROR(InTransaction([&] { return SetMeta("closed_clean", 0); }));
    RETURN_IF_ERROR(Exec("PRAGMA wal_checkpoint(TRUNCATE)"));
    RETURN_IF_ERROR(WriteMarkAtomically(MarkPath(), mark_));
    mark_fd_ = ::open(MarkPath().c_str(), O_WRONLY | O_CLOEXEC);
    if (mark_fd_ < 0) return UnavailableError(Errno("cannot open " + MarkPath()));
    return Status::Ok();
  }

  Status SaveJob(const JobRecord& job) override {
    const std::string text = StoredRecordText(job);  // without the lock
    std::lock_guard<std::mutex> lock(mu_);
    // The documents are written only when they changed: a progress update must not rewrite
    // 8 MiB of graph.
    const WrittenDocuments::Needed needed = written_.ForSave(job);
    RETURN_IF_ERROR(InTransaction([&] { return SaveJobLocked(job, text, needed); }, &job));
    written_.Remember(job);
    return Status::Ok();
  }

  using JobStore::SaveProgress;
  // In batches (stored_job.h).
  Status SaveProgress(const std::vector<JobSnapshot>& jobs) override {
    const std::vector<std::string> texts = StoredRecordTexts(jobs);  // without the lock
    return InBatches(jobs.size(), kProgressJobsPerTransaction, [&](size_t begin, size_t end) {
      std::lock_guard<std::mutex> lock(mu_);
      const JobRecord* newest = nullptr;
      for (size_t i = begin; i < end; ++i) {
        if (!newest || jobs[i]->seq > newest->seq) newest = jobs[i].get();
      }
      RETURN_IF_ERROR(InTransaction(
          [&]() -> Status {
            for (size_t i = begin; i < end; ++i) {
              RETURN_IF_ERROR(SaveJobLocked(*jobs[i], texts[i], written_.ForSave(*jobs[i])));
            }
            return Status::Ok();
          },
          newest));
      for (size_t i = begin; i < end; ++i) written_.Remember(*jobs[i]);
      return Status::Ok();
    });
  }

  StatusOr<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_, (std::string(kSelectJobs) + " ORDER BY j.seq").c_str());
    if (!st.ok()) return Error("prepare load jobs");
    std::vector<JobRecord> jobs;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      ASSIGN_OR_RETURN(JobRecord job, JobOfRowLocked(&st));
      jobs.push_back(std::move(job));
    }
    if (rc != SQLITE_DONE) return Error("load jobs");
    return jobs;
  }

  StatusOr<JobRecord> LoadJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_, (std::string(kSelectJobs) + " WHERE j.id = ?").c_str());
    if (!st.ok()) return Error("prepare load job");
    st.Bind(1, job_id);
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_DONE) return NotFoundError("job " + job_id + " is not stored");
    if (rc != SQLITE_ROW) return Error("load job " + job_id);
    return JobOfRowLocked(&st);
  }

  Status DeleteJobs(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    return InTransaction([&]() -> Status {
      for (const char* sql :
           {"DELETE FROM jobs WHERE id = ?", "DELETE FROM plans WHERE job_id = ?",
            "DELETE FROM spec_graphs WHERE job_id = ?", "DELETE FROM logs WHERE job_id = ?"}) {
        Statement st(db_, sql);
        if (!st.ok()) return Error("prepare delete jobs");
        for (const std::string& id : job_ids) {
          sqlite3_reset(st.get());
          st.Bind(1, id);
          if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("delete job " + id);
        }
      }
      return Status::Ok();
    });
  }

  Status ReserveSeqs(int64_t bound) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      RETURN_IF_ERROR(InTransaction([&] { return SetMeta("seq_reserved", bound); }));
    }
    // Into the main file now: a reservation that lived only in the WAL would die with it. Other
    // writes go on meanwhile.
    return checkpointer_->CheckpointAll();
  }

  // Hands checkpoints to their own connection and thread; the last step of opening the store
  // (after it, nothing may touch the files as found: see CheckCommitsAndMarkOpen).
  Status StartCheckpointer() {
    ASSIGN_OR_RETURN(checkpointer_, SQLiteCheckpointer::Start(path_));
    std::lock_guard<std::mutex> lock(mu_);
    checkpointer_->Attach(db_);
    return Status::Ok();
  }

  StatusOr<int64_t> LoadSeqReservation() override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(const std::optional<int64_t> reserved, GetMeta("seq_reserved"));
    return reserved.value_or(0);
  }

  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lines->empty()) return Status::Ok();
    return InTransaction([&] { return AppendLocked(job_id, lines); });
  }

  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_,
                 "SELECT seq, time_ms, node_id, rank, line FROM logs WHERE job_id = ? AND seq > ? "
                 "ORDER BY seq LIMIT ?");
    if (!st.ok()) return Error("prepare read logs");
    st.Bind(1, job_id);
    st.Bind(2, after_seq);
    st.Bind(3, static_cast<int64_t>(limit > 0 ? limit : -1));
    return ReadRows(&st);
  }

  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_,
                 "SELECT seq, time_ms, node_id, rank, line FROM (SELECT * FROM logs WHERE job_id = "
                 "? ORDER BY seq DESC LIMIT ?) ORDER BY seq");
    if (!st.ok()) return Error("prepare tail logs");
    st.Bind(1, job_id);
    st.Bind(2, static_cast<int64_t>(count));
    return ReadRows(&st);
  }

  Status SaveProfile(const std::string& model_key, const std::string& device_type,
                     const std::string& profile_json) override {
    std::lock_guard<std::mutex> lock(mu_);
    return InTransaction([&] {
      Statement st(
          db_, "INSERT OR REPLACE INTO profiles(model_key, device_type, profile) VALUES(?, ?, ?)");
      if (!st.ok()) return Error("prepare save profile");
      st.Bind(1, model_key);
      st.Bind(2, device_type);
      st.Bind(3, profile_json);
      if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("save profile");
      return Status::Ok();
    });
  }

  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_, "SELECT profile FROM profiles WHERE model_key = ? AND device_type = ?");
    if (!st.ok()) return Error("prepare load profile");
    st.Bind(1, model_key);
    st.Bind(2, device_type);
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) return std::optional<std::string>(st.Text(0));
    if (rc != SQLITE_DONE) return Error("load profile");
    return std::optional<std::string>();
  }

  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string message = err ? err : "unknown error";
      sqlite3_free(err);
      return DiskFull() ? DiskFullError(message) : InternalError(std::string("sqlite: ") + message);
    }
    return Status::Ok();
  }

 private:
  // One write transaction: `body`'s statements all land, or none does, and the commit number
  // with them; once committed, the marker is advanced (`saved`: the job this write saved). A
  // failed COMMIT (a full disk) is rolled back too: SQLite may or may not have done so itself,
  // and a transaction left open would refuse every later BEGIN.
  Status InTransaction(const std::function<Status()>& body, const JobRecord* saved = nullptr) {
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    int64_t commit = 0;
    Status status = body();
    if (status.ok()) {
      StatusOr<int64_t> bumped = BumpCommit();
      if (bumped.ok()) commit = *bumped;
      status = bumped.status();
    }
    if (status.ok()) status = Exec("COMMIT");
    if (!status.ok() && !sqlite3_get_autocommit(db_)) {
      Status rolled_back = Exec("ROLLBACK");
      if (!rolled_back.ok()) DP_LOG_ERROR("sqlite: rollback failed: {}", rolled_back.ToString());
    }
    if (!status.ok()) return status;
    mark_.commit = commit;
    if (saved != nullptr && saved->seq >= mark_.job_seq) {
      mark_.job_seq = saved->seq;
      mark_.job_id = saved->id;
    }
    AdvanceMark();
    return Status::Ok();
  }

  // meta(commit_seq) + 1, in the open transaction; its new value. The statement runs at every
  // write, so it is prepared once.
  StatusOr<int64_t> BumpCommit() {
    if (!bump_) {
      bump_ = std::make_unique<Statement>(
          db_,
          "INSERT INTO meta(key, value) VALUES('commit_seq', 1) ON CONFLICT(key) DO UPDATE SET "
          "value = value + 1 RETURNING value");
    }
    if (!bump_->ok()) return Error("prepare commit number");
    sqlite3_reset(bump_->get());
    if (sqlite3_step(bump_->get()) != SQLITE_ROW) return Error("commit number");
    const int64_t commit = bump_->Int(0);
    if (sqlite3_step(bump_->get()) != SQLITE_DONE) return Error("commit number");
    return commit;
  }

  // Overwrites the marker with mark_ (no fsync: like a commit under synchronous=NORMAL, it is
  // meant to outlive the process, not a power loss). A failure is logged, not returned: the write
  // is committed, and a marker left behind the database only weakens the check at the next open.
  void AdvanceMark() {
    if (mark_fd_ < 0) return;  // still opening: the marker is written whole at the end
    const std::string text = FormatMark(mark_);
    if (::pwrite(mark_fd_, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size())) {
      mark_failing_ = false;
      return;
    }
    if (!mark_failing_) {
      DP_LOG_ERROR(
          "job store: {}; writes go on, but a lost write-ahead log will not be noticed "
          "at the next start",
          Errno("cannot update the commit marker " + MarkPath()));
    }
    mark_failing_ = true;
  }

  // Why the database is known or suspected to have lost acknowledged writes ("": it is not).
  // `unclean`: the database counts commits and was not closed cleanly.
  std::string DescribeLostCommits(bool unclean, bool wal_existed) {
    const std::string wal = path_ + "-wal";
    StatusOr<std::optional<CommitMark>> read = ReadMark(MarkPath());
    if (!read.ok() || !read->has_value()) {
      if (!unclean) {
        // The main file holds every write; the marker is rewritten from it.
        if (!read.ok()) DP_LOG_WARN("job store: {}; rewritten", read.status().message());
        return "";
      }
      const std::string marker =
          read.ok() ? "its commit marker " + MarkPath() + " is missing" : read.status().message();
      return "the job store " + path_ + " was not closed cleanly and " + marker +
             ": nothing tells whether acknowledged writes were lost with its write-ahead log " +
             wal + " (was the database copied or restored without its other files?)";
    }
    const CommitMark& acknowledged = **read;
    if (mark_.commit >= acknowledged.commit) return "";
    std::string message =
        "the job store " + path_ + " is behind its last acknowledged commit (commit " +
        std::to_string(acknowledged.commit) + ", found " + std::to_string(mark_.commit) +
        "): its write-ahead log " + wal +
        (wal_existed ? " is damaged or truncated"
                     : " is missing (or an older copy of the database was put back)") +
        "; " + std::to_string(acknowledged.commit - mark_.commit) +
        " acknowledged write(s) are lost";
    if (acknowledged.job_seq > mark_.job_seq) {
      message += ", among them the submission of every job " +
                 (mark_.job_id.empty() ? std::string() : "after " + mark_.job_id + " ") + "up to " +
                 acknowledged.job_id + " (seq " + std::to_string(mark_.job_seq + 1) + " to " +
                 std::to_string(acknowledged.job_seq) + ")";
    } else {
      message += " (state changes, progress or log lines of stored jobs)";
    }
    return message;
  }

  // The newest stored job into mark_.
  Status LoadNewestJob() {
    Statement st(db_, "SELECT seq, id FROM jobs ORDER BY seq DESC LIMIT 1");
    if (!st.ok()) return Error("prepare newest job");
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) {
      mark_.job_seq = st.Int(0);
      mark_.job_id = st.Text(1);
    } else if (rc != SQLITE_DONE) {
      return Error("newest job");
    }
    return Status::Ok();
  }

  StatusOr<std::optional<int64_t>> GetMeta(const std::string& key) {
    Statement st(db_, "SELECT value FROM meta WHERE key = ?");
    if (!st.ok()) return Error("prepare read " + key);
    st.Bind(1, key);
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) return std::optional<int64_t>(st.Int(0));
    if (rc != SQLITE_DONE) return Error("read " + key);
    return std::optional<int64_t>();
  }

  Status SetMeta(const std::string& key, int64_t value) {
    Statement st(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    if (!st.ok()) return Error("prepare write " + key);
    st.Bind(1, key);
    st.Bind(2, value);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("write " + key);
    return Status::Ok();
  }

  std::string MarkPath() const { return path_ + ".lastcommit"; }

  // A failed read at open: DATA_LOSS when SQLite found the file malformed (as a failed load is).
  Status Damaged(const Status& read) {
    if (read.ok()) return read;
    const int rc = last_error_ & 0xff;
    if (rc != SQLITE_CORRUPT && rc != SQLITE_NOTADB) return read;
    return DataLossError("job store " + path_ + " is damaged (" + read.message() +
                         "): restore it from a backup, or move it aside to start with no jobs");
  }
  Status Error(const std::string& what) {
    last_error_ = sqlite3_extended_errcode(db_);
    const std::string message = what + ": " + sqlite3_errmsg(db_);
    return DiskFull() ? DiskFullError(message) : InternalError("sqlite: " + message);
  }
  // SQLite could not grow the database or its write-ahead log (ENOSPC, or a quota). The write
  // is rolled back whole; the caller retries or answers the client.
  bool DiskFull() const { return (sqlite3_extended_errcode(db_) & 0xff) == SQLITE_FULL; }
  static Status DiskFullError(const std::string& message) {
    return ResourceExhaustedError("the coordinator's disk is full (" + message +
                                  "); nothing was written: free space in its --data-dir");
  }

  // A job and its documents: the columns of kSelectJobs.
  static constexpr const char* kSelectJobs =
      "SELECT j.id, j.record, p.graph, p.plan, s.graph FROM jobs j "
      "LEFT JOIN plans p ON p.job_id = j.id LEFT JOIN spec_graphs s ON s.job_id = j.id";
  StatusOr<JobRecord> JobOfRowLocked(Statement* st) {
    StoredJobRow row{st->Text(0), st->Text(1), st->Text(2), st->Text(3), std::nullopt};
    if (sqlite3_column_type(st->get(), 4) != SQLITE_NULL) row.spec_graph = st->Text(4);
    ASSIGN_OR_RETURN(JobRecord job, JobFromStoredRow(row));
    written_.Remember(job, row.spec_graph.has_value());
    return job;
  }

  // `text`: StoredRecordText(job).
  Status SaveJobLocked(const JobRecord& job, const std::string& text,
                       WrittenDocuments::Needed needed) {
    Statement st(db_, "INSERT OR REPLACE INTO jobs(id, seq, state, record) VALUES(?, ?, ?, ?)");
    if (!st.ok()) return Error("prepare save job");
    st.Bind(1, job.id);
    st.Bind(2, job.seq);
    st.Bind(3, std::string(StateName(job.state)));
    st.Bind(4, text);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("save job " + job.id);
    if (needed.spec_graph) {
      Statement graph(db_, job.spec.graph_json.empty()
                               ? "DELETE FROM spec_graphs WHERE job_id = ?"
                               : "INSERT OR REPLACE INTO spec_graphs(job_id, graph) VALUES(?, ?)");
      if (!graph.ok()) return Error("prepare save spec graph");
      graph.Bind(1, job.id);
      if (!job.spec.graph_json.empty()) graph.Bind(2, job.spec.graph_json);
      if (sqlite3_step(graph.get()) != SQLITE_DONE) return Error("save the graph of " + job.id);
    }
    if (!needed.plan) return Status::Ok();
    Statement plan(db_, "INSERT OR REPLACE INTO plans(job_id, graph, plan) VALUES(?, ?, ?)");
    if (!plan.ok()) return Error("prepare save plan");
    plan.Bind(1, job.id);
    plan.Bind(2, job.graph_json);
    plan.Bind(3, job.plan_json);
    if (sqlite3_step(plan.get()) != SQLITE_DONE) return Error("save plan of " + job.id);
    return Status::Ok();
  }

  Status AppendLocked(const std::string& job_id, std::vector<LogRecord>* lines) {
    Statement last(db_, "SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = ?");
    if (!last.ok()) return Error("prepare log seq");
    last.Bind(1, job_id);
    if (sqlite3_step(last.get()) != SQLITE_ROW) return Error("log seq");
    int64_t seq = last.Int(0);
    Statement st(db_,
                 "INSERT INTO logs(job_id, seq, time_ms, node_id, rank, line) VALUES(?, ?, ?, ?, "
                 "?, ?)");
    if (!st.ok()) return Error("prepare append log");
    for (LogRecord& line : *lines) {
      line.seq = ++seq;
      sqlite3_reset(st.get());
      st.Bind(1, job_id);
      st.Bind(2, line.seq);
      st.Bind(3, line.time_ms);
      st.Bind(4, line.node_id);
      st.Bind(5, static_cast<int64_t>(line.rank));
      st.Bind(6, line.line);
      if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("append log");
    }
    return Status::Ok();
  }

  StatusOr<std::vector<LogRecord>> ReadRows(Statement* st) {
    std::vector<LogRecord> out;
    int rc;
    while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
      LogRecord r;
      r.seq = st->Int(0);
      r.time_ms = st->Int(1);
      r.node_id = st->Text(2);
      r.rank = static_cast<int>(st->Int(3));
      r.line = st->Text(4);
      out.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return Error("read logs");
    return out;
  }

  std::mutex mu_;
  sqlite3* db_;
  const std::string path_;
  // The marker: what it says (kept in step with each commit), and the file, open once the store
  // has checked it (-1 before).
  CommitMark mark_;
  int mark_fd_ = -1;
  const int lock_fd_;
  bool mark_failing_ = false;
  int last_error_ = SQLITE_OK;
  std::unique_ptr<Statement> bump_;  // BumpCommit's statement, prepared at its first use
  WrittenDocuments written_;
  std::unique_ptr<SQLiteCheckpointer> checkpointer_;  // set once the store is open
};

// Takes `<path>.lock` (flock, exclusive) for one store at a time: a second coordinator on the
// same file would replace the commit marker under the first (which then closes "cleanly" over
// writes its marker never saw) and issue the same job ids. Returns the open lock file, which
// holds the pid of the coordinator that has it; FAILED_PRECONDITION naming that pid when another
// process holds it.
StatusOr<int> LockStore(const std::string& path) {
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return UnavailableError(Errno("cannot open the job store's lock " + lock_path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool held = errno == EWOULDBLOCK;
    const std::string why = Errno("cannot lock " + lock_path);
    char pid[32] = {};
    const ssize_t got = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (!held) return UnavailableError(why);
    std::string holder(pid, got > 0 ? static_cast<size_t>(got) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return FailedPreconditionError(
        "job store " + path + " is in use by another coordinator" +
        (holder.empty() ? "" : " (pid " + holder + ")") + ", which holds " + lock_path +
        ": one coordinator per store; stop that one first, or give this one another --data-dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    DP_LOG_WARN("job store: {}", Errno("cannot write the pid into " + lock_path));
  }
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<JobStore>> OpenSQLiteJobStore(const std::string& path,
                                                       const SQLiteStoreOptions& options) {
  std::error_code ec;
  // Before SQLite opens it: whether the log is there at all, for the message if commits are lost.
  const bool wal_existed = std::filesystem::exists(path + "-wal", ec);
  if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec) {
    return DataLossError("job store " + path +
                         " is empty (0 bytes): it was truncated or lost its contents. The "
                         "coordinator will not start empty over it; restore it from a backup, or "
                         "move it aside to start with no jobs");
  }
  ASSIGN_OR_RETURN(const int lock_fd, LockStore(path));
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    ::close(lock_fd);
    return UnavailableError("cannot open job store " + path + ": " + message);
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SQLiteJobStore>(db, path, lock_fd);
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL").WithContext(path));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL").WithContext(path));
  RETURN_IF_ERROR(store->Migrate().WithContext(path));
  RETURN_IF_ERROR(store->CheckCommitsAndMarkOpen(options, wal_existed));
  RETURN_IF_ERROR(store->StartCheckpointer().WithContext(path));
  DP_LOG_INFO("job store: sqlite {}", path);
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace deepool::coordinator
