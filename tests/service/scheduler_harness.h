// The scheduler test harness: a Scheduler over a JobManager, a NodeRegistry and a FakeClock, with a
// FakePlanningBackend (or a given real one) and fake workers that are just calls; job specs for
// FG and BG jobs.
#pragma once

#include <catch2/catch.hpp>
#include <memory>

#include "common/clock.h"
#include "coordinator/scheduler.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Harness {
  // `backend`: a real PlanningBackend to schedule with instead of `planner` (the fake).
  explicit Harness(JobStore* external_store = nullptr, PlanningBackend* backend = nullptr,
                   SchedulerOptions options = {})
      : store(external_store ? external_store : &memory),
        jobs(store, &clock),
        nodes(&clock, seconds(10)),
        scheduler(&jobs, &nodes, backend ? backend : &planner, &clock, std::move(options)) {
    REQUIRE(jobs.Load().ok());
    REQUIRE(scheduler.Recover().ok());
  }

  // `protocol`: the executor protocol versions its worker shares with the coordinator.
  void AddNode(const std::string& name, int devices, const std::string& type = "cpu",
               std::vector<v1::RunningTask> running = {}, protocol::ProtocolRange protocol = {}) {
    std::vector<DeviceInfo> list;
    for (int i = 0; i < devices; ++i) list.push_back({"cpu:" + std::to_string(i), type, 0});
    REQUIRE(scheduler.RegisterNode(name, "10.0.0." + name + ":7000", list, running, protocol).ok());
  }
  std::vector<v1::TaskCommand> Commands(const std::string& node_id) {
    auto commands = scheduler.WaitForCommands(node_id, milliseconds(0));
    REQUIRE(commands.ok());
    return *commands;
  }
  JobRecord Submit(JobSpec spec) {
    StatusOr<JobRecord> job = scheduler.Submit(spec);
    REQUIRE(job.ok());
    return *job;
  }
  JobRecord Get(const std::string& id) { return *jobs.Get(id); }
  void Exit(const std::string& node_id, const std::string& task_id, v1::TaskOutcome outcome,
            const std::string& error = "", const std::string& result = "") {
    v1::ReportTaskExitRequest exit;
    exit.set_node_id(node_id);
    exit.set_task_id(task_id);
    exit.set_outcome(outcome);
    exit.set_error(error);
    exit.set_result_json(result);
    REQUIRE(scheduler.ReportTaskExit(exit).ok());
  }

  // The FG job's ranks report an iteration each (their executors run). Returns the FG task id.
  std::string ReportRanks(const std::string& node_id, const std::string& job_id,
                          const std::vector<int>& ranks) {
    std::string task_id;
    for (const std::string& id : Get(job_id).task_ids) {
      if (id.find(node_id) != std::string::npos) task_id = id;
    }
    REQUIRE_FALSE(task_id.empty());
    v1::ReportProgressRequest progress;
    progress.set_node_id(node_id);
    progress.set_task_id(task_id);
    for (int rank : ranks) {
      v1::IterationEvent* e = progress.add_iterations();
      e->set_rank(rank);
      e->set_iteration(0);
    }
    REQUIRE(scheduler.ReportProgress(progress).ok());
    return task_id;
  }

  FakeClock clock;
  InMemoryJobStore memory;
  JobStore* store;
  JobManager jobs;
  NodeRegistry nodes;
  FakePlanningBackend planner;
  Scheduler scheduler;
};

inline JobSpec Fg(int gpus, int priority = 0) {
  JobSpec spec;
  spec.name = "fg";
  spec.model = "tiny";
  spec.global_batch = 16;
  spec.gpus = gpus;
  spec.priority = priority;
  spec.iterations = 5;
  spec.profile = "analytical";
  return spec;
}

inline JobSpec Bg() {
  JobSpec spec = Fg(1);
  spec.name = "bg";
  spec.role = JobRole::kBg;
  return spec;
}

inline v1::RunningTask Running(const std::string& task_id, const std::string& job_id) {
  v1::RunningTask t;
  t.set_task_id(task_id);
  t.set_job_id(job_id);
  return t;
}

}  // namespace deepool::coordinator::testing
