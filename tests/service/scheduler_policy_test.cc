// The Scheduler under the max-min and deepool policies (SchedulerOptions::policy), with a
// FakeClock, a FakePlanningBackend and fake workers: preemption through checkpoints, the minimum
// slice, and jobs sized by the policy. fifo is the Scheduler's default and every other scheduler
// test's.
#include <catch2/catch.hpp>

#include "coordinator/policy/policy.h"
#include "coordinator/scheduler.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;
using testing::Fg;
using testing::Harness;
using testing::Running;

SchedulerOptions WithPolicy(const std::string& name, double min_slice_s = 300) {
  policy::PolicyOptions policy_options;
  policy_options.min_slice_s = min_slice_s;
  StatusOr<std::unique_ptr<policy::Policy>> made = policy::MakePolicy(name, policy_options);
  REQUIRE(made.ok());
  SchedulerOptions options;
  options.policy = std::move(*made);
  return options;
}

// A FG job that writes a periodic checkpoint every 5 of its 1000 iterations, into a directory of
// its own (one unfinished job per directory).
JobSpec Checkpointed(int gpus) {
  static int made = 0;
  JobSpec spec = Fg(gpus);
  spec.iterations = 1000;
  spec.checkpoint_dir = "/ckpt/job-" + std::to_string(++made);
  spec.checkpoint_every_iterations = 5;
  return spec;
}

JobRecord SubmitAs(Harness& h, const JobSpec& spec, const std::string& user) {
  StatusOr<JobRecord> job = h.scheduler.Submit(spec, "", user);
  REQUIRE(job.ok());
  return *job;
}

// Time passes in steps of 5 s, node a heartbeating with the tasks of the jobs running on it.
void Pass(Harness& h, int seconds_to_pass, const std::vector<std::string>& job_ids) {
  for (int passed = 0; passed < seconds_to_pass; passed += 5) {
    h.clock.Advance(seconds(5));
    std::vector<v1::RunningTask> running;
    for (const std::string& id : job_ids) {
      const JobRecord job = h.Get(id);
      if (job.state != JobState::kRunning) continue;
      for (const std::string& task_id : job.task_ids) running.push_back(Running(task_id, id));
    }
    REQUIRE(h.scheduler.Heartbeat("node-a", running).ok());
  }
}

// The job's ranks stop at a checkpoint when asked to (as executors do); returns whether asked.
bool StopIfAsked(Harness& h, const std::string& job_id) {
  const JobRecord job = h.Get(job_id);
  if (job.state != JobState::kRunning) return false;
  bool asked = false;
  for (const std::string& task_id : job.task_ids) {
    if (!h.scheduler.StopAtCheckpointWanted(task_id)) continue;
    asked = true;
    v1::ReportTaskExitRequest exit;
    exit.set_node_id("node-a");
    exit.set_task_id(task_id);
    exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
    exit.set_stopped_at_iteration(5);
    REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  }
  return asked;
}

TEST_CASE("max-min: another user's job preempts a running one at a checkpoint after the slice",
          "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("max-min"));
  h.AddNode("a", 4);
  const JobRecord alice = SubmitAs(h, Checkpointed(4), "alice");
  h.scheduler.Tick();
  REQUIRE(h.Get(alice.id).state == JobState::kRunning);

  Pass(h, 100, {alice.id});
  const JobRecord bob = SubmitAs(h, Checkpointed(4), "bob");
  h.scheduler.Tick();
  CHECK(h.Get(bob.id).state == JobState::kPending);
  CHECK(h.Get(bob.id).reason.find("user bob has share 0.00") == 0);
  CHECK_FALSE(StopIfAsked(h, alice.id));

  Pass(h, 200, {alice.id, bob.id});  // alice's job has held its devices for 300 s
  h.scheduler.Tick();
  CHECK(h.Get(bob.id).state == JobState::kPending);
  CHECK(h.Get(bob.id).reason ==
        "waiting for job " + alice.id + " to stop at its next checkpoint (preempted for this job)");
  const Scheduler::PolicyView view = h.scheduler.LastPolicyView();
  CHECK(view.preemptions == 1);
  REQUIRE(view.shares.size() == 2);
  CHECK(view.shares[0].user == "alice");
  CHECK(view.shares[1].user == "bob");
  CHECK(view.shares[1].devices == 4);  // decided; granted once alice's job has stopped
  REQUIRE(StopIfAsked(h, alice.id));
  const JobRecord preempted = h.Get(alice.id);
  CHECK(preempted.state == JobState::kPending);
  CHECK(preempted.reason.find("preempted to make way for other jobs: stopped at the checkpoint "
                              "of iteration 5") == 0);
  CHECK(preempted.spec.gpus == 4);
  h.scheduler.Tick();
  CHECK(h.Get(bob.id).state == JobState::kRunning);
  CHECK(h.Get(alice.id).state == JobState::kPending);
}

