// Conversions between the coordinator's records (jobs, nodes, states and reasons, the cluster
// summary) and the deepool.v1 protos, and between deepool::Status and grpc::Status (same codes,
// by design of common/status.h). The job spec's own conversion is jobspec/job_spec_proto.h.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"
#include "coordinator/cluster_summary.h"
#include "coordinator/job.h"
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

std::vector<DeviceInfo> DevicesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Device>& devices);
v1::Node NodeToProto(const NodeRecord& node,
                     const std::map<std::pair<std::string, std::string>, DeviceUse>& uses,
                     const std::vector<std::string>& task_ids);
v1::ClusterSummary ClusterSummaryToProto(const ClusterSummary& summary);

}  // namespace deepool::coordinator
