// Rank processes forked from the calling one, for tools whose ranks run the tool's own code with
// the state built before the fork (deepool-calibrate, benchmarks), not exec'd executors
// (subprocess.h): ForkRanks runs body(rank) in one child per rank and waits for them all, and a
// PortPipe lets rank 0 hand the other ranks the port of a store it listens on (port 0 binds any
// free port, so no port is fixed in advance).
// Threading: fork only while the calling process has no other threads (before libtorch's pools
// or any client starts them), as every caller does; a child then owns everything it inherits.
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"

namespace deepool {

// A pipe over which rank 0 publishes ports and the other ranks read them, in order.
class PortPipe {
 public:
  static StatusOr<PortPipe> Create();
  PortPipe(PortPipe&& other) noexcept;
  PortPipe& operator=(PortPipe&&) = delete;
  PortPipe(const PortPipe&) = delete;
  PortPipe& operator=(const PortPipe&) = delete;
  ~PortPipe();

  // Rank 0: `port`, once for each of the `readers` other ranks.
  Status Publish(int port, int readers) const;
  // Another rank: the next port published; blocks until rank 0 publishes it (the forking
  // process keeps the pipe open, so a rank 0 that died first leaves its readers waiting: bound
  // the wait by the caller's own timeout). UNAVAILABLE at the end of the pipe.
  StatusOr<int> Await() const;

 private:
  PortPipe(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  int read_fd_ = -1;
  int write_fd_ = -1;
};

// Forks a child per rank 0..ranks-1 that runs body(rank) and exits with its return value (stdout
// flushed; std::_Exit, so no static teardown runs while a peer may still be connected), waits for
// every child, and returns their exit codes by rank: -1 for a child killed by a signal. INTERNAL
// when a fork fails (the children already started are waited for first).
StatusOr<std::vector<int>> ForkRanks(int ranks, const std::function<int(int rank)>& body);

}  // namespace deepool