// Two users share one node for an hour, a round every 10 s, their executors stopping at once
// when asked: a job keeps its devices for the minimum slice, so there are a few preemptions per
// hour, not one every other round.
TEST_CASE("max-min: no thrashing through the scheduler", "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("max-min", /*min_slice_s=*/300));
  h.AddNode("a", 4);
  const JobRecord alice = SubmitAs(h, Checkpointed(4), "alice");
  const JobRecord bob = SubmitAs(h, Checkpointed(4), "bob");
  int preemptions = 0;
  int alice_rounds = 0;
  int bob_rounds = 0;
  for (int round = 0; round < 360; ++round) {
    h.scheduler.Tick();
    alice_rounds += h.Get(alice.id).state == JobState::kRunning;
    bob_rounds += h.Get(bob.id).state == JobState::kRunning;
    preemptions += StopIfAsked(h, alice.id);
    preemptions += StopIfAsked(h, bob.id);
    Pass(h, 10, {alice.id, bob.id});
  }
  CHECK(preemptions >= 5);
  CHECK(preemptions <= 12);
  // Each user ran about half the hour.
  CHECK(alice_rounds >= 130);
  CHECK(bob_rounds >= 130);
}

TEST_CASE("deepool: a FG job is sized to the devices that are free", "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool"));
  h.AddNode("a", 4);
  const JobRecord job = h.Submit(Fg(8));
  h.scheduler.Tick();
  const JobRecord running = h.Get(job.id);
  CHECK(running.state == JobState::kRunning);
  CHECK(running.devices.size() == 4);
  bool sized = false;
  for (const StateChange& change : running.history) {
    sized |= change.reason.find("(4 of the 8 asked for: the deepool policy's size)") !=
             std::string::npos;
  }
  CHECK(sized);
}

// A job started on the one device a busy node had, alone on the node once the other job has
// ended: the coordinator tells the policy how many iterations it has left (10 million at 1 s each
// on one device, 0.25 s on four), so growing it pays once it has held its device for the slice.
JobRecord StartGrower(Harness& h) {
  h.planner.curves[{"tiny", "cpu"}] = {1.0, 0.5, 0.34, 0.25};
  h.AddNode("a", 4);
  const JobRecord first = h.Submit(Fg(3));
  h.scheduler.Tick();
  REQUIRE(h.Get(first.id).devices.size() == 3);
  JobSpec long_job = Checkpointed(4);
  long_job.iterations = 10'000'000;
  const JobRecord grower = h.Submit(long_job);
  h.scheduler.Tick();
  REQUIRE(h.Get(grower.id).state == JobState::kRunning);
  REQUIRE(h.Get(grower.id).devices.size() == 1);
  for (const std::string& task_id : h.Get(first.id).task_ids) {
    h.Exit("node-a", task_id, v1::TASK_OUTCOME_SUCCEEDED);
  }
  REQUIRE(h.Get(first.id).state == JobState::kSucceeded);
  return grower;
}

