// Watching the process that started us. An executor must not outlive its worker daemon (killed:
// the executors would keep their devices busy with nobody to stop them), nor keep training while
// the daemon is frozen (SIGSTOP, a hung host): its node is then declared DOWN and the coordinator
// gives its devices to other jobs. The worker's lease on its executors is this watch: an executor
// ends itself once its daemon is gone, or has been stopped for longer than the lease.
//
// Threading: ProcessWatch owns one thread ("dp-proc-watch") that polls /proc; `on_lost` runs on
// it, at most once. The destructor stops and joins the thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace deepool {

// A process's run state from /proc/PID/stat: running (or sleeping), stopped (SIGSTOP, traced),
// or gone (no such process, or a zombie).
enum class ProcessRunState { kRunning, kStopped, kGone };
ProcessRunState ReadProcessRunState(pid_t pid);

class ProcessWatch {
 public:
  struct Options {
    pid_t pid = 0;  // the process to watch; 0: this process's parent (as it is now)
    // With pid 0: the parent that started this process, as it said (--worker-pid). A parent
    // that ended before the watch began (while this process loaded) is then seen as lost:
    // without it the watch would take the process that adopted this one as the parent.
    pid_t started_by = 0;
    std::chrono::milliseconds stopped_limit{5000};  // stopped longer than this: lost
    std::chrono::milliseconds poll{200};
  };
  // `on_lost` gets a sentence: "... exited" or "... stopped for over N ms".
  ProcessWatch(Options options, std::function<void(const std::string&)> on_lost);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

 private:
  void Run();
  // Whether the watched process is gone; for our parent, also when we were re-parented.
  bool Gone() const;

  Options options_;
  bool watching_parent_;
  std::function<void(const std::string&)> on_lost_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace deepool
