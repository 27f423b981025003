// Conversions between the coordinator's records (jobs, nodes, states and reasons, the cluster
// summary) and the deepool.v1 protos, and between deepool::Status and grpc::Status (same codes,
// by design of common/status.h). The job spec's own conversion is jobspec/job_spec_proto.h.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"
#include "coordinator/cluster_summary.h"
#include "coordinator/job.h"
#include "coordinator/job_manager.h"
#include "coordinator/node_registry.h"
#include "coordinator/scheduler.h"
#include "deepool/v1/coordinator.pb.h"
#include "deepool/v1/job.pb.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

grpc::Status ToGrpcStatus(const Status& status);

v1::JobState StateToProto(JobState state);
std::optional<JobState> StateFromProto(v1::JobState state);
v1::ReasonCode ReasonCodeToProto(ReasonCode code);
v1::Job JobToProto(const JobRecord& job);

// The most jobs one ListJobs page holds (also what limit 0 asks for): a page stays far below
// gRPC's message limit and the time one listing holds the job table.
inline constexpr int kMaxJobsPerPage = 1000;
// A ListJobs request's states, page size and page token as a query (its owner is the caller's
// to set); INVALID_ARGUMENT naming the field for an unknown state, a negative limit or a token
// this coordinator did not write.
StatusOr<JobQuery> JobQueryFromRequest(const v1::ListJobsRequest& request);
// The token for the page after `page`; "" when it ended the list.
std::string NextPageToken(const JobPage& page);

std::vector<DeviceInfo> DevicesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Device>& devices);
v1::Node NodeToProto(const NodeRecord& node,
                     const std::map<std::pair<std::string, std::string>, DeviceUse>& uses,
                     const std::vector<std::string>& task_ids);
v1::ClusterSummary ClusterSummaryToProto(const ClusterSummary& summary);

}  // namespace deepool::coordinator