// The grower grows from 1 to 4 devices once its slice is over; the growth is carried out as a
// preemption after which the next round sizes the job anew, but its history, its last move and
// the policy's counters call it a growth (a resize), never a preemption.
TEST_CASE("deepool: a running job grows onto devices another job freed", "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
  const JobRecord grower = StartGrower(h);
  h.scheduler.Tick();
  CHECK_FALSE(StopIfAsked(h, grower.id));  // within its slice

  const Scheduler::PolicyView before = h.scheduler.LastPolicyView();
  Pass(h, 300, {grower.id});
  h.scheduler.Tick();
  // A growth: counted as a resize, not as a preemption, and noted as the job's last move.
  const Scheduler::PolicyView after = h.scheduler.LastPolicyView();
  using Key = std::pair<std::string, std::string>;
  CHECK(after.decisions.at(Key{"resize", "fg"}) == 1);
  CHECK(after.decisions.at(Key{"preemption", "fg"}) ==
        before.decisions.at(Key{"preemption", "fg"}));
  CHECK(after.preemptions == before.preemptions);
  REQUIRE(after.preempted != nullptr);
  CHECK(after.preempted->at(grower.id).from_devices == 1);
  CHECK(after.preempted->at(grower.id).grow_to == 4);
  // What `status JOB --why` shows as its last move: the policy's reason, a growth.
  CHECK(after.preempted->at(grower.id).message.find("grows from 1 to 4 cpu devices") == 0);
  REQUIRE(StopIfAsked(h, grower.id));
  const JobRecord stopped = h.Get(grower.id);
  CHECK(stopped.state == JobState::kPending);
  CHECK(stopped.spec.gpus == 4);
  CHECK(stopped.reason.find("grown by the deepool policy from 1 to 4 devices: stopped at the "
                            "checkpoint of iteration 5") == 0);
  bool said = false;
  bool said_preempted = false;
  for (const StateChange& change : stopped.history) {
    INFO(change.reason);
    said |= change.reason.find(
                "grown by the deepool policy from 1 to 4 devices: grows from 1 to "
                "4 cpu devices") == 0;
    said_preempted |= change.reason.find("preempted") != std::string::npos;
  }
  CHECK(said);
  CHECK_FALSE(said_preempted);
  h.scheduler.Tick();
  CHECK(h.Get(grower.id).state == JobState::kRunning);
  CHECK(h.Get(grower.id).devices.size() == 4);
}

// The devices a growth is for stay the grown job's while it runs on to its checkpoint: a job
// submitted meanwhile waits, where it would otherwise take them and leave the grown job to resume
// on what is left after paying for the move. Once the grown job waits too, a round sizes both.
TEST_CASE("deepool: a job submitted while a grown job stops does not take the growth's devices",
          "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
  const JobRecord grower = StartGrower(h);
  Pass(h, 300, {grower.id});
  h.scheduler.Tick();  // grows it: it stops at its next checkpoint
  REQUIRE(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);

  const JobRecord late = h.Submit(Fg(2));
  h.scheduler.Tick();
  CHECK(h.Get(late.id).state == JobState::kPending);
  Pass(h, 30, {grower.id});  // idle rounds change nothing
  h.scheduler.Tick();
  CHECK(h.Get(late.id).state == JobState::kPending);
  CHECK(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);

  REQUIRE(StopIfAsked(h, grower.id));
  h.scheduler.Tick();
  const JobRecord grown = h.Get(grower.id);
  CHECK(grown.state == JobState::kRunning);
  // The round sized both: each waiting job one device, the rest where it saves most (without the
  // reservation the late job held 2 of the 4 and the grown job resumed on the other 2).
  CHECK(grown.devices.size() == 3);
  CHECK(h.Get(late.id).devices.size() == 1);
}

