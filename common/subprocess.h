// One child process, the only place deepool starts programs: the worker daemon's executors and
// profilers, `deepool up`'s coordinator and workers, `deepool profile`'s deepool-profile, test
// harnesses. The child runs in its own process group (unless asked not to), so a signal reaches
// it and everything it starts; its stdout and stderr are read line by line, inherited, or
// appended to a file.
//
// Threading: Start() spawns one thread per child ("dp-child-<pid>") that reads the piped streams,
// hands every complete line to the callbacks, and reaps the child once the pipes are closed and
// it has exited. Callbacks run on that thread, never under the object's lock; they must not call
// Wait() on their own child or destroy it. All public methods are safe to call from any thread.
// The destructor kills the group (SIGKILL) if the child is still running and joins the thread.
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

namespace deepool {

// Where a child's stdout or stderr goes.
struct ProcessOutput {
  enum class Kind {
    kLines,    // a pipe read line by line into ChildCallbacks
    kInherit,  // this process's own stream (a terminal, a log)
    kAppend,   // appended to `path`, created if missing
  };
  Kind kind = Kind::kLines;
  std::string path;  // for kAppend

  static ProcessOutput Lines() { return {}; }
  static ProcessOutput Inherit() { return {Kind::kInherit, ""}; }
  static ProcessOutput AppendTo(std::string file) { return {Kind::kAppend, std::move(file)}; }
};

struct ProcessSpec {
  std::string executable;              // absolute path, or a name looked up in PATH
  std::vector<std::string> args;       // without argv[0]
  std::string working_dir;             // empty: inherit
  std::vector<std::string> extra_env;  // "KEY=VALUE" entries added to (or replacing in) environ
  int nice = 0;                        // added to the child's CPU niceness (background work)
  bool stdin_pipe = false;  // give the child a pipe on stdin (WriteStdin); else /dev/null
  ProcessOutput stdout_to;
  ProcessOutput stderr_to;
  // A process group of its own: SignalGroup reaches the child's own children, and a Ctrl-C on
  // the terminal reaches only us. Off for a tool run in the foreground (deepool profile), which
  // should see the terminal's signals itself.
  bool own_process_group = true;
  // SIGKILL the child when this process ends (PR_SET_PDEATHSIG), so a crashed or killed test
  // harness leaves no daemons behind. Start such children from a thread that lives as long as
  // they should (the main thread): the kernel sends the signal when the starting thread ends.
  bool end_with_parent = false;
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
  std::function<void(const ProcessExit& exit)> on_exit;  // once, after the pipes closed
};

class ChildProcess {
 public:
  // Starts the child. Lines longer than max_line_bytes are split. Fails with NOT_FOUND when
  // the executable does not exist, INVALID_ARGUMENT when an output file cannot be opened and
  // INTERNAL when the system refuses to spawn it (the message says why: chdir, exec, ...).
  static StatusOr<std::unique_ptr<ChildProcess>> Start(const ProcessSpec& spec,
                                                       ChildCallbacks callbacks = {},
                                                       size_t max_line_bytes = 64 * 1024);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends `signal` to the child's process group (to the child alone without one) unless the
  // child has been reaped, so a recycled pid is never signalled.
  void SignalGroup(int signal);
  // SIGTERM, then SIGKILL if it has not exited within `grace`. Blocks until it has exited.
  // Returns true when SIGTERM was enough.
  bool Terminate(std::chrono::milliseconds grace);
  // Waits for the exit (reaped, callbacks done) up to `timeout`; nullopt on timeout.
  std::optional<ProcessExit> Wait(std::chrono::milliseconds timeout);
  // Waits for the exit however long it takes.
  ProcessExit Wait();
  std::optional<ProcessExit> exit() const;
  // Queues `text` for the child's stdin pipe and returns at once: a thread of the child's own
  // ("dp-stdin-PID") writes the queue in order, so a caller holding locks never waits for a
  // child that does not read yet (a pipe holds 64 KiB). FAILED_PRECONDITION without a pipe or
  // after the child was reaped; RESOURCE_EXHAUSTED past kMaxQueuedStdinBytes unwritten;
  // INTERNAL once a write has failed (the child closed its end; the writer blocks SIGPIPE).
  Status WriteStdin(const std::string& text);
  static constexpr size_t kMaxQueuedStdinBytes = size_t{256} << 20;

 private:
  ChildProcess(pid_t pid, bool own_group, int stdout_fd, int stderr_fd, int stdin_fd,
               ChildCallbacks callbacks, size_t max_line_bytes);
  void ReadAndReap(int stdout_fd, int stderr_fd);
  void WriteQueuedStdin();
  void ReadPipes(int stdout_fd, int stderr_fd);
  ProcessExit Reap();

  const pid_t pid_;
  const bool own_group_;
  ChildCallbacks callbacks_;
  const size_t max_line_bytes_;

  mutable std::mutex mu_;
  std::condition_variable exited_cv_;
  bool reaped_ = false;              // guarded by mu_; no signals after this
  std::optional<ProcessExit> exit_;  // guarded by mu_; set once callbacks have run
  const int stdin_fd_ = -1;          // closed when this object goes
  std::thread reader_;
  // The stdin queue and its writer (started by the first WriteStdin).
  std::mutex stdin_mu_;
  std::condition_variable stdin_cv_;
  std::string stdin_queue_;     // guarded by stdin_mu_
  size_t stdin_unwritten_ = 0;  // guarded by stdin_mu_: queued and being written
  Status stdin_failed_;         // guarded by stdin_mu_: the first failed write
  bool stdin_closing_ = false;  // guarded by stdin_mu_
  std::thread stdin_writer_;
};

// The path of `name` in the folder of this process's own executable (/proc/self/exe), where
// deepool's programs sit side by side; `name` itself when that folder cannot be found.
std::string SiblingExecutable(const std::string& name);

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

}  // namespace deepool
