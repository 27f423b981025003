// The scheduler with a FakeClock, a FakePlanningBackend and fake workers that are just calls.
#include "coordinator/scheduler.h"

#include <catch2/catch.hpp>
#include <memory>

#include "common/clock.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakePlanningBackend;

struct Harness {
  explicit Harness(JobStore* external_store = nullptr)
      : store(external_store ? external_store : &memory),
        jobs(store, &clock),
        nodes(&clock, seconds(10)),
        scheduler(&jobs, &nodes, &planner, &clock) {
    REQUIRE(jobs.Load().ok());
    REQUIRE(scheduler.Recover().ok());
  }

  void AddNode(const std::string& name, int devices, const std::string& type = "cpu",
               std::vector<v1::RunningTask> running = {}) {
    std::vector<DeviceInfo> list;
    for (int i = 0; i < devices; ++i) list.push_back({"cpu:" + std::to_string(i), type, 0});
    REQUIRE(scheduler.RegisterNode(name, "10.0.0." + name + ":7000", list, running).ok());
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

JobSpec Fg(int gpus, int priority = 0) {
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

JobSpec Bg() {
  JobSpec spec = Fg(1);
  spec.name = "bg";
  spec.role = JobRole::kBg;
  return spec;
}

v1::RunningTask Running(const std::string& task_id, const std::string& job_id) {
  v1::RunningTask t;
  t.set_task_id(task_id);
  t.set_job_id(job_id);
  return t;
}

TEST_CASE("a FG job on one node is planned, dispatched, and succeeds", "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord job = h.Submit(Fg(2));
  h.scheduler.Tick();
  JobRecord running = h.Get(job.id);
  REQUIRE(running.state == JobState::kRunning);
  CHECK(running.attempt == 1);
  REQUIRE(running.devices.size() == 2);
  CHECK(running.devices[1].device == "cpu:1");
  CHECK_FALSE(running.plan_json.empty());
  CHECK(h.planner.last_profile_json.empty());  // analytical
  // History: PENDING -> PLANNING -> RUNNING.
  REQUIRE(running.history.size() == 3);
  CHECK(running.history[1].state == JobState::kPlanning);

  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TaskAssignment& a = commands[0].assign();
  CHECK(a.kind() == v1::TASK_KIND_TRAIN);
  CHECK(a.train().world_size() == 2);
  CHECK(a.train().store_address() == "10.0.0.a:0");
  REQUIRE(a.train().ranks_size() == 2);
  CHECK(a.train().ranks(1).rank() == 1);
  auto spec = nlohmann::json::parse(a.train().run_spec_json());
  CHECK(spec["format"] == "deepool.run");
  CHECK(spec["iterations"] == 5);
  CHECK(spec["optimizer"]["name"] == "sgd");
  CHECK(spec["plan"]["num_devices"] == 2);

  v1::ReportProgressRequest progress;
  progress.set_node_id("node-a");
  progress.set_task_id(a.task_id());
  v1::IterationEvent* e = progress.add_iterations();
  e->set_rank(0);
  e->set_iteration(1);
  e->set_loss(2.5);
  e->set_samples_per_s(100);
  v1::LogLine* line = progress.add_logs();
  line->set_rank(0);
  line->set_line("iteration 1");
  StatusOr<bool> cancel = h.scheduler.ReportProgress(progress);
  REQUIRE(cancel.ok());
  CHECK_FALSE(*cancel);
  CHECK(h.Get(job.id).progress.iteration == 2);
  CHECK(*h.Get(job.id).progress.loss == 2.5);
  // One device row per reporting rank, placed where the rank runs.
  REQUIRE(h.Get(job.id).progress.devices.size() == 1);
  CHECK(h.Get(job.id).progress.devices[0].device == "cpu:0");
  CHECK(h.Get(job.id).progress.devices[0].node_id == "node-a");
  CHECK(h.jobs.ReadLogs(job.id, 0, 0)->at(0).line == "iteration 1");

  h.Exit("node-a", a.task_id(), v1::TASK_OUTCOME_SUCCEEDED);
  JobRecord done = h.Get(job.id);
  CHECK(done.state == JobState::kSucceeded);
  CHECK(done.progress.iteration == 5);
  CHECK(h.scheduler.DeviceUses().empty());
}

TEST_CASE("a multi-node job sends the other nodes their ranks once the store is up",
          "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  h.AddNode("b", 2);
  JobRecord job = h.Submit(Fg(4));
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  std::vector<v1::TaskCommand> on_a = h.Commands("node-a");
  REQUIRE(on_a.size() == 1);
  CHECK(h.Commands("node-b").empty());
  const std::string task_a = on_a[0].assign().task_id();

  v1::ReportProgressRequest ready;
  ready.set_node_id("node-a");
  ready.set_task_id(task_a);
  ready.set_store_ready("10.0.0.a:29501");
  REQUIRE(h.scheduler.ReportProgress(ready).ok());
  std::vector<v1::TaskCommand> on_b = h.Commands("node-b");
  REQUIRE(on_b.size() == 1);
  const v1::TrainTask& train_b = on_b[0].assign().train();
  CHECK(train_b.store_address() == "10.0.0.a:29501");
  REQUIRE(train_b.ranks_size() == 2);
  CHECK(train_b.ranks(0).rank() == 2);
  CHECK(train_b.world_size() == 4);

  SECTION("both succeed") {
    h.Exit("node-a", task_a, v1::TASK_OUTCOME_SUCCEEDED);
    CHECK(h.Get(job.id).state == JobState::kRunning);  // b still running
    h.Exit("node-b", on_b[0].assign().task_id(), v1::TASK_OUTCOME_SUCCEEDED);
    CHECK(h.Get(job.id).state == JobState::kSucceeded);
  }
  SECTION("one fails: the job fails with the reason and the other task is cancelled") {
    v1::ReportTaskExitRequest exit;
    exit.set_node_id("node-b");
    exit.set_task_id(on_b[0].assign().task_id());
    exit.set_outcome(v1::TASK_OUTCOME_FAILED);
    v1::RankExit* r = exit.add_ranks();
    r->set_rank(3);
    r->set_exit_code(1);
    r->set_error("out of memory");
    REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
    JobRecord failed = h.Get(job.id);
    CHECK(failed.state == JobState::kFailed);
    CHECK(failed.reason.find("rank 3: out of memory") != std::string::npos);
    std::vector<v1::TaskCommand> cancels = h.Commands("node-a");
    REQUIRE(cancels.size() == 1);
    CHECK(cancels[0].cancel().task_id() == task_a);
  }
}

TEST_CASE("FG jobs go in priority then submission order; a waiting job blocks those behind",
          "[scheduler]") {
  Harness h;
  h.AddNode("a", 2);
  JobRecord low = h.Submit(Fg(2, 0));
  JobRecord high = h.Submit(Fg(2, 5));
  JobRecord small = h.Submit(Fg(1, 0));
  JobRecord huge = h.Submit(Fg(8, 9));  // can never fit: must not block anyone
  h.scheduler.Tick();
  CHECK(h.Get(high.id).state == JobState::kRunning);
  CHECK(h.Get(low.id).state == JobState::kPending);
  CHECK(h.Get(low.id).reason.find("waiting for 2 free devices") != std::string::npos);
  CHECK(h.Get(small.id).state == JobState::kPending);
  CHECK(h.Get(small.id).reason == "queued behind " + low.id);
  CHECK(h.Get(huge.id).reason.find("needs 8 devices") != std::string::npos);

  h.Exit("node-a", h.Get(high.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
  h.scheduler.Tick();
  CHECK(h.Get(low.id).state == JobState::kRunning);
  CHECK(h.Get(small.id).state == JobState::kPending);
}

TEST_CASE("a missing profile is measured by a worker, then cached", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  JobSpec spec = Fg(1);
  spec.profile = "measured";
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kProfiling);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TaskAssignment& profile = commands[0].assign();
  CHECK(profile.kind() == v1::TASK_KIND_PROFILE);
  CHECK(profile.profile().model() == "tiny");
  CHECK(profile.profile().device() == "cpu:0");
  CHECK(profile.profile().batch_sizes_size() == 2);

  SECTION("success: planned with the measured profile; the next job skips profiling") {
    h.Exit("node-a", profile.task_id(), v1::TASK_OUTCOME_SUCCEEDED, "", "{\"measured\":1}");
    CHECK(h.Get(job.id).state == JobState::kPlanning);
    CHECK(h.store->LoadProfile("fake/tiny", "cpu")->value() == "{\"measured\":1}");
    h.scheduler.Tick();
    CHECK(h.Get(job.id).state == JobState::kRunning);
    CHECK(h.planner.last_profile_json == "{\"measured\":1}");
    h.Commands("node-a");
    h.Exit("node-a", h.Get(job.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);

    JobRecord second = h.Submit(spec);
    h.scheduler.Tick();
    CHECK(h.Get(second.id).state == JobState::kRunning);
    for (const StateChange& change : h.Get(second.id).history) {
      CHECK(change.state != JobState::kProfiling);
    }
  }
  SECTION("failure: the job fails and its device is free again") {
    h.Exit("node-a", profile.task_id(), v1::TASK_OUTCOME_FAILED, "profiler crashed");
    CHECK(h.Get(job.id).state == JobState::kFailed);
    CHECK(h.Get(job.id).reason.find("profiler crashed") != std::string::npos);
    CHECK(h.scheduler.DeviceUses().empty());
  }
}

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
  JobRecord bg4 = h.Submit(Bg());
  JobRecord bg5 = h.Submit(Bg());
  h.scheduler.Tick();
  CHECK(h.Get(bg4.id).devices.at(0).device == "cpu:0");
  CHECK(h.Get(bg5.id).state == JobState::kPending);
  CHECK(h.Get(bg5.id).reason.find("without a bg job") != std::string::npos);
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
  CHECK(requeued.reason.find("not checkpointed") != std::string::npos);
  h.scheduler.Tick();
  JobRecord again = h.Get(bg.id);
  CHECK(again.state == JobState::kRunning);
  CHECK(again.attempt == 2);
  commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().train().host_task_id() == fg_task);
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

TEST_CASE("BG jobs never hold FG jobs back; a FG job on a BG job's device makes it move",
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
      if (change.state == JobState::kPending &&
          change.reason.find("requeued: FG job " + fg.id + " took node-a/cpu:0") !=
              std::string::npos) {
        requeue_recorded = true;
      }
    }
    CHECK(requeue_recorded);
    h.scheduler.Tick();
    CHECK(h.Get(bg.id).reason.find("waiting for FG job " + fg.id) != std::string::npos);
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

TEST_CASE("cancel works in every non-terminal state", "[scheduler]") {
  Harness h;
  SECTION("pending") {
    JobRecord job = h.Submit(Fg(1));
    h.scheduler.Tick();  // no nodes: stays pending
    StatusOr<JobRecord> cancelled = h.scheduler.Cancel(job.id, "");
    REQUIRE(cancelled.ok());
    CHECK(cancelled->state == JobState::kCancelled);
    CHECK(cancelled->reason == "cancelled by user");
    CHECK(h.scheduler.Cancel(job.id, "").status().code() == StatusCode::kFailedPrecondition);
  }
  SECTION("profiling") {
    h.AddNode("a", 1);
    JobSpec spec = Fg(1);
    spec.profile = "measured";
    JobRecord job = h.Submit(spec);
    h.scheduler.Tick();
    const std::string task = h.Commands("node-a").at(0).assign().task_id();
    REQUIRE(h.scheduler.Cancel(job.id, "changed my mind").ok());
    CHECK(h.Commands("node-a").at(0).cancel().task_id() == task);
    // The late profile result changes nothing.
    h.Exit("node-a", task, v1::TASK_OUTCOME_SUCCEEDED, "", "{}");
    CHECK(h.Get(job.id).state == JobState::kCancelled);
    CHECK(h.Get(job.id).reason == "changed my mind");
  }
  SECTION("running") {
    h.AddNode("a", 1);
    JobRecord job = h.Submit(Fg(1));
    h.scheduler.Tick();
    const std::string task = h.Commands("node-a").at(0).assign().task_id();
    REQUIRE(h.scheduler.Cancel(job.id, "").ok());
    CHECK(h.Commands("node-a").at(0).cancel().task_id() == task);
    StatusOr<bool> stop = h.scheduler.ReportProgress([&] {
      v1::ReportProgressRequest r;
      r.set_node_id("node-a");
      r.set_task_id(task);
      return r;
    }());
    CHECK(*stop);
    h.Exit("node-a", task, v1::TASK_OUTCOME_CANCELLED);
    CHECK(h.Get(job.id).state == JobState::kCancelled);
    CHECK(h.scheduler.DeviceUses().empty());
  }
  SECTION("unknown") {
    CHECK(h.scheduler.Cancel("job-424242", "").status().code() == StatusCode::kNotFound);
  }
}

TEST_CASE("a silent node's jobs fail, or are requeued when the spec allows", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  h.AddNode("b", 1);
  JobSpec plain = Fg(1);
  JobSpec requeue = Fg(1);
  requeue.requeue_on_failure = true;
  JobRecord first = h.Submit(plain);
  JobRecord second = h.Submit(requeue);
  h.scheduler.Tick();
  REQUIRE(h.Get(first.id).state == JobState::kRunning);
  REQUIRE(h.Get(second.id).state == JobState::kRunning);
  CHECK(h.Get(first.id).devices[0].node_id != h.Get(second.id).devices[0].node_id);

  h.clock.Advance(seconds(11));  // both silent
  h.scheduler.Tick();
  JobRecord failed = h.Get(first.id);
  CHECK(failed.state == JobState::kFailed);
  CHECK(failed.reason.find("stopped heartbeating") != std::string::npos);
  JobRecord requeued = h.Get(second.id);
  CHECK(requeued.state == JobState::kPending);
  CHECK(requeued.history.back().state == JobState::kPending);
  CHECK(requeued.history.back().reason.rfind("requeued: node ", 0) == 0);

  // The node comes back: the requeued job runs again, as attempt 2.
  h.AddNode("a", 1);
  h.scheduler.Tick();
  CHECK(h.Get(second.id).state == JobState::kRunning);
  CHECK(h.Get(second.id).attempt == 2);
}

TEST_CASE("heartbeats re-send missed assignments and cancel unwanted tasks", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  const std::string task = h.Commands("node-a").at(0).assign().task_id();  // "lost" in transit

  StatusOr<std::vector<v1::TaskCommand>> beat = h.scheduler.Heartbeat("node-a", {});
  REQUIRE(beat.ok());
  CHECK(beat->empty());  // too early to call it missed
  h.clock.Advance(seconds(6));
  beat = h.scheduler.Heartbeat("node-a", {});
  REQUIRE(beat->size() == 1);
  CHECK(beat->at(0).assign().task_id() == task);
  h.clock.Advance(seconds(6));
  beat = h.scheduler.Heartbeat("node-a", {Running(task, job.id)});
  CHECK(beat->empty());  // confirmed

  beat = h.scheduler.Heartbeat("node-a", {Running(task, job.id), Running("stray.a1.x", "stray")});
  REQUIRE(beat->size() == 1);
  CHECK(beat->at(0).cancel().task_id() == "stray.a1.x");
  CHECK(h.scheduler.Heartbeat("node-zzz", {}).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a worker that restarts without its task fails the job", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  const std::string task = h.Commands("node-a").at(0).assign().task_id();
  REQUIRE(h.scheduler.Heartbeat("node-a", {Running(task, job.id)}).ok());
  h.AddNode("a", 1);  // re-registers listing nothing
  CHECK(h.Get(job.id).state == JobState::kFailed);
  CHECK(h.Get(job.id).reason.find("restarted") != std::string::npos);
}

TEST_CASE("planning errors fail the job with the planner's reason", "[scheduler]") {
  Harness h;
  h.AddNode("a", 1);
  h.planner.plan_error = FailedPreconditionError("amplification limit unreachable");
  JobRecord job = h.Submit(Fg(1));
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kFailed);
  CHECK(h.Get(job.id).reason.find("amplification limit unreachable") != std::string::npos);
  CHECK(h.scheduler.DeviceUses().empty());
}

TEST_CASE("submit refuses unknown models naming the field", "[scheduler]") {
  Harness h;
  JobSpec spec = Fg(1);
  spec.model = "nonexistent";
  StatusOr<JobRecord> job = h.scheduler.Submit(spec);
  CHECK(job.status().code() == StatusCode::kInvalidArgument);
  CHECK(job.status().message().rfind("model", 0) == 0);
  CHECK(h.jobs.List({}, 0).empty());
}

TEST_CASE("after a restart, running jobs are reconciled with what workers report", "[scheduler]") {
  testing::TempDir dir;
  std::string kept, lost, planning;
  std::string kept_task;
  {
    auto store = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(store.ok());
    Harness h(store->get());
    h.AddNode("a", 1);
    h.AddNode("b", 1);
    kept = h.Submit(Fg(1)).id;
    lost = h.Submit(Fg(1)).id;
    h.scheduler.Tick();
    REQUIRE(h.Get(kept).state == JobState::kRunning);
    REQUIRE(h.Get(lost).state == JobState::kRunning);
    planning = h.Submit(Bg()).id;
    REQUIRE(h.jobs.Transition(planning, JobState::kPlanning, "mid-planning").ok());
    kept_task = h.Get(kept).task_ids.at(0);
  }  // the coordinator "crashes": nothing but the SQLite file survives

  auto store = OpenSQLiteJobStore(dir.File("c.db"));
  REQUIRE(store.ok());
  Harness h(store->get());
  CHECK(h.Get(kept).state == JobState::kRunning);
  CHECK(h.Get(lost).state == JobState::kRunning);
  CHECK(h.Get(planning).state == JobState::kPending);
  CHECK(h.Get(planning).reason.find("restarted") != std::string::npos);

  const std::string kept_node = h.Get(kept).devices[0].node_id;
  h.AddNode(kept_node.substr(5), 1, "cpu", {Running(kept_task, kept)});
  h.clock.Advance(seconds(11));
  REQUIRE(h.scheduler.Heartbeat(kept_node, {Running(kept_task, kept)}).ok());
  h.scheduler.Tick();
  CHECK(h.Get(kept).state == JobState::kRunning);
  JobRecord failed = h.Get(lost);
  CHECK(failed.state == JobState::kFailed);
  CHECK(failed.reason.find("after the coordinator restarted") != std::string::npos);

  h.Exit(kept_node, kept_task, v1::TASK_OUTCOME_SUCCEEDED);
  CHECK(h.Get(kept).state == JobState::kSucceeded);
  CHECK(h.Get(kept).history.size() == 4);  // PENDING, PLANNING, RUNNING, SUCCEEDED
}

}  // namespace
}  // namespace deepool::coordinator

namespace deepool::coordinator {
namespace {

TEST_CASE("after a restart, a multi-node job's other ranks still get the store address",
          "[scheduler]") {
  testing::TempDir dir;
  std::string id, task_a, task_b;
  const bool store_known_before_crash = GENERATE(false, true);
  {
    auto store = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(store.ok());
    Harness h(store->get());
    h.AddNode("a", 2);
    h.AddNode("b", 2);
    id = h.Submit(Fg(4)).id;
    h.scheduler.Tick();
    task_a = h.Commands("node-a").at(0).assign().task_id();
    task_b = h.Get(id).task_ids.at(1);
    if (store_known_before_crash) {
      v1::ReportProgressRequest ready;
      ready.set_node_id("node-a");
      ready.set_task_id(task_a);
      ready.set_store_ready("10.0.0.a:29501");
      REQUIRE(h.scheduler.ReportProgress(ready).ok());
      // The coordinator dies before node b's stream delivers the assignment.
    }
  }
  auto store = OpenSQLiteJobStore(dir.File("c.db"));
  REQUIRE(store.ok());
  Harness h(store->get());
  h.AddNode("b", 2);  // lists nothing: it never got its task
  CHECK(h.Get(id).state == JobState::kRunning);
  h.AddNode("a", 2, "cpu", {Running(task_a, id)});
  if (!store_known_before_crash) {
    CHECK(h.Commands("node-b").empty());
    v1::ReportProgressRequest ready;
    ready.set_node_id("node-a");
    ready.set_task_id(task_a);
    ready.set_store_ready("10.0.0.a:29502");
    REQUIRE(h.scheduler.ReportProgress(ready).ok());
  }
  std::vector<v1::TaskCommand> on_b = h.Commands("node-b");
  REQUIRE(on_b.size() == 1);
  CHECK(on_b[0].assign().task_id() == task_b);
  CHECK(on_b[0].assign().train().store_address() ==
        (store_known_before_crash ? "10.0.0.a:29501" : "10.0.0.a:29502"));
  CHECK(on_b[0].assign().train().ranks_size() == 2);
  CHECK(nlohmann::json::parse(on_b[0].assign().train().run_spec_json())["format"] == "deepool.run");

  h.clock.Advance(seconds(11));
  REQUIRE(h.scheduler.Heartbeat("node-a", {Running(task_a, id)}).ok());
  REQUIRE(h.scheduler.Heartbeat("node-b", {Running(task_b, id)}).ok());
  h.scheduler.Tick();
  CHECK(h.Get(id).state == JobState::kRunning);
  h.Exit("node-a", task_a, v1::TASK_OUTCOME_SUCCEEDED);
  h.Exit("node-b", task_b, v1::TASK_OUTCOME_SUCCEEDED);
  CHECK(h.Get(id).state == JobState::kSucceeded);
}

TEST_CASE("after a restart, a job whose rank-0 task is gone fails", "[scheduler]") {
  testing::TempDir dir;
  std::string id;
  {
    auto store = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(store.ok());
    Harness h(store->get());
    h.AddNode("a", 1);
    id = h.Submit(Fg(1)).id;
    h.scheduler.Tick();
  }
  auto store = OpenSQLiteJobStore(dir.File("c.db"));
  REQUIRE(store.ok());
  Harness h(store->get());
  h.AddNode("a", 1);  // lists nothing
  CHECK(h.Get(id).state == JobState::kFailed);
}

}  // namespace
}  // namespace deepool::coordinator
