// When a loop behind a server stream (JobFollower, StreamNodeCommands) stops early.
//
// Such a loop sleeps on a notification (a condition variable) and wakes at once when there is
// something to send or on shutdown. Its one timed wake-up is the cancel probe: gRPC's
// synchronous API gives no notification when a client cancels (ServerContext::IsCancelled must
// be asked), so while nothing happens the loop asks `cancelled` every `cancel_probe`. A second:
// a pool holds a stream per node and per watcher, thousands at once, and each probe is a
// wake-up and a lock; a quarter of a second made the probes alone thousands of context
// switches a second (bench/capacity).
#pragma once

#include <chrono>
#include <functional>

namespace deepool::coordinator {

struct FollowStop {
  std::function<bool()> cancelled = [] { return false; };  // the client went away
  std::chrono::milliseconds cancel_probe{1000};
};

// Stops when a gRPC call's client cancels (`context` is a grpc::ServerContext, or any type with
// IsCancelled(); a template so this header needs no gRPC).
template <typename Context>
FollowStop StopWhenCancelled(Context* context) {
  FollowStop stop;
  stop.cancelled = [context] { return context->IsCancelled(); };
  return stop;
}

}  // namespace deepool::coordinator
