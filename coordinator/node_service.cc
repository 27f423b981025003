#include <chrono>

#include "coordinator/convert.h"
#include "coordinator/services.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

constexpr std::chrono::milliseconds kStreamPoll{250};

std::vector<v1::RunningTask> ToVector(
    const google::protobuf::RepeatedPtrField<v1::RunningTask>& tasks) {
  return std::vector<v1::RunningTask>(tasks.begin(), tasks.end());
}

}  // namespace

grpc::Status NodeServiceImpl::RegisterNode(grpc::ServerContext*, const v1::RegisterNodeRequest* req,
                                           v1::RegisterNodeResponse* resp) {
  Status protocol = CheckWorkerProtocol(req->protocol_version(), protocol::kProtocolVersion);
  if (!protocol.ok()) return ToGrpcStatus(protocol);
  StatusOr<Scheduler::Registration> registration =
      scheduler_->RegisterNode(req->name(), req->address(), DevicesFromProto(req->devices()),
                               ToVector(req->running_tasks()));
  if (!registration.ok()) return ToGrpcStatus(registration.status());
  resp->set_node_id(registration->node.id);
  resp->set_heartbeat_interval_ms(heartbeat_interval_ms_);
  resp->set_node_timeout_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(nodes_->node_timeout()).count());
  for (const std::string& id : registration->cancel_task_ids) resp->add_cancel_task_ids(id);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  StatusOr<std::vector<v1::TaskCommand>> commands =
      scheduler_->Heartbeat(req->node_id(), ToVector(req->running_tasks()));
  if (!commands.ok()) return ToGrpcStatus(commands.status());
  for (v1::TaskCommand& c : *commands) *resp->add_commands() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::StreamTasks(grpc::ServerContext* ctx,
                                          const v1::StreamTasksRequest* req,
                                          grpc::ServerWriter<v1::TaskCommand>* writer) {
  while (!ctx->IsCancelled()) {
    if (jobs_->shutting_down()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down");
    }
    StatusOr<std::vector<v1::TaskCommand>> commands =
        scheduler_->WaitForCommands(req->node_id(), kStreamPoll);
    if (!commands.ok()) return ToGrpcStatus(commands.status());
    for (const v1::TaskCommand& command : *commands) {
      // A failed write drops the command here; the next heartbeat re-sends what the worker lacks.
      if (!writer->Write(command)) return grpc::Status::OK;
    }
  }
  return grpc::Status::CANCELLED;
}

grpc::Status NodeServiceImpl::ReportProgress(grpc::ServerContext*,
                                             const v1::ReportProgressRequest* req,
                                             v1::ReportProgressResponse* resp) {
  StatusOr<bool> cancel = scheduler_->ReportProgress(*req);
  if (!cancel.ok()) return ToGrpcStatus(cancel.status());
  resp->set_cancel(*cancel);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ReportTaskExit(grpc::ServerContext*,
                                             const v1::ReportTaskExitRequest* req,
                                             v1::ReportTaskExitResponse*) {
  return ToGrpcStatus(scheduler_->ReportTaskExit(*req));
}

}  // namespace deepool::coordinator
