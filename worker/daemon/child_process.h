// One child process (an executor or a profiler) in its own process group, with its stdout and
// stderr read line by line.
//
// Threading: Start() spawns one reader thread per child ("dp-child-<pid>") that polls both pipes,
// hands every complete line to the callbacks, and reaps the child once both pipes are closed.
// Callbacks run on that reader thread, never under the object's lock; they must not call Wait()
// on their own child. All public methods are safe to call from any thread. The destructor kills
// the group (SIGKILL) if the child is still running and joins the reader thread.
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
#include <thread>
#include <vector>

#include "common/status.h"

namespace deepool::worker::daemon {

struct ProcessSpec {
  std::string executable;              // absolute path, or a name looked up in PATH
  std::vector<std::string> args;       // without argv[0]
  std::string working_dir;             // empty: inherit
  std::vector<std::string> extra_env;  // "KEY=VALUE" entries added to (or replacing in) environ
  int nice = 0;                        // added to the child's CPU niceness (background work)
  bool stdin_pipe = false;  // give the child a pipe on stdin (WriteStdin); else /dev/null
};

struct ProcessExit {
  int exit_code = -1;  // the exit status when the child exited, else -1
  int signal = 0;      // the signal that ended it, else 0
  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit code 3", "killed by signal 9 (Killed)".
  std::string Describe() const;
};

struct ChildCallbacks {
  std::function<void(const std::string& line)> on_stdout_line;
  std::function<void(const std::string& line)> on_stderr_line;
  std::function<void(const ProcessExit& exit)> on_exit;  // once, after both pipes closed
};

class ChildProcess {
 public:
  // Starts the child. Lines longer than max_line_bytes are split. Fails with NOT_FOUND when
  // the executable does not exist and INTERNAL when the system refuses to spawn it.
  static StatusOr<std::unique_ptr<ChildProcess>> Start(const ProcessSpec& spec,
                                                       ChildCallbacks callbacks,
                                                       size_t max_line_bytes = 64 * 1024);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` to the child's whole process group unless the child has been reaped.
  void SignalGroup(int signal);
  // SIGTERM to the group, then SIGKILL if it has not exited within `grace`. Blocks up to grace.
  void Terminate(std::chrono::milliseconds grace);
  // Waits for the exit (reaped, callbacks done) up to `timeout`; nullopt on timeout.
  std::optional<ProcessExit> Wait(std::chrono::milliseconds timeout);
  std::optional<ProcessExit> exit() const;
  // Writes `text` whole to the child's stdin pipe. FAILED_PRECONDITION without a pipe or after
  // the child was reaped; INTERNAL when the write fails (the child closed its end).
  Status WriteStdin(const std::string& text);

 private:
  ChildProcess(pid_t pid, int stdout_fd, int stderr_fd, int stdin_fd, ChildCallbacks callbacks,
               size_t max_line_bytes);
  void ReadLoop(int stdout_fd, int stderr_fd);

  const pid_t pid_;
  ChildCallbacks callbacks_;
  const size_t max_line_bytes_;

  mutable std::mutex mu_;
  std::condition_variable exited_cv_;
  bool reaped_ = false;              // guarded by mu_; no signals after this
  std::optional<ProcessExit> exit_;  // guarded by mu_; set once callbacks have run
  int stdin_fd_ = -1;                // guarded by mu_; closed once the child is reaped
  std::thread reader_;
};

// The last `capacity` lines of a log, for error reports. Thread-safe.
class LogTail {
 public:
  explicit LogTail(size_t capacity) : capacity_(capacity) {}
  void Add(std::string line);
  std::vector<std::string> Lines() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<std::string> lines_;
};

}  // namespace deepool::worker::daemon
