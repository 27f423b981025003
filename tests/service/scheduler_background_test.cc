// The scheduler's placement of BG jobs: by predicted idle time, inside running FG executors, and
// always behind FG jobs.
#include <catch2/catch.hpp>

#include "coordinator/scheduler.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Bg;
using testing::Fg;
using testing::Harness;
using testing::Running;

TEST_CASE("BG jobs take one device each, idlest first", "[scheduler]") {
  Harness h;
  h.AddNode("a", 4);
  JobRecord fg = h.Submit(Fg(3));  // ranks 0..2 on cpu:0..2, idle 0, 0.2, 0.4
  h.scheduler.Tick();
  REQUIRE(h.Get(fg.id).state == JobState::kRunning);
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {0, 1, 2});
  JobRecord bg1 = h.Submit(Bg());
  JobRecord bg2 = h.Submit(Bg());
  JobRecord bg3 = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg1.id).devices.at(0).device == "cpu:3");  // no FG job at all
  CHECK(h.Get(bg2.id).devices.at(0).device == "cpu:2");
  CHECK(h.Get(bg3.id).devices.at(0).device == "cpu:1");
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  int background = 0;
  for (const auto& c : commands) background += c.assign().train().background() ? 1 : 0;
  CHECK(background == 3);
  // Rank 0 (cpu:0) is predicted never idle: no place for a BG job (--min-bg-idle, 5 %).
  JobRecord bg4 = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg4.id).state == JobState::kPending);
  CHECK(h.Get(bg4.id).reason_code == ReasonCode::kWaitingForBgSlot);
  CHECK(h.Get(bg4.id).reason ==
        "waiting for a device with idle time: every device without a bg job runs a FG rank "
        "predicted idle less than 5% of each iteration");
}

TEST_CASE("with --min-bg-idle 0 a BG job runs inside a rank predicted never idle, the last choice",
          "[scheduler]") {
  SchedulerOptions options;
  options.policy_options.min_bg_idle_fraction = 0;
  Harness h(nullptr, nullptr, options);
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));  // ranks 0..1 on cpu:0..1, idle 0, 0.2
  h.scheduler.Tick();
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {0, 1});
  JobRecord bg1 = h.Submit(Bg());
  JobRecord bg2 = h.Submit(Bg());
  JobRecord bg3 = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg1.id).devices.at(0).device == "cpu:1");
  CHECK(h.Get(bg2.id).devices.at(0).device == "cpu:0");
  CHECK(h.Get(bg3.id).state == JobState::kPending);
  CHECK(h.Get(bg3.id).reason == "waiting for a device without a bg job");
}

TEST_CASE("device rows of a FG job name the BG job placed on the device", "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  const std::string fg_task = h.ReportRanks("node-a", fg.id, {0, 1});
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).devices.at(0).device == "cpu:1");  // rank 1 is the idler
  v1::ReportProgressRequest progress;
  progress.set_node_id("node-a");
  progress.set_task_id(fg_task);
  for (int rank = 0; rank < 2; ++rank) {
    v1::IterationEvent* e = progress.add_iterations();
    e->set_rank(rank);
    e->set_iteration(0);
    e->set_busy_ms(rank == 0 ? 9 : 4);
    e->set_idle_ms(rank == 0 ? 1 : 6);
  }
  REQUIRE(h.scheduler.ReportProgress(progress).ok());
  const std::vector<DeviceProgress> rows = h.Get(fg.id).progress.devices;
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].bg_job_id.empty());
  CHECK(rows[1].bg_job_id == bg.id);
  CHECK(rows[1].fg_busy_ms == 4);
  CHECK(rows[1].idle_ms == 6);
}

