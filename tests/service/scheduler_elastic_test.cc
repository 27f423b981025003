// The scheduler's elastic behaviour with a FakeClock, a FakePlanningBackend and fake workers:
// node-loss policies, resize at a checkpoint, drain with evacuate, and cluster default
// checkpoints.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "coordinator/scheduler.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator {
namespace {

using std::chrono::seconds;
using testing::Bg;
using testing::Fg;
using testing::Harness;
using testing::Running;

TEST_CASE("on a node loss a FG job fails, waits for its size, or is re-planned for what remains",
          "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  h.AddNode("b", 2);
  JobSpec spec = Fg(4);
  std::string policy = GENERATE(std::string("fail"), std::string("wait"), std::string("replan"));
  spec.on_node_loss = policy;
  INFO("on_node_loss " << policy);
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  REQUIRE(h.Get(job.id).devices.size() == 4);
  std::string task_a;
  for (const std::string& id : h.Get(job.id).task_ids) {
    if (id.find("node-a") != std::string::npos) task_a = id;
  }
  // Node b goes silent; node a stays.
  for (int i = 0; i < 3; ++i) {
    h.clock.Advance(seconds(4));
    REQUIRE(h.scheduler.Heartbeat("node-a", {Running(task_a, job.id)}).ok());
    h.scheduler.Tick();
  }
  // The first attempt's task on node a is cancelled; once it reports so, its devices are free.
  h.Exit("node-a", task_a, v1::TASK_OUTCOME_CANCELLED);
  h.scheduler.Tick();
  JobRecord after = h.Get(job.id);
  if (policy == "fail") {
    CHECK(after.state == JobState::kFailed);
    CHECK(after.reason_code == ReasonCode::kNodeLost);
  } else if (policy == "wait") {
    CHECK(after.state == JobState::kPending);
    CHECK(after.reason_code == ReasonCode::kNotEnoughDevices);
    h.AddNode("b", 2);  // back: the job runs at its size again
    h.scheduler.Tick();
    CHECK(h.Get(job.id).state == JobState::kRunning);
    CHECK(h.Get(job.id).devices.size() == 4);
  } else {
    CHECK(after.state == JobState::kRunning);
    CHECK(after.attempt == 2);
    CHECK(after.devices.size() == 2);
    bool replanned = false;
    for (const StateChange& change : after.history) {
      replanned |= change.state == JobState::kPlanning &&
                   change.reason.find("re-planned from 4: only 2 schedulable") != std::string::npos;
    }
    CHECK(replanned);
    CHECK(after.spec.gpus == 4);  // the spec stays: a later attempt takes 4 again if it can
  }
}

// Every task of the job's current attempt ends after the checkpoint of `iteration`, as a
// resize asks.
void StopAllAt(Harness& h, const std::string& job_id, int64_t iteration) {
  const JobRecord job = h.Get(job_id);
  for (const std::string& task_id : job.task_ids) {
    CHECK(h.scheduler.StopAtCheckpointWanted(task_id));
    v1::ReportTaskExitRequest exit;
    exit.set_node_id(task_id.find("node-a") != std::string::npos ? "node-a" : "node-b");
    exit.set_task_id(task_id);
    exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
    exit.set_stopped_at_iteration(iteration);
    REQUIRE(h.scheduler.ReportTaskExit(exit).ok());
  }
}

// Rank 0 of the job's current attempt reports the iteration with index `index`.
void ReportRank0(Harness& h, const std::string& job_id, int64_t index) {
  const JobRecord job = h.Get(job_id);
  const RankPlacement& rank0 = job.devices.at(0);
  for (const std::string& task_id : job.task_ids) {
    if (task_id.find(rank0.node_id) == std::string::npos) continue;
    v1::ReportProgressRequest progress;
    progress.set_node_id(rank0.node_id);
    progress.set_task_id(task_id);
    v1::IterationEvent* e = progress.add_iterations();
    e->set_rank(0);
    e->set_iteration(index);
    REQUIRE(h.scheduler.ReportProgress(progress).ok());
  }
}

// A FG job that writes a periodic checkpoint every 5 of its 100 iterations.
JobSpec Checkpointed(int gpus) {
  JobSpec spec = Fg(gpus);
  spec.iterations = 100;
  spec.checkpoint_dir = "/ckpt/job";
  spec.checkpoint_every_iterations = 5;
  return spec;
}

bool HistoryHas(const JobRecord& job, JobState state, ReasonCode code, const std::string& text) {
  for (const StateChange& change : job.history) {
    if (change.state == state && change.code == code &&
        change.reason.find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

TEST_CASE("a resized FG job stops at its next checkpoint and runs again on the new count",
          "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  h.AddNode("b", 2);
  JobSpec spec = Checkpointed(4);
  spec.requeue_on_failure = true;
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  REQUIRE(h.Get(job.id).devices.size() == 4);
  for (const std::string& task_id : h.Get(job.id).task_ids) {
    CHECK_FALSE(h.scheduler.StopAtCheckpointWanted(task_id));
  }

  ReportRank0(h, job.id, 11);  // 12 iterations done

  // Shrink: asked while it runs, it keeps running until its ranks stop at a checkpoint.
  StatusOr<JobRecord> asked = h.scheduler.Resize(job.id, 2);
  REQUIRE(asked.ok());
  CHECK(asked->resize_to == 2);
  CHECK(asked->state == JobState::kRunning);
  CHECK(HistoryHas(*asked, JobState::kRunning, ReasonCode::kResized, "resize to 2 devices"));
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kRunning);
  StopAllAt(h, job.id, 10);
  JobRecord stopped = h.Get(job.id);
  CHECK(stopped.state == JobState::kPending);
  CHECK(stopped.reason_code == ReasonCode::kResized);
  CHECK(stopped.reason.find("resized from 4 to 2 devices") != std::string::npos);
  CHECK(stopped.reason.find("iteration 10") != std::string::npos);
  CHECK(stopped.spec.gpus == 2);
  CHECK(stopped.resize_to == 0);
  h.scheduler.Tick();
  JobRecord smaller = h.Get(job.id);
  CHECK(smaller.state == JobState::kRunning);
  CHECK(smaller.devices.size() == 2);
  CHECK(smaller.attempt == 2);
  for (const std::string& task_id : smaller.task_ids) {
    CHECK_FALSE(h.scheduler.StopAtCheckpointWanted(task_id));
  }
  // Its first iteration says where it resumed: once, in the history, with what was lost.
  ReportRank0(h, job.id, 10);
  ReportRank0(h, job.id, 11);
  const std::string resumed =
      "training again from iteration 10: the previous attempt had reported 12 done, 2 of them "
      "lost";
  JobRecord training = h.Get(job.id);
  CHECK(HistoryHas(training, JobState::kRunning, ReasonCode::kProgress, resumed));
  CHECK(std::count_if(training.history.begin(), training.history.end(), [](const StateChange& c) {
          return c.reason.find("training again") != std::string::npos;
        }) == 1);

  // A resize asked for and withdrawn: nothing stops.
  REQUIRE(h.scheduler.Resize(job.id, 3).ok());
  StatusOr<JobRecord> withdrawn = h.scheduler.Resize(job.id, 2);
  REQUIRE(withdrawn.ok());
  CHECK(withdrawn->resize_to == 0);
  CHECK(HistoryHas(*withdrawn, JobState::kRunning, ReasonCode::kResized, "resize to 3 withdrawn"));
  for (const std::string& task_id : smaller.task_ids) {
    CHECK_FALSE(h.scheduler.StopAtCheckpointWanted(task_id));
  }

  // Grow back to 4.
  REQUIRE(h.scheduler.Resize(job.id, 4).ok());
  StopAllAt(h, job.id, 20);
  h.scheduler.Tick();
  JobRecord larger = h.Get(job.id);
  CHECK(larger.state == JobState::kRunning);
  CHECK(larger.devices.size() == 4);
  CHECK(HistoryHas(larger, JobState::kPending, ReasonCode::kResized,
                   "resized from 2 to 4 devices: stopped at the checkpoint of iteration 20"));

  // Resizes are not failures: the job keeps all its retries for real ones.
  CHECK(larger.attempt == 3);
  StatusOr<JobRecord> after_failure = [&] {
    for (const std::string& task_id : larger.task_ids) {
      h.Exit(task_id.find("node-a") != std::string::npos ? "node-a" : "node-b", task_id,
             v1::TASK_OUTCOME_FAILED, "out of memory");
      break;
    }
    return h.jobs.Get(job.id);
  }();
  REQUIRE(after_failure.ok());
  CHECK(after_failure->state == JobState::kPending);
  CHECK(after_failure->reason_code == ReasonCode::kRequeued);
}

TEST_CASE("resize refuses what it cannot do and resizes a pending job at once",
          "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  h.AddNode("b", 2);
  JobSpec spec = Checkpointed(2);
  SECTION("a pending job takes the size at once") {
    spec.gpus = 6;  // more than the cluster has: it stays pending
    JobRecord job = h.Submit(spec);
    h.scheduler.Tick();
    REQUIRE(h.Get(job.id).state == JobState::kPending);
    StatusOr<JobRecord> resized = h.scheduler.Resize(job.id, 3);
    REQUIRE(resized.ok());
    CHECK(resized->spec.gpus == 3);
    CHECK(resized->resize_to == 0);
    h.scheduler.Tick();
    CHECK(h.Get(job.id).state == JobState::kRunning);
    CHECK(h.Get(job.id).devices.size() == 3);
  }
  SECTION("refusals") {
    JobSpec plain = Fg(2);  // no periodic checkpoints
    JobRecord unchecked = h.Submit(plain);
    JobRecord bg = h.Submit(Bg());
    h.scheduler.Tick();
    REQUIRE(h.Get(unchecked.id).state == JobState::kRunning);
    StatusOr<JobRecord> no_checkpoints = h.scheduler.Resize(unchecked.id, 1);
    CHECK(no_checkpoints.status().code() == StatusCode::kFailedPrecondition);
    CHECK(no_checkpoints.status().message().find("checkpoint") != std::string::npos);
    CHECK(h.scheduler.Resize(bg.id, 2).status().code() == StatusCode::kFailedPrecondition);
    CHECK(h.scheduler.Resize(unchecked.id, 0).status().code() == StatusCode::kInvalidArgument);
    StatusOr<JobRecord> too_big = h.scheduler.Resize(unchecked.id, 5);
    CHECK(too_big.status().code() == StatusCode::kFailedPrecondition);
    CHECK(too_big.status().message().find("largest group has 4") != std::string::npos);
    REQUIRE(h.scheduler.Cancel(unchecked.id, "").ok());
    CHECK(h.scheduler.Resize(unchecked.id, 1).status().code() == StatusCode::kFailedPrecondition);
    CHECK(h.scheduler.Resize("job-424242", 1).status().code() == StatusCode::kNotFound);
  }
}

TEST_CASE("with a cluster checkpoint root a FG job without checkpoints gets periodic ones",
          "[scheduler][elastic]") {
  SchedulerOptions options;
  options.checkpoint_root = "/shared/ckpt";
  options.checkpoint_every_seconds = 300;
  Harness h(nullptr, nullptr, options);
  h.AddNode("a", 2);
  JobRecord fg = h.Submit(Fg(1));
  JobSpec own = Fg(1);
  own.checkpoint_dir = "/mine";
  own.checkpoint_every_iterations = 7;
  JobRecord mine = h.Submit(own);
  h.scheduler.Tick();
  std::map<std::string, nlohmann::json> checkpoint_of;  // by job id, from the run specs sent
  for (const v1::TaskCommand& command : h.Commands("node-a")) {
    const nlohmann::json run = nlohmann::json::parse(command.assign().train().run_spec_json());
    checkpoint_of[command.assign().job_id()] = run.value("checkpoint", nlohmann::json());
  }
  REQUIRE(checkpoint_of.size() == 2);
  CHECK(checkpoint_of[fg.id]["dir"] == "/shared/ckpt/" + fg.id);
  CHECK(checkpoint_of[fg.id]["every_seconds"] == 300);
  CHECK(checkpoint_of[mine.id]["dir"] == "/mine");  // the spec's own win
  CHECK(checkpoint_of[mine.id]["every_iterations"] == 7);
  CHECK_FALSE(checkpoint_of[mine.id].contains("every_seconds"));
  // And so it can be resized.
  CHECK(h.scheduler.Resize(fg.id, 2).ok());
}

TEST_CASE("a drain with evacuate moves FG jobs with checkpoints at their next one",
          "[scheduler][elastic]") {
  Harness h;
  h.AddNode("a", 2);
  h.AddNode("b", 2);
  JobRecord moving = h.Submit(Checkpointed(2));
  h.scheduler.Tick();
  JobRecord staying = h.Submit(Fg(2));  // no checkpoints
  h.scheduler.Tick();
  REQUIRE(h.Get(moving.id).devices.at(0).node_id == "node-a");
  REQUIRE(h.Get(staying.id).devices.at(0).node_id == "node-b");
  h.AddNode("c", 2);
  REQUIRE(h.nodes.Drain("a").ok());
  REQUIRE(h.nodes.Drain("b").ok());

  StatusOr<std::vector<std::string>> a = h.scheduler.Evacuate("node-a");
  StatusOr<std::vector<std::string>> b = h.scheduler.Evacuate("node-b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == std::vector<std::string>{moving.id +
                                       " stops at its next checkpoint and resumes on other nodes"});
  CHECK(*b == std::vector<std::string>{staying.id +
                                       " is left to finish: it writes no periodic checkpoints"});
  for (const std::string& task_id : h.Get(staying.id).task_ids) {
    CHECK_FALSE(h.scheduler.StopAtCheckpointWanted(task_id));
  }
  StopAllAt(h, moving.id, 15);
  JobRecord stopped = h.Get(moving.id);
  CHECK(stopped.state == JobState::kPending);
  CHECK(stopped.reason_code == ReasonCode::kEvacuated);
  CHECK(stopped.reason ==
        "evacuated from draining node a: stopped at the checkpoint of iteration 15, it resumes "
        "on other nodes");
  CHECK(stopped.spec.gpus == 2);
  CHECK(stopped.evacuate_from.empty());
  h.scheduler.Tick();
  JobRecord moved = h.Get(moving.id);
  CHECK(moved.state == JobState::kRunning);
  for (const RankPlacement& p : moved.devices) CHECK(p.node_id == "node-c");
  CHECK(h.Get(staying.id).state == JobState::kRunning);
}

}  // namespace
}  // namespace deepool::coordinator
