#include <algorithm>

#include "common/logging.h"
#include "coordinator/convert.h"
#include "coordinator/job_follower.h"
#include "coordinator/policy_status.h"
#include "coordinator/services.h"
#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"

namespace deepool::coordinator {
namespace {

// A client stream goes on while its credentials still prove someone.
std::function<Status()> StillAuthenticated(grpc::ServerContext* ctx,
                                           const security::Authenticator* auth) {
  return [ctx, auth] { return auth->Authenticate(security::PeerCredentialsOf(*ctx)).status(); };
}

}  // namespace

FollowStop StopWhenCancelledOrRefused(grpc::ServerContext* ctx,
                                      std::function<Status()> still_allowed, Status* refused) {
  FollowStop stop = StopWhenCancelled(ctx);
  stop.cancelled = [ctx, still_allowed = std::move(still_allowed), refused] {
    if (ctx->IsCancelled()) return true;
    Status allowed = still_allowed();
    if (allowed.ok()) return false;
    DP_LOG_WARN("a stream of {} ends: {}", ctx->peer(), allowed.ToString());
    *refused = std::move(allowed);
    return true;
  };
  return stop;
}

v1::Job CoordinatorServiceImpl::ClientView(const JobRecord& job) const {
  return ClientView(job, scheduler_->LastPolicyView());
}

v1::Job CoordinatorServiceImpl::ClientView(const JobRecord& job,
                                           const Scheduler::PolicyView& policy) const {
  v1::Job proto = JobToProto(job);
  SetPolicyStanding(policy, job, &proto);
  if (job.state != JobState::kPending) return proto;
  if (std::optional<int> position = jobs_->QueuePosition(job.id)) {
    proto.set_queue_position(*position);
  }
  return proto;
}

StatusOr<security::Identity> CoordinatorServiceImpl::Caller(grpc::ServerContext* ctx,
                                                            const char* method) const {
  StatusOr<security::Identity> caller = auth_->Authenticate(security::PeerCredentialsOf(*ctx));
  if (caller.ok()) {
    Status allowed = security::RequireClient(*caller);
    if (allowed.ok()) return caller;
    caller = allowed;
  }
  auth_->LogRefusal(method, ctx->peer(), caller.status());
  return caller;
}

StatusOr<CoordinatorServiceImpl::Admitted> CoordinatorServiceImpl::Admit(grpc::ServerContext* ctx,
                                                                         const char* method,
                                                                         CallSlots* slots) const {
  ASSIGN_OR_RETURN(security::Identity caller, Caller(ctx, method));
  StatusOr<CallSlots::Slot> slot = slots->Acquire(caller.name);
  if (!slot.ok()) {
    auth_->LogRefusal(method, ctx->peer(), slot.status());  // rate-limited: a flood of refusals
    return slot.status();
  }
  return Admitted{std::move(caller), *std::move(slot)};
}

StatusOr<JobRecord> CoordinatorServiceImpl::AccessibleJob(const security::Identity& caller,
                                                          const char* method,
                                                          const std::string& job_id) const {
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(job_id));
  if (!security::MayAccessJob(caller, job.owner)) {
    DP_LOG_WARN("{} of {} by {} refused: not the owner", method, job_id, caller.name);
    return PermissionDeniedError("job " + job.id + " belongs to another user; user " + caller.name +
                                 " needs the admin role to see or cancel it");
  }
  return job;
}

