#include "coordinator/coordinator_metrics.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <set>

#include "deepool/v1/coordinator.pb.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {
namespace {

constexpr JobState kAllStates[] = {JobState::kPending,  JobState::kProfiling, JobState::kPlanning,
                                   JobState::kRunning,  JobState::kSucceeded, JobState::kFailed,
                                   JobState::kCancelled};

// "/deepool.v1.CoordinatorService/GetJob" for every method of the two services; other names
// (a client may send any) are "other", so the label set stays bounded. The services are found
// through a message of each one's file, not by name in the generated pool: a name finds nothing
// in a program that links no code of that file (a test of these metrics), and every call would
// be "other".
const std::set<std::string>& ServedMethods() {
  static const std::set<std::string> methods = [] {
    std::set<std::string> names;
    const google::protobuf::FileDescriptor* files[] = {
        v1::ResizeJobRequest::descriptor()->file(), v1::RegisterNodeRequest::descriptor()->file()};
    for (const google::protobuf::FileDescriptor* file : files) {
      for (int s = 0; s < file->service_count(); ++s) {
        const google::protobuf::ServiceDescriptor* service = file->service(s);
        for (int i = 0; i < service->method_count(); ++i) {
          names.insert("/" + service->full_name() + "/" + service->method(i)->name());
        }
      }
    }
    return names;
  }();
  return methods;
}

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

// When the job entered its current state: the last history entry (its submission otherwise).
int64_t EnteredMs(const JobRecord& job) {
  return job.history.empty() ? job.submitted_ms : job.history.back().time_ms;
}

std::string NodeLabel(const NodeRecord& node) { return node.name.empty() ? node.id : node.name; }

void WriteJobs(const ClusterNow& now, MetricsText* out) {
  std::map<ReasonCode, int> pending_by_reason;
  for (const JobSnapshot& job : now.jobs) {
    if (job->state == JobState::kPending) ++pending_by_reason[job->reason_code];
  }
  out->Family("deepool_jobs", "gauge", "Jobs the coordinator holds, by state and role.");
  for (JobState state : kAllStates) {
    for (JobRole role : {JobRole::kFg, JobRole::kBg}) {
      auto count = now.counts.find({state, role});
      out->Sample("deepool_jobs", {{"state", StateName(state)}, {"role", RoleName(role)}},
                  count == now.counts.end() ? 0 : count->second);
    }
  }
  out->Family("deepool_pending_jobs", "gauge",
              "PENDING jobs by the reason of the scheduler's last decision.");
  for (const auto& [reason, count] : pending_by_reason) {
    out->Sample("deepool_pending_jobs", {{"reason", ReasonCodeName(reason)}}, count);
  }
  out->Family("deepool_pending_job_oldest_wait_seconds", "gauge",
              "How long the longest-waiting PENDING job has waited in this stay, by role.");
  for (JobRole role : {JobRole::kFg, JobRole::kBg}) {
    double oldest = 0;
    for (const JobSnapshot& job : now.jobs) {
      if (job->state != JobState::kPending || job->spec.role != role) continue;
      oldest = std::max(oldest, static_cast<double>(now.now_ms - EnteredMs(*job)) / 1000.0);
    }
    out->Sample("deepool_pending_job_oldest_wait_seconds", {{"role", RoleName(role)}}, oldest);
  }
}

// The last evaluation of each RUNNING job that has one (the loss only where it was finite).
void WriteEvaluations(const std::vector<const JobRecord*>& running, MetricsText* out) {
  out->Family("deepool_job_eval_top1", "gauge",
              "Top-1 accuracy (0-1) of each RUNNING job's last evaluation on its held-out set.");
  for (const JobRecord* job : running) {
    if (job->progress.evaluations.empty()) continue;
    out->Sample("deepool_job_eval_top1", {{"job", job->id}}, job->progress.evaluations.back().top1);
  }
  out->Family("deepool_job_eval_top5", "gauge",
              "Top-5 accuracy (0-1) of each RUNNING job's last evaluation on its held-out set.");
  for (const JobRecord* job : running) {
    if (job->progress.evaluations.empty()) continue;
    out->Sample("deepool_job_eval_top5", {{"job", job->id}}, job->progress.evaluations.back().top5);
  }
  out->Family("deepool_job_eval_loss", "gauge",
              "Mean loss of each RUNNING job's last evaluation on its held-out set.");
  for (const JobRecord* job : running) {
    if (job->progress.evaluations.empty() || !job->progress.evaluations.back().loss) continue;
    out->Sample("deepool_job_eval_loss", {{"job", job->id}},
                *job->progress.evaluations.back().loss);
  }
}

void WriteRunningJobs(const ClusterNow& now, MetricsText* out) {
  std::vector<const JobRecord*> running;
  for (const JobSnapshot& job : now.jobs) {
    if (job->state == JobState::kRunning) running.push_back(job.get());
  }
  out->Family("deepool_job_samples_per_second", "gauge",
              "Training throughput of each RUNNING job, from its last reported iteration.");
  for (const JobRecord* job : running) {
    out->Sample("deepool_job_samples_per_second",
                {{"job", job->id}, {"role", RoleName(job->spec.role)}},
                job->progress.samples_per_s);
  }
  out->Family("deepool_job_iteration_seconds", "gauge",
              "Iteration time of each RUNNING FG job (rank 0's last iteration).");
  for (const JobRecord* job : running) {
    if (job->spec.role != JobRole::kFg) continue;
    out->Sample("deepool_job_iteration_seconds", {{"job", job->id}},
                job->progress.iteration_ms / 1000.0);
  }
  out->Family("deepool_job_iterations_completed", "gauge",
              "Iterations each RUNNING job has completed.");
  for (const JobRecord* job : running) {
    out->Sample("deepool_job_iterations_completed", {{"job", job->id}},
                static_cast<double>(job->progress.iteration));
  }
  WriteEvaluations(running, out);
  out->Family("deepool_rank_last_iteration_seconds", "gauge",
              "Each rank of a RUNNING FG job: its last iteration's time computing the FG job "
              "(fg_busy), a BG job beside it (bg_busy), and idle.");
  for (const JobRecord* job : running) {
    if (job->spec.role != JobRole::kFg) continue;
    for (const DeviceProgress& d : job->progress.devices) {
      const std::pair<const char*, double> kinds[] = {
          {"fg_busy", d.fg_busy_ms}, {"bg_busy", d.bg_busy_ms}, {"idle", d.idle_ms}};
      for (const auto& [kind, ms] : kinds) {
        out->Sample("deepool_rank_last_iteration_seconds",
                    {{"job", job->id},
                     {"rank", std::to_string(d.rank)},
                     {"node", d.node_name.empty() ? d.node_id : d.node_name},
                     {"device", d.device},
                     {"kind", kind}},
                    ms / 1000.0);
      }
    }
  }
}

void WriteNodes(const ClusterNow& now, MetricsText* out) {
  std::map<NodeState, int> by_state;
  for (const NodeRecord& node : now.nodes) ++by_state[node.state];
  out->Family("deepool_nodes", "gauge", "Worker nodes by state.");
  for (NodeState state : {NodeState::kUp, NodeState::kDraining, NodeState::kDown}) {
    out->Sample("deepool_nodes", {{"state", NodeStateName(state)}}, by_state[state]);
  }
  out->Family("deepool_node_heartbeat_age_seconds", "gauge",
              "Time since each node's last heartbeat or registration.");
  for (const NodeRecord& node : now.nodes) {
    out->Sample("deepool_node_heartbeat_age_seconds", {{"node", NodeLabel(node)}},
                static_cast<double>(now.now_ms - node.last_heartbeat_ms) / 1000.0);
  }
  out->Family("deepool_devices", "gauge",
              "Devices on nodes that are not DOWN, by use (shared: a FG and a BG job).");
  const ClusterSummary& s = now.summary;
  const std::pair<const char*, int> uses[] = {{"fg_only", s.devices_fg - s.devices_shared},
                                              {"bg_only", s.devices_bg - s.devices_shared},
                                              {"shared", s.devices_shared},
                                              {"idle", s.devices_idle}};
  for (const auto& [use, count] : uses) out->Sample("deepool_devices", {{"use", use}}, count);
  out->Family("deepool_cluster_samples_per_second", "gauge",
              "Summed throughput of the RUNNING jobs, by role.");
  out->Sample("deepool_cluster_samples_per_second", {{"role", "fg"}}, s.fg_samples_per_s);
  out->Sample("deepool_cluster_samples_per_second", {{"role", "bg"}}, s.bg_samples_per_s);
}

// Times one call: created when the call arrives, records at its status.
class RpcTimer : public grpc::experimental::Interceptor {
 public:
  RpcTimer(CoordinatorMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->OnRpc(method_, static_cast<int>(methods->GetSendStatus().error_code()), seconds);
    }
    methods->Proceed();
  }

