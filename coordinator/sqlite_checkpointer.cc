#include "coordinator/sqlite_checkpointer.h"

#include <utility>

#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool::coordinator {

StatusOr<std::unique_ptr<SQLiteCheckpointer>> SQLiteCheckpointer::Start(const std::string& path,
                                                                        int threshold_frames) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return UnavailableError("cannot open " + path + " to checkpoint it: " + message);
  }
  // A full checkpoint waits this long for readers and writers before it gives up.
  sqlite3_busy_timeout(db, 5000);
  // A connection finds the log at its first read; until then a checkpoint finds nothing to do.
  if (sqlite3_exec(db, "SELECT COUNT(*) FROM sqlite_master", nullptr, nullptr, nullptr) !=
      SQLITE_OK) {
    const std::string message = sqlite3_errmsg(db);
    sqlite3_close_v2(db);
    return UnavailableError("cannot read " + path + " to checkpoint it: " + message);
  }
  return std::unique_ptr<SQLiteCheckpointer>(new SQLiteCheckpointer(db, path, threshold_frames));
}

SQLiteCheckpointer::SQLiteCheckpointer(sqlite3* db, std::string path, int threshold_frames)
    : db_(db), path_(std::move(path)), threshold_frames_(threshold_frames) {
  thread_ = std::thread([this] { Run(); });
}

SQLiteCheckpointer::~SQLiteCheckpointer() {
  if (writer_ != nullptr) sqlite3_wal_hook(writer_, nullptr, nullptr);  // it points at this
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  sqlite3_close_v2(db_);
}

void SQLiteCheckpointer::Attach(sqlite3* writer) {
  // A commit hook replaces SQLite's automatic checkpoint, which is itself one.
  writer_ = writer;
  sqlite3_wal_hook(writer, &SQLiteCheckpointer::OnCommit, this);
}

int SQLiteCheckpointer::OnCommit(void* self, sqlite3* /*writer*/, const char* /*schema*/,
                                 int frames) {
  auto* checkpointer = static_cast<SQLiteCheckpointer*>(self);
  if (frames < checkpointer->threshold_frames_) return SQLITE_OK;
  if (frames >= kBackstopFactor * checkpointer->threshold_frames_) {
    // The writer never paused long enough for the thread's checkpoint to catch up with it, and
    // the log restarts only once a checkpoint has copied all of it: this commit waits for the
    // thread's pass and checkpoints itself, as SQLite's automatic checkpoint would (nothing is
    // written meanwhile, so it copies the whole log).
    std::lock_guard<std::mutex> run(checkpointer->run_mu_);
    StatusOr<bool> done = checkpointer->CheckpointLocked(SQLITE_CHECKPOINT_PASSIVE);
    if (!done.ok()) DP_LOG_WARN("job store {}: {}", checkpointer->path_, done.status().ToString());
  }
  {
    std::lock_guard<std::mutex> lock(checkpointer->mu_);
    checkpointer->due_ = true;
  }
  checkpointer->cv_.notify_all();
  return SQLITE_OK;
}

void SQLiteCheckpointer::Run() {
  SetCurrentThreadName("dp-sqlite-ckpt");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return due_ || stopping_; });
    if (stopping_) return;
    due_ = false;
    lock.unlock();
    StatusOr<bool> done = [&] {
      std::lock_guard<std::mutex> run(run_mu_);
      return CheckpointLocked(SQLITE_CHECKPOINT_PASSIVE);
    }();
    lock.lock();
    ++passes_;
    if (!done.ok() && !failing_) {
      DP_LOG_WARN("job store {}: {} (the write-ahead log grows until a checkpoint succeeds)", path_,
                  done.status().ToString());
    }
    failing_ = !done.ok();
    cv_.notify_all();
  }
}

StatusOr<bool> SQLiteCheckpointer::CheckpointLocked(int mode) {
  int log_frames = 0;
  int copied_frames = 0;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, mode, &log_frames, &copied_frames);
  // BUSY: readers or writers kept a passive checkpoint from some frames, a full one waited for
  // them past its timeout, or a checkpoint could not start at all (the frame counts are then
  // -1); what one copied stays copied. Either way not done yet, and tried again.
  if (rc == SQLITE_BUSY) return false;
  if (rc != SQLITE_OK) return UnavailableError(std::string("checkpoint: ") + sqlite3_errmsg(db_));
  if (log_frames < 0) {
    return FailedPreconditionError("checkpoint: " + path_ + " is not in WAL mode");
  }
  return copied_frames == log_frames;
}

Status SQLiteCheckpointer::CheckpointAll() {
  std::lock_guard<std::mutex> run(run_mu_);
  // Frames committed before this call are in the log now; a checkpoint that copies every frame
  // it finds copies them. A passive one rarely misses: the store's readers are short.
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSIGN_OR_RETURN(const bool done, CheckpointLocked(SQLITE_CHECKPOINT_PASSIVE));
    if (done) return Status::Ok();
  }
  ASSIGN_OR_RETURN(const bool done, CheckpointLocked(SQLITE_CHECKPOINT_FULL));
  if (done) return Status::Ok();
  return UnavailableError("checkpoint of " + path_ +
                          ": readers kept it from copying the whole write-ahead log");
}

int64_t SQLiteCheckpointer::passes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return passes_;
}

bool SQLiteCheckpointer::WaitForPasses(int64_t passes, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return passes_ >= passes; });
}

}  // namespace deepool::coordinator
