#include "common/process_watch.h"

#include <unistd.h>

#include <fstream>

#include "common/thread_name.h"

namespace deepool {

ProcessRunState ReadProcessRunState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return ProcessRunState::kGone;
  // "PID (COMM) S ...": the command may hold spaces and parentheses; the state follows the last
  // ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return ProcessRunState::kGone;
  switch (stat[close + 2]) {
    case 'Z':
    case 'X':
    case 'x':
      return ProcessRunState::kGone;
    case 'T':
    case 't':
      return ProcessRunState::kStopped;
    default:
      return ProcessRunState::kRunning;
  }
}

ProcessWatch::ProcessWatch(Options options, std::function<void(const std::string&)> on_lost)
    : options_(options), watching_parent_(options.pid == 0), on_lost_(std::move(on_lost)) {
  if (watching_parent_) options_.pid = options.started_by != 0 ? options.started_by : getppid();
  thread_ = std::thread([this] { Run(); });
}

ProcessWatch::~ProcessWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

bool ProcessWatch::Gone() const {
  if (watching_parent_ && getppid() != options_.pid) return true;
  return ReadProcessRunState(options_.pid) == ProcessRunState::kGone;
}

void ProcessWatch::Run() {
  SetCurrentThreadName("dp-proc-watch");
  const std::string who =
      (watching_parent_ ? "parent process " : "process ") + std::to_string(options_.pid);
  using Clock = std::chrono::steady_clock;
  bool stopped = false;
  Clock::time_point stopped_since = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, options_.poll, [&] { return stop_; })) {
    std::string lost;
    if (Gone()) {
      lost = who + " exited";
    } else if (ReadProcessRunState(options_.pid) == ProcessRunState::kStopped) {
      if (!stopped) stopped_since = Clock::now();
      stopped = true;
      if (Clock::now() - stopped_since > options_.stopped_limit) {
        lost = who + " stopped for over " + std::to_string(options_.stopped_limit.count()) + " ms";
      }
    } else {
      stopped = false;
    }
    if (!lost.empty()) {
      lock.unlock();
      on_lost_(lost);
      return;
    }
  }
}

}  // namespace deepool
