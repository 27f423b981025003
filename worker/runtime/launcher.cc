#include "worker/runtime/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/logging.h"

namespace deepool::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string DeviceFor(const std::string& device, int rank) {
  return device == "cuda" ? "cuda:" + std::to_string(rank) : device;
}

// CPU ranks on this machine share its cores.
int CpuThreadsPerRank(int world_size) {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, world_size));
}

}  // namespace

std::string RankOutcome::Describe() const {
  std::string text;
  if (signal != 0) {
    text = "killed by signal " + std::to_string(signal);
  } else if (exited) {
    text = "exit " + std::to_string(exit_code);
  } else {
    text = "still running";
  }
  if (error) text += ": " + *error;
  return text;
}

std::string SiblingExecutable(const std::string& name) {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return name;
  return (self.parent_path() / name).string();
}

RankProcesses::~RankProcesses() {
  KillAll();
  for (auto& outcome : outcomes_) {
    if (outcome.pid > 0 && !outcome.exited && outcome.signal == 0) {
      int status = 0;
      waitpid(outcome.pid, &status, 0);
    }
  }
  for (int fd : stdout_fds_) {
    if (fd >= 0) close(fd);
  }
}

Status RankProcesses::Spawn(int rank, int store_port) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> args{options_.executor_path,
                                "--run-spec",
                                options_.run_spec_path,
                                "--rank",
                                std::to_string(rank),
                                "--world-size",
                                std::to_string(options_.world_size),
                                "--store",
                                options_.store_host + ":" + std::to_string(store_port),
                                "--device",
                                DeviceFor(options_.device, rank),
                                "--timeout-s",
                                std::to_string(options_.timeout_s)};
  if (options_.device == "cpu") {
    args.push_back("--threads");
    args.push_back(std::to_string(CpuThreadsPerRank(options_.world_size)));
  }
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return InternalError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  outcomes_[static_cast<size_t>(rank)].pid = pid;
  stdout_fds_[static_cast<size_t>(rank)] = fds[0];
  return Status::Ok();
}

