// Folding iteration events into a job's progress, and the cluster summary over jobs and nodes.
#include "coordinator/job_progress.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <optional>

#include "coordinator/cluster_summary.h"

namespace deepool::coordinator {
namespace {

JobRecord RunningJob(const std::string& id, JobRole role, int ranks) {
  JobRecord job;
  job.id = id;
  job.spec.model = "tiny";
  job.spec.global_batch = 8;
  job.spec.role = role;
  job.spec.iterations = 10;
  job.state = JobState::kRunning;
  for (int r = 0; r < ranks; ++r) {
    job.devices.push_back({r, "node-a", "a", "cpu:" + std::to_string(r)});
  }
  return job;
}

v1::IterationEvent Event(int rank, int64_t iteration, double busy, double idle) {
  v1::IterationEvent e;
  e.set_rank(rank);
  e.set_iteration(iteration);
  e.set_iteration_ms(busy + idle);
  e.set_samples_per_s(100 + rank);
  e.set_busy_ms(busy);
  e.set_idle_ms(idle);
  return e;
}

DeviceJobs BgOnCpu1(const RankPlacement& p) {
  return p.device == "cpu:1" ? DeviceJobs{"fg-1", "bg-1"} : DeviceJobs{"fg-1", ""};
}

TEST_CASE("an epochs job's total iterations come from its executors' events", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 1);
  job.spec.iterations = 0;
  job.spec.epochs = 2;
  v1::IterationEvent first = Event(0, 0, 9, 1);
  ApplyIterationEvent(first, nullptr, 1000, &job);
  CHECK(job.progress.iterations == 0);  // not counted yet: an older executor sends none
  CHECK(job.progress.iteration == 1);   // and nothing caps the count meanwhile
  first.set_iteration(1);
  first.set_total_iterations(172);
  ApplyIterationEvent(first, nullptr, 2000, &job);
  CHECK(job.progress.iterations == 172);
  CHECK(job.progress.iteration == 2);
  v1::IterationEvent past = Event(0, 500, 9, 1);  // capped at the total, as for iterations jobs
  past.set_total_iterations(172);
  ApplyIterationEvent(past, nullptr, 3000, &job);
  CHECK(job.progress.iteration == 172);
}

TEST_CASE("every rank's iteration fills its device row, rank 0 sets the job's numbers",
          "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 2);
  ApplyIterationEvent(Event(1, 0, 6, 4), BgOnCpu1, 1000, &job);
  // Until rank 0 reports, the first reporting rank's numbers stand in.
  CHECK(job.progress.samples_per_s == 101);
  ApplyIterationEvent(Event(0, 0, 9, 1), BgOnCpu1, 2000, &job);
  CHECK(job.progress.samples_per_s == 100);
  CHECK(job.progress.iteration == 1);
  REQUIRE(job.progress.devices.size() == 2);
  const DeviceProgress& r0 = job.progress.devices[0];
  const DeviceProgress& r1 = job.progress.devices[1];
  CHECK(r0.rank == 0);
  CHECK(r0.node_name == "a");
  CHECK(r0.device == "cpu:0");
  CHECK(r0.fg_busy_ms == 9);
  CHECK(r0.idle_ms == 1);
  CHECK(r0.bg_job_id.empty());
  CHECK(r0.fg_job_id == "fg-1");
  CHECK(r0.updated_ms == 2000);
  // The BG job runs in its own process: the FG executor does not measure it.
  CHECK(r1.bg_job_id == "bg-1");
  CHECK_FALSE(r1.shared_executor);
  CHECK(r1.fg_busy_ms == 6);
  CHECK(r1.bg_busy_ms == 0);
}

TEST_CASE("a shared executor's FG busy, BG busy and BG rate reach the device row", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 2);
  v1::IterationEvent e = Event(1, 3, 6, 1);
  e.set_fg_busy_ms(6);
  e.set_bg_busy_ms(3);
  e.set_bg_samples_per_s(42);
  ApplyIterationEvent(e, BgOnCpu1, 1000, &job);
  REQUIRE(job.progress.devices.size() == 1);
  const DeviceProgress& row = job.progress.devices[0];
  CHECK(row.rank == 1);
  CHECK(row.iteration == 4);
  CHECK(row.shared_executor);
  CHECK(row.fg_busy_ms == 6);
  CHECK(row.bg_busy_ms == 3);
  CHECK(row.idle_ms == 1);
  CHECK(row.bg_samples_per_s == 42);
  CHECK(row.bg_job_id == "bg-1");
}

TEST_CASE("stale events and unknown ranks do not overwrite device rows", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 2);
  ApplyIterationEvent(Event(0, 5, 9, 1), nullptr, 1000, &job);
  ApplyIterationEvent(Event(0, 2, 1, 9), nullptr, 2000, &job);  // reordered, older
  REQUIRE(job.progress.devices.size() == 1);
  CHECK(job.progress.devices[0].iteration == 6);
  CHECK(job.progress.devices[0].fg_busy_ms == 9);
  ApplyIterationEvent(Event(7, 6, 1, 1), nullptr, 3000, &job);  // no such rank placed
  CHECK(job.progress.devices.size() == 1);
  CHECK(job.progress.iteration == 7);
}