// The reservation is stored with the grown job: a coordinator restarted while it stops keeps the
// growth's devices for it and tells its requeue as a growth (kept in memory only, the late job took
// 2 of the 4 devices after the restart and the requeue said "resized from 1 to 4 devices").
TEST_CASE("deepool: a growth's devices stay reserved across a coordinator restart",
          "[scheduler][policy]") {
  testing::TempDir dir;
  std::string grower_id;
  std::string grower_task;
  {
    auto store = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(store.ok());
    Harness h(store->get(), nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
    const JobRecord grower = StartGrower(h);
    Pass(h, 300, {grower.id});
    h.scheduler.Tick();  // grows it: it stops at its next checkpoint
    REQUIRE(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);
    grower_id = grower.id;
    grower_task = h.Get(grower.id).task_ids.at(0);
  }  // the coordinator stops: only the store survives

  auto store = OpenSQLiteJobStore(dir.File("c.db"));
  REQUIRE(store.ok());
  Harness h(store->get(), nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
  h.planner.curves[{"tiny", "cpu"}] = {1.0, 0.5, 0.34, 0.25};
  h.AddNode("a", 4, "cpu", {Running(grower_task, grower_id)});
  REQUIRE(h.Get(grower_id).state == JobState::kRunning);
  CHECK(h.Get(grower_id).grow_onto.size() == 3);
  const JobRecord late = h.Submit(Fg(2));
  h.scheduler.Tick();
  CHECK(h.Get(late.id).state == JobState::kPending);

  REQUIRE(StopIfAsked(h, grower_id));
  const JobRecord stopped = h.Get(grower_id);
  CHECK(stopped.reason.find("grown by the deepool policy from 1 to 4 devices: stopped at the "
                            "checkpoint of iteration 5") == 0);
  CHECK(stopped.grow_onto.empty());
  h.scheduler.Tick();
  CHECK(h.Get(grower_id).devices.size() == 3);
  CHECK(h.Get(late.id).devices.size() == 1);
}

// Nor is another running job grown onto them: of two long jobs on one device each, the first is
// grown onto the two devices a finished job freed, and the rounds while it stops grow nobody else.
TEST_CASE("deepool: a second running job is not grown onto the devices of a growth under way",
          "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
  h.planner.curves[{"tiny", "cpu"}] = {1.0, 0.5, 0.34, 0.25};
  h.AddNode("a", 4);
  const JobRecord first = h.Submit(Fg(2));
  h.scheduler.Tick();
  REQUIRE(h.Get(first.id).devices.size() == 2);
  JobSpec long_job = Checkpointed(4);
  long_job.iterations = 10'000'000;
  const JobRecord one = h.Submit(long_job);
  long_job.checkpoint_dir += "-two";  // a directory of its own
  const JobRecord two = h.Submit(long_job);
  h.scheduler.Tick();
  REQUIRE(h.Get(one.id).devices.size() == 1);
  REQUIRE(h.Get(two.id).devices.size() == 1);
  for (const std::string& task_id : h.Get(first.id).task_ids) {
    h.Exit("node-a", task_id, v1::TASK_OUTCOME_SUCCEEDED);
  }
  Pass(h, 300, {one.id, two.id});
  h.scheduler.Tick();
  REQUIRE(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);
  for (int round = 0; round < 3; ++round) {
    Pass(h, 10, {one.id, two.id});
    h.scheduler.Tick();
  }
  CHECK(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);
  // Only the grown job is asked to stop; it waits to be placed on 3 devices, not its request of 4.
  const bool one_stopped = StopIfAsked(h, one.id);
  const bool two_stopped = StopIfAsked(h, two.id);
  CHECK(one_stopped != two_stopped);
  const JobRecord stopped = h.Get(one_stopped ? one.id : two.id);
  CHECK(stopped.state == JobState::kPending);
  CHECK(stopped.reason ==
        "grown by the deepool policy from 1 to 3 devices: stopped at the checkpoint of iteration "
        "5, it resumes from there on the devices the next round gives it");
}

// A BG job that finds no free device while a grown job stops is told that the device it wants is
// reserved for the grown job, and for how long; not that the grown job's rank there has yet to
// start, as though that job already ran there.
TEST_CASE("deepool: a BG job waiting for a device reserved for a growth is told so",
          "[scheduler][policy]") {
  Harness h(nullptr, nullptr, WithPolicy("deepool", /*min_slice_s=*/300));
  const JobRecord grower = StartGrower(h);
  Pass(h, 300, {grower.id});
  h.scheduler.Tick();  // grows it from 1 to 4: it stops at its next checkpoint
  REQUIRE(h.scheduler.LastPolicyView().decisions.at({"resize", "fg"}) == 1);

  const JobRecord bg = h.Submit(testing::Bg());
  h.scheduler.Tick();
  const JobRecord waiting = h.Get(bg.id);
  CHECK(waiting.state == JobState::kPending);
  CHECK(waiting.reason_code == ReasonCode::kWaitingForFgRank);
  CHECK(waiting.reason ==
        "device node-a/cpu:0 is reserved for FG job " + grower.id +
            ", grown by the deepool policy from 1 to 4 devices, until it stops at its checkpoint "
            "(a BG job started there would make way for it when it resumes)");
  Pass(h, 30, {grower.id});  // nor is it placed there while the grown job runs on
  h.scheduler.Tick();
  CHECK(h.Get(bg.id).state == JobState::kPending);

  // Once the grown job has stopped the reservation is gone: placed anew, it holds the devices
  // and the BG job waits for one of its ranks to start, as beside any FG job.
  REQUIRE(StopIfAsked(h, grower.id));
  h.scheduler.Tick();
  REQUIRE(h.Get(grower.id).state == JobState::kRunning);
  CHECK(h.Get(bg.id).reason.find("waiting for FG job " + grower.id + "'s rank on node-a/") == 0);
}

}  // namespace
}  // namespace deepool::coordinator
