// The dispatcher's task table and outboxes with a FakeClock: sends, re-sends, cancels, the c10d
// store hand-off, and forgetting ended tasks.
#include "coordinator/dispatcher.h"

#include <catch2/catch.hpp>
#include <future>

namespace deepool::coordinator {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Task TrainTask(const std::string& id, const std::string& node, TaskPhase phase,
               const std::string& job = "job-1") {
  Task task;
  task.id = id;
  task.job_id = job;
  task.node_id = node;
  task.attempt = 1;
  task.phase = phase;
  task.rank0_node = phase == TaskPhase::kSent;
  task.assignment.set_task_id(id);
  task.assignment.set_job_id(job);
  task.assignment.mutable_train();
  return task;
}

v1::RunningTask Listed(const std::string& id) {
  v1::RunningTask task;
  task.set_task_id(id);
  return task;
}

const Dispatcher::JobWanted kWanted = [](const std::string&) { return true; };

TEST_CASE("sent tasks reach the outbox, waiting ones go out with the store address",
          "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add(
      {TrainTask("t0", "a", TaskPhase::kSent), TrainTask("t1", "b", TaskPhase::kWaitingForStore)});
  REQUIRE(dispatcher.WaitForCommands("a", milliseconds(0)).size() == 1);
  CHECK(dispatcher.WaitForCommands("b", milliseconds(0)).empty());
  dispatcher.OnStoreReady("job-1", 1, "10.0.0.1:29500");
  std::vector<v1::TaskCommand> on_b = dispatcher.WaitForCommands("b", milliseconds(0));
  REQUIRE(on_b.size() == 1);
  CHECK(on_b[0].assign().train().store_address() == "10.0.0.1:29500");
}

TEST_CASE("a task the worker does not list is re-sent after resend_after", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add({TrainTask("t0", "a", TaskPhase::kSent)});
  CHECK(dispatcher.OnHeartbeat("a", {}, kWanted).empty());
  clock.Advance(seconds(5));
  std::vector<v1::TaskCommand> again = dispatcher.OnHeartbeat("a", {}, kWanted);
  REQUIRE(again.size() == 1);
  CHECK(again[0].assign().task_id() == "t0");
  // Listed: confirmed, never re-sent.
  clock.Advance(seconds(5));
  CHECK(dispatcher.OnHeartbeat("a", {Listed("t0")}, kWanted).empty());
  clock.Advance(seconds(5));
  CHECK(dispatcher.OnHeartbeat("a", {Listed("t0")}, kWanted).empty());
}

TEST_CASE("cancelling ends unsent tasks and sends cancels for the others", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add(
      {TrainTask("t0", "a", TaskPhase::kSent), TrainTask("t1", "b", TaskPhase::kWaitingForStore)});
  dispatcher.WaitForCommands("a", milliseconds(0));
  dispatcher.CancelJob("job-1", "user");
  std::vector<v1::TaskCommand> on_a = dispatcher.WaitForCommands("a", milliseconds(0));
  REQUIRE(on_a.size() == 1);
  CHECK(on_a[0].cancel().task_id() == "t0");
  CHECK(dispatcher.WaitForCommands("b", milliseconds(0)).empty());
  CHECK(dispatcher.TasksOnNode("b").empty());
  // The worker stops listing it: it has ended.
  REQUIRE(dispatcher.TasksOnNode("a").size() == 1);
  dispatcher.OnHeartbeat("a", {}, kWanted);
  CHECK(dispatcher.TasksOnNode("a").empty());
}

TEST_CASE("ended tasks are forgotten once their job is done with them", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add({TrainTask("t0", "a", TaskPhase::kSent, "done-job"),
                  TrainTask("t1", "a", TaskPhase::kSent, "live-job")});
  REQUIRE(dispatcher.OnExit("t0", v1::TASK_OUTCOME_SUCCEEDED, "").has_value());
  REQUIRE(dispatcher.OnExit("t1", v1::TASK_OUTCOME_SUCCEEDED, "").has_value());
  CHECK_FALSE(dispatcher.OnExit("t1", v1::TASK_OUTCOME_SUCCEEDED, "").has_value());  // repeated
  const size_t dropped =
      dispatcher.DropEnded([](const std::string& job, int64_t) { return job == "done-job"; });
  CHECK(dropped == 1);
  CHECK(dispatcher.size() == 1);
  CHECK_FALSE(dispatcher.Find("t0").has_value());
  std::string checkpoint;
  CHECK(dispatcher.AllSucceeded({"t1"}, &checkpoint));
}

