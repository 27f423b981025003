#include "coordinator/postgres_connection.h"

#include <cstdlib>

#include "common/logging.h"

namespace deepool::coordinator::postgres {
namespace {

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

void OnNotice(void*, const char* message) {
  DP_LOG_DEBUG("job store: postgresql: {}", FirstLine(message));
}

}  // namespace

Params& Params::Null() {
  Add("", 0);
  null_.back() = true;
  return *this;
}

const char* const* Params::values() {
  pointers_.clear();
  for (size_t i = 0; i < values_.size(); ++i) {
    pointers_.push_back(null_[i] ? nullptr : values_[i].c_str());
  }
  return pointers_.data();
}

const int* Params::lengths() {
  lengths_.clear();
  for (const std::string& v : values_) lengths_.push_back(static_cast<int>(v.size()));
  return lengths_.data();
}

Params& Params::Add(std::string value, int format) {
  values_.push_back(std::move(value));
  formats_.push_back(format);
  null_.push_back(false);
  return *this;
}

std::string FirstLine(const char* text) {
  std::string line = text ? text : "";
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "unknown error" : line;
}

std::string Value(const PGresult* rows, int row, int col) {
  return std::string(PQgetvalue(rows, row, col), static_cast<size_t>(PQgetlength(rows, row, col)));
}

int64_t IntValue(const PGresult* rows, int row, int col) {
  return std::strtoll(PQgetvalue(rows, row, col), nullptr, 10);
}

Connection::Connection(PGconn* conn) : conn_(conn), where_(Describe(conn)) {
  PQsetNoticeProcessor(conn_, &OnNotice, nullptr);
}

Connection::~Connection() { PQfinish(conn_); }

bool Connection::lost() const { return PQstatus(conn_) != CONNECTION_OK; }

StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& uri) {
  // Defaults first: what the URI says overrides them. A bounded connect, so that a call made
  // while the server is unreachable cannot hold a connection for minutes.
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
  return std::unique_ptr<Connection>(new Connection(conn));
}

Status Connection::Reconnected() {
  if (!lost()) return Status::Ok();
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return UnavailableError("the job store's " + where_ +
                            " is unreachable: " + FirstLine(PQerrorMessage(conn_)));
  }
  DP_LOG_WARN("job store: connected again to {}", where_);
  return Status::Ok();
}

Status Connection::Retrying(const std::function<Status()>& call) {
  RETURN_IF_ERROR(Reconnected());
  Status status = call();
  if (status.ok() || !lost()) return status;
  RETURN_IF_ERROR(Reconnected());
  return call();
}

Status Connection::InTransaction(const std::function<Status()>& body, Commit commit) {
  // Both in one round trip when asynchronous.
  RETURN_IF_ERROR(
      Exec(commit == Commit::kFlushed ? "BEGIN" : "BEGIN; SET LOCAL synchronous_commit TO OFF",
           "begin"));
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

Status Connection::Exec(const char* sql, const std::string& what) {
  Result result(PQexec(conn_, sql));
  return Check(result.get(), what);
}

StatusOr<Result> Connection::Query(const std::string& sql, Params params, const std::string& what) {
  Result result(PQexecParams(conn_, sql.c_str(), params.size(), /*paramTypes=*/nullptr,
                             params.values(), params.lengths(), params.formats(),
                             /*resultFormat=text*/ 0));
  RETURN_IF_ERROR(Check(result.get(), what));
  return result;
}

Status Connection::Check(const PGresult* result, const std::string& what) {
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

StatusOr<std::optional<int64_t>> Connection::GetMeta(const std::string& key) {
  ASSIGN_OR_RETURN(Result rows, Query("SELECT value FROM meta WHERE key = $1",
                                      std::move(Params().Text(key)), "read " + key));
  if (PQntuples(rows.get()) == 0) return std::optional<int64_t>();
  return std::optional<int64_t>(IntValue(rows.get(), 0, 0));
}

Status Connection::SetMeta(const std::string& key, int64_t value) {
  return Query(
             "INSERT INTO meta(key, value) VALUES($1, $2) ON CONFLICT (key) DO UPDATE SET value "
             "= EXCLUDED.value",
             std::move(Params().Text(key).Int(value)), "write " + key)
      .status();
}

ConnectionPool::ConnectionPool(std::vector<std::unique_ptr<Connection>> connections)
    : connections_(std::move(connections)) {
  for (const auto& connection : connections_) free_.push_back(connection.get());
}

ConnectionPool::Handle ConnectionPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  returned_.wait(lock, [&] { return !free_.empty(); });
  Connection* connection = free_.back();
  free_.pop_back();
  return Handle(this, connection);
}

void ConnectionPool::Return(Connection* connection) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(connection);
  }
  returned_.notify_one();
}

}  // namespace deepool::coordinator::postgres
