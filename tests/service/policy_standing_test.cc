// A job's standing under the scheduling policy (coordinator/policy_standing.h) from hand-made
// snapshots and decisions: who is in a waiting job's way, when it is due, what it queues behind.
#include "coordinator/policy_standing.h"

#include <catch2/catch.hpp>

namespace deepool::coordinator {
namespace {

using policy::WaitCode;

policy::PolicyJob Placed(const std::string& id, const std::string& user, const std::string& type,
                         int devices, double placed_at_s, bool preemptible) {
  policy::PolicyJob job;
  job.id = id;
  job.user = user;
  job.device_type = type;
  for (int i = 0; i < devices; ++i)
    job.devices.push_back({"node-" + id, "cpu:" + std::to_string(i)});
  job.placed_at_s = placed_at_s;
  job.preemptible = preemptible;
  return job;
}

policy::PolicyJob Waiting(const std::string& id, const std::string& user, int priority = 0) {
  policy::PolicyJob job;
  job.id = id;
  job.user = user;
  job.priority = priority;
  return job;
}

std::vector<std::string> Ids(const std::vector<PolicyHolderView>& holders) {
  std::vector<std::string> ids;
  for (const PolicyHolderView& holder : holders) ids.push_back(holder.job_id);
  return ids;
}

TEST_CASE("max-min: a fair-share wait names the holders above its share and the slice end",
          "[policy_standing]") {
  policy::PolicySnapshot snapshot;
  snapshot.now_s = 1000;
  snapshot.jobs = {Placed("a1", "alice", "cpu", 4, 600, /*preemptible=*/true),
                   Placed("a2", "alice", "cpu", 2, 500, /*preemptible=*/false),
                   Placed("c1", "carol", "cpu", 2, 400, /*preemptible=*/true),
                   Waiting("b1", "bob")};
  policy::Decisions decisions;
  decisions.shares = {{"alice", 1.0, 6}, {"bob", 0.0, 0}, {"carol", 0.0, 2}};
  decisions.waits = {{"b1", WaitCode::kFairShare, "user bob has share 0.00"}};
  const PolicyRound round = SummarizeRound("max-min", snapshot, decisions);
  const JobStanding standing = StandingOf(round, /*min_slice_s=*/300, "b1", "bob");
  CHECK(standing.user_share == 0.0);
  CHECK(standing.user_devices == 0);
  REQUIRE(standing.wait.has_value());
  CHECK(standing.wait->code == WaitCode::kFairShare);
  // carol's share is not above bob's: max-min takes nothing from her. Earliest placed first.
  CHECK(Ids(standing.wait->holders) == std::vector<std::string>{"a2", "a1"});
  // a2 keeps no periodic checkpoints: a1's slice is the first to end that may be preempted.
  REQUIRE(standing.wait->due_s.has_value());
  CHECK(*standing.wait->due_s == 900);
  CHECK(standing.wait->queued_behind.empty());

  // The placed user's own standing: its share, no wait.
  const JobStanding alice = StandingOf(round, 300, "a1", "alice");
  CHECK(alice.user_share == 1.0);
  CHECK(alice.user_devices == 6);
  CHECK_FALSE(alice.wait.has_value());
}

TEST_CASE("max-min: no preemptible holder leaves the due time unknown", "[policy_standing]") {
  policy::PolicySnapshot snapshot;
  snapshot.jobs = {Placed("a1", "alice", "cpu", 4, 600, false), Waiting("b1", "bob")};
  policy::Decisions decisions;
  decisions.shares = {{"alice", 1.0, 4}};
  decisions.waits = {{"b1", WaitCode::kFairShare, ""}};
  decisions.preemptions = {{"a9", "b1", "user bob is below its fair share"}};
  const JobStanding standing =
      StandingOf(SummarizeRound("max-min", snapshot, decisions), 300, "b1", "bob");
  REQUIRE(standing.wait.has_value());
  CHECK(Ids(standing.wait->holders) == std::vector<std::string>{"a1"});
  CHECK_FALSE(standing.wait->due_s.has_value());
  CHECK(standing.wait->making_way == std::vector<std::string>{"a9"});

  // Granted the devices of the job it preempted, it waits for that job to stop.
  decisions.waits.clear();
  decisions.grants = {{"b1", "cpu", {{"node-a9", "cpu:0"}}, 1.0}};
  const JobStanding granted =
      StandingOf(SummarizeRound("max-min", snapshot, decisions), 300, "b1", "bob");
  REQUIRE(granted.wait.has_value());
  CHECK(granted.wait->making_way == std::vector<std::string>{"a9"});
}

TEST_CASE("fifo: a queued job names the queue's head and holders of the types it may use",
          "[policy_standing]") {
  policy::PolicySnapshot snapshot;
  snapshot.jobs = {Placed("p1", "", "a100", 4, 10, true), Placed("p2", "", "v100", 4, 5, true)};
  policy::PolicyJob too_big = Waiting("f2", "", /*priority=*/9);
  policy::PolicyJob head = Waiting("f1", "", /*priority=*/1);
  head.required_device_type = "a100";
  policy::PolicyJob behind = Waiting("f3", "", /*priority=*/0);
  snapshot.jobs.push_back(behind);
  snapshot.jobs.push_back(head);
  snapshot.jobs.push_back(too_big);
  for (size_t i = 0; i < snapshot.jobs.size(); ++i) snapshot.jobs[i].seq = static_cast<int64_t>(i);
  policy::Decisions decisions;
  decisions.waits = {{"f3", WaitCode::kQueuedBehind, "queued behind f1"},
                     {"f1", WaitCode::kWaitingForDevices, ""},
                     {"f2", WaitCode::kNotEnoughDevices, ""}};
  const PolicyRound round = SummarizeRound("fifo", snapshot, decisions);
  // f2 comes first (priority 9) but can never fit: it blocks nobody.
  CHECK(round.queue_head == "f1");
  const JobStanding behind_standing = StandingOf(round, 300, "f3", "");
  REQUIRE(behind_standing.wait.has_value());
  CHECK(behind_standing.wait->queued_behind == "f1");
  CHECK(behind_standing.wait->holders.empty());
  const JobStanding head_standing = StandingOf(round, 300, "f1", "");
  REQUIRE(head_standing.wait.has_value());
  CHECK(Ids(head_standing.wait->holders) == std::vector<std::string>{"p1"});  // not v100's p2
  CHECK_FALSE(head_standing.wait->due_s.has_value());  // fifo preempts nobody
  CHECK(StandingOf(round, 300, "f2", "").wait->holders.empty());
}

TEST_CASE("at most four holders are named, the rest counted", "[policy_standing]") {
  policy::PolicySnapshot snapshot;
  for (int i = 0; i < 6; ++i) {
    snapshot.jobs.push_back(Placed("h" + std::to_string(i), "u", "cpu", 1, 100 - i, true));
  }
  snapshot.jobs.push_back(Waiting("w", "v"));
  policy::Decisions decisions;
  decisions.waits = {{"w", WaitCode::kWaitingForDevices, ""}};
  const JobStanding standing =
      StandingOf(SummarizeRound("deepool", snapshot, decisions), 300, "w", "v");
  REQUIRE(standing.wait.has_value());
  CHECK(Ids(standing.wait->holders) == std::vector<std::string>{"h5", "h4", "h3", "h2"});
  CHECK(standing.wait->holders_not_shown == 2);
  CHECK_FALSE(standing.wait->due_s.has_value());
  CHECK(WaitCodeName(WaitCode::kFairShare) == "fair_share");
}

}  // namespace
}  // namespace deepool::coordinator