TEST_CASE("a node that re-registers without its confirmed task lost it", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add({TrainTask("t0", "a", TaskPhase::kSent)});
  dispatcher.OnHeartbeat("a", {Listed("t0")}, kWanted);  // confirmed
  Dispatcher::Registration registration = dispatcher.OnRegister("a", "10.0.0.1", {}, kWanted);
  CHECK(registration.lost_jobs == std::set<std::string>{"job-1"});
  // A task of a job nobody wants any more is cancelled at registration.
  dispatcher.Add({TrainTask("t2", "a", TaskPhase::kSent, "gone")});
  registration = dispatcher.OnRegister("a", "10.0.0.1", {Listed("t2")},
                                       [](const std::string& job) { return job != "gone"; });
  CHECK(registration.cancel_task_ids == std::vector<std::string>{"t2"});
}

TEST_CASE("a task listed several times is answered once", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  const std::vector<v1::RunningTask> stray(1000, Listed("stray"));
  CHECK(dispatcher.OnRegister("a", "10.0.0.1", stray, kWanted).cancel_task_ids ==
        std::vector<std::string>{"stray"});
  CHECK(dispatcher.OnHeartbeat("a", stray, kWanted).size() == 1);
}

TEST_CASE("the job table is asked without the dispatcher's lock held", "[dispatcher]") {
  // A heartbeat that waited for the job table under the dispatcher's lock held every other
  // worker call up with it. Here the predicate asks the dispatcher from another thread; that
  // call gets through only if the lock is free.
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  dispatcher.Add({TrainTask("t0", "a", TaskPhase::kSent), TrainTask("t1", "b", TaskPhase::kSent)});
  bool answered = true;
  // Kept past each call: a future's destructor waits for its call, which a held lock blocks.
  std::vector<std::future<size_t>> other_calls;
  auto asks_dispatcher = [&](const std::string&) {
    other_calls.push_back(std::async(std::launch::async, [&] { return dispatcher.size(); }));
    answered = answered && other_calls.back().wait_for(seconds(2)) == std::future_status::ready;
    return true;
  };
  CHECK(dispatcher.OnHeartbeat("a", {Listed("t0")}, asks_dispatcher).empty());
  CHECK(answered);
  dispatcher.OnRegister("b", "10.0.0.2", {Listed("t1")}, asks_dispatcher);
  CHECK(answered);
  REQUIRE(dispatcher.OnExit("t0", v1::TASK_OUTCOME_SUCCEEDED, "").has_value());
  CHECK(dispatcher.DropEnded(
            [&](const std::string& job, int64_t) { return asks_dispatcher(job); }) == 1);
  CHECK(answered);
}

TEST_CASE("a heartbeat sees only its own node's tasks among many", "[dispatcher]") {
  FakeClock clock;
  Dispatcher dispatcher(&clock, seconds(5));
  std::vector<Task> tasks;
  for (int n = 0; n < 50; ++n) {
    tasks.push_back(TrainTask("t" + std::to_string(n), "node-" + std::to_string(n),
                              TaskPhase::kSent, "job-" + std::to_string(n)));
  }
  dispatcher.Add(std::move(tasks));
  clock.Advance(seconds(5));
  // Node 7 lists nothing: only its own task is re-sent.
  std::vector<v1::TaskCommand> resent = dispatcher.OnHeartbeat("node-7", {}, kWanted);
  REQUIRE(resent.size() == 1);
  CHECK(resent[0].assign().task_id() == "t7");
  CHECK(dispatcher.TasksOnNode("node-7") == std::vector<std::string>{"t7"});
  // A task ended and forgotten leaves its node's index too.
  REQUIRE(dispatcher.OnExit("t7", v1::TASK_OUTCOME_SUCCEEDED, "").has_value());
  CHECK(dispatcher.DropEnded([](const std::string&, int64_t) { return true; }) == 1);
  CHECK(dispatcher.TasksOnNode("node-7").empty());
  CHECK(dispatcher.OnHeartbeat("node-7", {}, kWanted).empty());
  CHECK(dispatcher.size() == 49);
}

}  // namespace
}  // namespace deepool::coordinator
