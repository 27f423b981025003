// The body of deepool-executor, separate from main() so that tests can run it in-process:
// read the run spec, rendezvous, build the executor, train, checkpoint, and report every step as
// one JSON line on `out` (executor_events.h). Errors become an "error" event and a non-OK
// return; libtorch exceptions never escape.
// Threading: runs on the calling thread; with a command descriptor, also one command thread.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"

namespace deepool::worker {

struct ExecutorProcessOptions {
  std::string run_spec_path;
  int rank = 0;
  int world_size = 1;
  std::string store = "127.0.0.1:0";  // HOST:PORT; port 0 only for rank 0
  std::string device = "cpu";
  // CUDA devices: this rank shares its GPU with other ranks, so it communicates over Gloo
  // through host buffers (communicator_staged.h) instead of NCCL, which refuses two ranks on
  // one device. A test and benchmark path; NCCL is the production path.
  bool share_gpu = false;
  // Gloo (CPU devices): the local address the other ranks connect to; empty: CommOptions'
  // default. NCCL picks its own interface (NCCL_SOCKET_IFNAME).
  std::string bind_host;
  int timeout_s = 60;
  // CPU devices: libtorch's intra-op threads for this rank (0: libtorch's default, one per
  // core). Ranks that share a machine's cores must divide them: libtorch's OpenMP threads spin
  // while they wait, and on an oversubscribed machine a parallel region waits for descheduled
  // threads (measured: small_cnn, batch 8, 400 ms per iteration instead of 1 ms).
  int cpu_threads = 0;
  // >= 0: read executor commands from this descriptor while training (executor_commands.h), so
  // BG jobs can be attached to this rank at run time (BackgroundHost). When the run spec
  // already attaches a BG job to this rank, commands are read and ignored.
  int command_fd = -1;
  // The gate mode for BG jobs attached by command: "idle_only" or "concurrent"; empty: the
  // device's default (idle_only on CPU, concurrent on CUDA).
  std::string background_sharing;
};

Status RunExecutorProcess(const ExecutorProcessOptions& options, std::ostream& out);

}  // namespace deepool::worker
