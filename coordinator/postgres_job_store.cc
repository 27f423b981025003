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
// its lines twice, and so is tried again only when the connection was lost before its COMMIT.
// Threading: calls run side by side, each on a connection of its own from a pool
// (postgres_connection.h), so a submission does not queue behind a progress batch or a log
// append. Log appends have two further connections, one append at a time on each, a job's always
// on the same one: its next line number is read from its log, so two appends to one log must not
// interleave. The JobManager orders the writes of each job (one store write of a job at a time),
// which the pool keeps.
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>

#include "common/logging.h"
#include "coordinator/job_store.h"
#include "coordinator/leader_lease.h"
#include "coordinator/postgres_connection.h"
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

// A PostgreSQL array literal of `values` (text[]), each quoted, for one `= ANY($1)` parameter.
std::string TextArray(const std::vector<std::string>& values) {
  std::string out = "{";
  for (const std::string& value : values) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char ch : value) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    out += '"';
  }
  return out + "}";
}

// Log lines per INSERT (six parameters each; PostgreSQL takes at most 65,535 per statement).
constexpr size_t kLinesPerInsert = 1000;

// Connections for everything but log appends: enough that a submission finds one free while a
// progress batch, a state change and a read are in flight (with one, submissions waited
// 50-170 ms for it under bench/capacity while each call held it 0.5-5 ms); few enough that
// a standby coordinator or two stay far below the server's default 100 connections.
constexpr int kPooledConnections = 4;
// Connections for log appends, each one append at a time, a job's always on the same one (its
// next line number is read from its log). A hundred appends a second of six round trips each
// kept one busy when the server was short of CPU.
constexpr int kLogConnections = 2;

using postgres::Connection;
using postgres::ConnectionPool;
using postgres::IntValue;
using postgres::Params;
using postgres::Result;
using postgres::Value;

class PostgresJobStore final : public JobStore, public LeaderLease {
 public:
  PostgresJobStore(std::vector<std::unique_ptr<Connection>> pooled,
                   std::vector<std::unique_ptr<Connection>> for_logs)
      : where_(pooled.front()->where()), pool_(std::move(pooled)) {
    for (std::unique_ptr<Connection>& connection : for_logs) {
      std::vector<std::unique_ptr<Connection>> one;
      one.push_back(std::move(connection));
      logs_.push_back(std::make_unique<ConnectionPool>(std::move(one)));
    }
  }

  const std::string& where() const { return where_; }
  LeaderLease* lease() override { return this; }

