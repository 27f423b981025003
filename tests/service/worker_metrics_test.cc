// The worker's metrics (worker/daemon/worker_metrics.h): device time summed per device and
// kind from the executors' iteration reports, FG and BG roles told apart, hosted BG progress not
// counted twice, exits by outcome.
#include "worker/daemon/worker_metrics.h"

#include <catch2/catch.hpp>

#include "tests/promtool.h"

namespace deepool::worker::daemon {
namespace {

TrainTask Task(const std::string& id, bool background, const std::string& node_device) {
  TrainTask task;
  task.task_id = id;
  task.background = background;
  task.ranks = {{0, "cpu", node_device}};
  return task;
}

IterationReport Report(double busy_ms, double idle_ms) {
  IterationReport report;
  report.busy_ms = busy_ms;
  report.idle_ms = idle_ms;
  return report;
}

}  // namespace

TEST_CASE("device seconds add up per device and kind, roles and hosted BG apart", "[metrics]") {
  WorkerMetrics metrics;
  metrics.OnTrainStarted(Task("fg", false, "cpu:0"));
  metrics.OnTrainStarted(Task("bg", true, "cpu:1"));
  IterationReport waited = Report(300, 100);  // of its 300 ms busy, 50 waiting for the batch
  waited.data_ms = 50;
  metrics.OnIteration("fg", waited);
  IterationReport shared = Report(500, 50);  // an executor beside a BG job splits its busy time
  shared.fg_busy_ms = 350;
  shared.bg_busy_ms = 150;
  metrics.OnIteration("fg", shared);
  metrics.OnIteration("bg", Report(200, 0));
  IterationReport hosted = Report(999, 999);  // a hosted BG job's own line: already in bg_busy
  hosted.in_fg_executor = true;
  metrics.OnIteration("fg", hosted);
  metrics.OnIteration("unknown-task", Report(1, 1));
  TaskResult done;
  done.task_id = "bg";
  done.succeeded = true;
  metrics.OnTaskFinished(done);
  metrics.OnIteration("bg", Report(200, 0));  // after its end: not counted
  const std::string text = metrics.Render(1, true);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("deepool_worker_device_seconds_total{device=\"cpu:0\","
                                   "kind=\"fg_busy\"} 0.6\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_device_seconds_total{device=\"cpu:0\","
                                   "kind=\"data_wait\"} 0.05\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_device_seconds_total{device=\"cpu:0\","
                                   "kind=\"bg_busy\"} 0.15\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_device_seconds_total{device=\"cpu:0\","
                                   "kind=\"idle\"} 0.15\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_device_seconds_total{device=\"cpu:1\","
                                   "kind=\"bg_busy\"} 0.2\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_worker_iterations_total{device=\"cpu:0\",role=\"fg\"} 2\n"));
  CHECK_THAT(text,
             Catch::Contains("deepool_worker_iterations_total{device=\"cpu:1\",role=\"bg\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_task_exits_total{outcome=\"succeeded\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_tasks_running 1\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_registered 1\n"));
  CHECK_THAT(text, !Catch::Contains("unknown-task"));
}

TEST_CASE("each rank's checkpoint write time goes into a histogram by role", "[metrics]") {
  WorkerMetrics metrics;
  metrics.OnTrainStarted(Task("fg", false, "cpu:0"));
  metrics.OnTrainStarted(Task("bg", true, "cpu:1"));
  TaskResult fg;
  fg.task_id = "fg";
  fg.succeeded = true;
  fg.checkpoint_seconds = {0.02, 0.3};  // two ranks wrote one each
  metrics.OnTaskFinished(fg);
  TaskResult bg;
  bg.task_id = "bg";
  bg.succeeded = true;
  bg.checkpoint_seconds = {1.5};
  metrics.OnTaskFinished(bg);
  const std::string text = metrics.Render(0, true);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("# TYPE deepool_worker_checkpoint_seconds histogram\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_checkpoint_seconds_count{role=\"fg\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_checkpoint_seconds_sum{role=\"fg\"} 0.32\n"));
  CHECK_THAT(text, Catch::Contains("deepool_worker_checkpoint_seconds_count{role=\"bg\"} 1\n"));
  if (auto problems = deepool::testing::PromtoolProblems(text)) CHECK(*problems == "");
}

}  // namespace deepool::worker::daemon
