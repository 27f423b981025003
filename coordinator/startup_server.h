// StartupServer: answers on the coordinator's port while the coordinator loads its store and
// recovers, so a restart never leaves the port closed for as long as loading takes (16 s for a
// 478 MB store, past a worker's 9 s lease). Every call, of any service and method, ends at once
// with UNAVAILABLE "the coordinator is starting ..." and the trailing metadata
// protocol::kCoordinatorStartingKey: workers keep their tasks (an answer renews their lease),
// clients retry. It serves with the coordinator's own credentials (mutual TLS when configured).
// It binds no port: the coordinator's GrpcListener hands it connections until the real server
// takes them over, so the port is never closed.
// Threading: Start and Stop from the owner; calls are answered on one thread, "dp-coord-start".
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "coordinator/grpc_listener.h"

namespace deepool::coordinator {

class StartupServer {
 public:
  // Starts answering the connections `listener` (which must outlive this) hands it.
  static StatusOr<std::unique_ptr<StartupServer>> Start(
      GrpcListener* listener, std::shared_ptr<grpc::ServerCredentials> credentials);
  ~StartupServer();
  StartupServer(const StartupServer&) = delete;
  StartupServer& operator=(const StartupServer&) = delete;

  // Calls answered so far.
  int answered() const { return answered_; }
  // Stops answering (withdrawn from the listener first); connections still open are closed.
  // Idempotent.
  void Stop();

 private:
  StartupServer() = default;
  void Serve();

  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  GrpcListener* listener_ = nullptr;
  std::unique_ptr<GrpcListener::Acceptor> acceptor_;
  std::thread thread_;
  std::atomic<int> answered_{0};
  std::mutex mu_;
  bool stopped_ = false;  // guarded by mu_
};

}  // namespace deepool::coordinator
