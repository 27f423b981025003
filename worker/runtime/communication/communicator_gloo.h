// Communicator over c10d: rendezvous through a c10d::TCPStore (rank 0 hosts it) and one
// ProcessGroupGloo per rank group, each over its own PrefixStore with members only, plus one
// world group for point-to-point transfers and world-wide reductions.
// Threading: as Communicator (one driving thread).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "worker/runtime/communication/communicator.h"

namespace deepool::worker {

struct CommOptions {
  int rank = 0;
  int world_size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 0;  // rank 0 only may pass 0: it binds a free port
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // The address Gloo listens on, where the other ranks reach this one: the worker passes its
  // node's address (--bind-host). Empty: loopback when the store host is a loopback name,
  // otherwise the address this host's name resolves to (often loopback itself, as on hosts
  // whose /etc/hosts maps the hostname to 127.0.1.1: then ranks on other hosts cannot connect).
  std::string bind_host;
  // NCCL only: run NCCL's kernels on high-priority CUDA streams. On for a FG job, so that its
  // communication is not queued behind a BG job's low-priority kernels.
  bool high_priority_streams = true;
};

// Binds the store (rank 0) or connects to it, then joins the world group. `on_store_ready`
// runs on rank 0 right after the store is listening, with the bound port, before waiting for
// the other ranks (the executor prints the port there so a launcher can start the others).
StatusOr<std::unique_ptr<Communicator>> ConnectGloo(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready = {});

}  // namespace deepool::worker
