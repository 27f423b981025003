// deepool-executor: one training rank. Contract (docs/runtime.md):
//   deepool-executor --run-spec FILE --rank R --world-size N --store HOST:PORT
//                    [--device cpu|cuda:K [--share-gpu]] [--timeout-s S] [--threads N]
//                    [--commands-on-stdin [--background-sharing idle_only|concurrent]]
//                    [--worker-lease-s S]
// stdout carries one JSON event per line; logs go to stderr.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "common/logging.h"
#include "common/process_watch.h"
#include "protocol/executor_events.h"
#include "worker/runtime/executor_process.h"

namespace {

// The worker daemon that started this rank is gone or frozen: its lease on us is over. Say why
// and end at once. The daemon no longer reads our pipes, so they may be full and the other
// threads blocked writing to them (holding the logger's lock): write without blocking, past the
// logger, and leave.
[[noreturn]] void EndWithoutWorker(int rank, const std::string& why) {
  const std::string event = deepool::protocol::ExecutorEventToJson(
      deepool::protocol::ErrorEvent{rank, "the worker daemon's lease ended (" + why + "); stopping",
                                    deepool::StatusCode::kAborted});
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    const std::string line = "\n" + event + "\n";
    if (write(fd, line.data(), line.size()) < 0) continue;  // full or closed: nobody to tell
  }
  std::_Exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  deepool::worker::ExecutorProcessOptions options;
  std::string log_level = "warn";
  CLI::App app{"deepool-executor: runs one rank of a training plan"};
  app.add_option("--run-spec", options.run_spec_path, "run spec JSON file")->required();
  app.add_option("--rank", options.rank, "this process's rank")->required();
  app.add_option("--world-size", options.world_size, "number of ranks")->required();
  app.add_option("--store", options.store, "HOST:PORT of the c10d store (rank 0: port 0 binds)")
      ->required();
  app.add_option("--device", options.device, "cpu or cuda:K");
  app.add_flag("--share-gpu", options.share_gpu,
               "CUDA: other ranks share this GPU, so communicate over Gloo through host buffers "
               "instead of NCCL (a test and benchmark path)");
  app.add_option("--bind-host", options.bind_host,
                 "CPU devices: the local address other ranks reach this one at (Gloo); default: "
                 "loopback for a loopback store, else the address the hostname resolves to");
  app.add_option("--timeout-s", options.timeout_s, "communication timeout in seconds");
  app.add_option("--threads", options.cpu_threads,
                 "CPU device: libtorch intra-op threads (0: one per core; ranks sharing a "
                 "machine should divide its cores)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  bool commands_on_stdin = false;
  app.add_flag("--commands-on-stdin", commands_on_stdin,
               "read attach_background / detach_background commands from stdin");
  app.add_option("--background-sharing", options.background_sharing,
                 "gate mode for BG jobs attached by command: idle_only or concurrent");
  double worker_lease_s = 0;
  app.add_option("--worker-lease-s", worker_lease_s,
                 "end when the parent (the worker daemon) exits, or is stopped for longer than "
                 "this (0: no watch)")
      ->check(CLI::NonNegativeNumber);
  pid_t worker_pid = 0;
  app.add_option("--worker-pid", worker_pid,
                 "the worker daemon that started this executor: with --worker-lease-s, a worker "
                 "that ended while the executor loaded is noticed too");
  CLI11_PARSE(app, argc, argv);
  if (commands_on_stdin) options.command_fd = 0;
  deepool::InitLogging("executor-" + std::to_string(options.rank), log_level);
  std::unique_ptr<deepool::ProcessWatch> worker_watch;
  if (worker_lease_s > 0) {
    deepool::ProcessWatch::Options watch;
    watch.stopped_limit = std::chrono::milliseconds(static_cast<int64_t>(worker_lease_s * 1000));
    watch.started_by = worker_pid;
    worker_watch = std::make_unique<deepool::ProcessWatch>(
        watch, [rank = options.rank](const std::string& why) { EndWithoutWorker(rank, why); });
  }
  deepool::Status status = deepool::worker::RunExecutorProcess(options, std::cout);
  std::cout.flush();
  // After a failed transfer c10d's process groups may still hold threads blocked on dead peers;
  // running their destructors could wait out more timeouts. The result is reported: leave now.
  if (!status.ok()) std::_Exit(1);
  return 0;
}
