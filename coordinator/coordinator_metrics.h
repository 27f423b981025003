// The coordinator's Prometheus metrics (served at /metrics by --metrics-listen; the list is in
// docs/operations.md, "Metrics"). Two kinds:
// - events, counted as they happen: job transitions, the time a job spent in the state it left
//   (PENDING is the queue wait, PLANNING the planning latency), scheduler rounds, and gRPC calls
//   by method and status code (RpcMetricsInterceptorFactory);
// - the cluster now, read at each scrape: jobs by state and role, pending jobs by reason, nodes
//   by state and their heartbeat age, devices by use, and per running job its samples/s,
//   iteration time, its last evaluation's top-1/top-5 accuracy and loss, and each rank's
//   last-iteration FG busy, BG busy and idle time.
// Label sets: states, roles, reasons and gRPC methods are fixed lists; job labels name jobs
// only while PENDING to RUNNING; node and device labels name every node registered since the
// coordinator started, DOWN ones included (the registry forgets no node until a restart).
// Threading: the recorders are thread-safe; RenderCoordinatorMetrics is a pure function.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics_text.h"
#include "coordinator/cluster_summary.h"
#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/policy/policy.h"

namespace deepool::coordinator {

class CoordinatorMetrics {
 public:
  // JobManager's transition observer.
  void OnTransition(const JobRecord& before, const JobRecord& after);
  void OnSchedulerRound(double seconds);
  // method: the full gRPC method name ("/deepool.v1.CoordinatorService/GetJob"); a method this
  // coordinator does not serve is counted as "other".
  void OnRpc(const std::string& method, int grpc_code, double seconds);

  // The event families, written into out.
  void WriteEvents(MetricsText* out) const;

 private:
  CounterMap transitions_;   // {from, to, role}
  Histogram state_seconds_;  // {state, role}: time in the state a job left
  Histogram round_seconds_;
  Histogram rpc_seconds_;  // {service, method}
  CounterMap rpc_calls_;   // {service, method, code}
};

struct ClusterNow {
  // The unfinished jobs (JobManager::Active): finished ones are only counted, in `counts`, so a
  // scrape costs the same with 100 or 100,000 jobs in the history.
  std::vector<JobSnapshot> jobs;
  JobCounts counts;  // every job, finished ones included (deepool_jobs)
  std::vector<NodeRecord> nodes;
  ClusterSummary summary;
  int64_t now_ms = 0;  // wall clock, for heartbeat ages
  // The scheduling policy's view (Scheduler::LastPolicyView): users' shares and devices after its
  // last round, and the FG jobs it has preempted.
  std::vector<policy::UserShare> shares;
  int64_t preemptions = 0;
  // The policy's name, and its decisions of every round since start by (kind, code)
  // (Scheduler::PolicyView::decisions).
  std::string policy = "fifo";
  std::map<std::pair<std::string, std::string>, int64_t> decisions;
};

// The whole /metrics document: events, then the cluster now.
std::string RenderCoordinatorMetrics(const CoordinatorMetrics& events, const ClusterNow& now);

// Times every call and records it in metrics (install with ServerBuilder::experimental()).
class RpcMetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(CoordinatorMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  CoordinatorMetrics* metrics_;
};

}  // namespace deepool::coordinator
