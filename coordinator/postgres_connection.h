// The PostgreSQL job store's connections (postgres_job_store.cc): one libpq connection with the
// statements, transactions, error mapping and reconnection the store needs, and a fixed pool of
// them, so that a call waits for a free connection, not for every call before it.
// Threading: a Connection is used by one thread at a time (the pool hands it out);
// ConnectionPool is safe to call from several threads.
#pragma once

#include <libpq-fe.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::coordinator::postgres {

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
  Params& Null();
  int size() const { return static_cast<int>(values_.size()); }
  // The arrays libpq reads; valid while this object lives unchanged.
  const char* const* values();
  const int* lengths();
  const int* formats() const { return formats_.data(); }

 private:
  Params& Add(std::string value, int format);
  std::vector<std::string> values_;
  std::vector<int> formats_;
  std::vector<bool> null_;
  std::vector<const char*> pointers_;
  std::vector<int> lengths_;
};

// The first line of a libpq message ("unknown error" for none).
std::string FirstLine(const char* text);

// A result's cell as bytes, and as a number.
std::string Value(const PGresult* rows, int row, int col);
int64_t IntValue(const PGresult* rows, int row, int col);

class Connection {
 public:
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Connects to `uri` (libpq's URI form), with a bounded connect timeout unless the URI sets
  // one. UNAVAILABLE naming the database, host and user (never the password) when it cannot.
  static StatusOr<std::unique_ptr<Connection>> Open(const std::string& uri);

  // "PostgreSQL database D on H:P as U".
  const std::string& where() const { return where_; }

  // Whether the last call found the connection gone. (A connection the server closed while
  // nobody used it, as a restart of the server does, is found so by its next call.)
  bool lost() const;
  // A connection lost since the last call is made again (once per call).
  Status Reconnected();
  // `call`, and once more on a fresh connection when the connection was lost under it. Only for
  // calls that may run twice.
  Status Retrying(const std::function<Status()>& call);
  // How a transaction commits: kFlushed waits for the server's WAL flush (durable, as the
  // server's synchronous_commit makes it); kAsynchronous does not (a crash of the server may lose
  // the last such commits, under a second's worth; a later flushed commit flushes them too).
  enum class Commit { kFlushed, kAsynchronous };
  // One transaction: `body`'s statements all land, or none does.
  Status InTransaction(const std::function<Status()>& body, Commit commit = Commit::kFlushed);
  // Statements without parameters (several may be in `sql`).
  Status Exec(const char* sql, const std::string& what);
  StatusOr<Result> Query(const std::string& sql, Params params, const std::string& what);

  // The meta table's number under `key`, nullopt when it has none; and its upsert.
  StatusOr<std::optional<int64_t>> GetMeta(const std::string& key);
  Status SetMeta(const std::string& key, int64_t value);

 private:
  explicit Connection(PGconn* conn);
  // A statement's error as a Status: UNAVAILABLE for a lost connection or a server going down
  // (and serialization failures, which a retry may pass), RESOURCE_EXHAUSTED for a full disk,
  // else INTERNAL.
  Status Check(const PGresult* result, const std::string& what);

  PGconn* conn_;
  const std::string where_;
};

// A fixed set of connections. Acquire hands one out, waiting while all are in use.
class ConnectionPool {
 public:
  explicit ConnectionPool(std::vector<std::unique_ptr<Connection>> connections);

  // A connection for one call; back to the pool when it goes.
  class Handle {
   public:
    Handle(ConnectionPool* pool, Connection* connection) : pool_(pool), connection_(connection) {}
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { pool_->Return(connection_); }
    Connection& operator*() const { return *connection_; }
    Connection* operator->() const { return connection_; }

   private:
    ConnectionPool* pool_;
    Connection* connection_;
  };
  Handle Acquire();

 private:
  void Return(Connection* connection);

  const std::vector<std::unique_ptr<Connection>> connections_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<Connection*> free_;
};

}  // namespace deepool::coordinator::postgres
