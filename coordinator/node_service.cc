#include <chrono>

#include "coordinator/command_stream.h"
#include "coordinator/convert.h"
#include "coordinator/services.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

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
  auto send = [writer](const v1::TaskCommand& command) { return writer->Write(command); };
  return ToGrpcStatus(
      StreamNodeCommands(scheduler_, jobs_, req->node_id(), send, StopWhenCancelled(ctx)));
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
