#include <chrono>

#include "common/limits.h"
#include "common/logging.h"
#include "coordinator/command_stream.h"
#include "coordinator/convert.h"
#include "coordinator/services.h"
#include "protocol/coordinator_status.h"
#include "protocol/version.h"

namespace deepool::coordinator {
namespace {

std::vector<v1::RunningTask> ToVector(
    const google::protobuf::RepeatedPtrField<v1::RunningTask>& tasks) {
  return std::vector<v1::RunningTask>(tasks.begin(), tasks.end());
}

// Each listed task is looked up, may be answered with a cancel and held for: bounded.
Status CheckListedTasks(int listed) {
  if (listed <= kMaxListedTasks) return Status::Ok();
  return InvalidArgumentError("running_tasks: " + std::to_string(listed) + " listed, at most " +
                              std::to_string(kMaxListedTasks));
}

}  // namespace

Status NodeServiceImpl::AuthorizeNodeName(grpc::ServerContext* ctx,
                                          const std::string& node_name) const {
  StatusOr<security::Identity> caller = auth_->Authenticate(security::PeerCredentialsOf(*ctx));
  Status allowed =
      caller.ok() ? security::RequireWorker(*caller, node_name, auth_->open()) : caller.status();
  if (!allowed.ok()) auth_->LogRefusal("worker call", ctx->peer(), allowed);
  return allowed;
}

Status NodeServiceImpl::AuthorizeNodeId(grpc::ServerContext* ctx,
                                        const std::string& node_id) const {
  if (auth_->open()) return Status::Ok();
  StatusOr<NodeRecord> node = nodes_->Get(node_id);
  if (node.ok()) return AuthorizeNodeName(ctx, node->name);
  // An unknown id is the worker's cue to register again: any worker may learn that.
  StatusOr<security::Identity> caller = auth_->Authenticate(security::PeerCredentialsOf(*ctx));
  if (caller.ok() && caller->role == security::Role::kWorker) return node.status();
  return AuthorizeNodeName(ctx, node_id);  // logs the refusal and says what is missing
}

grpc::Status NodeServiceImpl::Answer(grpc::ServerContext* ctx, const std::string& node_id,
                                     const Status& status) const {
  if (!status.ok() && status.code() != StatusCode::kPermissionDenied &&
      status.code() != StatusCode::kUnauthenticated) {
    StatusOr<NodeRecord> node = nodes_->Get(node_id);
    if (!node.ok() || node->state == NodeState::kDown) {
      ctx->AddTrailingMetadata(protocol::kRegisterAgainKey, "1");
    }
  }
  return ToGrpcStatus(status);
}

grpc::Status NodeServiceImpl::RegisterNode(grpc::ServerContext* ctx,
                                           const v1::RegisterNodeRequest* req,
                                           v1::RegisterNodeResponse* resp) {
  Status allowed = AuthorizeNodeName(ctx, req->name());
  if (!allowed.ok()) return ToGrpcStatus(allowed);
  if (req->devices_size() > kMaxNodeDevices) {
    return ToGrpcStatus(
        InvalidArgumentError("devices: at most " + std::to_string(kMaxNodeDevices) + " per node"));
  }
  Status listed = CheckListedTasks(req->running_tasks_size());
  if (!listed.ok()) return ToGrpcStatus(listed);
  StatusOr<protocol::ProtocolRange> common = NegotiateWorkerProtocol(
      req->protocol_version(), req->oldest_protocol_version(), protocol::ProtocolRange{});
  if (!common.ok()) return ToGrpcStatus(common.status());
  StatusOr<Scheduler::Registration> registration =
      scheduler_->RegisterNode(req->name(), req->address(), DevicesFromProto(req->devices()),
                               ToVector(req->running_tasks()), *common);
  if (!registration.ok()) return ToGrpcStatus(registration.status());
  resp->set_node_id(registration->node.id);
  resp->set_protocol_version(common->newest);
  resp->set_heartbeat_interval_ms(heartbeat_interval_ms_);
  resp->set_node_timeout_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(nodes_->node_timeout()).count());
  for (const std::string& id : registration->cancel_task_ids) resp->add_cancel_task_ids(id);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  Status allowed = AuthorizeNodeId(ctx, req->node_id());
  if (!allowed.ok()) return Answer(ctx, req->node_id(), allowed);
  Status listed = CheckListedTasks(req->running_tasks_size());
  if (!listed.ok()) return ToGrpcStatus(listed);
  StatusOr<std::vector<v1::TaskCommand>> commands =
      scheduler_->Heartbeat(req->node_id(), ToVector(req->running_tasks()));
  if (!commands.ok()) return Answer(ctx, req->node_id(), commands.status());
  for (v1::TaskCommand& c : *commands) *resp->add_commands() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::StreamTasks(grpc::ServerContext* ctx,
                                          const v1::StreamTasksRequest* req,
                                          grpc::ServerWriter<v1::TaskCommand>* writer) {
  Status allowed = AuthorizeNodeId(ctx, req->node_id());
  if (!allowed.ok()) return Answer(ctx, req->node_id(), allowed);
  auto send = [writer](const v1::TaskCommand& command) { return writer->Write(command); };
  // A node whose certificate or token is revoked, or expires, while its stream is open is sent
  // no more tasks (its other calls are refused already).
  Status refused;
  const std::string node_id = req->node_id();
  Status streamed = StreamNodeCommands(
      scheduler_, jobs_, node_id, send,
      StopWhenCancelledOrRefused(
          ctx, [this, ctx, node_id] { return AuthorizeNodeId(ctx, node_id); }, &refused));
  return Answer(ctx, node_id, refused.ok() ? streamed : refused);
}

grpc::Status NodeServiceImpl::ReportProgress(grpc::ServerContext* ctx,
                                             const v1::ReportProgressRequest* req,
                                             v1::ReportProgressResponse* resp) {
  Status allowed = AuthorizeNodeId(ctx, req->node_id());
  if (!allowed.ok()) return Answer(ctx, req->node_id(), allowed);
  StatusOr<bool> cancel = scheduler_->ReportProgress(*req);
  if (!cancel.ok()) return Answer(ctx, req->node_id(), cancel.status());
  resp->set_cancel(*cancel);
  std::optional<std::string> job_id =
      *cancel ? std::nullopt : scheduler_->JobOfTask(req->task_id());
  if (job_id) {
    std::optional<v1::TraceRequest> trace =
        traces_->OnReport(*job_id, req->node_id(), req->task_id(), req->traces());
    if (trace) *resp->mutable_trace() = *trace;
    resp->set_stop_at_checkpoint(scheduler_->StopAtCheckpointWanted(req->task_id()));
  }
  return grpc::Status::OK;
}

grpc::Status NodeServiceImpl::ReportTaskExit(grpc::ServerContext* ctx,
                                             const v1::ReportTaskExitRequest* req,
                                             v1::ReportTaskExitResponse*) {
  Status allowed = AuthorizeNodeId(ctx, req->node_id());
  if (!allowed.ok()) return Answer(ctx, req->node_id(), allowed);
  return Answer(ctx, req->node_id(), scheduler_->ReportTaskExit(*req));
}

}  // namespace deepool::coordinator
