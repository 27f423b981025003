#include "coordinator/startup_server.h"

#include <grpcpp/server_builder.h>

#include "common/thread_name.h"
#include "protocol/coordinator_status.h"

namespace deepool::coordinator {
namespace {

// One call, from its arrival to its answer; the completion queue's tag.
struct StartupCall {
  grpc::GenericServerContext context;
  grpc::GenericServerAsyncReaderWriter stream{&context};
  bool answered = false;
};

constexpr int kCallsRequestedAtOnce = 64;

constexpr const char* kStartingMessage =
    "the coordinator is starting (loading its job store and recovering its jobs); try again "
    "shortly";

}  // namespace

StatusOr<std::unique_ptr<StartupServer>> StartupServer::Start(
    GrpcListener* listener, std::shared_ptr<grpc::ServerCredentials> credentials) {
  std::unique_ptr<StartupServer> s(new StartupServer());
  grpc::ServerBuilder builder;
  s->acceptor_ = GrpcListener::AddAcceptor(&builder, std::move(credentials));
  builder.RegisterAsyncGenericService(&s->service_);
  s->queue_ = builder.AddCompletionQueue();
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return UnavailableError("cannot start the 'starting' server");
  s->thread_ = std::thread([p = s.get()] { p->Serve(); });
  s->listener_ = listener;
  listener->ServeWith(s->acceptor_.get());
  return s;
}

void StartupServer::Serve() {
  SetCurrentThreadName("dp-coord-start");
  // gRPC aborts on a call requested after Shutdown began: ask under the lock Stop takes.
  auto await_call = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    auto* call = new StartupCall();
    service_.RequestCall(&call->context, &call->stream, queue_.get(), queue_.get(), call);
  };
  // Calls that arrive while none is requested wait in gRPC's queue, and Stop's shutdown ends
  // those with CANCELLED, which a client cannot tell from its own cancel: so many are requested
  // at once that a burst of callers finds one each.
  for (int i = 0; i < kCallsRequestedAtOnce; ++i) await_call();
  void* tag = nullptr;
  bool ok = false;
  while (queue_->Next(&tag, &ok)) {
    auto* call = static_cast<StartupCall*>(tag);
    if (call->answered || !ok) {  // its answer went out, or the server is shutting down
      delete call;
      continue;
    }
    await_call();
    call->answered = true;
    call->context.AddTrailingMetadata(protocol::kCoordinatorStartingKey, "1");
    call->stream.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kStartingMessage), call);
    ++answered_;
  }
}

void StartupServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (listener_) listener_->Withdraw(acceptor_.get());
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
  queue_->Shutdown();
  if (thread_.joinable()) thread_.join();
}

StartupServer::~StartupServer() { Stop(); }

}  // namespace deepool::coordinator
