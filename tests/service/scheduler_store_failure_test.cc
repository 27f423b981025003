// No store error is dropped: every job change the scheduler makes is either stored, retried on a
// later tick until it is, or refused to its caller (a client, or a worker that sends its report
// again). Each test runs twice (breakable_store.h): on the fake store whose writes fail on demand,
// as a full disk would make them, and on the PostgreSQL store whose server is stopped.
#include <catch2/catch.hpp>

#include "coordinator/scheduler.h"
#include "tests/service/breakable_store.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using testing::Bg;
using testing::Fg;
using testing::Harness;
using testing::Running;

// node-a's report that `task` ended with `outcome`.
v1::ReportTaskExitRequest ExitOnNodeA(const std::string& task, v1::TaskOutcome outcome) {
  v1::ReportTaskExitRequest exit;
  exit.set_node_id("node-a");
  exit.set_task_id(task);
  exit.set_outcome(outcome);
  return exit;
}

// The one task of a FG job dispatched to node-a.
std::string DispatchedTask(Harness& h) {
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  REQUIRE(commands[0].has_assign());
  return commands[0].assign().task_id();
}

TEST_CASE("a failed admission write leaves the job pending with its devices free",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 2);
  JobRecord job = h.Submit(Fg(2));
  store->Break();
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.scheduler.DeviceUses().empty());
  CHECK(h.Commands("node-a").empty());

  store->Mend();
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.Commands("node-a").size() == 1);
}

TEST_CASE("a failed task whose FAILED cannot be stored is failed once the store is back",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 2);
  JobRecord job = h.Submit(Fg(2));
  h.scheduler.Tick();
  const std::string task = DispatchedTask(h);

  store->Break();
  v1::ReportTaskExitRequest exit = ExitOnNodeA(task, v1::TASK_OUTCOME_FAILED);
  exit.set_error("boom");
  // Not taken until stored: the worker keeps the report and sends it again.
  CHECK(h.scheduler.ReportTaskExit(exit).code() == StatusCode::kUnavailable);
  // The devices are free at once; the job's new state waits for the store.
  CHECK(h.scheduler.DeviceUses().empty());
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.scheduler.UnwrittenCount() == 1);
  h.scheduler.Tick();  // still failing: kept
  CHECK(h.scheduler.UnwrittenCount() == 1);

  store->Mend();
  h.scheduler.Tick();
  CHECK(h.scheduler.UnwrittenCount() == 0);
  JobRecord failed = h.Get(job.id);
  CHECK(failed.state == JobState::kFailed);
  CHECK_THAT(failed.reason, Catch::Contains("boom"));
}

TEST_CASE("a success that cannot be stored keeps the devices, and its report, until it is",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  const std::string task = DispatchedTask(h);

  // No last log lines: the job's SUCCEEDED is the exit's only write.
  v1::ReportTaskExitRequest exit = ExitOnNodeA(task, v1::TASK_OUTCOME_SUCCEEDED);
  store->Break();
  // Refused while the end is not stored, so the worker keeps the report (and lists the task at a
  // registration): a coordinator restarted meanwhile would otherwise find the task gone.
  CHECK(h.scheduler.ReportTaskExit(exit).code() == StatusCode::kUnavailable);
  h.scheduler.Tick();  // the retry fails too
  CHECK(h.scheduler.ReportTaskExit(exit).code() == StatusCode::kUnavailable);  // sent again
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.scheduler.DeviceUses().size() == 1);
  // A second job cannot take the device the first still holds in the store's view.
  store->Mend();
  JobRecord second = h.Submit(Fg(1));
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kSucceeded);
  CHECK(h.scheduler.ReportTaskExit(exit).ok());  // stored: the report is taken
  // The success was written first in the tick, so the freed device went to the next job.
  CHECK(h.Get(second.id).state == JobState::kRunning);
}

TEST_CASE("a dispatch that cannot be stored sends nothing and requeues the job",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  // PLANNING is stored, RUNNING is not: fail from the moment the plan exists.
  h.planner.on_plan = [&] { store->Break(); };
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPlanning);
  CHECK(h.Commands("node-a").empty());
  CHECK(h.scheduler.DeviceUses().empty());

  h.planner.on_plan = nullptr;
  store->Mend();
  h.scheduler.Tick();  // the requeue is stored; the job is admitted again next round
  h.scheduler.Tick();
  JobRecord running = h.Get(job.id);
  CHECK(running.state == JobState::kRunning);
  bool requeued = false;
  for (const auto& entry : running.history) {
    if (entry.reason.find("dispatch could not be stored") != std::string::npos) requeued = true;
  }
  CHECK(requeued);
  CHECK(h.Commands("node-a").size() == 1);
}

