// The coordinator's metrics as a pure rendering (coordinator/coordinator_metrics.h): per-job
// gauges only for running jobs (their last evaluation too), every rank's last iteration split
// three ways, bounded labels.
#include "coordinator/coordinator_metrics.h"

#include <catch2/catch.hpp>

namespace deepool::coordinator {
namespace {

JobRecord Running(const std::string& id, JobRole role) {
  JobRecord job;
  job.id = id;
  job.state = JobState::kRunning;
  job.spec.role = role;
  job.progress.samples_per_s = 120.5;
  job.progress.iteration_ms = 250;
  job.progress.iteration = 7;
  return job;
}

}  // namespace

TEST_CASE("running jobs get throughput, iteration and per-rank time, ended jobs only counts",
          "[metrics]") {
  ClusterNow now;
  JobRecord fg = Running("job-1", JobRole::kFg);
  DeviceProgress rank;
  rank.rank = 1;
  rank.node_name = "n1";
  rank.device = "cpu:0";
  rank.fg_busy_ms = 150;
  rank.bg_busy_ms = 40;
  rank.idle_ms = 60;
  fg.progress.devices.push_back(rank);
  fg.progress.evaluations.push_back({100, 800, 0.75, 0.5, 0.875, 0});
  fg.progress.evaluations.push_back({200, 800, 0.5, 0.75, 1, 0});  // the last one is shown
  JobRecord bg = Running("job-3", JobRole::kBg);
  bg.progress.evaluations.push_back({100, 800, std::nullopt, 0.25, 0.5, 0});  // no loss
  JobRecord done = Running("job-2", JobRole::kFg);
  done.state = JobState::kSucceeded;
  done.progress.evaluations = fg.progress.evaluations;
  now.jobs = Snapshots({fg, bg, done});
  now.counts = {{{JobState::kRunning, JobRole::kFg}, 1},
                {{JobState::kRunning, JobRole::kBg}, 1},
                {{JobState::kSucceeded, JobRole::kFg}, 1}};
  NodeRecord node;
  node.id = "id-1";
  node.name = "n1";
  node.last_heartbeat_ms = 1'000;
  node.state = NodeState::kDraining;
  now.nodes = {node};
  now.now_ms = 3'500;
  CoordinatorMetrics events;
  events.OnRpc("/deepool.v1.CoordinatorService/GetJob", 5, 0.002);
  events.OnRpc("/evil/method-name-" + std::string(100, 'x'), 12, 0.001);
  now.shares = {{"alice", 0.75, 4}, {"bob", 0, 0}};
  now.preemptions = 3;
  now.policy = "max-min";
  now.decisions = {{{"grant", "fg"}, 2}, {{"wait", "fair_share"}, 7}};
  const std::string text = RenderCoordinatorMetrics(events, now);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("deepool_user_share{user=\"alice\"} 0.75\n"));
  CHECK_THAT(text, Catch::Contains("deepool_user_devices{user=\"alice\"} 4\n"));
  CHECK_THAT(text, Catch::Contains("deepool_user_share{user=\"bob\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("deepool_policy_preemptions_total 3\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_policy_decisions_total{policy=\"max-min\",kind=\"wait\","
                             "code=\"fair_share\"} 7\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_policy_decisions_total{policy=\"max-min\",kind=\"grant\","
                             "code=\"fg\"} 2\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_job_samples_per_second{job=\"job-1\",role=\"fg\"} 120.5\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_job_samples_per_second{job=\"job-3\",role=\"bg\"} 120.5\n"));
  CHECK_THAT(text, Catch::Contains("deepool_job_iteration_seconds{job=\"job-1\"} 0.25\n"));
  CHECK_THAT(text, !Catch::Contains("job=\"job-2\""));
  CHECK_THAT(text, !Catch::Contains("deepool_job_iteration_seconds{job=\"job-3\""));
  CHECK_THAT(text, Catch::Contains("deepool_job_eval_top1{job=\"job-1\"} 0.75\n"));
  CHECK_THAT(text, Catch::Contains("deepool_job_eval_top5{job=\"job-1\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_job_eval_loss{job=\"job-1\"} 0.5\n"));
  CHECK_THAT(text, Catch::Contains("deepool_job_eval_top1{job=\"job-3\"} 0.25\n"));
  CHECK_THAT(text, !Catch::Contains("deepool_job_eval_loss{job=\"job-3\""));
  CHECK_THAT(text, Catch::Contains("deepool_rank_last_iteration_seconds{job=\"job-1\",rank=\"1\","
                                   "node=\"n1\",device=\"cpu:0\",kind=\"bg_busy\"} 0.04\n"));
  CHECK_THAT(text, Catch::Contains("deepool_jobs{state=\"SUCCEEDED\",role=\"fg\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_nodes{state=\"DRAINING\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_node_heartbeat_age_seconds{node=\"n1\"} 2.5\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_rpc_calls_total{service=\"deepool.v1.CoordinatorService\","
                             "method=\"GetJob\",code=\"NOT_FOUND\"} 1\n"));
  // A method nobody serves is "other": a client cannot grow the label set.
  CHECK_THAT(text, Catch::Contains("deepool_rpc_calls_total{service=\"other\",method=\"other\","
                                   "code=\"UNIMPLEMENTED\"} 1\n"));
  CHECK_THAT(text, !Catch::Contains("evil"));
}

}  // namespace deepool::coordinator