TEST_CASE(
    "a BG job on a running FG rank's device runs inside its executor and is requeued "
    "when that rank ends first",
    "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  std::string fg_task = h.Commands("node-a").at(0).assign().task_id();
  // Before the FG rank reports, no executor is known to run. As its own process the BG job
  // would compete with the FG rank: it waits for the rank instead.
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg.id).state == JobState::kPending);
  CHECK(h.Get(bg.id).reason_code == ReasonCode::kWaitingForFgRank);
  // The sentence names the job, rank, device and predicted idleness.
  CHECK(h.Get(bg.id).reason == "waiting for FG job " + fg.id +
                                   "'s rank on node-a/cpu:1 to start (to run inside it) or "
                                   "to end (predicted idle 20%)");
  CHECK(h.Commands("node-a").empty());

  h.ReportRanks("node-a", fg.id, {1});
  h.scheduler.Tick();
  JobRecord placed = h.Get(bg.id);
  REQUIRE(placed.state == JobState::kRunning);
  CHECK(placed.devices.at(0).device == "cpu:1");
  CHECK(placed.history.back().reason.find("inside the executor of job " + fg.id + " rank 1") !=
        std::string::npos);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TrainTask& train = commands[0].assign().train();
  CHECK(train.background());
  CHECK(train.host_task_id() == fg_task);
  CHECK(train.host_rank() == 1);
  auto background = nlohmann::json::parse(train.background_json());
  CHECK(background["job_id"] == bg.id);
  CHECK(background["batch_size"] == 16);
  CHECK(background["iterations"] == 5);
  CHECK(background["graph"].is_object());
  CHECK(background["optimizer"]["name"] == "sgd");

  // The BG job's progress comes from the host's "background" lines.
  v1::ReportProgressRequest bg_progress;
  bg_progress.set_node_id("node-a");
  bg_progress.set_task_id(commands[0].assign().task_id());
  v1::IterationEvent* b = bg_progress.add_iterations();
  b->set_rank(0);
  b->set_iteration(1);
  b->set_samples_per_s(50);
  b->set_in_fg_executor(true);
  REQUIRE(h.scheduler.ReportProgress(bg_progress).ok());
  REQUIRE(h.Get(bg.id).progress.devices.size() == 1);
  CHECK(h.Get(bg.id).progress.devices[0].shared_executor);
  CHECK(h.Get(bg.id).progress.devices[0].fg_job_id == fg.id);

  // The FG rank ended first: the BG job goes back to PENDING and is placed again.
  v1::ReportTaskExitRequest exit;
  exit.set_node_id("node-a");
  exit.set_task_id(commands[0].assign().task_id());
  exit.set_outcome(v1::TASK_OUTCOME_FAILED);
  exit.set_error("the FG executor it ran in ended first");
  exit.set_host_ended(true);
  REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  JobRecord requeued = h.Get(bg.id);
  CHECK(requeued.state == JobState::kPending);
  CHECK(requeued.reason_code == ReasonCode::kRequeued);
  h.scheduler.Tick();
  JobRecord again = h.Get(bg.id);
  CHECK(again.state == JobState::kRunning);
  CHECK(again.attempt == 2);
  commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id() == fg_task);
}

TEST_CASE("a BG job whose FG host keeps ending first fails after 20 dispatches, not never",
          "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {1});
  JobRecord bg = h.Submit(Bg());
  for (int dispatch = 1; dispatch <= 20; ++dispatch) {
    h.scheduler.Tick();
    REQUIRE(h.Get(bg.id).state == JobState::kRunning);
    REQUIRE(h.Get(bg.id).attempt == dispatch);
    std::vector<v1::TaskCommand> commands = h.Commands("node-a");
    REQUIRE(commands.size() == 1);
    v1::ReportTaskExitRequest exit;
    exit.set_node_id("node-a");
    exit.set_task_id(commands[0].assign().task_id());
    exit.set_outcome(v1::TASK_OUTCOME_FAILED);
    exit.set_host_ended(true);
    REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  }
  JobRecord failed = h.Get(bg.id);
  CHECK(failed.state == JobState::kFailed);
  CHECK_THAT(failed.reason, Catch::Contains("on each of its 20 dispatches"));
}

// One dispatch of a hosted BG job that reaches `reach` iterations (0: reports none) before its
// FG host ends. Returns the dispatched task's assignment.
v1::TaskAssignment HostEndsAfter(Harness& h, const std::string& bg_id, int64_t reach) {
  h.scheduler.Tick();
  REQUIRE(h.Get(bg_id).state == JobState::kRunning);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TaskAssignment assignment = commands[0].assign();
  if (reach > 0) {
    v1::ReportProgressRequest progress;
    progress.set_node_id("node-a");
    progress.set_task_id(assignment.task_id());
    v1::IterationEvent* e = progress.add_iterations();
    e->set_iteration(reach - 1);
    e->set_in_fg_executor(true);
    REQUIRE(h.scheduler.ReportProgress(progress).ok());
  }
  v1::ReportTaskExitRequest exit;
  exit.set_node_id("node-a");
  exit.set_task_id(assignment.task_id());
  exit.set_outcome(v1::TASK_OUTCOME_FAILED);
  exit.set_host_ended(true);
  REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  return assignment;
}

