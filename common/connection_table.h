// ConnectionTable: the connections a listener has handed on and that are still open, counted
// per peer address, against a bound per peer and one in total: what the listener asks before it
// keeps a new connection. The total bound keeps file descriptors for the rest of the process
// (common/open_files.h); the per-peer bound keeps one peer from taking all of it (as Nomad's
// rpc_max_conns_per_client does).
//
// The table does not own the connections: once handed on, their new owner (gRPC) closes them
// and tells nobody. So each entry is the descriptor's number with the identity of the socket it
// named (device and inode), and `still_open` says whether that number still names that socket
// (the kernel gives a closed number out again, but never to the same socket). A sweep forgets the
// entries that do not. It costs a check per entry, so it runs when a bound is reached, at most
// once per sweep_interval (between sweeps a connection may be refused for one that closed in the
// meantime, and its client retries; none is ever kept past a bound), and whenever the owner
// calls Sweep.
// Threading: not thread-safe; one owner (the listener's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "common/clock.h"

namespace deepool {

struct ConnectionLimits {
  int max_total = 4096;
  int max_per_peer = 100;
};

struct SocketIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  friend bool operator==(const SocketIdentity& a, const SocketIdentity& b) {
    return a.device == b.device && a.inode == b.inode;
  }
};

class ConnectionTable {
 public:
  using StillOpen = std::function<bool(int fd, const SocketIdentity& identity)>;
  enum class Verdict { kKeep, kRefuseTotal, kRefusePeer };

  ConnectionTable(ConnectionLimits limits, StillOpen still_open, const Clock* clock,
                  Clock::Duration sweep_interval);

  // Whether a new connection from `peer` may be kept; at a bound, sweeps first (if the last
  // sweep is sweep_interval old).
  Verdict Check(const std::string& peer);
  // Records a kept connection. An entry already under `fd` is dropped: its socket has closed,
  // since the kernel gave the number out again.
  void Add(int fd, const SocketIdentity& identity, const std::string& peer);
  // Forgets the connections that have closed.
  void Sweep();

  const ConnectionLimits& limits() const { return limits_; }
  int open() const { return static_cast<int>(by_fd_.size()); }
  int open_from(const std::string& peer) const;
  int peers() const { return static_cast<int>(per_peer_.size()); }

 private:
  struct Entry {
    SocketIdentity identity;
    std::string peer;
  };
  void Forget(std::unordered_map<int, Entry>::iterator entry);
  bool AtBound(const std::string& peer) const;

  ConnectionLimits limits_;
  StillOpen still_open_;
  const Clock* clock_;
  Clock::Duration sweep_interval_;
  Clock::TimePoint last_sweep_{};
  bool swept_ = false;
  std::unordered_map<int, Entry> by_fd_;
  std::unordered_map<std::string, int> per_peer_;
};

}  // namespace deepool
