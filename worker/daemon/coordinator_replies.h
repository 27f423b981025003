// What the worker daemon reads from the coordinator's replies, shared by its registration and
// report halves (worker_daemon.cc, worker_daemon_reports.cc).
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include "common/status.h"
#include "protocol/coordinator_status.h"

namespace deepool::worker::daemon {

// The coordinator refused a call because it does not know this node (it restarted or marked
// the node down): the node must register again.
inline bool AsksToRegisterAgain(const grpc::ClientContext& context, const grpc::Status& status) {
  return !status.ok() &&
         context.GetServerTrailingMetadata().count(protocol::kRegisterAgainKey) != 0;
}

// A gRPC status as a deepool Status (the codes share their numbers).
inline Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
}

}  // namespace deepool::worker::daemon
