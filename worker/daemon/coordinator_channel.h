// The worker's channel to the coordinator, and a watcher that keeps it connecting and says so.
//
// Why a watcher: gRPC's synchronous client advances a connection attempt (the TCP connect, each
// round trip of the TLS handshake) only while some thread of the process polls, which in
// practice means a thread blocked in a call on that channel. While the coordinator is away the
// worker's calls fail fast or end at short deadlines, so between them nobody reads the
// coordinator's half of a handshake; the attempt then dies at its connect deadline, and a TLS
// worker could retry forever without ever finishing one. The watcher waits on the channel's
// state changes (which polls the channel all the time), asks it to connect whenever it falls
// idle, and logs each change, so an operator sees what the worker is doing while it cannot reach
// the coordinator.
//
// Threading: the watcher owns one thread, "dp-worker-link", started by the constructor and
// joined by Stop() or the destructor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "security/transport.h"

namespace deepool::worker::daemon {

// The channel arguments the worker dials the coordinator with: prompt reconnects after a
// restart, messages as large as a task (its graph and plan), and gRPC's own connect timeout.
grpc::ChannelArguments CoordinatorChannelArguments();

// A channel to the coordinator at `address` with those arguments and `security`.
StatusOr<std::shared_ptr<grpc::Channel>> OpenCoordinatorChannel(
    const std::string& address, const security::ClientSecurity& security);

// The state's name as an operator reads it in the log.
std::string ChannelStateName(grpc_connectivity_state state);

class ChannelWatcher {
 public:
  // Watches `channel`; `peer` names the other end in log lines ("coordinator 10.0.0.1:7070").
  ChannelWatcher(std::shared_ptr<grpc::Channel> channel, std::string peer);
  ~ChannelWatcher();
  ChannelWatcher(const ChannelWatcher&) = delete;
  ChannelWatcher& operator=(const ChannelWatcher&) = delete;

  // Ends the watch within about a poll interval; idempotent.
  void Stop();
  // How many times the channel became ready (connected) since the watch began.
  int connections() const { return connections_.load(); }

 private:
  void Run();

  std::shared_ptr<grpc::Channel> channel_;
  const std::string peer_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace deepool::worker::daemon
