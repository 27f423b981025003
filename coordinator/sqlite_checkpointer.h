// SQLiteCheckpointer: copies a WAL database's write-ahead log into its main file from its own
// connection and its own thread, so that the store's writers do not wait for a checkpoint (unless
// they never pause: see kBackstopFactor).
//
// Why: SQLite's automatic checkpoint runs inside the commit that takes the log past 1,000 pages,
// and a checkpoint syncs the main file to disk. The store commits under its one lock, so every
// other write (a submission, a state change) queued behind that fsync: a dozen submissions
// at a time waited 60 to 360 ms under bench/capacity on the development machine's disk. A
// passive checkpoint from a second connection runs alongside writers (WAL mode lets it), so
// Attach() turns the automatic one off and hands its work to the thread here.
//
// Threading: the thread "dp-sqlite-ckpt" checkpoints whenever a commit leaves the log at or over
// `threshold_frames` (the writer's commit hook signals it; only past kBackstopFactor times that
// does the commit checkpoint itself). CheckpointAll() may be called from any thread;
// checkpoints are serialized on this object's connection.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace deepool::coordinator {

class SQLiteCheckpointer {
 public:
  // SQLite's own default for its automatic checkpoint.
  static constexpr int kDefaultThresholdFrames = 1000;
  // A commit that leaves this many thresholds of frames in the log checkpoints it itself: a
  // writer that never pauses would otherwise stay ahead of the thread, and the log, which
  // restarts only once wholly copied, would grow without bound.
  static constexpr int kBackstopFactor = 8;

  // Opens a second connection to the WAL database at `path` and starts the thread. Attach() the
  // writer's connection afterwards.
  static StatusOr<std::unique_ptr<SQLiteCheckpointer>> Start(
      const std::string& path, int threshold_frames = kDefaultThresholdFrames);
  // Stops the thread and closes this connection (before the writer's, whose close then
  // checkpoints and removes the log as the last connection).
  ~SQLiteCheckpointer();
  SQLiteCheckpointer(const SQLiteCheckpointer&) = delete;
  SQLiteCheckpointer& operator=(const SQLiteCheckpointer&) = delete;

  // Replaces the automatic checkpoint of `writer` (a connection to the same file) with this
  // thread, until this object is destroyed (which leaves `writer` with no automatic checkpoint).
  // `writer` must outlive this object.
  void Attach(sqlite3* writer);

  // Copies every frame committed before the call into the main file and syncs it: for a write
  // that must outlive the loss of the log. Passive first (writers go on); if readers keep it
  // from finishing, a full checkpoint, which waits for them and holds writers back meanwhile.
  Status CheckpointAll();

  // Background checkpoints done so far, and a wait for the next one (tests).
  int64_t passes() const;
  bool WaitForPasses(int64_t passes, std::chrono::milliseconds timeout) const;

 private:
  SQLiteCheckpointer(sqlite3* db, std::string path, int threshold_frames);
  static int OnCommit(void* self, sqlite3* writer, const char* schema, int frames);
  void Run();
  // One checkpoint of `mode` under run_mu_; OK with whether it copied every frame of the log.
  StatusOr<bool> CheckpointLocked(int mode);

  sqlite3* const db_;
  const std::string path_;
  const int threshold_frames_;

  sqlite3* writer_ = nullptr;  // Attach()'s
  std::mutex run_mu_;          // serializes checkpoints on db_

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool due_ = false;
  bool stopping_ = false;
  int64_t passes_ = 0;
  bool failing_ = false;  // a failure is logged once until a checkpoint succeeds again
  std::thread thread_;
};

}  // namespace deepool::coordinator
