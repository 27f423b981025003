#include "common/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/logging.h"
#include "common/thread_name.h"

extern char** environ;

namespace deepool {
namespace {

// Owns one file descriptor; -1 when empty.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset(other.Release());
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read;
  Fd write;
};

// Both ends close on exec: the child keeps only what it dup2s onto 0, 1 and 2.
StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return InternalError(std::string("pipe: ") + strerror(errno));
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

// The child's end of one output stream, and (for kLines) our end to read.
struct OutputFds {
  Fd child;   // -1: inherit
  Fd parent;  // -1: nothing to read
};

StatusOr<OutputFds> OpenOutput(const ProcessOutput& output) {
  switch (output.kind) {
    case ProcessOutput::Kind::kLines: {
      ASSIGN_OR_RETURN(Pipe pipe, MakePipe());
      return OutputFds{std::move(pipe.write), std::move(pipe.read)};
    }
    case ProcessOutput::Kind::kInherit:
      return OutputFds{};
    case ProcessOutput::Kind::kAppend: {
      int fd = open(output.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        return InvalidArgumentError("cannot open " + output.path + ": " + strerror(errno));
      }
      return OutputFds{Fd(fd), Fd()};
    }
  }
  return InternalError("unknown output kind");
}

// Finds `name` the way execvp would, but before fork, so a missing binary is a clean error.
std::optional<std::string> ResolveExecutable(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> MergedEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto key_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const auto& x : extra) replaced |= key_of(x) == key_of(entry);
    if (!replaced) env.push_back(std::move(entry));
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Everything the forked child uses, prepared before fork: after fork only async-signal-safe
// calls are allowed, so no allocation.
struct ChildSetup {
  std::vector<char*> argv;
  std::vector<char*> envp;
  const char* working_dir = nullptr;
  int nice = 0;
  bool own_group = true;
  pid_t end_with_parent = 0;  // the parent's pid, when the child dies with it
  int stdin_fd = -1;
  int stdout_fd = -1;  // -1: inherit
  int stderr_fd = -1;
  int exec_error_fd = -1;
};

[[noreturn]] void RunChild(const ChildSetup& setup) {
  if (setup.own_group) setpgid(0, 0);
  if (setup.end_with_parent != 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before prctl took effect: then nobody would send the signal.
    if (getppid() != setup.end_with_parent) _exit(127);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
    sigaction(sig, &default_action, nullptr);
  }
  dup2(setup.stdin_fd, STDIN_FILENO);
  if (setup.stdout_fd >= 0) dup2(setup.stdout_fd, STDOUT_FILENO);
  if (setup.stderr_fd >= 0) dup2(setup.stderr_fd, STDERR_FILENO);
  // Nothing else crosses the exec: a file another thread opened without O_CLOEXEC (a stream's
  // log file, a library's socket) and whatever this process inherited would stay open in the
  // child for its whole life. (A kernel without close_range leaves them, as before.)
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (setup.nice != 0) setpriority(PRIO_PROCESS, 0, setup.nice);
  // The parent reads errno from the pipe; negative when chdir, not exec, failed.
  int report = 0;
  if (setup.working_dir && chdir(setup.working_dir) != 0) {
    report = -errno;
  } else {
    execve(setup.argv[0], setup.argv.data(), setup.envp.data());
    report = errno;
  }
  ssize_t ignored = write(setup.exec_error_fd, &report, sizeof(report));
  (void)ignored;
  _exit(127);
}

// Splits incoming bytes into lines; a partial line waits for more bytes.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line) : max_line_(max_line) {}
  template <typename Fn>
  void Feed(const char* data, size_t size, Fn&& emit) {
    for (size_t i = 0; i < size; ++i) {
      if (data[i] == '\n') {
        if (!buffer_.empty() && buffer_.back() == '\r') buffer_.pop_back();
        emit(buffer_);
        buffer_.clear();
      } else {
        buffer_.push_back(data[i]);
        if (buffer_.size() >= max_line_) {
          emit(buffer_);
          buffer_.clear();
        }
      }
    }
  }
  template <typename Fn>
  void Flush(Fn&& emit) {
    if (!buffer_.empty()) emit(buffer_);
    buffer_.clear();
  }

 private:
  size_t max_line_;
  std::string buffer_;
};

}  // namespace