TEST_CASE(
    "a checkpointed BG job whose FG hosts keep ending resumes each time and is given up "
    "only after 20 dispatches in a row that got no further",
    "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {1});
  JobSpec spec = Bg();
  spec.iterations = 10000;
  spec.checkpoint_dir = "/shared/ckpt/bg";
  spec.checkpoint_every_iterations = 10;
  JobRecord bg = h.Submit(spec);
  // The hosted job's background object carries its checkpoints, so the FG rank writes them.
  const v1::TaskAssignment first = HostEndsAfter(h, bg.id, 30);
  const nlohmann::json background = nlohmann::json::parse(first.train().background_json());
  CHECK(background.at("checkpoint").at("dir") == "/shared/ckpt/bg");
  CHECK(background.at("checkpoint").at("every_iterations") == 10);
  CHECK_THAT(h.Get(bg.id).reason, Catch::Contains("it resumes from its newest checkpoint"));
  // More than 20 dispatches, each getting further: never given up.
  for (int dispatch = 2; dispatch <= 25; ++dispatch) {
    HostEndsAfter(h, bg.id, 30 + dispatch * 10);
    REQUIRE(h.Get(bg.id).state == JobState::kPending);
  }
  CHECK(h.Get(bg.id).best_reached == 280);
  CHECK(h.Get(bg.id).hosted_stalls == 0);
  // Then 20 in a row that get no further than iteration 280 (the last reports nothing).
  for (int stall = 1; stall <= 19; ++stall) {
    HostEndsAfter(h, bg.id, stall % 2 == 0 ? 280 : 270);
    REQUIRE(h.Get(bg.id).state == JobState::kPending);
  }
  HostEndsAfter(h, bg.id, 0);
  const JobRecord failed = h.Get(bg.id);
  CHECK(failed.state == JobState::kFailed);
  CHECK_THAT(failed.reason, Catch::Contains("on 20 dispatches in a row, none of which got past "
                                            "iteration 280"));
}

TEST_CASE("a drain with evacuate requeues a checkpointed BG job at once and leaves one without",
          "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  JobSpec kept = Bg();
  kept.checkpoint_dir = "/shared/ckpt/bg";
  kept.checkpoint_every_iterations = 10;
  JobRecord with = h.Submit(kept);
  JobRecord without = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(with.id).state == JobState::kRunning);
  REQUIRE(h.Get(without.id).state == JobState::kRunning);
  h.Commands("node-a");
  StatusOr<std::vector<std::string>> outcomes = h.scheduler.Evacuate("node-a");
  REQUIRE(outcomes.ok());
  REQUIRE(outcomes->size() == 2);
  const JobRecord moved = h.Get(with.id);
  CHECK(moved.state == JobState::kPending);
  CHECK(moved.reason_code == ReasonCode::kEvacuated);
  CHECK_THAT(moved.reason, Catch::Contains("resumes from its newest checkpoint elsewhere"));
  CHECK(h.Get(without.id).state == JobState::kRunning);
  // Its task is cancelled on the worker.
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].has_cancel());
}

TEST_CASE(
    "a BG job waits while the FG job holding every device profiles and plans, then runs inside "
    "the FG rank with the most predicted idle",
    "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobSpec spec = Fg(2);
  spec.profile = "measured";
  JobRecord fg = h.Submit(spec);
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(fg.id).state == JobState::kProfiling);
  // Devices reserved by a FG job not planned yet are held (idleness unknown).
  CHECK(h.Get(bg.id).state == JobState::kPending);
  CHECK(h.Get(bg.id).reason.find("waiting for FG job " + fg.id + "'s rank on node-a/cpu:0") !=
        std::string::npos);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);  // the profile task only
  h.Exit("node-a", commands[0].assign().task_id(), v1::TASK_OUTCOME_SUCCEEDED, "", "{}");

  h.scheduler.Tick();
  REQUIRE(h.Get(fg.id).state == JobState::kRunning);
  h.scheduler.Tick();  // a round admits before it plans: the next one sees the plan
  // The plan is known: rank 1 (cpu:1) is predicted idler; its rank has not reported yet.
  CHECK(h.Get(bg.id).state == JobState::kPending);
  CHECK(h.Get(bg.id).reason.find(
            "node-a/cpu:1 to start (to run inside it) or to end (predicted idle 20%)") !=
        std::string::npos);
  h.Commands("node-a");
  h.ReportRanks("node-a", fg.id, {0});  // a rank elsewhere changes nothing
  h.scheduler.Tick();
  CHECK(h.Get(bg.id).state == JobState::kPending);
  const std::string fg_task = h.ReportRanks("node-a", fg.id, {1});
  h.scheduler.Tick();
  JobRecord placed = h.Get(bg.id);
  REQUIRE(placed.state == JobState::kRunning);
  CHECK(placed.devices.at(0).device == "cpu:1");
  commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id() == fg_task);
  CHECK(commands[0].assign().train().host_rank() == 1);
}