StatusOr<std::unique_ptr<RankProcesses>> RankProcesses::Start(const LaunchOptions& options) {
  if (options.world_size < 1) return InvalidArgumentError("world size must be >= 1");
  if (access(options.executor_path.c_str(), X_OK) != 0) {
    return NotFoundError("executor binary " + options.executor_path + " is not executable");
  }
  std::unique_ptr<RankProcesses> ranks(new RankProcesses(options));
  ranks->outcomes_.resize(static_cast<size_t>(options.world_size));
  ranks->stdout_fds_.assign(static_cast<size_t>(options.world_size), -1);
  ranks->partial_lines_.resize(static_cast<size_t>(options.world_size));
  for (int r = 0; r < options.world_size; ++r) ranks->outcomes_[static_cast<size_t>(r)].rank = r;
  RETURN_IF_ERROR(ranks->Spawn(0, 0));
  // Rank 0 prints store_ready before anything else once its store listens.
  auto deadline = SteadyClock::now() + std::chrono::seconds(options.timeout_s);
  int port = -1;
  std::string& buffer = ranks->partial_lines_[0];
  while (port < 0) {
    if (SteadyClock::now() > deadline) {
      return DeadlineExceededError("rank 0 did not report its store port within " +
                                   std::to_string(options.timeout_s) + " s");
    }
    pollfd pfd{ranks->stdout_fds_[0], POLLIN, 0};
    poll(&pfd, 1, 200);
    char chunk[4096];
    ssize_t n = read(ranks->stdout_fds_[0], chunk, sizeof(chunk));
    if (n == 0) return UnavailableError("rank 0 exited before its store was ready");
    if (n < 0) continue;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t newline;
    while (port < 0 && (newline = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(line);
      const auto* ready = event.ok() ? std::get_if<protocol::StoreReadyEvent>(&*event) : nullptr;
      if (ready) {
        port = ready->port;
      } else {
        ranks->early_lines_.push_back(line);
        const auto* error = event.ok() ? std::get_if<protocol::ErrorEvent>(&*event) : nullptr;
        if (error) return UnavailableError("rank 0 failed: " + error->message);
      }
    }
  }
  for (int r = 1; r < options.world_size; ++r) RETURN_IF_ERROR(ranks->Spawn(r, port));
  return ranks;
}

void RankProcesses::Kill(int rank, int signal_number) {
  const RankOutcome& outcome = outcomes_.at(static_cast<size_t>(rank));
  if (outcome.pid > 0 && !outcome.exited && outcome.signal == 0) kill(outcome.pid, signal_number);
}

void RankProcesses::KillAll() {
  for (size_t r = 0; r < outcomes_.size(); ++r) Kill(static_cast<int>(r), SIGKILL);
}

void RankProcesses::HandleLine(int rank, const std::string& line, const EventCallback& on_event) {
  StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(line);
  if (!event.ok()) {
    DP_LOG_WARN("rank {} printed a line that is not an event ({}): {}", rank,
                event.status().message(), line);
    return;
  }
  RankOutcome& outcome = outcomes_[static_cast<size_t>(rank)];
  if (const auto* done = std::get_if<protocol::DoneEvent>(&*event)) {
    outcome.done = true;
    outcome.iterations = done->iterations;
    if (done->checkpoint) outcome.checkpoint = done->checkpoint;
  } else if (const auto* error = std::get_if<protocol::ErrorEvent>(&*event)) {
    outcome.error = error->message;
    if (std::find(failure_order_.begin(), failure_order_.end(), rank) == failure_order_.end()) {
      failure_order_.push_back(rank);
    }
  }
  if (on_event) on_event(rank, *event);
}

Status RankProcesses::Wait(const EventCallback& on_event) {
  for (const std::string& line : early_lines_) HandleLine(0, line, on_event);
  early_lines_.clear();
  const int silence_limit_s =
      options_.silence_limit_s > 0 ? options_.silence_limit_s : 3 * options_.timeout_s + 30;
  auto last_activity = SteadyClock::now();
  bool gave_up = false;
  auto running = [&] {
    return std::any_of(outcomes_.begin(), outcomes_.end(), [](const RankOutcome& o) {
      return o.pid > 0 && !o.exited && o.signal == 0;
    });
  };
  while (running()) {
    std::vector<pollfd> pfds;
    std::vector<int> pfd_ranks;
    for (size_t r = 0; r < stdout_fds_.size(); ++r) {
      if (stdout_fds_[r] >= 0) {
        pfds.push_back({stdout_fds_[r], POLLIN, 0});
        pfd_ranks.push_back(static_cast<int>(r));
      }
    }
    if (!pfds.empty())
      poll(pfds.data(), pfds.size(), 100);
    else
      usleep(20000);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int rank = pfd_ranks[i];
      char chunk[8192];
      ssize_t n = read(pfds[i].fd, chunk, sizeof(chunk));
      if (n < 0) continue;
      std::string& buffer = partial_lines_[static_cast<size_t>(rank)];
      if (n == 0) {
        if (!buffer.empty()) HandleLine(rank, buffer, on_event);
        buffer.clear();
        close(pfds[i].fd);
        stdout_fds_[static_cast<size_t>(rank)] = -1;
        continue;
      }
      last_activity = SteadyClock::now();
      buffer.append(chunk, static_cast<size_t>(n));
      size_t newline;
      while ((newline = buffer.find('\n')) != std::string::npos) {
        std::string line = buffer.substr(0, newline);
        buffer.erase(0, newline + 1);
        if (!line.empty()) HandleLine(rank, line, on_event);
      }
    }
    for (auto& outcome : outcomes_) {
      if (outcome.pid <= 0 || outcome.exited || outcome.signal != 0) continue;
      int status = 0;
      if (waitpid(outcome.pid, &status, WNOHANG) != outcome.pid) continue;
      if (WIFSIGNALED(status)) {
        outcome.signal = WTERMSIG(status);
      } else {
        outcome.exited = true;
        outcome.exit_code = WEXITSTATUS(status);
      }
      bool failed = outcome.signal != 0 || outcome.exit_code != 0 || !outcome.done;
      if (failed && std::find(failure_order_.begin(), failure_order_.end(), outcome.rank) ==
                        failure_order_.end()) {
        failure_order_.push_back(outcome.rank);
      }
    }
    if (options_.stop_on_failure && !failure_order_.empty()) KillAll();
    if (SteadyClock::now() - last_activity > std::chrono::seconds(silence_limit_s)) {
      gave_up = true;
      KillAll();
    }
  }
  if (gave_up) {
    return DeadlineExceededError("no progress from any rank for " +
                                 std::to_string(silence_limit_s) + " s; all ranks were killed");
  }
  if (failure_order_.empty()) return Status::Ok();
  // A rank that died without reporting an error (killed, crashed) is usually the cause and the
  // others' "connection closed" errors the consequence: name it first.
  std::stable_partition(failure_order_.begin(), failure_order_.end(), [&](int rank) {
    return !outcomes_[static_cast<size_t>(rank)].error.has_value();
  });
  const RankOutcome& first = outcomes_[static_cast<size_t>(failure_order_.front())];
  std::string message = "rank " + std::to_string(first.rank) + " failed (" + first.Describe() + ")";
  for (size_t i = 1; i < failure_order_.size(); ++i) {
    const RankOutcome& other = outcomes_[static_cast<size_t>(failure_order_[i])];
    message += "; then rank " + std::to_string(other.rank) + " (" + other.Describe() + ")";
  }
  return AbortedError(message);
}

}  // namespace deepool::worker