std::string ProcessExit::Describe() const {
  if (signal != 0) {
    const char* name = strsignal(signal);
    return "killed by signal " + std::to_string(signal) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "exit code " + std::to_string(exit_code);
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(const ProcessSpec& spec,
                                                            ChildCallbacks callbacks,
                                                            size_t max_line_bytes) {
  std::optional<std::string> path = ResolveExecutable(spec.executable);
  if (!path) return NotFoundError("executable not found or not executable: " + spec.executable);

  std::vector<std::string> argv_strings{*path};
  argv_strings.insert(argv_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<std::string> env_strings = MergedEnvironment(spec.extra_env);
  ASSIGN_OR_RETURN(OutputFds out, OpenOutput(spec.stdout_to));
  ASSIGN_OR_RETURN(OutputFds err, OpenOutput(spec.stderr_to));
  ASSIGN_OR_RETURN(Pipe exec_error, MakePipe());
  Pipe in;
  if (spec.stdin_pipe) {
    ASSIGN_OR_RETURN(in, MakePipe());
  } else {
    in.read = Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  }

  ChildSetup setup;
  setup.argv = CStrings(argv_strings);
  setup.envp = CStrings(env_strings);
  setup.working_dir = spec.working_dir.empty() ? nullptr : spec.working_dir.c_str();
  setup.nice = spec.nice;
  setup.own_group = spec.own_process_group;
  setup.end_with_parent = spec.end_with_parent ? getpid() : 0;
  setup.stdin_fd = in.read.get();
  setup.stdout_fd = out.child.get();
  setup.stderr_fd = err.child.get();
  setup.exec_error_fd = exec_error.write.get();

  pid_t pid = fork();
  if (pid < 0) return InternalError(std::string("fork: ") + strerror(errno));
  if (pid == 0) RunChild(setup);
  // Also set the group here, so a signal sent right after Start() reaches it.
  if (spec.own_process_group) setpgid(pid, pid);
  // Close our copies of the child's ends, so end-of-file arrives when the child exits.
  out.child.Reset();
  err.child.Reset();
  in.read.Reset();
  exec_error.write.Reset();

  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_error.read.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (child_errno < 0) {
      return InternalError("cannot start " + *path + ": chdir " + spec.working_dir + ": " +
                           strerror(-child_errno));
    }
    return InternalError("cannot start " + *path + ": " + strerror(child_errno));
  }
  std::unique_ptr<ChildProcess> child(
      new ChildProcess(pid, spec.own_process_group, out.parent.Release(), err.parent.Release(),
                       in.write.Release(), std::move(callbacks), max_line_bytes));
  return child;
}

ChildProcess::ChildProcess(pid_t pid, bool own_group, int stdout_fd, int stderr_fd, int stdin_fd,
                           ChildCallbacks callbacks, size_t max_line_bytes)
    : pid_(pid),
      own_group_(own_group),
      callbacks_(std::move(callbacks)),
      max_line_bytes_(max_line_bytes),
      stdin_fd_(stdin_fd) {
  reader_ = std::thread([this, stdout_fd, stderr_fd] { ReadAndReap(stdout_fd, stderr_fd); });
}

ChildProcess::~ChildProcess() {
  SignalGroup(SIGKILL);  // a write blocked on the child's full pipe fails once it is gone
  if (reader_.joinable()) reader_.join();
  {
    std::lock_guard<std::mutex> lock(stdin_mu_);
    stdin_closing_ = true;
  }
  stdin_cv_.notify_all();
  if (stdin_writer_.joinable()) stdin_writer_.join();
  if (stdin_fd_ >= 0) close(stdin_fd_);
}

Status ChildProcess::WriteStdin(const std::string& text) {
  if (stdin_fd_ < 0) return FailedPreconditionError("the child has no stdin pipe");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reaped_) return FailedPreconditionError("the child has exited");
  }
  std::lock_guard<std::mutex> lock(stdin_mu_);
  if (!stdin_failed_.ok()) return stdin_failed_;
  if (stdin_unwritten_ + text.size() > kMaxQueuedStdinBytes) {
    return ResourceExhaustedError("the child's stdin has " + std::to_string(stdin_unwritten_) +
                                  " bytes unread; it does not read its commands");
  }
  stdin_queue_ += text;
  stdin_unwritten_ += text.size();
  if (!stdin_writer_.joinable()) stdin_writer_ = std::thread([this] { WriteQueuedStdin(); });
  stdin_cv_.notify_one();
  return Status::Ok();
}

