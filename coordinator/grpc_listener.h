// GrpcListener: the coordinator's TCP port. It accepts connections itself and hands each one it
// keeps to the gRPC server that serves now, through that server's ExternalConnectionAcceptor:
// the StartupServer while the store loads, then the real one, so the port stays open from Start
// to Stop.
//
// Why not let gRPC listen: gRPC 1.51's listener (src/core/lib/iomgr/tcp_server_posix.cc,
// on_read) stops for good at the first accept that fails with anything but EINTR or EAGAIN. On
// EMFILE it logs "Failed accept4: Too many open files" and never watches the listening socket
// again, so a flood of idle connections past the open-file limit left the port deaf until a
// restart, even after the flood ended (issue 47). Here:
// - kept connections are bounded in total and per peer address (common/connection_table.h,
//   sized by common/open_files.h so the total stays below the open-file limit); a connection
//   past a bound is reset at once (RST: neither side keeps it in TIME_WAIT), with a warning at
//   most every 10 s;
// - an accept that fails for want of descriptors or memory pauses accepting for 250 ms, then
//   accepting resumes by itself.
// gRPC closes the connections it was given (when the peer goes, or at its handshake deadline
// when the peer never completes one); the table learns of it by sweeping (when a bound is
// reached, and every 5 s).
//
// Contract with the servers: gRPC neither serves nor closes a connection handed to a server that
// has shut down (it logs "NOT handling external connection" and leaks the descriptor), so a
// server's owner calls Withdraw before shutting that server down.
// Threading: accepting, the table and the hand-offs run on one thread, "dp-coord-accept".
// ServeWith and Withdraw may be called from any thread (they wait for a hand-off in progress);
// stats() too. Start and Stop from the owner.
#pragma once

#include <grpcpp/server_builder.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/connection_table.h"
#include "common/status.h"
#include "common/wake_pipe.h"

namespace deepool::coordinator {

struct ListenerStats {
  uint64_t kept = 0;           // handed to a server
  uint64_t refused_total = 0;  // reset: the total bound was reached
  uint64_t refused_peer = 0;   // reset: the peer's bound was reached
  uint64_t accept_pauses = 0;  // accepts that failed for want of descriptors or memory
  int open = 0;                // kept and not yet seen closed, as of the last sweep
};

class GrpcListener {
 public:
  using Acceptor = grpc::experimental::ExternalConnectionAcceptor;

  // Binds listen ("HOST:PORT"; port 0: any free one) and starts accepting. Until ServeWith,
  // connections are reset. `clock` paces the sweeps at a bound and the warnings (a real one in
  // the coordinator: it paces a socket loop).
  static StatusOr<std::unique_ptr<GrpcListener>> Start(const std::string& listen,
                                                       ConnectionLimits limits, const Clock* clock);
  ~GrpcListener();
  GrpcListener(const GrpcListener&) = delete;
  GrpcListener& operator=(const GrpcListener&) = delete;

  // Adds to `builder` what a server fed by a GrpcListener needs: an acceptor with `credentials`
  // (ServeWith it once the server has started), and a deadline of kHandshakeTimeoutMs for a new
  // connection's TLS handshake and HTTP/2 settings. gRPC's default is 120 s: a peer that
  // connects and says nothing would hold a place under the bounds that long. Also lets workers
  // ping as often as their keepalive does (kKeepalivePingEveryMs, common/limits.h).
  static std::unique_ptr<Acceptor> AddAcceptor(
      grpc::ServerBuilder* builder, std::shared_ptr<grpc::ServerCredentials> credentials);
  static constexpr int kHandshakeTimeoutMs = 10'000;

  int port() const { return port_; }
  const ConnectionLimits& limits() const { return limits_; }
  // Hands kept connections to `acceptor` (not owned) from now on, until Withdraw or the next
  // ServeWith. The acceptor's server must have started.
  void ServeWith(Acceptor* acceptor);
  // If `acceptor` is the one served with, connections are reset from now on.
  void Withdraw(Acceptor* acceptor);
  ListenerStats stats() const;
  // Stops accepting and closes the port; connections already handed on stay with their server.
  // Idempotent.
  void Stop();

 private:
  GrpcListener() = default;
  void Serve();
  // Accepts what waits, a turn's worth; false when accepting must pause (out of descriptors or
  // memory).
  bool AcceptSome(ConnectionTable& table);
  void HandOff(ConnectionTable& table, int fd, const std::string& peer);
  void NoteRefusal(const ConnectionTable& table, ConnectionTable::Verdict verdict,
                   const std::string& peer);
  void NotePause(int error);

  ConnectionLimits limits_;
  const Clock* clock_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string address_;
  WakePipe stop_pipe_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};

  std::mutex hand_mu_;            // held across a hand-off
  Acceptor* acceptor_ = nullptr;  // guarded by hand_mu_

  std::atomic<uint64_t> kept_{0};
  std::atomic<uint64_t> refused_total_{0};
  std::atomic<uint64_t> refused_peer_{0};
  std::atomic<uint64_t> accept_pauses_{0};
  std::atomic<int> open_{0};

  // Rate-limited warnings; the accepting thread's alone.
  std::optional<Clock::TimePoint> last_refusal_warning_;
  uint64_t refusals_unreported_ = 0;
  std::optional<Clock::TimePoint> last_pause_warning_;
  uint64_t pauses_unreported_ = 0;
};

}  // namespace deepool::coordinator