TEST_CASE("an event whose iteration no run can reach is dropped", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 1);
  job.spec.iterations = 0;  // an epochs job: nothing caps the count until its total is known
  job.spec.epochs = 1;
  ApplyIterationEvent(Event(0, 4, 9, 1), nullptr, 1000, &job);
  for (int64_t forged : {std::numeric_limits<int64_t>::max(), int64_t{-5}}) {
    ApplyIterationEvent(Event(0, forged, 9, 1), nullptr, 2000, &job);
  }
  v1::IterationEvent total = Event(0, 5, 9, 1);
  total.set_total_iterations(std::numeric_limits<int64_t>::max());
  ApplyIterationEvent(total, nullptr, 3000, &job);
  CHECK(job.progress.iteration == 5);
  CHECK(job.progress.iterations == 0);
  REQUIRE(job.progress.devices.size() == 1);
  CHECK(job.progress.devices[0].iteration == 5);
}

TEST_CASE("a BG job's own executor counts as BG time on its device", "[progress]") {
  JobRecord job = RunningJob("bg-2", JobRole::kBg, 1);
  ApplyIterationEvent(
      Event(0, 0, 5, 2),
      [](const RankPlacement&) {
        return DeviceJobs{"fg-1", "bg-2"};
      },
      1000, &job);
  REQUIRE(job.progress.devices.size() == 1);
  const DeviceProgress& row = job.progress.devices[0];
  CHECK(row.fg_busy_ms == 0);
  CHECK(row.bg_busy_ms == 5);
  CHECK(row.idle_ms == 2);
  CHECK(row.fg_job_id == "fg-1");
  CHECK(row.bg_job_id == "bg-2");
  CHECK(row.bg_samples_per_s == 100);
}

TEST_CASE("device rows survive the stored JSON, records without them still load", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 2);
  v1::IterationEvent e = Event(1, 3, 6, 1);
  e.set_fg_busy_ms(6);
  e.set_bg_busy_ms(3);
  ApplyIterationEvent(e, BgOnCpu1, 1000, &job);
  StatusOr<JobRecord> back = JobRecordFromJson(JobRecordToJson(job));
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  REQUIRE(back->progress.devices.size() == 1);
  CHECK(back->progress.devices[0].bg_busy_ms == 3);
  CHECK(back->progress.devices[0].bg_job_id == "bg-1");
  CHECK(back->progress.devices[0].shared_executor);
  nlohmann::json old = JobRecordToJson(job);
  old["progress"].erase("devices");
  StatusOr<JobRecord> older = JobRecordFromJson(old);
  REQUIRE(older.ok());
  CHECK(older->progress.devices.empty());
}

v1::Evaluation Eval(int64_t iteration, double top1, std::optional<double> loss = 0.5) {
  v1::Evaluation e;
  e.set_iteration(iteration);
  e.set_samples(800);
  if (loss) e.set_loss(*loss);
  e.set_top1(top1);
  e.set_top5(0.99);
  e.set_time_ms(5000);
  return e;
}

TEST_CASE("evaluations are kept by iteration, once each, the newest 100", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 1);
  CHECK(ApplyEvaluation(Eval(200, 0.812), 1000, &job));
  CHECK(ApplyEvaluation(Eval(100, 0.5, std::nan("")), 1000, &job));  // an older one, out of order
  CHECK_FALSE(ApplyEvaluation(Eval(200, 0.812), 1000, &job));        // a report sent again
  REQUIRE(job.progress.evaluations.size() == 2);
  CHECK(job.progress.evaluations[0].iteration == 100);
  CHECK_FALSE(job.progress.evaluations[0].loss.has_value());
  const Evaluation& last = job.progress.evaluations[1];
  CHECK(last.iteration == 200);
  CHECK(last.samples == 800);
  CHECK(last.loss == 0.5);
  CHECK(last.top1 == 0.812);
  CHECK(last.top5 == 0.99);
  CHECK(last.time_ms == 5000);
  CHECK(DescribeEvaluation(last) ==
        "evaluation after iteration 200: top-1 81.2 %, top-5 99.0 %, loss 0.500 (800 samples)");
  CHECK(DescribeEvaluation(job.progress.evaluations[0]) ==
        "evaluation after iteration 100: top-1 50.0 %, top-5 99.0 % (800 samples)");
  // A later attempt evaluating the same iteration again replaces it.
  CHECK(ApplyEvaluation(Eval(200, 0.9), 1000, &job));
  REQUIRE(job.progress.evaluations.size() == 2);
  CHECK(job.progress.evaluations[1].top1 == 0.9);
  // Malformed ones are ignored.
  CHECK_FALSE(ApplyEvaluation(Eval(300, 1.5), 1000, &job));
  CHECK_FALSE(ApplyEvaluation(Eval(300, std::nan("")), 1000, &job));
  CHECK_FALSE(ApplyEvaluation(Eval(-1, 0.5), 1000, &job));
  CHECK(job.progress.evaluations.size() == 2);
  for (int64_t i = 1; i <= 150; ++i) ApplyEvaluation(Eval(1000 + i, 0.5), 1000, &job);
  REQUIRE(job.progress.evaluations.size() == JobProgress::kMaxEvaluations);
  CHECK(job.progress.evaluations.front().iteration == 1051);
  CHECK(job.progress.evaluations.back().iteration == 1150);
  CHECK_FALSE(ApplyEvaluation(Eval(50, 0.5), 1000, &job));  // older than all kept
  CHECK(job.progress.evaluations.front().iteration == 1051);
}

