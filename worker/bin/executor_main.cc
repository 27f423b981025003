// deepool-executor: one training rank. Contract (docs/runtime.md):
//   deepool-executor --run-spec FILE --rank R --world-size N --store HOST:PORT
//                    [--device cpu|cuda:K] [--timeout-s S] [--threads N]
//                    [--commands-on-stdin [--background-sharing idle_only|concurrent]]
// stdout carries one JSON event per line; logs go to stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "common/logging.h"
#include "worker/runtime/executor_process.h"

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
  CLI11_PARSE(app, argc, argv);
  if (commands_on_stdin) options.command_fd = 0;
  deepool::InitLogging("executor-" + std::to_string(options.rank), log_level);
  deepool::Status status = deepool::worker::RunExecutorProcess(options, std::cout);
  std::cout.flush();
  // After a failed transfer c10d's process groups may still hold threads blocked on dead peers;
  // running their destructors could wait out more timeouts. The result is reported: leave now.
  if (!status.ok()) std::_Exit(1);
  return 0;
}
