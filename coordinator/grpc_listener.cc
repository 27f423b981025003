#include "coordinator/grpc_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/limits.h"
#include "common/listen_socket.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool::coordinator {
namespace {

// Accepted per turn of the loop, so a flood cannot keep Stop waiting.
constexpr int kAcceptsPerTurn = 64;
// Out of descriptors or memory, accepting rests this long (the listening socket, a connection
// waiting on it, would wake poll at once, again and again).
constexpr int kAcceptPauseMs = 250;
// With nothing to accept, the table is swept this often, so stats().open stays current.
constexpr int kIdleSweepMs = 5000;
// At a bound, the table is swept at most this often (a sweep is one fstat per connection).
constexpr auto kSweepInterval = std::chrono::milliseconds(50);
// Refusals and pauses are logged at most this often, with how many there were.
constexpr auto kWarnEvery = std::chrono::seconds(10);

SocketIdentity IdentityOf(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// Whether `fd` still names the socket it named when it was kept.
bool StillOpen(int fd, const SocketIdentity& identity) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && IdentityOf(st) == identity;
}

// The peer's address without its port; an IPv4 address mapped into IPv6 as plain IPv4, so a
// peer counts once whichever family the listening socket has.
std::string PeerAddress(const sockaddr_storage& from) {
  char text[INET6_ADDRSTRLEN] = {};
  if (from.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(from).sin_addr, text, sizeof(text));
  } else if (from.ss_family == AF_INET6) {
    const in6_addr& address = reinterpret_cast<const sockaddr_in6&>(from).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&address)) {
      inet_ntop(AF_INET, &address.s6_addr[12], text, sizeof(text));
    } else {
      inet_ntop(AF_INET6, &address, text, sizeof(text));
    }
  }
  return text;
}

// Closes with a reset: a refused peer learns at once, and no TIME_WAIT is left on our side.
void Reset(int fd) {
  const linger abort{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  close(fd);
}

}  // namespace

StatusOr<std::unique_ptr<GrpcListener>> GrpcListener::Start(const std::string& listen,
                                                            ConnectionLimits limits,
                                                            const Clock* clock) {
  ASSIGN_OR_RETURN(const ListeningSocket bound, ListenTcp(listen, SOMAXCONN));
  std::unique_ptr<GrpcListener> listener(new GrpcListener());
  listener->limits_ = limits;
  listener->clock_ = clock;
  listener->listen_fd_ = bound.fd;
  listener->port_ = bound.port;
  listener->address_ = bound.address;
  ASSIGN_OR_RETURN(listener->stop_pipe_, WakePipe::Open());
  listener->thread_ = std::thread([p = listener.get()] { p->Serve(); });
  return listener;
}

std::unique_ptr<GrpcListener::Acceptor> GrpcListener::AddAcceptor(
    grpc::ServerBuilder* builder, std::shared_ptr<grpc::ServerCredentials> credentials) {
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  // Workers' keepalive pings (common/limits.h): gRPC's default refuses a ping more often than
  // every 5 minutes without data, and ends the connection after two such.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              kKeepalivePingEveryMs / 2);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return builder->experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
}

void GrpcListener::ServeWith(Acceptor* acceptor) {
  std::lock_guard<std::mutex> lock(hand_mu_);
  acceptor_ = acceptor;
}

void GrpcListener::Withdraw(Acceptor* acceptor) {
  std::lock_guard<std::mutex> lock(hand_mu_);
  if (acceptor_ == acceptor) acceptor_ = nullptr;
}

ListenerStats GrpcListener::stats() const {
  ListenerStats s;
  s.kept = kept_.load();
  s.refused_total = refused_total_.load();
  s.refused_peer = refused_peer_.load();
  s.accept_pauses = accept_pauses_.load();
  s.open = open_.load();
  return s;
}

void GrpcListener::Serve() {
  SetCurrentThreadName("dp-coord-accept");
  ConnectionTable table(limits_, StillOpen, clock_, kSweepInterval);
  bool paused = false;
  while (true) {
    pollfd fds[2] = {{stop_pipe_.read_fd(), POLLIN, 0}, {paused ? -1 : listen_fd_, POLLIN, 0}};
    const int ready = poll(fds, 2, paused ? kAcceptPauseMs : kIdleSweepMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {  // out of memory for poll's own tables: rest, as for a failed accept
      NotePause(errno);
      paused = true;
      continue;
    }
    if (fds[0].revents != 0) return;
    paused = false;
    if (ready == 0) {
      table.Sweep();
    } else if ((fds[1].revents & POLLIN) != 0) {
      paused = !AcceptSome(table);
    }
    open_ = table.open();
  }
}

bool GrpcListener::AcceptSome(ConnectionTable& table) {
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    sockaddr_storage from{};
    socklen_t length = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        NotePause(errno);
        return false;
      }
      if (errno == EAGAIN) return true;  // none left (EWOULDBLOCK is the same on Linux)
      continue;  // a connection that failed before it was taken (ECONNABORTED, EPROTO, ...)
    }
    const std::string peer = PeerAddress(from);
    const ConnectionTable::Verdict verdict = table.Check(peer);
    if (verdict != ConnectionTable::Verdict::kKeep) {
      Reset(fd);
      NoteRefusal(table, verdict, peer);
      continue;
    }
    HandOff(table, fd, peer);
  }
  return true;
}

void GrpcListener::HandOff(ConnectionTable& table, int fd, const std::string& peer) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Reset(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(hand_mu_);
  if (acceptor_ == nullptr) {  // between servers, or shutting down
    Reset(fd);
    return;
  }
  // Recorded before the hand-off: from then on gRPC may close it (and the number be reused) at
  // any moment, which the next sweep sees.
  table.Add(fd, IdentityOf(st), peer);
  Acceptor::NewConnectionParameters connection;
  connection.listener_fd = listen_fd_;
  connection.fd = fd;
  acceptor_->HandleNewConnection(&connection);
  ++kept_;
}

void GrpcListener::NoteRefusal(const ConnectionTable& table, ConnectionTable::Verdict verdict,
                               const std::string& peer) {
  const bool total = verdict == ConnectionTable::Verdict::kRefuseTotal;
  ++(total ? refused_total_ : refused_peer_);
  ++refusals_unreported_;
  const Clock::TimePoint now = clock_->Now();
  if (last_refusal_warning_ && now - *last_refusal_warning_ < kWarnEvery) return;
  DP_LOG_WARN(
      "{}: refused {} connection(s) since the last warning (latest from {}: {}); {} open from "
      "{} peer(s), at most {} in all and {} per peer address (--max-connections, "
      "--max-connections-per-peer)",
      address_, refusals_unreported_, peer,
      total ? "all connections in use" : "its own connections in use", table.open(), table.peers(),
      limits_.max_total, limits_.max_per_peer);
  last_refusal_warning_ = now;
  refusals_unreported_ = 0;
}

void GrpcListener::NotePause(int error) {
  ++accept_pauses_;
  ++pauses_unreported_;
  const Clock::TimePoint now = clock_->Now();
  if (last_pause_warning_ && now - *last_pause_warning_ < kWarnEvery) return;
  DP_LOG_WARN("{}: accept: {}; accepting pauses {} ms ({} pause(s) since the last warning)",
              address_, std::strerror(error), kAcceptPauseMs, pauses_unreported_);
  last_pause_warning_ = now;
  pauses_unreported_ = 0;
}

void GrpcListener::Stop() {
  if (stopped_.exchange(true)) return;
  stop_pipe_.Wake();
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

GrpcListener::~GrpcListener() { Stop(); }

}  // namespace deepool::coordinator
