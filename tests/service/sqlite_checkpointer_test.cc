#include "coordinator/sqlite_checkpointer.h"

#include <sqlite3.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

// A connection to `path` (a writer, or a reader of a copy).
class Connection {
 public:
  explicit Connection(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
  }
  ~Connection() { sqlite3_close_v2(db_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  sqlite3* get() { return db_; }
  bool Exec(const std::string& sql) {
    return sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  // COUNT(*) of table t; -1 when there is none.
  int64_t Rows() {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM t", -1, &st, nullptr) != SQLITE_OK) {
      sqlite3_finalize(st);
      return -1;
    }
    const int64_t rows = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return rows;
  }

 private:
  sqlite3* db_ = nullptr;
};

// The rows a copy of the main file alone holds: what outlives a lost write-ahead log.
int64_t RowsInMainFile(const testing::TempDir& dir, const std::string& name) {
  const std::string copy = dir.File(name + ".copy");
  std::filesystem::copy_file(dir.File(name), copy,
                             std::filesystem::copy_options::overwrite_existing);
  Connection reader(copy);
  return reader.Rows();
}

// A WAL database with table t, its writer, and a checkpointer attached to it.
struct Database {
  explicit Database(const testing::TempDir& dir, int threshold_frames) : writer(dir.File("db")) {
    REQUIRE(writer.Exec("PRAGMA journal_mode=WAL"));
    REQUIRE(writer.Exec("PRAGMA synchronous=NORMAL"));
    REQUIRE(writer.Exec("PRAGMA wal_autocheckpoint=0"));  // nothing but the checkpointer copies
    REQUIRE(writer.Exec("CREATE TABLE t (x TEXT)"));
    StatusOr<std::unique_ptr<SQLiteCheckpointer>> started =
        SQLiteCheckpointer::Start(dir.File("db"), threshold_frames);
    REQUIRE(started.ok());
    checkpointer = *std::move(started);
    checkpointer->Attach(writer.get());
  }
  void Insert(int rows) {
    for (int i = 0; i < rows; ++i) {
      REQUIRE(writer.Exec("INSERT INTO t VALUES (randomblob(2000))"));  // a page each, at least
    }
  }

  Connection writer;
  std::unique_ptr<SQLiteCheckpointer> checkpointer;
};

TEST_CASE("the checkpointer copies the log into the main file once it passes its threshold",
          "[job_store]") {
  testing::TempDir dir;
  Database db(dir, /*threshold_frames=*/50);
  db.Insert(2);
  CHECK(db.checkpointer->passes() == 0);   // under the threshold: the commits only signal it
  CHECK(RowsInMainFile(dir, "db") == -1);  // not even the table is there yet
  db.Insert(100);
  // A pass that found the writer mid-commit is BUSY and copies nothing; the next commit past
  // the threshold signals another. (A copy that catches a later pass half-way reads no rows,
  // and the next round looks again.)
  int64_t rows = -1;
  for (int pass = 1; pass <= 10 && rows < 1; ++pass) {
    if (pass > 1) db.Insert(1);
    REQUIRE(db.checkpointer->WaitForPasses(pass, std::chrono::seconds(30)));
    rows = RowsInMainFile(dir, "db");
  }
  CHECK(rows >= 1);  // what the log held when a pass began, or more
}

TEST_CASE("the log stays bounded while its writer never pauses", "[job_store]") {
  testing::TempDir dir;
  const int threshold = 20;
  Database db(dir, threshold);
  uintmax_t largest = 0;
  for (int i = 0; i < 1500; ++i) {
    db.Insert(1);
    largest = std::max(largest, std::filesystem::file_size(dir.File("db-wal")));
  }
  // Frames of one page (4 KiB by default) and its header; a commit adds a few.
  const uintmax_t frame = 4096 + 24;
  CHECK(largest <= (SQLiteCheckpointer::kBackstopFactor * threshold + 10) * frame);
}

TEST_CASE("CheckpointAll puts every committed write into the main file", "[job_store]") {
  testing::TempDir dir;
  Database db(dir, /*threshold_frames=*/1000);
  db.Insert(7);
  REQUIRE(db.checkpointer->CheckpointAll().ok());
  CHECK(RowsInMainFile(dir, "db") == 7);
  db.Insert(3);  // the writer goes on after a checkpoint, from the start of the log again
  REQUIRE(db.checkpointer->CheckpointAll().ok());
  CHECK(RowsInMainFile(dir, "db") == 10);
  CHECK(db.checkpointer->passes() == 0);  // the thread never ran: these were the caller's own
}

}  // namespace
}  // namespace deepool::coordinator