void ChildProcess::WriteQueuedStdin() {
  SetCurrentThreadName("dp-stdin-" + std::to_string(pid_));
  // A write into a pipe the child closed fails with EPIPE here rather than raise SIGPIPE (sent to
  // this thread, which then ends), whatever the process does with that signal.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  std::unique_lock<std::mutex> lock(stdin_mu_);
  while (true) {
    stdin_cv_.wait(lock, [this] { return stdin_closing_ || !stdin_queue_.empty(); });
    if (stdin_queue_.empty()) return;  // closing, all written
    std::string text;
    text.swap(stdin_queue_);
    lock.unlock();
    size_t done = 0;
    Status written;
    while (done < text.size()) {
      const ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        written = InternalError(std::string("write to child stdin: ") + strerror(errno));
        break;
      }
      done += static_cast<size_t>(n);
    }
    lock.lock();
    stdin_unwritten_ -= text.size();
    if (!written.ok()) {
      stdin_failed_ = written;
      stdin_queue_.clear();
      return;
    }
  }
}

void ChildProcess::ReadAndReap(int stdout_fd, int stderr_fd) {
  SetCurrentThreadName("dp-child-" + std::to_string(pid_));
  ReadPipes(stdout_fd, stderr_fd);
  ProcessExit exit = Reap();
  if (callbacks_.on_exit) callbacks_.on_exit(exit);
  {
    std::lock_guard<std::mutex> lock(mu_);
    exit_ = exit;
  }
  exited_cv_.notify_all();
}

// Reads both pipes (either may be -1: not piped) until both are closed, emitting lines.
void ChildProcess::ReadPipes(int stdout_fd, int stderr_fd) {
  LineSplitter out_lines(max_line_bytes_), err_lines(max_line_bytes_);
  auto emit_out = [this](const std::string& line) {
    if (callbacks_.on_stdout_line) callbacks_.on_stdout_line(line);
  };
  auto emit_err = [this](const std::string& line) {
    if (callbacks_.on_stderr_line) callbacks_.on_stderr_line(line);
  };
  pollfd fds[2] = {{stdout_fd, POLLIN, 0}, {stderr_fd, POLLIN, 0}};
  int open_count = (stdout_fd >= 0) + (stderr_fd >= 0);
  char buffer[8192];
  while (open_count > 0) {
    // poll ignores negative fds, so a stream that is not piped costs nothing.
    int ready = poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      DP_LOG_ERROR("poll on child {} pipes failed: {}", pid_, strerror(errno));
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
        continue;
      }
      if (i == 0) {
        out_lines.Feed(buffer, static_cast<size_t>(n), emit_out);
      } else {
        err_lines.Feed(buffer, static_cast<size_t>(n), emit_err);
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  out_lines.Flush(emit_out);
  err_lines.Flush(emit_err);
}

ProcessExit ChildProcess::Reap() {
  // Wait without reaping first, so SignalGroup never signals a recycled process group id.
  siginfo_t info{};
  while (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    reaped_ = true;
  }
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  ProcessExit exit;
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  }
  return exit;
}

void ChildProcess::SignalGroup(int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reaped_) return;
  if (!own_group_ || (kill(-pid_, signal) != 0 && errno == ESRCH)) kill(pid_, signal);
}

bool ChildProcess::Terminate(std::chrono::milliseconds grace) {
  SignalGroup(SIGTERM);
  if (Wait(grace)) return true;
  SignalGroup(SIGKILL);
  Wait();
  return false;
}

std::optional<ProcessExit> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  exited_cv_.wait_for(lock, timeout, [this] { return exit_.has_value(); });
  return exit_;
}

ProcessExit ChildProcess::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  exited_cv_.wait(lock, [this] { return exit_.has_value(); });
  return *exit_;
}

std::optional<ProcessExit> ChildProcess::exit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_;
}

std::string SiblingExecutable(const std::string& name) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return name;
  return (self.parent_path() / name).string();
}

void LogTail::Add(std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.push_back(std::move(line));
  while (lines_.size() > capacity_) lines_.pop_front();
}

std::vector<std::string> LogTail::Lines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {lines_.begin(), lines_.end()};
}

}  // namespace deepool
