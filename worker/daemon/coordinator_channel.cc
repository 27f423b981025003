#include "worker/daemon/coordinator_channel.h"

#include "common/limits.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool::worker::daemon {
namespace {

// How long one wait for a state change lasts: the longest Stop() takes.
constexpr std::chrono::milliseconds kPollInterval{250};
// While the channel cannot connect, a reminder at most this often (each change is logged once).
constexpr std::chrono::seconds kStillDownEvery{10};

}  // namespace

grpc::ChannelArguments CoordinatorChannelArguments() {
  grpc::ChannelArguments args;
  // Retry soon after a coordinator restart: 0.2 s after the first failure, then at most 2 s
  // apart. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is deliberately left alone: gRPC also takes it as
  // the least time a connection attempt is given, and 0.2 s cut TLS handshakes off on a loaded
  // machine; its default (20 s) lets a slow handshake finish.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Leave a coordinator that stopped answering (common/limits.h says why), idle or not. Pings
  // between heartbeats are no abuse: gRPC would otherwise stop after two without data.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepalivePingEveryMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveAnswerMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A task carries its job's graph and plan: more than gRPC's default 4 MiB for a large graph.
  args.SetMaxReceiveMessageSize(kMaxRpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxRpcMessageBytes);
  return args;
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenCoordinatorChannel(
    const std::string& address, const security::ClientSecurity& security) {
  return security::OpenChannel(address, security, CoordinatorChannelArguments());
}

std::string ChannelStateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "connected";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "cannot connect (retrying)";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shut down";
  }
  return "unknown";
}

ChannelWatcher::ChannelWatcher(std::shared_ptr<grpc::Channel> channel, std::string peer)
    : channel_(std::move(channel)), peer_(std::move(peer)) {
  thread_ = std::thread([this] { Run(); });
}

ChannelWatcher::~ChannelWatcher() { Stop(); }

void ChannelWatcher::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void ChannelWatcher::Run() {
  SetCurrentThreadName("dp-worker-link");
  using Clock = std::chrono::steady_clock;
  grpc_connectivity_state last = channel_->GetState(/*try_to_connect=*/true);
  Clock::time_point down_since = Clock::now();
  Clock::time_point reminded = down_since;
  bool connected = false;
  while (!stopping_) {
    // Blocks, polling the channel, until its state changes or the interval ends.
    channel_->WaitForStateChange(last, std::chrono::system_clock::now() + kPollInterval);
    const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
    const Clock::time_point at = Clock::now();
    const double down_s = std::chrono::duration<double>(at - down_since).count();
    if (state != last) DP_LOG_DEBUG("{}: {}", peer_, ChannelStateName(state));
    last = state;
    if (state == GRPC_CHANNEL_READY && !connected) {
      connected = true;
      if (connections_++ == 0) {
        DP_LOG_INFO("{}: connected", peer_);
      } else {
        DP_LOG_INFO("{}: connected again after {:.1f} s", peer_, down_s);
      }
    } else if (state != GRPC_CHANNEL_READY && connected) {
      connected = false;
      down_since = reminded = at;
      DP_LOG_WARN("{}: connection lost ({}); reconnecting", peer_, ChannelStateName(state));
    } else if (!connected && at - reminded >= kStillDownEvery) {
      reminded = at;
      DP_LOG_WARN("{}: not connected for {:.0f} s ({}); still trying", peer_, down_s,
                  ChannelStateName(state));
    }
  }
}

}  // namespace deepool::worker::daemon