 private:
  CoordinatorMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void CoordinatorMetrics::OnTransition(const JobRecord& before, const JobRecord& after) {
  const char* role = RoleName(after.spec.role);
  transitions_.Add(
      {{"from", StateName(before.state)}, {"to", StateName(after.state)}, {"role", role}});
  const double seconds = static_cast<double>(after.updated_ms - EnteredMs(before)) / 1000.0;
  state_seconds_.Observe({{"state", StateName(before.state)}, {"role", role}},
                         std::max(0.0, seconds));
}

void CoordinatorMetrics::OnSchedulerRound(double seconds) { round_seconds_.Observe({}, seconds); }

void CoordinatorMetrics::OnRpc(const std::string& method, int grpc_code, double seconds) {
  // "/deepool.v1.CoordinatorService/GetJob": service "deepool.v1.CoordinatorService", method
  // "GetJob".
  std::string service = "other";
  std::string name = "other";
  if (ServedMethods().count(method) > 0) {
    const size_t slash = method.rfind('/');
    service = method.substr(1, slash - 1);
    name = method.substr(slash + 1);
  }
  rpc_seconds_.Observe({{"service", service}, {"method", name}}, seconds);
  rpc_calls_.Add({{"service", service}, {"method", name}, {"code", GrpcCodeName(grpc_code)}});
}

void CoordinatorMetrics::WriteEvents(MetricsText* out) const {
  transitions_.Write(out, "deepool_job_transitions_total",
                     "Job state transitions since the coordinator started.");
  state_seconds_.Write(out, "deepool_job_state_duration_seconds",
                       "Time a job spent in a state before leaving it: PENDING is the queue "
                       "wait, PLANNING the planning latency.");
  round_seconds_.Write(out, "deepool_scheduler_round_duration_seconds",
                       "Duration of a scheduler round (admission, planning, dispatch).");
  rpc_seconds_.Write(out, "deepool_rpc_duration_seconds",
                     "gRPC calls served, by method: from arrival to status (a stream's whole "
                     "life).");
  rpc_calls_.Write(out, "deepool_rpc_calls_total", "gRPC calls served, by method and status code.");
}

// Users' shares under the scheduling policy, its preemptions and its other decisions.
void WritePolicy(const ClusterNow& now, MetricsText* out) {
  out->Family("deepool_user_share", "gauge",
              "Each user's share after the scheduling policy's last round: the sum over its FG "
              "jobs of their throughput over what they would get on their fastest device type.");
  for (const policy::UserShare& share : now.shares) {
    out->Sample("deepool_user_share", {{"user", share.user}}, share.share);
  }
  out->Family("deepool_user_devices", "gauge",
              "Devices each user's FG jobs hold after the scheduling policy's last round.");
  for (const policy::UserShare& share : now.shares) {
    out->Sample("deepool_user_devices", {{"user", share.user}}, share.devices);
  }
  out->Family("deepool_policy_preemptions_total", "counter",
              "Running FG jobs the scheduling policy asked to stop at a checkpoint to make way "
              "(a growth is not one: deepool_policy_decisions_total kind resize).");
  out->Sample("deepool_policy_preemptions_total", {}, static_cast<double>(now.preemptions));
  out->Family("deepool_policy_decisions_total", "counter",
              "The scheduling policy's decisions in every round since the coordinator started: "
              "grants and preemptions by role (code fg or bg), running FG jobs grown (kind "
              "resize, code fg), and a waiting job's wait once per round by its wait code.");
  for (const auto& [key, count] : now.decisions) {
    out->Sample("deepool_policy_decisions_total",
                {{"policy", now.policy}, {"kind", key.first}, {"code", key.second}},
                static_cast<double>(count));
  }
}

std::string RenderCoordinatorMetrics(const CoordinatorMetrics& events, const ClusterNow& now) {
  MetricsText out;
  events.WriteEvents(&out);
  WriteJobs(now, &out);
  WriteRunningJobs(now, &out);
  WriteNodes(now, &out);
  WritePolicy(now, &out);
  return out.text();
}

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcTimer(metrics_, info->method() ? info->method() : "");
}

}  // namespace deepool::coordinator