TEST_CASE("a FG rank that completed its iterations hosts no BG job", "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  // Rank 1 (cpu:1, the idler) reports its last iteration: its executor is ending.
  const std::string fg_task = h.Get(fg.id).task_ids.at(0);
  v1::ReportProgressRequest progress;
  progress.set_node_id("node-a");
  progress.set_task_id(fg_task);
  v1::IterationEvent* e = progress.add_iterations();
  e->set_rank(1);
  e->set_iteration(4);  // the 5th of 5
  REQUIRE(h.scheduler.ReportProgress(progress).ok());
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg.id).state == JobState::kPending);
  CHECK(h.Get(bg.id).reason.find("node-a/cpu:1 to start (to run inside it) or to end") !=
        std::string::npos);
  CHECK(h.Commands("node-a").empty());
  // The FG job ends: the device is free and the BG job runs as its own process.
  h.Exit("node-a", fg_task, v1::TASK_OUTCOME_SUCCEEDED);
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id().empty());
}

TEST_CASE("a FG rank that stops at its checkpoint hosts no BG job", "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobSpec spec = Fg(2);
  spec.iterations = 100;
  spec.checkpoint_dir = "/ckpt/fg";
  spec.checkpoint_every_iterations = 5;
  JobRecord fg = h.Submit(spec);
  h.scheduler.Tick();
  h.Commands("node-a");
  const std::string fg_task = h.ReportRanks("node-a", fg.id, {0, 1});
  // Asked to stop at its next checkpoint (a resize, as a policy's preemption or growth is): a BG
  // job started inside one of its ranks would be told its host ended a checkpoint later.
  REQUIRE(h.scheduler.Resize(fg.id, 1).ok());
  REQUIRE(h.scheduler.StopAtCheckpointWanted(fg_task));
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  JobRecord waiting = h.Get(bg.id);
  CHECK(waiting.state == JobState::kPending);
  CHECK(waiting.reason_code == ReasonCode::kWaitingForFgRank);
  CHECK(waiting.reason.find("node-a/cpu:1 to start (to run inside it) or to end") !=
        std::string::npos);
  CHECK(h.Commands("node-a").empty());
  CHECK(h.scheduler.DeviceUses().at({"node-a", "cpu:1"}).bg_job.empty());
}

TEST_CASE("a BG job whose FG host rank ends while it is planned does not run beside the FG job",
          "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  const std::string fg_task = h.ReportRanks("node-a", fg.id, {0, 1});
  JobRecord bg = h.Submit(Bg());
  // Admitted onto the running rank 1 (cpu:1); while it is planned, that rank reports its last
  // iteration (its executor is ending, the FG job still holds the device).
  h.planner.on_plan = [&] {
    v1::ReportProgressRequest progress;
    progress.set_node_id("node-a");
    progress.set_task_id(fg_task);
    v1::IterationEvent* e = progress.add_iterations();
    e->set_rank(1);
    e->set_iteration(4);  // the 5th of 5
    REQUIRE(h.scheduler.ReportProgress(progress).ok());
  };
  h.scheduler.Tick();
  h.planner.on_plan = nullptr;
  // Not sent as a process of its own onto the FG job's device: it waits again.
  CHECK(h.Commands("node-a").empty());
  JobRecord waiting = h.Get(bg.id);
  CHECK(waiting.state == JobState::kPending);
  CHECK(waiting.reason_code == ReasonCode::kWaitingForFgRank);
  CHECK(waiting.attempt == 0);
  CHECK(h.scheduler.DeviceUses().at({"node-a", "cpu:1"}).bg_job.empty());
  // The FG job ends: the BG job runs as its own process.
  h.Exit("node-a", fg_task, v1::TASK_OUTCOME_SUCCEEDED);
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id().empty());
}

