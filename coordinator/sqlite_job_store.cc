// SQLiteJobStore: one database file, WAL journal, synchronous=NORMAL (a committed transaction
// survives a crash of this process; see docs/coordinator.md for the power-loss trade-off).
// Job records are stored as JSON next to the columns queries need; a job's graph and plan
// documents (large, written once per dispatch) live in their own table and are rewritten only
// when they change, so the frequent progress updates stay small writes.
// Job id reservations (see JobStore::ReserveSeqs) are checkpointed into the main file at once.
// Threading: one connection, guarded by mu_.
#include <sqlite3.h>

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>

#include "common/logging.h"
#include "coordinator/job_store.h"

namespace deepool::coordinator {
namespace {

constexpr const char* kSchema = R"sql(
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
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql";

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
  explicit SQLiteJobStore(sqlite3* db) : db_(db) {}
  ~SQLiteJobStore() override { sqlite3_close_v2(db_); }

  Status SaveJob(const JobRecord& job) override {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t plan_hash =
        std::hash<std::string>{}(job.graph_json) * 31 + std::hash<std::string>{}(job.plan_json);
    auto written = plan_hashes_.find(job.id);
    const bool write_plan = written == plan_hashes_.end() || written->second != plan_hash;
    RETURN_IF_ERROR(InTransaction([&] { return SaveJobLocked(job, write_plan); }));
    plan_hashes_[job.id] = plan_hash;
    return Status::Ok();
  }

  StatusOr<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(
        db_,
        "SELECT j.id, j.record, p.graph, p.plan FROM jobs j LEFT JOIN plans p ON p.job_id = j.id "
        "ORDER BY j.seq");
    if (!st.ok()) return Error("prepare load jobs");
    std::vector<JobRecord> jobs;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const std::string id = st.Text(0);
      auto doc = nlohmann::json::parse(st.Text(1), nullptr, false);
      if (doc.is_discarded()) return DataLossError("the stored record of " + id + " is not JSON");
      StatusOr<JobRecord> loaded = JobRecordFromJson(doc);
      if (!loaded.ok()) {
        return DataLossError("the stored record of " + id + " is damaged: " +
                             loaded.status().message());
      }
      JobRecord job = std::move(*loaded);
      job.graph_json = st.Text(2);
      job.plan_json = st.Text(3);
      plan_hashes_[job.id] =
          std::hash<std::string>{}(job.graph_json) * 31 + std::hash<std::string>{}(job.plan_json);
      jobs.push_back(std::move(job));
    }
    if (rc != SQLITE_DONE) return Error("load jobs");
    return jobs;
  }

  Status ReserveSeqs(int64_t bound) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_,
                 "INSERT OR REPLACE INTO meta(key, value) VALUES('seq_reserved', ?)");
    if (!st.ok()) return Error("prepare reserve job ids");
    st.Bind(1, bound);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("reserve job ids");
    // Into the main file now: a reservation that lived only in the WAL would die with it.
    return Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }

  StatusOr<int64_t> LoadSeqReservation() override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement st(db_, "SELECT value FROM meta WHERE key = 'seq_reserved'");
    if (!st.ok()) return Error("prepare load job id reservation");
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) return st.Int(0);
    if (rc != SQLITE_DONE) return Error("load job id reservation");
    return int64_t{0};
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
    Statement st(
        db_, "INSERT OR REPLACE INTO profiles(model_key, device_type, profile) VALUES(?, ?, ?)");
    if (!st.ok()) return Error("prepare save profile");
    st.Bind(1, model_key);
    st.Bind(2, device_type);
    st.Bind(3, profile_json);
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("save profile");
    return Status::Ok();
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
  // One write transaction: `body`'s statements all land, or none does. A failed COMMIT (a full
  // disk) is rolled back too: SQLite may or may not have done so itself, and a transaction left
  // open would refuse every later BEGIN.
  Status InTransaction(const std::function<Status()>& body) {
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status status = body();
    if (status.ok()) status = Exec("COMMIT");
    if (!status.ok() && !sqlite3_get_autocommit(db_)) {
      Status rolled_back = Exec("ROLLBACK");
      if (!rolled_back.ok()) DP_LOG_ERROR("sqlite: rollback failed: {}", rolled_back.ToString());
    }
    return status;
  }
  Status Error(const std::string& what) {
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

  Status SaveJobLocked(const JobRecord& job, bool write_plan) {
    Statement st(db_, "INSERT OR REPLACE INTO jobs(id, seq, state, record) VALUES(?, ?, ?, ?)");
    if (!st.ok()) return Error("prepare save job");
    st.Bind(1, job.id);
    st.Bind(2, job.seq);
    st.Bind(3, std::string(StateName(job.state)));
    st.Bind(4, JobRecordToJson(job, /*include_plan=*/false).dump());
    if (sqlite3_step(st.get()) != SQLITE_DONE) return Error("save job " + job.id);
    if (!write_plan) return Status::Ok();
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
  // Per job, a hash of the graph and plan last written, to skip rewriting them.
  std::map<std::string, size_t> plan_hashes_;
};

}  // namespace

StatusOr<std::unique_ptr<JobStore>> OpenSQLiteJobStore(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec) {
    return DataLossError("job store " + path +
                         " is empty (0 bytes): it was truncated or lost its contents. The "
                         "coordinator will not start empty over it; restore it from a backup, or "
                         "move it aside to start with no jobs");
  }
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return UnavailableError("cannot open job store " + path + ": " + message);
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SQLiteJobStore>(db);
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL").WithContext(path));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL").WithContext(path));
  RETURN_IF_ERROR(store->Exec(kSchema).WithContext(path));
  DP_LOG_INFO("job store: sqlite {}", path);
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace deepool::coordinator
