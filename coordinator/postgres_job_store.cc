// PostgresJobStore: the coordinator's state in a PostgreSQL database (--store postgresql://...),
// so that it outlives the coordinator's machine. The rows are SQLite's (stored_job.h); log lines
// are BYTEA, since a training process may print bytes that are not UTF-8. Every write is one
// transaction, committed before the call returns (as durable as the server's synchronous_commit
// makes it), except progress (SaveProgress) and log lines, whose commits do not wait for the
// server's WAL flush. Several coordinators may share one database: the leader lease
// (leader_lease.h, a row of it) decides which one serves, and every write of a store that took the
// lease checks its token in the same transaction. The schema steps run under an advisory lock. A
// lost connection (the server restarted, a network cut) fails the call UNAVAILABLE, after one more
// try on a fresh connection for the calls that may safely run twice: the JobManager retries its
// writes, so the coordinator waits for the database and goes on. A COMMIT cut off by the connection
// may have landed; every write is an upsert of whole rows except a log append, which may then store
// its lines twice.
// Threading: one connection, guarded by mu_.
#include <libpq-fe.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>

#include "common/logging.h"
#include "coordinator/job_store.h"
#include "coordinator/leader_lease.h"
#include "coordinator/stored_job.h"

namespace deepool::coordinator {
namespace {

// Created first, outside the versioned steps: it records their number.
constexpr const char* kMetaTable =
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL)";

// Taken while the schema steps run, so two coordinators starting on one new database do not
// both create its tables.
constexpr const char* kSchemaLock = "SELECT pg_advisory_xact_lock(7234652018375910401)";

// The schema, step by step (stored_job.h). Never edit a step that shipped: add one.
const std::vector<SchemaStep>& SchemaSteps() {
  static const std::vector<SchemaStep> steps = {
      {1, "jobs, plans, inline graphs, logs and profiles", R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  seq BIGINT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX jobs_by_seq ON jobs(seq);
CREATE TABLE plans (
  job_id TEXT PRIMARY KEY,
  graph TEXT NOT NULL,
  plan TEXT NOT NULL
);
CREATE TABLE spec_graphs (
  job_id TEXT PRIMARY KEY,
  graph TEXT NOT NULL
);
CREATE TABLE logs (
  job_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  time_ms BIGINT NOT NULL,
  node_id TEXT NOT NULL,
  rank INTEGER NOT NULL,
  line BYTEA NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE profiles (
  model_key TEXT NOT NULL,
  device_type TEXT NOT NULL,
  profile TEXT NOT NULL,
  PRIMARY KEY (model_key, device_type)
);
)sql"},
      {2, "the leader lease (leader_lease.h)", R"sql(
CREATE TABLE leader (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL,
  token BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL
);
INSERT INTO leader(id, holder, token, expires_at) VALUES (1, '', 0, 'epoch');
)sql"}};
  return steps;
}

// Log lines per INSERT (six parameters each; PostgreSQL takes at most 65,535 per statement).
constexpr size_t kLinesPerInsert = 1000;

struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// A statement's parameters, sent as text except BYTEA ones (binary: any bytes pass).
class Params {
 public:
  Params& Text(std::string value) { return Add(std::move(value), 0); }
  Params& Int(int64_t value) { return Add(std::to_string(value), 0); }
  Params& Bytes(std::string value) { return Add(std::move(value), 1); }
  Params& Null() {
    Add("", 0);
    null_.back() = true;
    return *this;
  }
  int size() const { return static_cast<int>(values_.size()); }
  // The arrays libpq reads; valid while this object lives unchanged.
  const char* const* values() {
    pointers_.clear();
    for (size_t i = 0; i < values_.size(); ++i) {
      pointers_.push_back(null_[i] ? nullptr : values_[i].c_str());
    }
    return pointers_.data();
  }
  const int* lengths() {
    lengths_.clear();
    for (const std::string& v : values_) lengths_.push_back(static_cast<int>(v.size()));
    return lengths_.data();
  }
  const int* formats() const { return formats_.data(); }

 private:
  Params& Add(std::string value, int format) {
    values_.push_back(std::move(value));
    formats_.push_back(format);
    null_.push_back(false);
    return *this;
  }
  std::vector<std::string> values_;
  std::vector<int> formats_;
  std::vector<bool> null_;
  std::vector<const char*> pointers_;
  std::vector<int> lengths_;
};

std::string FirstLine(const char* text) {
  std::string line = text ? text : "";
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "unknown error" : line;
}

// "database D on H:P as U" (never the password).
std::string Describe(const PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  const char* user = PQuser(conn);
  return std::string("PostgreSQL database ") + (db ? db : "?") + " on " +
         (host && *host ? host : "the default host") +
         (port && *port ? ":" + std::string(port) : "") + " as " + (user ? user : "?");
}

class PostgresJobStore final : public JobStore, public LeaderLease {
 public:
  explicit PostgresJobStore(PGconn* conn) : conn_(conn), where_(Describe(conn)) {
    PQsetNoticeProcessor(conn_, &PostgresJobStore::OnNotice, nullptr);
  }
  ~PostgresJobStore() override { PQfinish(conn_); }

  const std::string& where() const { return where_; }
  LeaderLease* lease() override { return this; }

  StatusOr<LeaseHolder> TryAcquire(const std::string& holder,
                                   std::chrono::milliseconds duration) override {
    std::lock_guard<std::mutex> lock(mu_);
    LeaseHolder after;
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      // A new token when it changes hands; the same when the holder extends it.
      ASSIGN_OR_RETURN(
          Result taken,
          Query("UPDATE leader SET token = CASE WHEN holder = $1 THEN token ELSE token + 1 END, "
                "holder = $1, expires_at = now() + ($2::bigint * interval '1 millisecond') "
                "WHERE id = 1 AND (holder = $1 OR expires_at <= now()) RETURNING token",
                std::move(Params().Text(holder).Int(duration.count())), "take the leader lease"));
      if (PQntuples(taken.get()) == 1) {
        after = {holder, IntValue(taken.get(), 0, 0), duration};
        return Status::Ok();
      }
      ASSIGN_OR_RETURN(after, ReadLeaderLocked());
      return Status::Ok();
    }));
    if (after.holder == holder) fence_ = after;
    return after;
  }

