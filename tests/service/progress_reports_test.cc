// ProgressReports alone, over a JobManager on the in-memory store and a Dispatcher with a
// FakeClock: only the task's own node may report, and only its own ranks; rank 0's store address is
// stored and sends the other nodes their tasks, iterations land in the job's progress with the
// device holders it is given, and a task whose job ended is told to stop.
#include "coordinator/progress_reports.h"

#include <catch2/catch.hpp>

#include "coordinator/job_store.h"

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;

Task TrainTask(const std::string& id, const std::string& job, const std::string& node, bool rank0) {
  Task task;
  task.id = id;
  task.job_id = job;
  task.node_id = node;
  task.attempt = 1;
  task.rank0_node = rank0;
  task.phase = rank0 ? TaskPhase::kSent : TaskPhase::kWaitingForStore;
  task.assignment.set_task_id(id);
  task.assignment.set_job_id(job);
  task.assignment.mutable_train();
  return task;
}

// A RUNNING job of two ranks on nodes n1 and n2, with a TRAIN task on each.
struct RunningJob {
  RunningJob() {
    REQUIRE(jobs.Load().ok());
    JobSpec spec;
    spec.name = "two";
    spec.model = "tiny";
    spec.global_batch = 8;
    spec.iterations = 4;
    spec.gpus = 2;
    id = jobs.Submit(spec)->id;
    REQUIRE(jobs.Transition(id, JobState::kPlanning, "planning").ok());
    REQUIRE(jobs.Transition(id, JobState::kRunning, "go",
                            [](JobRecord& r) {
                              r.attempt = 1;
                              r.devices = {{0, "n1", "one", "cpu:0"}, {1, "n2", "two", "cpu:0"}};
                              r.progress.iterations = 4;
                            })
                .ok());
    dispatcher.Add({TrainTask("t1", id, "n1", true), TrainTask("t2", id, "n2", false)});
  }

  v1::ReportProgressRequest Report(const std::string& task, const std::string& node) const {
    v1::ReportProgressRequest report;
    report.set_task_id(task);
    report.set_node_id(node);
    return report;
  }

  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs{&store, &clock};
  Dispatcher dispatcher{&clock, std::chrono::seconds(5)};
  int holder_reads = 0;
  int wakes = 0;
  ProgressReports reports{&jobs, &dispatcher, &clock,
                          [this](const std::vector<RankPlacement>& devices) {
                            ++holder_reads;
                            std::map<DeviceKey, DeviceJobs> held;
                            for (const RankPlacement& p : devices) {
                              held[{p.node_id, p.device}] = {id, "bg-job"};
                            }
                            return held;
                          },
                          [this] { ++wakes; }};
  std::string id;
};

TEST_CASE("a node reports only its own tasks", "[progress_reports]") {
  RunningJob cluster;
  StatusOr<bool> from_n2 = cluster.reports.Report(cluster.Report("t1", "n2"));
  CHECK(from_n2.status().code() == StatusCode::kPermissionDenied);
  StatusOr<bool> from_n1 = cluster.reports.Report(cluster.Report("t1", "n1"));
  REQUIRE(from_n1.ok());
  CHECK_FALSE(*from_n1);
}

TEST_CASE("rank 0's store address is stored and sends the other nodes their ranks",
          "[progress_reports]") {
  RunningJob cluster;
  cluster.dispatcher.WaitForCommands("n1", milliseconds(0));  // rank 0's assignment
  CHECK(cluster.dispatcher.WaitForCommands("n2", milliseconds(0)).empty());
  v1::ReportProgressRequest report = cluster.Report("t1", "n1");
  report.set_store_ready("10.0.0.1:29500");
  REQUIRE(cluster.reports.Report(report).ok());
  CHECK(cluster.jobs.Get(cluster.id)->store_address == "10.0.0.1:29500");
  std::vector<v1::TaskCommand> on_n2 = cluster.dispatcher.WaitForCommands("n2", milliseconds(0));
  REQUIRE(on_n2.size() == 1);
  CHECK(on_n2[0].assign().train().store_address() == "10.0.0.1:29500");
}

TEST_CASE("iterations reach the job's progress with the holders of its devices",
          "[progress_reports]") {
  RunningJob cluster;
  v1::ReportProgressRequest report = cluster.Report("t1", "n1");
  v1::IterationEvent* event = report.add_iterations();
  event->set_rank(0);
  event->set_iteration(2);
  event->set_busy_ms(10);
  report.add_logs()->set_line("hello");
  StatusOr<bool> wanted = cluster.reports.Report(report);
  REQUIRE(wanted.ok());
  CHECK_FALSE(*wanted);
  CHECK(cluster.holder_reads == 1);
  CHECK(cluster.wakes == 1);  // a FG rank's first iteration: a BG job may wait for it
  const JobRecord job = *cluster.jobs.Get(cluster.id);
  REQUIRE(job.progress.devices.size() == 1);
  CHECK(job.progress.devices[0].iteration == 3);  // index 2: three done
  CHECK(job.progress.devices[0].bg_job_id == "bg-job");
  StatusOr<std::vector<LogRecord>> logs = cluster.jobs.TailLogs(cluster.id, 10);
  REQUIRE(logs.ok());
  REQUIRE(logs->size() == 1);
  CHECK(logs->front().line == "hello");
}

TEST_CASE("a node's iterations for a rank placed on another node are dropped",
          "[progress_reports]") {
  RunningJob cluster;
  v1::ReportProgressRequest ready = cluster.Report("t1", "n1");
  ready.set_store_ready("10.0.0.1:29500");
  REQUIRE(cluster.reports.Report(ready).ok());  // n2's rank is sent: its task is live
  v1::ReportProgressRequest report = cluster.Report("t2", "n2");
  v1::IterationEvent* forged = report.add_iterations();  // rank 0 runs on n1
  forged->set_rank(0);
  forged->set_iteration(3);
  forged->set_samples_per_s(1e9);
  v1::IterationEvent* own = report.add_iterations();
  own->set_rank(1);
  own->set_iteration(1);
  own->set_samples_per_s(80);
  REQUIRE(cluster.reports.Report(report).ok());
  const JobRecord job = *cluster.jobs.Get(cluster.id);
  REQUIRE(job.progress.devices.size() == 1);
  CHECK(job.progress.devices[0].rank == 1);
  CHECK(job.progress.devices[0].node_id == "n2");
  CHECK(job.progress.iteration == 2);
  CHECK(job.progress.samples_per_s == 80);
}

TEST_CASE("a task unknown or of an ended job is told to stop", "[progress_reports]") {
  RunningJob cluster;
  StatusOr<bool> unknown = cluster.reports.Report(cluster.Report("t9", "n1"));
  REQUIRE(unknown.ok());
  CHECK(*unknown);
  REQUIRE(cluster.jobs.Transition(cluster.id, JobState::kCancelled, "stop").ok());
  StatusOr<bool> ended = cluster.reports.Report(cluster.Report("t1", "n1"));
  REQUIRE(ended.ok());
  CHECK(*ended);
}

}  // namespace
}  // namespace deepool::coordinator
