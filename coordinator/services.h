// gRPC adapters: authenticate the caller, convert proto <-> domain, map Status codes, delegate
// to the managers. CoordinatorServiceImpl serves clients (the CLI): users see and cancel their own
// jobs, admins every job and the node drains. NodeServiceImpl serves worker daemons: a worker
// acts only for the node its certificate or token names (security/authenticator.h).
// Threading: gRPC's synchronous server calls these on its thread pool; the managers they hold
// are thread-safe. Streaming calls end when the client cancels, the job ends, or on shutdown.
// Every client call holds a CallSlots slot while it runs (streams their own), so clients take
// a bounded number of the pool's threads; worker calls take none, and none of them waits for a
// lock a client call holds for long (views copy no job's large documents).
#pragma once

#include <atomic>
#include <functional>

#include "coordinator/call_slots.h"
#include "coordinator/follow_stop.h"
#include "coordinator/job_manager.h"
#include "coordinator/node_registry.h"
#include "coordinator/scheduler.h"
#include "coordinator/trace_collector.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "security/authenticator.h"

namespace deepool::coordinator {

// A server stream's stop: its caller went away, or `still_allowed` refuses it now (its token or
// certificate was revoked, or expired, while the stream was open). Asked at every wake-up of the
// stream's loop (at least every cancel probe), so a refused caller's stream ends within about
// that; the reason is left in *refused.
FollowStop StopWhenCancelledOrRefused(grpc::ServerContext* ctx,
                                      std::function<Status()> still_allowed, Status* refused);

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  // `client_calls` bounds the unary calls, `client_streams` WatchJob and GetJobLogs.
  CoordinatorServiceImpl(JobManager* jobs, NodeRegistry* nodes, Scheduler* scheduler,
                         CallSlots* client_calls, CallSlots* client_streams, TraceCollector* traces,
                         const security::Authenticator* auth)
      : jobs_(jobs),
        nodes_(nodes),
        scheduler_(scheduler),
        client_calls_(client_calls),
        client_streams_(client_streams),
        traces_(traces),
        auth_(auth) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Job>* writer) override;
  grpc::Status GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                          grpc::ServerWriter<v1::LogEntry>* writer) override;
  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                         v1::ListNodesResponse* resp) override;
  grpc::Status DrainNode(grpc::ServerContext* ctx, const v1::DrainNodeRequest* req,
                         v1::Node* resp) override;
  grpc::Status UndrainNode(grpc::ServerContext* ctx, const v1::UndrainNodeRequest* req,
                           v1::Node* resp) override;
  grpc::Status GetJobPlan(grpc::ServerContext* ctx, const v1::GetJobPlanRequest* req,
                          v1::GetJobPlanResponse* resp) override;
  grpc::Status TraceJob(grpc::ServerContext* ctx, const v1::TraceJobRequest* req,
                        v1::TraceJobResponse* resp) override;
  grpc::Status ResizeJob(grpc::ServerContext* ctx, const v1::ResizeJobRequest* req,
                         v1::Job* resp) override;

 private:
  v1::Node NodeView(const NodeRecord& node) const;
  // The caller, who must be a user or an admin; refusals are logged with the peer.
  StatusOr<security::Identity> Caller(grpc::ServerContext* ctx, const char* method) const;
  // A call admitted: its caller, and the slot it holds until it returns.
  struct Admitted {
    security::Identity caller;
    CallSlots::Slot slot;
  };
  // The caller (as Caller) with a slot of `slots`; RESOURCE_EXHAUSTED at once past a bound.
  StatusOr<Admitted> Admit(grpc::ServerContext* ctx, const char* method, CallSlots* slots) const;
  // The job as clients see it: the record, and while PENDING its place in the queue.
  v1::Job ClientView(const JobRecord& job) const;
  // With the scheduling policy's view read once for many jobs (ListJobs).
  v1::Job ClientView(const JobRecord& job, const Scheduler::PolicyView& policy) const;
  // The job, when the caller may see and act on it (its owner, or an admin).
  StatusOr<JobRecord> AccessibleJob(const security::Identity& caller, const char* method,
                                    const std::string& job_id) const;

  JobManager* jobs_;
  NodeRegistry* nodes_;
  Scheduler* scheduler_;
  CallSlots* client_calls_;
  CallSlots* client_streams_;
  TraceCollector* traces_;
  const security::Authenticator* auth_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(JobManager* jobs, NodeRegistry* nodes, Scheduler* scheduler,
                  TraceCollector* traces, int64_t heartbeat_interval_ms,
                  const security::Authenticator* auth)
      : jobs_(jobs),
        nodes_(nodes),
        scheduler_(scheduler),
        traces_(traces),
        heartbeat_interval_ms_(heartbeat_interval_ms),
        auth_(auth) {}

  grpc::Status RegisterNode(grpc::ServerContext* ctx, const v1::RegisterNodeRequest* req,
                            v1::RegisterNodeResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status StreamTasks(grpc::ServerContext* ctx, const v1::StreamTasksRequest* req,
                           grpc::ServerWriter<v1::TaskCommand>* writer) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* resp) override;
  grpc::Status ReportTaskExit(grpc::ServerContext* ctx, const v1::ReportTaskExitRequest* req,
                              v1::ReportTaskExitResponse* resp) override;

 private:
  // OK when the caller is the worker of the node named (RegisterNode) or with this id.
  Status AuthorizeNodeName(grpc::ServerContext* ctx, const std::string& node_name) const;
  Status AuthorizeNodeId(grpc::ServerContext* ctx, const std::string& node_id) const;
  // `status` as the answer to a call from node `node_id`; a refusal while the node is unknown
  // or down says "register again" in its trailing metadata (protocol::kRegisterAgainKey).
  grpc::Status Answer(grpc::ServerContext* ctx, const std::string& node_id,
                      const Status& status) const;

  JobManager* jobs_;
  NodeRegistry* nodes_;
  Scheduler* scheduler_;
  TraceCollector* traces_;
  int64_t heartbeat_interval_ms_;
  const security::Authenticator* auth_;
};

}  // namespace deepool::coordinator
