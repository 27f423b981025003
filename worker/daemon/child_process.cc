#include "worker/daemon/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "common/logging.h"

extern char** environ;

namespace deepool::worker::daemon {
namespace {

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
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
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

  // Everything the child needs is built before fork: after fork only async-signal-safe calls.
  std::vector<std::string> argv_strings{*path};
  argv_strings.insert(argv_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<std::string> env_strings = MergedEnvironment(spec.extra_env);
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);
  const char* working_dir = spec.working_dir.empty() ? nullptr : spec.working_dir.c_str();
  const int nice_increment = spec.nice;

  int out_pipe[2], err_pipe[2], exec_error_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0)
    return InternalError(std::string("pipe: ") + strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return InternalError(std::string("pipe: ") + strerror(errno));
  }
  if (pipe2(exec_error_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return InternalError(std::string("pipe: ") + strerror(errno));
  }
  int in_pipe[2] = {-1, -1};
  if (spec.stdin_pipe && pipe2(in_pipe, O_CLOEXEC) != 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_error_pipe[0],
                   exec_error_pipe[1]}) {
      close(fd);
    }
    return InternalError(std::string("pipe: ") + strerror(errno));
  }
  int dev_null = spec.stdin_pipe ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);

  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_error_pipe[0],
                   exec_error_pipe[1], dev_null, in_pipe[0], in_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
    return InternalError(std::string("fork: ") + strerror(saved));
  }
  if (pid == 0) {
    // Child. A new process group, so cancel can kill the executor and anything it starts.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD})
      sigaction(sig, &default_action, nullptr);
    if (dev_null >= 0) dup2(dev_null, STDIN_FILENO);
    if (in_pipe[0] >= 0) dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    if (nice_increment != 0) setpriority(PRIO_PROCESS, 0, nice_increment);
    int err = 0;
    if (working_dir && chdir(working_dir) != 0) {
      err = errno;
    } else {
      execve(argv[0], argv.data(), envp.data());
      err = errno;
    }
    ssize_t ignored = write(exec_error_pipe[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  // Parent. Also set the group here, so a signal sent right after Start() reaches it.
  setpgid(pid, pid);
  for (int fd : {out_pipe[1], err_pipe[1], exec_error_pipe[1], dev_null, in_pipe[0]}) {
    if (fd >= 0) close(fd);
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_error_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_error_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status = 0;
    waitpid(pid, &status, 0);
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (in_pipe[1] >= 0) close(in_pipe[1]);
    return InternalError("cannot start " + *path + ": " + strerror(child_errno));
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess(pid, out_pipe[0], err_pipe[0], in_pipe[1],
                                                       std::move(callbacks), max_line_bytes));
  return child;
}

ChildProcess::ChildProcess(pid_t pid, int stdout_fd, int stderr_fd, int stdin_fd,
                           ChildCallbacks callbacks, size_t max_line_bytes)
    : pid_(pid),
      callbacks_(std::move(callbacks)),
      max_line_bytes_(max_line_bytes),
      stdin_fd_(stdin_fd) {
  reader_ = std::thread([this, stdout_fd, stderr_fd] { ReadLoop(stdout_fd, stderr_fd); });
}

ChildProcess::~ChildProcess() {
  SignalGroup(SIGKILL);
  if (reader_.joinable()) reader_.join();
  if (stdin_fd_ >= 0) close(stdin_fd_);
}

Status ChildProcess::WriteStdin(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stdin_fd_ < 0) return FailedPreconditionError("the child has no stdin pipe");
  if (reaped_) return FailedPreconditionError("the child has exited");
  size_t done = 0;
  while (done < text.size()) {
    // The daemon ignores SIGPIPE (worker/daemon/main.cc): a closed pipe is EPIPE here.
    ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError(std::string("write to child stdin: ") + strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

void ChildProcess::ReadLoop(int stdout_fd, int stderr_fd) {
  std::string thread_name = "dp-child-" + std::to_string(pid_);
  thread_name.resize(std::min<size_t>(thread_name.size(), 15));
  pthread_setname_np(pthread_self(), thread_name.c_str());

  LineSplitter out_lines(max_line_bytes_), err_lines(max_line_bytes_);
  auto emit_out = [this](const std::string& line) {
    if (callbacks_.on_stdout_line) callbacks_.on_stdout_line(line);
  };
  auto emit_err = [this](const std::string& line) {
    if (callbacks_.on_stderr_line) callbacks_.on_stderr_line(line);
  };
  pollfd fds[2] = {{stdout_fd, POLLIN, 0}, {stderr_fd, POLLIN, 0}};
  char buffer[8192];
  int open_count = 2;
  while (open_count > 0) {
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
  if (callbacks_.on_exit) callbacks_.on_exit(exit);
  {
    std::lock_guard<std::mutex> lock(mu_);
    exit_ = exit;
  }
  exited_cv_.notify_all();
}

void ChildProcess::SignalGroup(int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reaped_) return;
  if (kill(-pid_, signal) != 0 && errno == ESRCH) kill(pid_, signal);
}

void ChildProcess::Terminate(std::chrono::milliseconds grace) {
  SignalGroup(SIGTERM);
  if (!Wait(grace)) SignalGroup(SIGKILL);
}

std::optional<ProcessExit> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  exited_cv_.wait_for(lock, timeout, [this] { return exit_.has_value(); });
  return exit_;
}

std::optional<ProcessExit> ChildProcess::exit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_;
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

}  // namespace deepool::worker::daemon