  Status Release() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fence_) return Status::Ok();
    return Retrying([&] {
      return Query(
                 "UPDATE leader SET expires_at = now() WHERE id = 1 AND holder = $1 AND "
                 "token = $2",
                 std::move(Params().Text(fence_->holder).Int(fence_->token)),
                 "release the leader lease")
          .status();
    });
  }

  Status Renew(std::chrono::milliseconds duration) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fence_) return FailedPreconditionError("this coordinator never took the leader lease");
    return Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(
          Result renewed,
          Query("UPDATE leader SET expires_at = now() + ($3::bigint * interval '1 millisecond') "
                "WHERE id = 1 AND holder = $1 AND token = $2",
                std::move(Params().Text(fence_->holder).Int(fence_->token).Int(duration.count())),
                "renew the leader lease"));
      if (std::string(PQcmdTuples(renewed.get())) == "1") return Status::Ok();
      return DeposedLocked();
    });
  }

  // Brings the schema to its newest step: the missing steps and their number in one transaction,
  // under the schema lock.
  Status Migrate() {
    std::lock_guard<std::mutex> lock(mu_);
    return InTransaction([&]() -> Status {
      RETURN_IF_ERROR(Exec(kSchemaLock, "lock the schema"));
      RETURN_IF_ERROR(Exec(kMetaTable, "create the meta table"));
      ASSIGN_OR_RETURN(const std::optional<int64_t> current, GetMeta("schema_version"));
      ASSIGN_OR_RETURN(const std::vector<SchemaStep> steps,
                       SchemaStepsToApply("the job store", current.value_or(0), SchemaSteps()));
      for (const SchemaStep& step : steps) {
        RETURN_IF_ERROR(Exec(step.sql, "schema step " + std::to_string(step.version)));
        DP_LOG_INFO("job store: schema step {} ({})", step.version, step.what);
      }
      if (steps.empty()) return Status::Ok();
      return SetMeta("schema_version", steps.back().version);
    });
  }

  Status SaveJob(const JobRecord& job) override {
    const std::string text = StoredRecordText(job);  // without the lock
    std::lock_guard<std::mutex> lock(mu_);
    return SaveLocked(job, text, /*flushed=*/true);
  }

  Status SaveProgress(const JobRecord& job) override {
    const std::string text = StoredRecordText(job);
    std::lock_guard<std::mutex> lock(mu_);
    return SaveLocked(job, text, /*flushed=*/false);
  }

  // In batches (stored_job.h), each a transaction of a handful of round trips: the records in
  // one statement; the few with new documents whole, and then the commit is flushed.
  Status SaveProgress(const std::vector<JobSnapshot>& jobs) override {
    const std::vector<std::string> texts = StoredRecordTexts(jobs);  // without the lock
    return InBatches(jobs.size(), kProgressJobsPerTransaction, [&](size_t begin, size_t end) {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<size_t> records;
      std::vector<std::pair<size_t, WrittenDocuments::Needed>> with_documents;
      for (size_t i = begin; i < end; ++i) {
        const WrittenDocuments::Needed needed = written_.ForSave(*jobs[i]);
        if (needed.plan || needed.spec_graph) {
          with_documents.emplace_back(i, needed);
        } else {
          records.push_back(i);
        }
      }
      RETURN_IF_ERROR(Retrying([&] {
        return InWriteTransaction([&]() -> Status {
          if (with_documents.empty()) {
            RETURN_IF_ERROR(Exec("SET LOCAL synchronous_commit TO OFF", "relax the commit"));
          }
          for (const auto& [i, needed] : with_documents) {
            RETURN_IF_ERROR(SaveJobLocked(*jobs[i], texts[i], needed));
          }
          return SaveRecordsLocked(jobs, texts, records);
        });
      }));
      for (size_t i = begin; i < end; ++i) written_.Remember(*jobs[i]);
      return Status::Ok();
    });
  }

  StatusOr<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<JobRecord> jobs;
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      jobs.clear();
      ASSIGN_OR_RETURN(Result rows,
                       Query(std::string(kSelectJobs) + " ORDER BY j.seq", Params(), "load jobs"));
      for (int i = 0; i < PQntuples(rows.get()); ++i) {
        ASSIGN_OR_RETURN(JobRecord job, JobOfRowLocked(rows.get(), i));
        jobs.push_back(std::move(job));
      }
      return Status::Ok();
    }));
    return jobs;
  }

  StatusOr<JobRecord> LoadJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<JobRecord> job = NotFoundError("job " + job_id + " is not stored");
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(Result rows, Query(std::string(kSelectJobs) + " WHERE j.id = $1",
                                          std::move(Params().Text(job_id)), "load job " + job_id));
      if (PQntuples(rows.get()) == 0) return Status::Ok();
      job = JobOfRowLocked(rows.get(), 0);
      return Status::Ok();
    }));
    return job;
  }

  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lines->empty()) return Status::Ok();
    RETURN_IF_ERROR(Reconnected());
    // Committed asynchronously, as progress is: at a hundred appends a second each waited for the
    // server's WAL flush on the one connection, and submissions behind them (holds of up to 1 s
    // measured under bench/capacity).
    return InWriteTransaction([&]() -> Status {  // not retried: see top
      RETURN_IF_ERROR(Exec("SET LOCAL synchronous_commit TO OFF", "relax the commit"));
      return AppendLocked(job_id, lines);
    });
  }

  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) override {
    Params params;
    params.Text(job_id).Int(after_seq);
    if (limit > 0) {
      params.Int(limit);
    } else {
      params.Null();  // LIMIT NULL: all
    }
    return LogQuery(
        "SELECT seq, time_ms, node_id, rank, line FROM logs WHERE job_id = $1 AND seq > $2 "
        "ORDER BY seq LIMIT $3",
        std::move(params));
  }

  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) override {
    return LogQuery(
        "SELECT seq, time_ms, node_id, rank, line FROM (SELECT * FROM logs WHERE job_id = $1 "
        "ORDER BY seq DESC LIMIT $2) AS tail ORDER BY seq",
        std::move(Params().Text(job_id).Int(count)));
  }

  Status SaveProfile(const std::string& model_key, const std::string& device_type,
                     const std::string& profile_json) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Retrying([&] {
      return InWriteTransaction([&] {
        return Query(
                   "INSERT INTO profiles(model_key, device_type, profile) VALUES($1, $2, $3) "
                   "ON CONFLICT (model_key, device_type) DO UPDATE SET profile = EXCLUDED.profile",
                   std::move(Params().Text(model_key).Text(device_type).Text(profile_json)),
                   "save profile")
            .status();
      });
    });
  }

  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<std::string> profile;
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(
          Result rows,
          Query("SELECT profile FROM profiles WHERE model_key = $1 AND device_type = $2",
                std::move(Params().Text(model_key).Text(device_type)), "load profile"));
      if (PQntuples(rows.get()) > 0) profile = Value(rows.get(), 0, 0);
      return Status::Ok();
    }));
    return profile;
  }

  Status ReserveSeqs(int64_t bound) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Retrying(
        [&] { return InWriteTransaction([&] { return SetMeta("seq_reserved", bound); }); });
  }

  StatusOr<int64_t> LoadSeqReservation() override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t reserved = 0;
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(const std::optional<int64_t> value, GetMeta("seq_reserved"));
      reserved = value.value_or(0);
      return Status::Ok();
    }));
    return reserved;
  }

 private:
  static void OnNotice(void*, const char* message) {
    DP_LOG_DEBUG("job store: postgresql: {}", FirstLine(message));
  }

  // A connection lost since the last call is made again (once per call).
  Status Reconnected() {
    if (PQstatus(conn_) == CONNECTION_OK) return Status::Ok();
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      return UnavailableError("the job store's " + where_ +
                              " is unreachable: " + FirstLine(PQerrorMessage(conn_)));
    }
    DP_LOG_WARN("job store: connected again to {}", where_);
    return Status::Ok();
  }

  // `call`, and once more on a fresh connection when the connection was lost under it. Only for
  // calls that may run twice.
  Status Retrying(const std::function<Status()>& call) {
    RETURN_IF_ERROR(Reconnected());
    Status status = call();
    if (status.ok() || PQstatus(conn_) == CONNECTION_OK) return status;
    RETURN_IF_ERROR(Reconnected());
    return call();
  }

  // Who holds the lease now.
  StatusOr<LeaseHolder> ReadLeaderLocked() {
    ASSIGN_OR_RETURN(Result rows,
                     Query("SELECT holder, token, (EXTRACT(EPOCH FROM (expires_at - now())) * "
                           "1000)::bigint FROM leader WHERE id = 1",
                           Params(), "read the leader lease"));
    if (PQntuples(rows.get()) != 1) return DataLossError("the leader lease row is missing");
    return LeaseHolder{Value(rows.get(), 0, 0), IntValue(rows.get(), 0, 1),
                       std::chrono::milliseconds(IntValue(rows.get(), 0, 2))};
  }

  // The error of a write or renewal made after another coordinator took the lease.
  Status DeposedLocked() {
    StatusOr<LeaseHolder> now = ReadLeaderLocked();
    const std::string who = now.ok() ? now->holder + " (token " + std::to_string(now->token) + ")"
                                     : "another coordinator";
    return FailedPreconditionError("this coordinator (" + fence_->holder + ", token " +
                                   std::to_string(fence_->token) + ") no longer leads: " + who +
                                   " took the leader lease; nothing was written");
  }

  // In a write's transaction, first: the lease is still this store's (FOR SHARE: a takeover
  // waits for this transaction to end, or this one sees the new holder). Nothing to check for a
  // store that never took the lease (one coordinator alone).
  Status CheckFenceLocked() {
    if (!fence_) return Status::Ok();
    ASSIGN_OR_RETURN(Result rows,
                     Query("SELECT 1 FROM leader WHERE id = 1 AND holder = $1 AND token = $2 "
                           "FOR SHARE",
                           std::move(Params().Text(fence_->holder).Int(fence_->token)),
                           "check the leader lease"));
    if (PQntuples(rows.get()) == 1) return Status::Ok();
    return DeposedLocked();
  }

  // A write: `body` in one transaction, after the fence check.
  Status InWriteTransaction(const std::function<Status()>& body) {
    return InTransaction([&]() -> Status {
      RETURN_IF_ERROR(CheckFenceLocked());
      return body();
    });
  }

  // One transaction: `body`'s statements all land, or none does.
  Status InTransaction(const std::function<Status()>& body) {
    RETURN_IF_ERROR(Exec("BEGIN", "begin"));
    Status status = body();
    if (status.ok()) status = Exec("COMMIT", "commit");
    if (!status.ok() && PQstatus(conn_) == CONNECTION_OK &&
        PQtransactionStatus(conn_) != PQTRANS_IDLE) {
      Result rolled_back(PQexec(conn_, "ROLLBACK"));
      if (PQresultStatus(rolled_back.get()) != PGRES_COMMAND_OK) {
        DP_LOG_ERROR("job store: rollback failed: {}", FirstLine(PQerrorMessage(conn_)));
      }
    }
    return status;
  }

  // Statements without parameters (several may be in `sql`).
  Status Exec(const char* sql, const std::string& what) {
    Result result(PQexec(conn_, sql));
    return Check(result.get(), what);
  }

  StatusOr<Result> Query(const std::string& sql, Params params, const std::string& what) {
    Result result(PQexecParams(conn_, sql.c_str(), params.size(), /*paramTypes=*/nullptr,
                               params.values(), params.lengths(), params.formats(),
                               /*resultFormat=text*/ 0));
    RETURN_IF_ERROR(Check(result.get(), what));
    return result;
  }

  Status Check(const PGresult* result, const std::string& what) {
    const ExecStatusType status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return Status::Ok();
    const char* code = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    const std::string sqlstate = code ? code : "";
    const std::string message =
        what + ": " + FirstLine(result ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
    if (PQstatus(conn_) != CONNECTION_OK || sqlstate.rfind("08", 0) == 0 ||
        sqlstate.rfind("57P", 0) == 0) {
      return UnavailableError("the job store's " + where_ + " is unreachable (" + message +
                              "); the coordinator tries again");
    }
    if (sqlstate == "53100") {
      return ResourceExhaustedError("the job store's PostgreSQL server is out of disk (" + message +
                                    "); nothing was written");
    }
    if (sqlstate == "40001" || sqlstate == "40P01") return UnavailableError(message);
    return InternalError("postgresql: " + message);
  }

  static std::string Value(const PGresult* rows, int row, int col) {
    return std::string(PQgetvalue(rows, row, col),
                       static_cast<size_t>(PQgetlength(rows, row, col)));
  }
  static int64_t IntValue(const PGresult* rows, int row, int col) {
    return std::strtoll(PQgetvalue(rows, row, col), nullptr, 10);
  }

  StatusOr<std::optional<int64_t>> GetMeta(const std::string& key) {
    ASSIGN_OR_RETURN(Result rows, Query("SELECT value FROM meta WHERE key = $1",
                                        std::move(Params().Text(key)), "read " + key));
    if (PQntuples(rows.get()) == 0) return std::optional<int64_t>();
    return std::optional<int64_t>(IntValue(rows.get(), 0, 0));
  }

  Status SetMeta(const std::string& key, int64_t value) {
    return Query(
               "INSERT INTO meta(key, value) VALUES($1, $2) ON CONFLICT (key) DO UPDATE SET value "
               "= EXCLUDED.value",
               std::move(Params().Text(key).Int(value)), "write " + key)
        .status();
  }

  // A job and its documents: the columns of kSelectJobs.
  static constexpr const char* kSelectJobs =
      "SELECT j.id, j.record, p.graph, p.plan, s.graph FROM jobs j "
      "LEFT JOIN plans p ON p.job_id = j.id LEFT JOIN spec_graphs s ON s.job_id = j.id";
  StatusOr<JobRecord> JobOfRowLocked(const PGresult* rows, int i) {
    StoredJobRow row{Value(rows, i, 0), Value(rows, i, 1), Value(rows, i, 2), Value(rows, i, 3),
                     std::nullopt};
    if (!PQgetisnull(rows, i, 4)) row.spec_graph = Value(rows, i, 4);
    ASSIGN_OR_RETURN(JobRecord job, JobFromStoredRow(row));
    written_.Remember(job, row.spec_graph.has_value());
    return job;
  }

  // The records of jobs[i] for each i of `which` (texts[i]: StoredRecordText of it), in one
  // upsert.
  Status SaveRecordsLocked(const std::vector<JobSnapshot>& jobs,
                           const std::vector<std::string>& texts,
                           const std::vector<size_t>& which) {
    if (which.empty()) return Status::Ok();
    std::string sql = "INSERT INTO jobs(id, seq, state, record) VALUES ";
    Params params;
    for (size_t i : which) {
      const int first = params.size() + 1;
      if (first > 1) sql += ", ";
      sql += "($" + std::to_string(first) + ", $" + std::to_string(first + 1) + ", $" +
             std::to_string(first + 2) + ", $" + std::to_string(first + 3) + ")";
      params.Text(jobs[i]->id)
          .Int(jobs[i]->seq)
          .Text(std::string(StateName(jobs[i]->state)))
          .Text(texts[i]);
    }
    sql +=
        " ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, state = EXCLUDED.state, record = "
        "EXCLUDED.record";
    return Query(sql, std::move(params),
                 "save the progress of " + std::to_string(which.size()) + " jobs")
        .status();
  }

  // `text`: StoredRecordText(job).
  Status SaveRecordLocked(const JobRecord& job, const std::string& text) {
    return Query(
               "INSERT INTO jobs(id, seq, state, record) VALUES($1, $2, $3, $4) ON CONFLICT (id) "
               "DO UPDATE SET seq = EXCLUDED.seq, state = EXCLUDED.state, record = "
               "EXCLUDED.record",
               std::move(Params()
                             .Text(job.id)
                             .Int(job.seq)
                             .Text(std::string(StateName(job.state)))
                             .Text(text)),
               "save job " + job.id)
        .status();
  }

  // flushed false: an asynchronous commit, which does not wait for the server's WAL flush (an
  // fsync; at a thousand running jobs those waits were most of the job table's lock time). A
  // save that writes documents is always flushed: written_ must not count documents whose
  // commit a server crash could still lose.
  Status SaveLocked(const JobRecord& job, const std::string& text, bool flushed) {
    // The documents are written only when they changed: a progress update must not rewrite
    // 8 MiB of graph, and is then a single statement.
    const WrittenDocuments::Needed needed = written_.ForSave(job);
    if (needed.plan || needed.spec_graph) flushed = true;
    RETURN_IF_ERROR(Retrying([&] {
      if (flushed && !needed.plan && !needed.spec_graph && !fence_) {
        return SaveRecordLocked(job, text);
      }
      return InWriteTransaction([&] {
        if (!flushed) {
          RETURN_IF_ERROR(Exec("SET LOCAL synchronous_commit TO OFF", "relax the commit"));
        }
        return SaveJobLocked(job, text, needed);
      });
    }));
    written_.Remember(job);
    return Status::Ok();
  }

  Status SaveJobLocked(const JobRecord& job, const std::string& text,
                       WrittenDocuments::Needed needed) {
    RETURN_IF_ERROR(SaveRecordLocked(job, text));
    if (needed.spec_graph) {
      if (job.spec.graph_json.empty()) {
        RETURN_IF_ERROR(Query("DELETE FROM spec_graphs WHERE job_id = $1",
                              std::move(Params().Text(job.id)), "save the graph of " + job.id)
                            .status());
      } else {
        RETURN_IF_ERROR(Query("INSERT INTO spec_graphs(job_id, graph) VALUES($1, $2) ON "
                              "CONFLICT (job_id) DO UPDATE SET graph = EXCLUDED.graph",
                              std::move(Params().Text(job.id).Text(job.spec.graph_json)),
                              "save the graph of " + job.id)
                            .status());
      }
    }
    if (!needed.plan) return Status::Ok();
    return Query(
               "INSERT INTO plans(job_id, graph, plan) VALUES($1, $2, $3) ON CONFLICT (job_id) DO "
               "UPDATE SET graph = EXCLUDED.graph, plan = EXCLUDED.plan",
               std::move(Params().Text(job.id).Text(job.graph_json).Text(job.plan_json)),
               "save plan of " + job.id)
        .status();
  }

  Status AppendLocked(const std::string& job_id, std::vector<LogRecord>* lines) {
    ASSIGN_OR_RETURN(Result last, Query("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = $1",
                                        std::move(Params().Text(job_id)), "log seq"));
    int64_t seq = IntValue(last.get(), 0, 0);
    for (size_t begin = 0; begin < lines->size(); begin += kLinesPerInsert) {
      const size_t end = std::min(lines->size(), begin + kLinesPerInsert);
      std::string sql = "INSERT INTO logs(job_id, seq, time_ms, node_id, rank, line) VALUES ";
      Params params;
      for (size_t i = begin; i < end; ++i) {
        LogRecord& line = (*lines)[i];
        line.seq = ++seq;
        const int first = params.size() + 1;
        if (i > begin) sql += ", ";
        sql += "(";
        for (int p = 0; p < 6; ++p) sql += (p ? ", $" : "$") + std::to_string(first + p);
        sql += ")";
        params.Text(job_id)
            .Int(line.seq)
            .Int(line.time_ms)
            .Text(line.node_id)
            .Int(line.rank)
            .Bytes(line.line);
      }
      RETURN_IF_ERROR(Query(sql, std::move(params), "append log").status());
    }
    return Status::Ok();
  }

  StatusOr<std::vector<LogRecord>> LogQuery(const std::string& sql, Params params) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<LogRecord> out;
    RETURN_IF_ERROR(Retrying([&]() -> Status {
      out.clear();
      ASSIGN_OR_RETURN(Result rows, Query(sql, params, "read logs"));
      for (int i = 0; i < PQntuples(rows.get()); ++i) {
        LogRecord r;
        r.seq = IntValue(rows.get(), i, 0);
        r.time_ms = IntValue(rows.get(), i, 1);
        r.node_id = Value(rows.get(), i, 2);
        r.rank = static_cast<int>(IntValue(rows.get(), i, 3));
        size_t length = 0;
        unsigned char* bytes = PQunescapeBytea(
            reinterpret_cast<const unsigned char*>(PQgetvalue(rows.get(), i, 4)), &length);
        if (bytes == nullptr) return InternalError("postgresql: out of memory reading a log line");
        r.line.assign(reinterpret_cast<const char*>(bytes), length);
        PQfreemem(bytes);
        out.push_back(std::move(r));
      }
      return Status::Ok();
    }));
    return out;
  }

  std::mutex mu_;
  PGconn* conn_;
  const std::string where_;
  WrittenDocuments written_;
  std::optional<LeaseHolder> fence_;  // the lease this store took, checked by every write
};

}  // namespace

bool IsPostgresUri(const std::string& store) {
  return store.rfind("postgresql://", 0) == 0 || store.rfind("postgres://", 0) == 0;
}

StatusOr<std::unique_ptr<JobStore>> OpenPostgresJobStore(const std::string& uri) {
  // Defaults first: what the URI says overrides them. A bounded connect, so that a call made
  // while the server is unreachable cannot hold the store for minutes.
  const char* keywords[] = {"connect_timeout", "fallback_application_name", "dbname", nullptr};
  const char* values[] = {"10", "deepool-coordinator", uri.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return UnavailableError("job store: out of memory connecting to PostgreSQL");
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = "cannot connect to the job store's " + Describe(conn) + ": " +
                                FirstLine(PQerrorMessage(conn));
    PQfinish(conn);
    return UnavailableError(message);
  }
  auto store = std::make_unique<PostgresJobStore>(conn);
  RETURN_IF_ERROR(store->Migrate().WithContext(store->where()));
  DP_LOG_INFO("job store: {}", store->where());
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace deepool::coordinator