  StatusOr<LeaseHolder> TryAcquire(const std::string& holder,
                                   std::chrono::milliseconds duration) override {
    ConnectionPool::Handle c = pool_.Acquire();
    LeaseHolder after;
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      // A new token when it changes hands; the same when the holder extends it.
      ASSIGN_OR_RETURN(
          Result taken,
          c->Query("UPDATE leader SET token = CASE WHEN holder = $1 THEN token ELSE token + 1 END, "
                   "holder = $1, expires_at = now() + ($2::bigint * interval '1 millisecond') "
                   "WHERE id = 1 AND (holder = $1 OR expires_at <= now()) RETURNING token",
                   std::move(Params().Text(holder).Int(duration.count())),
                   "take the leader lease"));
      if (PQntuples(taken.get()) == 1) {
        after = {holder, IntValue(taken.get(), 0, 0), duration};
        return Status::Ok();
      }
      ASSIGN_OR_RETURN(after, ReadLeader(*c));
      return Status::Ok();
    }));
    if (after.holder == holder) {
      std::lock_guard<std::mutex> lock(fence_mu_);
      fence_ = after;
    }
    return after;
  }

  Status Release() override {
    const std::optional<LeaseHolder> fence = Fence();
    if (!fence) return Status::Ok();
    ConnectionPool::Handle c = pool_.Acquire();
    return c->Retrying([&] {
      return c
          ->Query(
              "UPDATE leader SET expires_at = now() WHERE id = 1 AND holder = $1 AND token = $2",
              std::move(Params().Text(fence->holder).Int(fence->token)), "release the leader lease")
          .status();
    });
  }

  Status Renew(std::chrono::milliseconds duration) override {
    const std::optional<LeaseHolder> fence = Fence();
    if (!fence) return FailedPreconditionError("this coordinator never took the leader lease");
    ConnectionPool::Handle c = pool_.Acquire();
    return c->Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(
          Result renewed,
          c->Query("UPDATE leader SET expires_at = now() + ($3::bigint * interval '1 millisecond') "
                   "WHERE id = 1 AND holder = $1 AND token = $2",
                   std::move(Params().Text(fence->holder).Int(fence->token).Int(duration.count())),
                   "renew the leader lease"));
      if (std::string(PQcmdTuples(renewed.get())) == "1") return Status::Ok();
      return Deposed(*c, *fence);
    });
  }

  // Brings the schema to its newest step: the missing steps and their number in one transaction,
  // under the schema lock.
  Status Migrate() {
    ConnectionPool::Handle c = pool_.Acquire();
    return c->InTransaction([&]() -> Status {
      RETURN_IF_ERROR(c->Exec(kSchemaLock, "lock the schema"));
      RETURN_IF_ERROR(c->Exec(kMetaTable, "create the meta table"));
      ASSIGN_OR_RETURN(const std::optional<int64_t> current, c->GetMeta("schema_version"));
      ASSIGN_OR_RETURN(const std::vector<SchemaStep> steps,
                       SchemaStepsToApply("the job store", current.value_or(0), SchemaSteps()));
      for (const SchemaStep& step : steps) {
        RETURN_IF_ERROR(c->Exec(step.sql, "schema step " + std::to_string(step.version)));
        DP_LOG_INFO("job store: schema step {} ({})", step.version, step.what);
      }
      if (steps.empty()) return Status::Ok();
      return c->SetMeta("schema_version", steps.back().version);
    });
  }

  Status SaveJob(const JobRecord& job) override {
    return Save(job, StoredRecordText(job), /*flushed=*/true);
  }

  Status SaveProgress(const JobRecord& job) override {
    return Save(job, StoredRecordText(job), /*flushed=*/false);
  }

  // In batches (stored_job.h), each a transaction of a handful of round trips: the records in
  // one statement; the few with new documents whole, and then the commit is flushed.
  Status SaveProgress(const std::vector<JobSnapshot>& jobs) override {
    const std::vector<std::string> texts = StoredRecordTexts(jobs);
    return InBatches(jobs.size(), kProgressJobsPerTransaction, [&](size_t begin, size_t end) {
      std::vector<size_t> records;
      std::vector<std::pair<size_t, WrittenDocuments::Needed>> with_documents;
      {
        std::lock_guard<std::mutex> lock(written_mu_);
        for (size_t i = begin; i < end; ++i) {
          const WrittenDocuments::Needed needed = written_.ForSave(*jobs[i]);
          if (needed.plan || needed.spec_graph) {
            with_documents.emplace_back(i, needed);
          } else {
            records.push_back(i);
          }
        }
      }
      ConnectionPool::Handle c = pool_.Acquire();
      RETURN_IF_ERROR(c->Retrying([&] {
        return InWriteTransaction(
            *c,
            [&]() -> Status {
              for (const auto& [i, needed] : with_documents) {
                RETURN_IF_ERROR(SaveJobRows(*c, *jobs[i], texts[i], needed));
              }
              return SaveRecords(*c, jobs, texts, records);
            },
            with_documents.empty() ? Connection::Commit::kAsynchronous
                                   : Connection::Commit::kFlushed);
      }));
      std::lock_guard<std::mutex> lock(written_mu_);
      for (size_t i = begin; i < end; ++i) written_.Remember(*jobs[i]);
      return Status::Ok();
    });
  }

  StatusOr<std::vector<JobRecord>> LoadJobs() override {
    ConnectionPool::Handle c = pool_.Acquire();
    std::vector<JobRecord> jobs;
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      jobs.clear();
      ASSIGN_OR_RETURN(Result rows, c->Query(std::string(kSelectJobs) + " ORDER BY j.seq", Params(),
                                             "load jobs"));
      for (int i = 0; i < PQntuples(rows.get()); ++i) {
        ASSIGN_OR_RETURN(JobRecord job, JobOfRow(rows.get(), i));
        jobs.push_back(std::move(job));
      }
      return Status::Ok();
    }));
    return jobs;
  }

  StatusOr<JobRecord> LoadJob(const std::string& job_id) override {
    ConnectionPool::Handle c = pool_.Acquire();
    StatusOr<JobRecord> job = NotFoundError("job " + job_id + " is not stored");
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(Result rows,
                       c->Query(std::string(kSelectJobs) + " WHERE j.id = $1",
                                std::move(Params().Text(job_id)), "load job " + job_id));
      if (PQntuples(rows.get()) == 0) return Status::Ok();
      job = JobOfRow(rows.get(), 0);
      return Status::Ok();
    }));
    return job;
  }

  Status DeleteJobs(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return Status::Ok();
    const std::string ids = TextArray(job_ids);
    ConnectionPool::Handle c = pool_.Acquire();
    return c->Retrying([&] {
      return InWriteTransaction(*c, [&]() -> Status {
        for (const char* sql : {"DELETE FROM jobs WHERE id = ANY($1::text[])",
                                "DELETE FROM plans WHERE job_id = ANY($1::text[])",
                                "DELETE FROM spec_graphs WHERE job_id = ANY($1::text[])",
                                "DELETE FROM logs WHERE job_id = ANY($1::text[])"}) {
          RETURN_IF_ERROR(c->Query(sql, std::move(Params().Text(ids)), "delete jobs").status());
        }
        return Status::Ok();
      });
    });
  }

  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override {
    if (lines->empty()) return Status::Ok();
    ConnectionPool::Handle c = logs_[std::hash<std::string>()(job_id) % logs_.size()]->Acquire();
    RETURN_IF_ERROR(c->Reconnected());
    // Committed asynchronously, as progress is: at a hundred appends a second each waited for the
    // server's WAL flush, and submissions behind them (holds of up to 1 s measured under
    // bench/capacity when one connection served every call).
    bool committing = false;
    const auto append = [&] {
      return InWriteTransaction(
          *c,
          [&]() -> Status {
            RETURN_IF_ERROR(AppendRows(*c, job_id, lines));
            committing = true;
            return Status::Ok();
          },
          Connection::Commit::kAsynchronous);
    };
    // Tried again on a fresh connection only when the connection was lost before the COMMIT was
    // sent (nothing of it can have landed: see top). A connection the server closed while it
    // waited in the pool, as a restart of the server does, fails at BEGIN.
    const Status appended = append();
    if (appended.ok() || committing || !c->lost()) return appended;
    RETURN_IF_ERROR(c->Reconnected());
    return append();
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
    ConnectionPool::Handle c = pool_.Acquire();
    return c->Retrying([&] {
      return InWriteTransaction(*c, [&] {
        return c
            ->Query(
                "INSERT INTO profiles(model_key, device_type, profile) VALUES($1, $2, $3) "
                "ON CONFLICT (model_key, device_type) DO UPDATE SET profile = "
                "EXCLUDED.profile",
                std::move(Params().Text(model_key).Text(device_type).Text(profile_json)),
                "save profile")
            .status();
      });
    });
  }

  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override {
    ConnectionPool::Handle c = pool_.Acquire();
    std::optional<std::string> profile;
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(
          Result rows,
          c->Query("SELECT profile FROM profiles WHERE model_key = $1 AND device_type = $2",
                   std::move(Params().Text(model_key).Text(device_type)), "load profile"));
      if (PQntuples(rows.get()) > 0) profile = Value(rows.get(), 0, 0);
      return Status::Ok();
    }));
    return profile;
  }

  Status ReserveSeqs(int64_t bound) override {
    ConnectionPool::Handle c = pool_.Acquire();
    return c->Retrying(
        [&] { return InWriteTransaction(*c, [&] { return c->SetMeta("seq_reserved", bound); }); });
  }

  StatusOr<int64_t> LoadSeqReservation() override {
    ConnectionPool::Handle c = pool_.Acquire();
    int64_t reserved = 0;
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      ASSIGN_OR_RETURN(const std::optional<int64_t> value, c->GetMeta("seq_reserved"));
      reserved = value.value_or(0);
      return Status::Ok();
    }));
    return reserved;
  }

 private:
  // The lease this store took, if it took one.
  std::optional<LeaseHolder> Fence() const {
    std::lock_guard<std::mutex> lock(fence_mu_);
    return fence_;
  }

  // Who holds the lease now.
  static StatusOr<LeaseHolder> ReadLeader(Connection& c) {
    ASSIGN_OR_RETURN(Result rows,
                     c.Query("SELECT holder, token, (EXTRACT(EPOCH FROM (expires_at - now())) * "
                             "1000)::bigint FROM leader WHERE id = 1",
                             Params(), "read the leader lease"));
    if (PQntuples(rows.get()) != 1) return DataLossError("the leader lease row is missing");
    return LeaseHolder{Value(rows.get(), 0, 0), IntValue(rows.get(), 0, 1),
                       std::chrono::milliseconds(IntValue(rows.get(), 0, 2))};
  }

  // The error of a write or renewal made under `fence` after another coordinator took the lease.
  static Status Deposed(Connection& c, const LeaseHolder& fence) {
    StatusOr<LeaseHolder> now = ReadLeader(c);
    const std::string who = now.ok() ? now->holder + " (token " + std::to_string(now->token) + ")"
                                     : "another coordinator";
    return FailedPreconditionError("this coordinator (" + fence.holder + ", token " +
                                   std::to_string(fence.token) + ") no longer leads: " + who +
                                   " took the leader lease; nothing was written");
  }

  // In a write's transaction, first: the lease is still this store's (FOR SHARE: a takeover
  // waits for this transaction to end, or this one sees the new holder). Nothing to check for a
  // store that never took the lease (one coordinator alone).
  Status CheckFence(Connection& c) {
    const std::optional<LeaseHolder> fence = Fence();
    if (!fence) return Status::Ok();
    ASSIGN_OR_RETURN(Result rows,
                     c.Query("SELECT 1 FROM leader WHERE id = 1 AND holder = $1 AND token = $2 "
                             "FOR SHARE",
                             std::move(Params().Text(fence->holder).Int(fence->token)),
                             "check the leader lease"));
    if (PQntuples(rows.get()) == 1) return Status::Ok();
    return Deposed(c, *fence);
  }

  // A write: `body` in one transaction, after the fence check.
  Status InWriteTransaction(Connection& c, const std::function<Status()>& body,
                            Connection::Commit commit = Connection::Commit::kFlushed) {
    return c.InTransaction(
        [&]() -> Status {
          RETURN_IF_ERROR(CheckFence(c));
          return body();
        },
        commit);
  }

  // A job and its documents: the columns of kSelectJobs.
  static constexpr const char* kSelectJobs =
      "SELECT j.id, j.record, p.graph, p.plan, s.graph FROM jobs j "
      "LEFT JOIN plans p ON p.job_id = j.id LEFT JOIN spec_graphs s ON s.job_id = j.id";
  StatusOr<JobRecord> JobOfRow(const PGresult* rows, int i) {
    StoredJobRow row{Value(rows, i, 0), Value(rows, i, 1), Value(rows, i, 2), Value(rows, i, 3),
                     std::nullopt};
    if (!PQgetisnull(rows, i, 4)) row.spec_graph = Value(rows, i, 4);
    ASSIGN_OR_RETURN(JobRecord job, JobFromStoredRow(row));
    std::lock_guard<std::mutex> lock(written_mu_);
    written_.Remember(job, row.spec_graph.has_value());
    return job;
  }

  // The records of jobs[i] for each i of `which` (texts[i]: StoredRecordText of it), in one
  // upsert.
  static Status SaveRecords(Connection& c, const std::vector<JobSnapshot>& jobs,
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
    return c
        .Query(sql, std::move(params),
               "save the progress of " + std::to_string(which.size()) + " jobs")
        .status();
  }

  // `text`: StoredRecordText(job).
  static Status SaveRecord(Connection& c, const JobRecord& job, const std::string& text) {
    return c
        .Query(
            "INSERT INTO jobs(id, seq, state, record) VALUES($1, $2, $3, $4) ON CONFLICT (id) "
            "DO UPDATE SET seq = EXCLUDED.seq, state = EXCLUDED.state, record = EXCLUDED.record",
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
  Status Save(const JobRecord& job, const std::string& text, bool flushed) {
    // The documents are written only when they changed: a progress update must not rewrite
    // 8 MiB of graph, and is then a single statement.
    WrittenDocuments::Needed needed;
    {
      std::lock_guard<std::mutex> lock(written_mu_);
      needed = written_.ForSave(job);
    }
    if (needed.plan || needed.spec_graph) flushed = true;
    const bool fenced = Fence().has_value();
    ConnectionPool::Handle c = pool_.Acquire();
    RETURN_IF_ERROR(c->Retrying([&] {
      if (flushed && !needed.plan && !needed.spec_graph && !fenced) {
        return SaveRecord(*c, job, text);
      }
      return InWriteTransaction(
          *c, [&] { return SaveJobRows(*c, job, text, needed); },
          flushed ? Connection::Commit::kFlushed : Connection::Commit::kAsynchronous);
    }));
    std::lock_guard<std::mutex> lock(written_mu_);
    written_.Remember(job);
    return Status::Ok();
  }

  static Status SaveJobRows(Connection& c, const JobRecord& job, const std::string& text,
                            WrittenDocuments::Needed needed) {
    RETURN_IF_ERROR(SaveRecord(c, job, text));
    if (needed.spec_graph) {
      if (job.spec.graph_json.empty()) {
        RETURN_IF_ERROR(c.Query("DELETE FROM spec_graphs WHERE job_id = $1",
                                std::move(Params().Text(job.id)), "save the graph of " + job.id)
                            .status());
      } else {
        RETURN_IF_ERROR(c.Query("INSERT INTO spec_graphs(job_id, graph) VALUES($1, $2) ON "
                                "CONFLICT (job_id) DO UPDATE SET graph = EXCLUDED.graph",
                                std::move(Params().Text(job.id).Text(job.spec.graph_json)),
                                "save the graph of " + job.id)
                            .status());
      }
    }
    if (!needed.plan) return Status::Ok();
    return c
        .Query(
            "INSERT INTO plans(job_id, graph, plan) VALUES($1, $2, $3) ON CONFLICT (job_id) DO "
            "UPDATE SET graph = EXCLUDED.graph, plan = EXCLUDED.plan",
            std::move(Params().Text(job.id).Text(job.graph_json).Text(job.plan_json)),
            "save plan of " + job.id)
        .status();
  }

  static Status AppendRows(Connection& c, const std::string& job_id,
                           std::vector<LogRecord>* lines) {
    ASSIGN_OR_RETURN(Result last,
                     c.Query("SELECT COALESCE(MAX(seq), 0) FROM logs WHERE job_id = $1",
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
      RETURN_IF_ERROR(c.Query(sql, std::move(params), "append log").status());
    }
    return Status::Ok();
  }

  StatusOr<std::vector<LogRecord>> LogQuery(const std::string& sql, Params params) {
    ConnectionPool::Handle c = pool_.Acquire();
    std::vector<LogRecord> out;
    RETURN_IF_ERROR(c->Retrying([&]() -> Status {
      out.clear();
      ASSIGN_OR_RETURN(Result rows, c->Query(sql, params, "read logs"));
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

  const std::string where_;
  ConnectionPool pool_;                                // every call but log appends
  std::vector<std::unique_ptr<ConnectionPool>> logs_;  // log appends, one of each at a time
  std::mutex written_mu_;
  WrittenDocuments written_;  // guarded by written_mu_
  mutable std::mutex fence_mu_;
  std::optional<LeaseHolder> fence_;  // the lease this store took, checked by every write
};

}  // namespace

bool IsPostgresUri(const std::string& store) {
  return store.rfind("postgresql://", 0) == 0 || store.rfind("postgres://", 0) == 0;
}

StatusOr<std::unique_ptr<JobStore>> OpenPostgresJobStore(const std::string& uri) {
  const auto open = [&](int count) -> StatusOr<std::vector<std::unique_ptr<Connection>>> {
    std::vector<std::unique_ptr<Connection>> connections;
    for (int i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection, Connection::Open(uri));
      connections.push_back(std::move(connection));
    }
    return connections;
  };
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Connection>> pooled, open(kPooledConnections));
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Connection>> for_logs, open(kLogConnections));
  auto store = std::make_unique<PostgresJobStore>(std::move(pooled), std::move(for_logs));
  RETURN_IF_ERROR(store->Migrate().WithContext(store->where()));
  DP_LOG_INFO("job store: {} ({} connections)", store->where(),
              kPooledConnections + kLogConnections);
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace deepool::coordinator