TEST_CASE("a BG job prefers a device no FG job holds over a FG rank's", "[scheduler]") {
  Harness h;
  h.AddNode("a", 3);
  JobRecord fg = h.Submit(Fg(2));
  h.scheduler.Tick();
  h.Commands("node-a");
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  CHECK(h.Get(bg.id).devices.at(0).device == "cpu:2");
  CHECK(h.Get(bg.id).history.back().reason.find("dispatched 1 ranks") != std::string::npos);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id().empty());  // its own process
  CHECK(h.Get(fg.id).state == JobState::kRunning);
}

TEST_CASE("BG jobs never hold FG jobs back, a FG job on a BG job's device makes it move",
          "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord bg = h.Submit(Bg());
  h.scheduler.Tick();
  REQUIRE(h.Get(bg.id).state == JobState::kRunning);
  REQUIRE(h.Get(bg.id).devices.at(0).device == "cpu:0");
  const std::string bg_task = h.Get(bg.id).task_ids.at(0);
  h.Commands("node-a");

  SECTION("with a free device, the FG job takes it and the BG job keeps running") {
    JobRecord fg = h.Submit(Fg(1));
    h.scheduler.Tick();
    REQUIRE(h.Get(fg.id).state == JobState::kRunning);
    CHECK(h.Get(fg.id).devices.at(0).device == "cpu:1");
    CHECK(h.Get(bg.id).state == JobState::kRunning);
    std::vector<v1::TaskCommand> commands = h.Commands("node-a");
    REQUIRE(commands.size() == 1);
    CHECK(commands[0].has_assign());
  }
  SECTION("without one, the BG process is stopped and the job later runs inside the FG rank") {
    JobRecord fg = h.Submit(Fg(2));
    h.scheduler.Tick();
    REQUIRE(h.Get(fg.id).state == JobState::kRunning);
    JobRecord requeued = h.Get(bg.id);
    CHECK(requeued.state == JobState::kPending);
    bool requeue_recorded = false;
    for (const StateChange& change : requeued.history) {
      if (change.state == JobState::kPending && change.code == ReasonCode::kDisplaced &&
          change.reason.find("FG job " + fg.id + " took node-a/cpu:0") != std::string::npos) {
        requeue_recorded = true;
      }
    }
    CHECK(requeue_recorded);
    h.scheduler.Tick();
    CHECK(h.Get(bg.id).reason_code == ReasonCode::kWaitingForFgRank);
    bool cancelled = false;
    for (const auto& c : h.Commands("node-a")) {
      if (c.has_cancel() && c.cancel().task_id() == bg_task) cancelled = true;
    }
    CHECK(cancelled);
    // The stopped process's exit changes nothing.
    h.Exit("node-a", bg_task, v1::TASK_OUTCOME_CANCELLED);
    CHECK(h.Get(bg.id).state == JobState::kPending);

    const std::string fg_task = h.ReportRanks("node-a", fg.id, {0, 1});
    h.scheduler.Tick();
    JobRecord again = h.Get(bg.id);
    REQUIRE(again.state == JobState::kRunning);
    CHECK(again.attempt == 2);
    // Rank 1, the idler, is on cpu:0: the FG job took the device without a BG job first.
    CHECK(h.Get(fg.id).devices.at(1).device == "cpu:0");
    CHECK(again.devices.at(0).device == "cpu:0");
    std::vector<v1::TaskCommand> commands = h.Commands("node-a");
    REQUIRE(commands.size() == 1);
    CHECK(commands[0].assign().train().host_task_id() == fg_task);
  }
  SECTION("a BG job submitted first but admitted in the same round does not take a FG device") {
    h.Exit("node-a", bg_task, v1::TASK_OUTCOME_SUCCEEDED);
    REQUIRE(h.Get(bg.id).state == JobState::kSucceeded);
    JobRecord bg2 = h.Submit(Bg());
    JobRecord fg = h.Submit(Fg(2));
    h.scheduler.Tick();
    CHECK(h.Get(fg.id).state == JobState::kRunning);
    CHECK(h.Get(bg2.id).state == JobState::kPending);
    CHECK(h.Get(bg2.id).history.size() == 1);  // never placed, never requeued
  }
}

}  // namespace
}  // namespace deepool::coordinator