grpc::Status CoordinatorServiceImpl::SubmitJob(grpc::ServerContext* ctx,
                                               const v1::SubmitJobRequest* req,
                                               v1::SubmitJobResponse* resp) {
  StatusOr<Admitted> call = Admit(ctx, "SubmitJob", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobSpec> spec = InvalidArgumentError("job spec: give spec or spec_json");
  if (req->has_spec()) {
    spec = jobspec::JobSpecFromProto(req->spec());
  } else if (req->spec_source_case() == v1::SubmitJobRequest::kSpecJson) {
    spec = jobspec::ParseJobSpecJson(req->spec_json());
  }
  StatusOr<JobRecord> job = spec.ok()
                                ? scheduler_->Submit(*spec, req->request_id(), call->caller.name)
                                : StatusOr<JobRecord>(spec.status());
  if (!job.ok()) {
    // Refusals are logged (with the peer) so an operator can see who sends what.
    DP_LOG_INFO("SubmitJob from {} refused: {}", ctx->peer(), job.status().ToString());
    return ToGrpcStatus(job.status());
  }
  resp->set_job_id(job->id);
  *resp->mutable_job() = ClientView(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                            v1::Job* resp) {
  StatusOr<Admitted> call = Admit(ctx, "GetJob", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobRecord> job = AccessibleJob(call->caller, "GetJob", req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = ClientView(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ListJobs(grpc::ServerContext* ctx,
                                              const v1::ListJobsRequest* req,
                                              v1::ListJobsResponse* resp) {
  StatusOr<Admitted> call = Admit(ctx, "ListJobs", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  const security::Identity& caller = call->caller;
  StatusOr<JobQuery> query = JobQueryFromRequest(*req);
  if (!query.ok()) return ToGrpcStatus(query.status());
  // A user lists their own jobs; the cluster summary below still counts everyone's.
  if (caller.role != security::Role::kAdmin) query->owner = caller.name;
  JobPage page = jobs_->ListPage(*query);
  const Scheduler::PolicyView policy = scheduler_->LastPolicyView();
  for (const JobRecord& job : page.jobs) *resp->add_jobs() = ClientView(job, policy);
  resp->set_next_page_token(NextPageToken(page));
  *resp->mutable_summary() = ClusterSummaryToProto(
      SummarizeCluster(jobs_->Active(), nodes_->List(), scheduler_->DeviceUses()));
  SetPolicyShares(policy, resp->mutable_summary());
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::CancelJob(grpc::ServerContext* ctx,
                                               const v1::CancelJobRequest* req, v1::Job* resp) {
  StatusOr<Admitted> call = Admit(ctx, "CancelJob", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobRecord> accessible = AccessibleJob(call->caller, "CancelJob", req->job_id());
  if (!accessible.ok()) return ToGrpcStatus(accessible.status());
  StatusOr<JobRecord> job = scheduler_->Cancel(req->job_id(), req->reason());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = JobToProto(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ResizeJob(grpc::ServerContext* ctx,
                                               const v1::ResizeJobRequest* req, v1::Job* resp) {
  StatusOr<Admitted> call = Admit(ctx, "ResizeJob", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobRecord> accessible = AccessibleJob(call->caller, "ResizeJob", req->job_id());
  if (!accessible.ok()) return ToGrpcStatus(accessible.status());
  StatusOr<JobRecord> job = scheduler_->Resize(req->job_id(), req->gpus());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = ClientView(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::WatchJob(grpc::ServerContext* ctx,
                                              const v1::WatchJobRequest* req,
                                              grpc::ServerWriter<v1::Job>* writer) {
  StatusOr<Admitted> stream = Admit(ctx, "WatchJob", client_streams_);
  if (!stream.ok()) return ToGrpcStatus(stream.status());
  StatusOr<JobRecord> accessible = AccessibleJob(stream->caller, "WatchJob", req->job_id());
  if (!accessible.ok()) return ToGrpcStatus(accessible.status());
  std::string last_sent;
  auto send = [&](const JobRecord& job) {
    v1::Job proto = ClientView(job);
    // A job's log lines change its version too; the client sees a new message only when the
    // job itself changed.
    std::string serialized = proto.SerializeAsString();
    if (serialized == last_sent) return true;
    last_sent = std::move(serialized);
    return writer->Write(proto);
  };
  Status refused;
  Status watched = JobFollower(jobs_).Watch(
      req->job_id(), send,
      StopWhenCancelledOrRefused(ctx, StillAuthenticated(ctx, auth_), &refused));
  return ToGrpcStatus(refused.ok() ? watched : refused);
}

grpc::Status CoordinatorServiceImpl::GetJobLogs(grpc::ServerContext* ctx,
                                                const v1::GetJobLogsRequest* req,
                                                grpc::ServerWriter<v1::LogEntry>* writer) {
  StatusOr<Admitted> stream = Admit(ctx, "GetJobLogs", client_streams_);
  if (!stream.ok()) return ToGrpcStatus(stream.status());
  StatusOr<JobRecord> accessible = AccessibleJob(stream->caller, "GetJobLogs", req->job_id());
  if (!accessible.ok()) return ToGrpcStatus(accessible.status());
  LogFollowRequest request;
  request.tail_lines = req->tail_lines();
  request.follow = req->follow();
  auto send = [&](const LogRecord& line) {
    v1::LogEntry entry;
    entry.set_time_ms(line.time_ms);
    entry.set_job_id(req->job_id());
    entry.set_node_id(line.node_id);
    entry.set_rank(line.rank);
    entry.set_line(line.line);
    return writer->Write(entry);
  };
  Status refused;
  Status followed = JobFollower(jobs_).Logs(
      req->job_id(), request, send,
      StopWhenCancelledOrRefused(ctx, StillAuthenticated(ctx, auth_), &refused));
  return ToGrpcStatus(refused.ok() ? followed : refused);
}

v1::Node CoordinatorServiceImpl::NodeView(const NodeRecord& node) const {
  return NodeToProto(node, scheduler_->DeviceUses(), scheduler_->TasksOnNode(node.id));
}

grpc::Status CoordinatorServiceImpl::ListNodes(grpc::ServerContext* ctx,
                                               const v1::ListNodesRequest*,
                                               v1::ListNodesResponse* resp) {
  StatusOr<Admitted> call = Admit(ctx, "ListNodes", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  auto uses = scheduler_->DeviceUses();
  for (const NodeRecord& node : nodes_->List()) {
    *resp->add_nodes() = NodeToProto(node, uses, scheduler_->TasksOnNode(node.id));
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::DrainNode(grpc::ServerContext* ctx,
                                               const v1::DrainNodeRequest* req, v1::Node* resp) {
  StatusOr<Admitted> call = Admit(ctx, "DrainNode", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  Status admin = security::RequireAdmin(call->caller, "drain a node");
  if (!admin.ok()) return ToGrpcStatus(admin);
  StatusOr<NodeRecord> node = nodes_->Drain(req->node());
  if (!node.ok()) return ToGrpcStatus(node.status());
  *resp = NodeView(*node);
  if (req->evacuate()) {
    StatusOr<std::vector<std::string>> evacuations = scheduler_->Evacuate(node->id);
    if (!evacuations.ok()) return ToGrpcStatus(evacuations.status());
    for (const std::string& line : *evacuations) resp->add_evacuations(line);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::UndrainNode(grpc::ServerContext* ctx,
                                                 const v1::UndrainNodeRequest* req,
                                                 v1::Node* resp) {
  StatusOr<Admitted> call = Admit(ctx, "UndrainNode", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  Status admin = security::RequireAdmin(call->caller, "undrain a node");
  if (!admin.ok()) return ToGrpcStatus(admin);
  StatusOr<NodeRecord> node = nodes_->Undrain(req->node());
  if (!node.ok()) return ToGrpcStatus(node.status());
  *resp = NodeView(*node);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::GetJobPlan(grpc::ServerContext* ctx,
                                                const v1::GetJobPlanRequest* req,
                                                v1::GetJobPlanResponse* resp) {
  StatusOr<Admitted> call = Admit(ctx, "GetJobPlan", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobRecord> accessible = AccessibleJob(call->caller, "GetJobPlan", req->job_id());
  if (!accessible.ok()) return ToGrpcStatus(accessible.status());
  // The one view that shows the documents (a finished job's are read from the store).
  StatusOr<JobRecord> job = jobs_->GetWithDocuments(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (job->plan_json.empty()) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "job " + job->id + " has no plan yet (it is " + StateName(job->state) + ")");
  }
  resp->set_job_id(job->id);
  resp->set_plan_json(job->plan_json);
  resp->set_graph_json(job->graph_json);
  for (const RankPlacement& d : job->devices) {
    v1::DeviceAssignment* a = resp->add_devices();
    a->set_rank(d.rank);
    a->set_node_id(d.node_id);
    a->set_node_name(d.node_name);
    a->set_device(d.device);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::TraceJob(grpc::ServerContext* ctx,
                                              const v1::TraceJobRequest* req,
                                              v1::TraceJobResponse* resp) {
  StatusOr<Admitted> call = Admit(ctx, "TraceJob", client_calls_);
  if (!call.ok()) return ToGrpcStatus(call.status());
  StatusOr<JobRecord> job = AccessibleJob(call->caller, "TraceJob", req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  StatusOr<TraceWindow> window =
      ChooseTraceWindow(*job, req->iterations() == 0 ? 3 : req->iterations());
  if (!window.ok()) return ToGrpcStatus(window.status());
  StatusOr<int64_t> request = traces_->Open(job->id, *window);
  if (!request.ok()) return ToGrpcStatus(request.status());
  const int timeout_s = req->timeout_s() > 0 ? std::min(req->timeout_s(), 600) : 60;
  CollectedTrace trace = traces_->Collect(*request, std::chrono::seconds(timeout_s));
  *resp = TraceResponse(*job, trace);
  return grpc::Status::OK;
}

}  // namespace deepool::coordinator
