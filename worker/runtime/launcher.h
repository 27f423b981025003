// Starts one deepool-executor process per rank on this machine and follows their stdout events
// (protocol/executor_events.h).
// Rank 0 starts first with store port 0; its store_ready line gives the port the others join.
// Used by deepool-train and by end-to-end tests; the worker daemon has its own supervisor.
// Ranks are common/subprocess.h children in this process's group (a Ctrl-C reaches them too);
// their stderr is this process's.
// Threading: a RankProcesses object is used by one thread; Kill may be called from the
// on_event callback (same thread). Each rank's ChildProcess reads its lines on its own thread
// and queues them; Start and Wait take them off the queue, so every callback runs on the
// caller's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"
#include "protocol/executor_events.h"

namespace deepool::worker {

struct LaunchOptions {
  std::string executor_path;  // the deepool-executor binary
  std::string run_spec_path;
  int world_size = 1;
  std::string device = "cpu";  // "cpu", or "cuda": rank R gets cuda:R
  // "cuda" only: every rank on cuda:0, over the staging communicator (deepool-executor
  // --share-gpu; communicator_staged.h). A test and benchmark path for one GPU: NCCL, the
  // production path, refuses two ranks on one device.
  bool share_gpu = false;
  int timeout_s = 60;  // passed to every rank (--timeout-s)
  // Kill the remaining ranks as soon as one fails. Off: let them notice on their own.
  bool stop_on_failure = true;
  // Give up (kill every rank) after this long without any event line; 0: 3 * timeout_s + 30.
  int silence_limit_s = 0;
  std::string store_host = "127.0.0.1";
};

struct RankOutcome {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int exit_code = -1;  // when it exited normally
  int signal = 0;      // when a signal ended it
  bool done = false;   // it printed its "done" event
  int64_t iterations = 0;
  std::optional<std::string> error;  // its "error" event's message
  std::optional<std::string> checkpoint;
  // "exit 0", "exit 1: <error message>", "killed by signal 9".
  std::string Describe() const;
};

class RankProcesses {
 public:
  ~RankProcesses();  // kills and reaps ranks still running
  // Starts all ranks (rank 0 first, then the rest once its store is listening).
  static StatusOr<std::unique_ptr<RankProcesses>> Start(const LaunchOptions& options);

  // Follows every rank until all exited, calling on_event(rank, event) for each event line
  // (other lines are logged).
  // OK when every rank printed "done" and exited 0; otherwise an error naming the first rank
  // that failed and why.
  using EventCallback = std::function<void(int rank, const protocol::ExecutorEvent& event)>;
  Status Wait(const EventCallback& on_event = {});

  void Kill(int rank, int signal_number = 9);
  const std::vector<RankOutcome>& outcomes() const { return outcomes_; }

 private:
  // A stdout line of a rank, or (no line) its exit, in the order the ranks' threads saw them.
  struct Output {
    int rank = 0;
    std::optional<std::string> line;
    ProcessExit exit;
  };

  explicit RankProcesses(LaunchOptions options) : options_(std::move(options)) {}
  Status Spawn(int rank, int store_port);
  // The next output, or nullopt when none came before `deadline`.
  std::optional<Output> NextOutput(std::chrono::steady_clock::time_point deadline);
  // Reads rank 0's lines until its store_ready event; returns the port.
  StatusOr<int> AwaitStorePort();
  void HandleLine(int rank, const std::string& line, const EventCallback& on_event);
  void HandleExit(int rank, const ProcessExit& exit);
  bool AnyRunning() const;
  void KillAll();

  LaunchOptions options_;
  std::vector<RankOutcome> outcomes_;
  std::vector<std::string> early_lines_;  // rank 0's lines read while waiting for store_ready
  std::vector<int> failure_order_;        // ranks in the order their failure was seen

  std::mutex mu_;
  std::condition_variable output_cv_;
  std::deque<Output> outputs_;  // guarded by mu_; filled by the children's reader threads
  // Last: destroyed first, which kills and joins the children before the queue goes away.
  std::vector<std::unique_ptr<ChildProcess>> children_;
};

}  // namespace deepool::worker