TEST_CASE("evaluations survive the stored JSON, records without them still load", "[progress]") {
  JobRecord job = RunningJob("fg-1", JobRole::kFg, 1);
  ApplyEvaluation(Eval(200, 0.812), 1000, &job);
  ApplyEvaluation(Eval(400, 0.9, std::nullopt), 1000, &job);
  StatusOr<JobRecord> back = JobRecordFromJson(JobRecordToJson(job));
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  REQUIRE(back->progress.evaluations.size() == 2);
  CHECK(back->progress.evaluations[0].iteration == 200);
  CHECK(back->progress.evaluations[0].loss == 0.5);
  CHECK(back->progress.evaluations[0].top1 == 0.812);
  CHECK(back->progress.evaluations[0].samples == 800);
  CHECK(back->progress.evaluations[0].time_ms == 5000);
  CHECK_FALSE(back->progress.evaluations[1].loss.has_value());
  nlohmann::json old = JobRecordToJson(job);
  old["progress"].erase("evaluations");
  StatusOr<JobRecord> older = JobRecordFromJson(old);
  REQUIRE(older.ok());
  CHECK(older->progress.evaluations.empty());
}

TEST_CASE("the cluster summary adds up running jobs' rates and counts device use", "[progress]") {
  JobRecord fg = RunningJob("fg-1", JobRole::kFg, 2);
  fg.progress.samples_per_s = 200;
  fg.progress.iteration_ms = 80;
  fg.progress.devices = {{0, "node-a", "a", "cpu:0", 3, 8, 0, 2, "fg-1", "", false, 0, 1},
                         {1, "node-a", "a", "cpu:1", 3, 5, 3, 2, "fg-1", "bg-1", true, 40, 1}};
  JobRecord shared_bg = RunningJob("bg-1", JobRole::kBg, 1);
  shared_bg.devices[0].device = "cpu:1";
  shared_bg.progress.samples_per_s = 40;
  JobRecord alone_bg = RunningJob("bg-2", JobRole::kBg, 1);
  alone_bg.devices[0].device = "cpu:2";
  alone_bg.progress.samples_per_s = 60;
  alone_bg.progress.devices = {{0, "node-a", "a", "cpu:2", 5, 0, 9, 1, "", "bg-2", false, 60, 1}};
  JobRecord done = RunningJob("fg-0", JobRole::kFg, 1);
  done.state = JobState::kSucceeded;
  done.progress.samples_per_s = 1000;

  NodeRecord a;
  a.id = "node-a";
  for (int i = 0; i < 4; ++i) a.devices.push_back({"cpu:" + std::to_string(i), "cpu", 0});
  NodeRecord down = a;
  down.id = "node-b";
  down.state = NodeState::kDown;
  std::map<std::pair<std::string, std::string>, DeviceUse> uses;
  uses[{"node-a", "cpu:0"}] = {"fg-1", "", 0.2};
  uses[{"node-a", "cpu:1"}] = {"fg-1", "bg-1", 0.5};
  uses[{"node-a", "cpu:2"}] = {"", "bg-2", 1.0};
  uses[{"node-b", "cpu:0"}] = {"fg-9", "", 0.0};

  ClusterSummary s = SummarizeCluster(Snapshots({fg, shared_bg, alone_bg, done}), {a, down}, uses);
  CHECK(s.fg_jobs_running == 1);
  CHECK(s.bg_jobs_running == 2);
  CHECK(s.fg_samples_per_s == 200);
  CHECK(s.bg_samples_per_s == 100);
  CHECK(s.total_samples_per_s == 300);
  CHECK(s.fg_iteration_ms == 80);
  CHECK(s.devices == 4);  // node-b is DOWN
  CHECK(s.devices_busy == 3);
  CHECK(s.devices_idle == 1);
  CHECK(s.devices_fg == 2);
  CHECK(s.devices_bg == 2);
  CHECK(s.devices_shared == 1);
  CHECK(s.fg_busy_ms == 13);
  CHECK(s.bg_busy_ms == 12);  // 3 measured in the shared executor + 9 of the lone BG job
  CHECK(s.idle_ms == 5);

  ClusterSummary empty = SummarizeCluster({}, {}, {});
  CHECK(empty.devices == 0);
  CHECK(empty.total_samples_per_s == 0);
}

}  // namespace
}  // namespace deepool::coordinator