TEST_CASE("worker reports that cannot be stored are refused, so the worker sends them again",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  const std::string task = DispatchedTask(h);

  v1::ReportProgressRequest progress;
  progress.set_node_id("node-a");
  progress.set_task_id(task);
  v1::IterationEvent* e = progress.add_iterations();
  e->set_rank(0);
  e->set_iteration(2);
  progress.add_logs()->set_line("iteration 2");
  store->Break();
  StatusOr<bool> refused = h.scheduler.ReportProgress(progress);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kUnavailable);

  v1::ReportTaskExitRequest exit = ExitOnNodeA(task, v1::TASK_OUTCOME_SUCCEEDED);
  exit.add_last_log_lines("bye");
  CHECK(h.scheduler.ReportTaskExit(exit).code() == StatusCode::kUnavailable);
  CHECK(h.Get(job.id).state == JobState::kRunning);

  store->Mend();
  REQUIRE(h.scheduler.ReportProgress(progress).ok());
  CHECK(h.Get(job.id).progress.iteration == 3);
  REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  CHECK(h.Get(job.id).state == JobState::kSucceeded);
  StatusOr<std::vector<LogRecord>> logs = h.jobs.ReadLogs(job.id, 0, 0);
  REQUIRE(logs.ok());
  REQUIRE(logs->size() == 2);
  CHECK(logs->at(0).line == "iteration 2");
  CHECK(logs->at(1).line == "[exit] bye");
}

TEST_CASE("a cancel that cannot be stored fails for the client and stops nothing",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  DispatchedTask(h);
  store->Break();
  StatusOr<JobRecord> cancelled = h.scheduler.Cancel(job.id, "");
  CHECK(cancelled.status().code() == StatusCode::kUnavailable);
  CHECK(h.Commands("node-a").empty());
  CHECK(h.scheduler.DeviceUses().size() == 1);
}

TEST_CASE("a lost node's jobs are failed once the store takes the write", "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  DispatchedTask(h);
  store->Break();
  h.clock.Advance(std::chrono::seconds(11));
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.scheduler.UnwrittenCount() == 1);
  store->Mend();
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kFailed);
  CHECK_THAT(h.Get(job.id).reason, Catch::Contains("stopped heartbeating"));
}

TEST_CASE("a measured profile whose PLANNING cannot be stored is planned once it is",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 1);
  JobSpec spec = Fg(1);
  spec.profile = "measured";
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kProfiling);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const std::string profile_task = commands[0].assign().task_id();

  store->Break();
  v1::ReportTaskExitRequest exit = ExitOnNodeA(profile_task, v1::TASK_OUTCOME_SUCCEEDED);
  exit.set_result_json(R"({"format":"x"})");
  CHECK(h.scheduler.ReportTaskExit(exit).code() == StatusCode::kUnavailable);
  CHECK(h.Get(job.id).state == JobState::kProfiling);
  CHECK(h.scheduler.UnwrittenCount() == 1);
  store->Mend();
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.scheduler.ReportTaskExit(exit).ok());
  CHECK(h.planner.last_profile_json == R"({"format":"x"})");
}

// Whether node-a was told to stop `task` since its commands were last read.
bool ToldToStop(Harness& h, const std::string& task) {
  for (const v1::TaskCommand& command : h.Commands("node-a")) {
    if (command.has_cancel() && command.cancel().task_id() == task) return true;
  }
  return false;
}

TEST_CASE("a displaced BG job's task is stopped only once its requeue is stored",
          "[scheduler][store]") {
  DEEPOOL_BREAKABLE_STORE(store);
  Harness h(store->get());
  h.AddNode("a", 2);
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  const std::string bg_task = h.Get(bg.id).task_ids.at(0);
  h.Commands("node-a");

  JobRecord fg = h.Submit(Fg(2));  // needs the BG job's device
  store->Break();
  h.scheduler.Tick();
  h.scheduler.Tick();
  // Were the coordinator to crash now, its successor would find the BG job RUNNING: a task
  // stopped already would end it FAILED "cancelled" there.
  CHECK_FALSE(ToldToStop(h, bg_task));
  CHECK(h.Get(bg.id).state == JobState::kRunning);

  store->Mend();
  h.scheduler.Tick();
  CHECK(h.Get(bg.id).state == JobState::kPending);
  CHECK(ToldToStop(h, bg_task));
}

TEST_CASE("tasks of finished jobs are forgotten", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  const std::string task = DispatchedTask(h);
  CHECK(h.scheduler.TaskCount() == 1);
  h.Exit("node-a", task, v1::TASK_OUTCOME_SUCCEEDED);
  REQUIRE(h.Get(job.id).state == JobState::kSucceeded);
  h.scheduler.Tick();
  CHECK(h.scheduler.TaskCount() == 0);
  // The worker still lists it for a moment: it is told to stop, not resent.
  StatusOr<std::vector<v1::TaskCommand>> commands =
      h.scheduler.Heartbeat("node-a", {Running(task, job.id)});
  REQUIRE(commands.ok());
  REQUIRE(commands->size() == 1);
  CHECK(commands->at(0).has_cancel());
}

}  // namespace
}  // namespace deepool::coordinator
