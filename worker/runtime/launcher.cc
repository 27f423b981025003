#include "worker/runtime/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/host_port.h"
#include "common/logging.h"

namespace deepool::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::string DeviceFor(const std::string& device, bool share_gpu, int rank) {
  if (device != "cuda") return device;
  return "cuda:" + std::to_string(share_gpu ? 0 : rank);
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

RankProcesses::~RankProcesses() { KillAll(); }

Status RankProcesses::Spawn(int rank, int store_port) {
  ProcessSpec spec;
  spec.executable = options_.executor_path;
  spec.args = {"--run-spec",   options_.run_spec_path,
               "--rank",       std::to_string(rank),
               "--world-size", std::to_string(options_.world_size),
               "--store",      FormatHostPort(options_.store_host, store_port),
               "--device",     DeviceFor(options_.device, options_.share_gpu, rank),
               "--timeout-s",  std::to_string(options_.timeout_s)};
  if (options_.share_gpu) spec.args.push_back("--share-gpu");
  if (options_.device == "cpu") {
    spec.args.push_back("--threads");
    spec.args.push_back(std::to_string(CpuThreadsPerRank(options_.world_size)));
  }
  spec.stderr_to = ProcessOutput::Inherit();
  spec.own_process_group = false;  // a Ctrl-C on deepool-train reaches its ranks too
  ChildCallbacks callbacks;
  callbacks.on_stdout_line = [this, rank](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    outputs_.push_back({rank, line, {}});
    output_cv_.notify_all();
  };
  callbacks.on_exit = [this, rank](const ProcessExit& exit) {
    std::lock_guard<std::mutex> lock(mu_);
    outputs_.push_back({rank, std::nullopt, exit});
    output_cv_.notify_all();
  };
  ASSIGN_OR_RETURN(children_[static_cast<size_t>(rank)],
                   ChildProcess::Start(spec, std::move(callbacks)));
  outcomes_[static_cast<size_t>(rank)].pid = children_[static_cast<size_t>(rank)]->pid();
  return Status::Ok();
}

std::optional<RankProcesses::Output> RankProcesses::NextOutput(SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!output_cv_.wait_until(lock, deadline, [&] { return !outputs_.empty(); })) {
    return std::nullopt;
  }
  Output output = std::move(outputs_.front());
  outputs_.pop_front();
  return output;
}

StatusOr<int> RankProcesses::AwaitStorePort() {
  const auto deadline = SteadyClock::now() + std::chrono::seconds(options_.timeout_s);
  while (true) {
    std::optional<Output> output = NextOutput(deadline);
    if (!output) {
      return DeadlineExceededError("rank 0 did not report its store port within " +
                                   std::to_string(options_.timeout_s) + " s");
    }
    if (!output->line) {
      HandleExit(0, output->exit);
      return UnavailableError("rank 0 exited before its store was ready (" +
                              output->exit.Describe() + ")");
    }
    StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(*output->line);
    if (const auto* ready =
            event.ok() ? std::get_if<protocol::StoreReadyEvent>(&*event) : nullptr) {
      return ready->port;
    }
    early_lines_.push_back(*output->line);
    if (const auto* error = event.ok() ? std::get_if<protocol::ErrorEvent>(&*event) : nullptr) {
      return UnavailableError("rank 0 failed: " + error->message);
    }
  }
}

StatusOr<std::unique_ptr<RankProcesses>> RankProcesses::Start(const LaunchOptions& options) {
  if (options.world_size < 1) return InvalidArgumentError("world size must be >= 1");
  if (options.share_gpu && options.device != "cuda") {
    return InvalidArgumentError("sharing a GPU between ranks needs device cuda, not " +
                                options.device);
  }
  if (access(options.executor_path.c_str(), X_OK) != 0) {
    return NotFoundError("executor binary " + options.executor_path + " is not executable");
  }
  std::unique_ptr<RankProcesses> ranks(new RankProcesses(options));
  const auto world = static_cast<size_t>(options.world_size);
  ranks->outcomes_.resize(world);
  ranks->children_.resize(world);
  for (int r = 0; r < options.world_size; ++r) ranks->outcomes_[static_cast<size_t>(r)].rank = r;
  RETURN_IF_ERROR(ranks->Spawn(0, 0));
  ASSIGN_OR_RETURN(int port, ranks->AwaitStorePort());
  for (int r = 1; r < options.world_size; ++r) RETURN_IF_ERROR(ranks->Spawn(r, port));
  return ranks;
}

void RankProcesses::Kill(int rank, int signal_number) {
  const auto& child = children_.at(static_cast<size_t>(rank));
  if (child) child->SignalGroup(signal_number);  // no-op once reaped
}

void RankProcesses::KillAll() {
  for (size_t r = 0; r < children_.size(); ++r) Kill(static_cast<int>(r), SIGKILL);
}

bool RankProcesses::AnyRunning() const {
  return std::any_of(outcomes_.begin(), outcomes_.end(),
                     [](const RankOutcome& o) { return o.pid > 0 && !o.exited && o.signal == 0; });
}

void RankProcesses::HandleLine(int rank, const std::string& line, const EventCallback& on_event) {
  StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(line);
  if (!event.ok()) {
    // The protocol allows log lines (such as a resume's) beside the events.
    if (line.empty() || line.front() != '{') {
      DP_LOG_INFO("rank {}: {}", rank, line);
    } else {
      DP_LOG_WARN("rank {} printed a line that is not an event ({}): {}", rank,
                  event.status().message(), line);
    }
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

void RankProcesses::HandleExit(int rank, const ProcessExit& exit) {
  RankOutcome& outcome = outcomes_[static_cast<size_t>(rank)];
  outcome.signal = exit.signal;
  outcome.exited = exit.signal == 0;
  outcome.exit_code = exit.exit_code;
  const bool failed = !exit.ok() || !outcome.done;
  if (failed &&
      std::find(failure_order_.begin(), failure_order_.end(), rank) == failure_order_.end()) {
    failure_order_.push_back(rank);
  }
}

Status RankProcesses::Wait(const EventCallback& on_event) {
  for (const std::string& line : early_lines_) HandleLine(0, line, on_event);
  early_lines_.clear();
  const int silence_limit_s =
      options_.silence_limit_s > 0 ? options_.silence_limit_s : 3 * options_.timeout_s + 30;
  const auto silence_limit = std::chrono::seconds(silence_limit_s);
  bool gave_up = false;
  while (AnyRunning()) {
    std::optional<Output> output = NextOutput(SteadyClock::now() + silence_limit);
    if (!output) {
      gave_up = true;
      KillAll();  // their exits still arrive and end the loop
      continue;
    }
    if (output->line) {
      if (!output->line->empty()) HandleLine(output->rank, *output->line, on_event);
    } else {
      HandleExit(output->rank, output->exit);
    }
    if (options_.stop_on_failure && !failure_order_.empty()) KillAll();
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
