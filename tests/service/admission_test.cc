// Admission as a pure step: pending jobs, nodes and a ledger in; grants and reasons out.
#include "coordinator/admission.h"

#include <catch2/catch.hpp>

namespace deepool::coordinator {
namespace {

NodeRecord Node(const std::string& id, int devices, const std::string& type = "cpu") {
  NodeRecord node;
  node.id = id;
  node.name = id;
  for (int i = 0; i < devices; ++i) node.devices.push_back({"d" + std::to_string(i), type, 0});
  return node;
}

JobRecord Job(const std::string& id, int gpus, JobRole role = JobRole::kFg, int priority = 0) {
  JobRecord job;
  job.id = id;
  job.state = JobState::kPending;
  job.spec.gpus = gpus;
  job.spec.role = role;
  job.spec.priority = priority;
  return job;
}

TEST_CASE("FG jobs take the fewest nodes, in priority then submission order", "[admission]") {
  AdmissionInput input;
  input.nodes = {Node("a", 2), Node("b", 4)};
  input.pending = Snapshots({Job("first", 3), Job("urgent", 2, JobRole::kFg, /*priority=*/5)});
  const Admission admission = Admit(input);
  REQUIRE(admission.foreground.size() == 2);
  CHECK(admission.foreground[0].job_id == "urgent");
  // The node with the most free devices first: both of urgent's devices on b.
  CHECK(admission.foreground[0].devices == std::vector<DeviceKey>{{"b", "d0"}, {"b", "d1"}});
  CHECK(admission.foreground[0].shape.nodes == 1);
  // first: 3 devices over a's two and b's remaining two, a first (equal counts keep node order).
  const ForegroundGrant& first = admission.foreground[1];
  REQUIRE(first.devices.size() == 3);
  CHECK(first.shape.devices_per_node == 2);
  CHECK(first.shape.nodes == 2);
  CHECK(admission.pending.empty());
}

TEST_CASE("queue positions follow the admission order, FG and BG apart", "[admission]") {
  const std::map<std::string, int> positions = QueuePositions({{"fg-old", 0, JobRole::kFg},
                                                               {"bg-old", 0, JobRole::kBg},
                                                               {"fg-urgent", 3, JobRole::kFg},
                                                               {"bg-urgent", 1, JobRole::kBg},
                                                               {"fg-new", 0, JobRole::kFg}});
  CHECK(positions ==
        std::map<std::string, int>{
            {"fg-urgent", 1}, {"fg-old", 2}, {"fg-new", 3}, {"bg-urgent", 1}, {"bg-old", 2}});
}

TEST_CASE("a FG job that does not fit now blocks the FG jobs behind it", "[admission]") {
  AdmissionInput input;
  input.nodes = {Node("a", 4)};
  input.ledger.HoldForeground({"a", "d0"}, "running");
  input.pending = Snapshots({Job("big", 4), Job("small", 1), Job("huge", 8)});
  const Admission admission = Admit(input);
  CHECK(admission.foreground.empty());
  REQUIRE(admission.pending.size() == 3);
  CHECK(admission.pending[0].job_id == "big");
  CHECK(admission.pending[0].code == ReasonCode::kWaitingForDevices);
  CHECK(admission.pending[0].message == "waiting for 4 free devices of one type (3 free)");
  CHECK(admission.pending[1].job_id == "small");
  CHECK(admission.pending[1].code == ReasonCode::kQueuedBehind);
  CHECK(admission.pending[1].message == "queued behind big");
  CHECK(admission.pending[2].code == ReasonCode::kQueuedBehind);  // "huge" is behind it too
}

TEST_CASE("a FG job larger than any device type is told so and blocks nobody", "[admission]") {
  AdmissionInput input;
  input.nodes = {Node("a", 2), Node("g", 2, "a100")};
  input.pending = Snapshots({Job("huge", 3), Job("small", 2)});
  const Admission admission = Admit(input);
  REQUIRE(admission.pending.size() == 1);
  CHECK(admission.pending[0].code == ReasonCode::kNotEnoughDevices);
  REQUIRE(admission.foreground.size() == 1);
  CHECK(admission.foreground[0].job_id == "small");
}

TEST_CASE("a BG job takes the idlest device and makes way for a FG job", "[admission]") {
  AdmissionInput input;
  input.nodes = {Node("a", 2)};
  input.ledger.HoldForeground({"a", "d0"}, "fg0");
  input.ledger.SetIdleFraction({"a", "d0"}, 0.4);
  input.ledger.HoldBackground({"a", "d1"}, "old-bg");
  SECTION("the idlest free slot, with its FG rank running") {
    input.running_fg_ranks = {{"a", "d0"}};
    input.pending = Snapshots({Job("bg", 1, JobRole::kBg)});
    const Admission admission = Admit(input);
    REQUIRE(admission.background.size() == 1);
    CHECK(admission.background[0].device == DeviceKey{"a", "d0"});
    CHECK(admission.background[0].idle_fraction == Approx(0.4));
  }
  SECTION("a FG rank not started yet: the BG job waits to run inside it") {
    input.pending = Snapshots({Job("bg", 1, JobRole::kBg)});
    const Admission admission = Admit(input);
    CHECK(admission.background.empty());
    REQUIRE(admission.pending.size() == 1);
    CHECK(admission.pending[0].code == ReasonCode::kWaitingForFgRank);
  }
  SECTION("a FG job on the BG job's device displaces it") {
    input.pending = Snapshots({Job("fg1", 1)});
    const Admission admission = Admit(input);
    REQUIRE(admission.foreground.size() == 1);
    CHECK(admission.foreground[0].devices == std::vector<DeviceKey>{{"a", "d1"}});
    REQUIRE(admission.displaced.size() == 1);
    CHECK(admission.displaced[0].bg_job == "old-bg");
    CHECK(admission.displaced[0].fg_job == "fg1");
  }
}

TEST_CASE("drained and down nodes take no work", "[admission]") {
  AdmissionInput input;
  input.nodes = {Node("a", 2), Node("b", 2)};
  input.nodes[0].state = NodeState::kDown;
  input.nodes[1].state = NodeState::kDraining;
  input.pending = Snapshots({Job("fg", 1), Job("bg", 1, JobRole::kBg)});
  const Admission admission = Admit(input);
  CHECK(admission.foreground.empty());
  CHECK(admission.background.empty());
  REQUIRE(admission.pending.size() == 2);
  CHECK(admission.pending[0].code == ReasonCode::kNotEnoughDevices);
  CHECK(admission.pending[1].code == ReasonCode::kWaitingForBgSlot);
}

// A node whose worker shares versions [oldest, newest] of the executor protocol with the
// coordinator.
NodeRecord NodeSpeaking(const std::string& id, int devices, int oldest, int newest) {
  NodeRecord node = Node(id, devices);
  node.protocol = {oldest, newest};
  return node;
}

JobRecord AdamW(JobRecord job) {
  job.spec.optimizer.name = "adamw";
  return job;
}

TEST_CASE("an adamw job goes only onto nodes that speak executor protocol 2", "[admission]") {
  AdmissionInput input;
  // a has the most free devices, so a job that any node can run goes there first.
  input.nodes = {NodeSpeaking("a", 3, 1, 1), NodeSpeaking("b", 2, 1, 2)};
  SECTION("FG") {
    input.pending = Snapshots({AdamW(Job("adamw", 2)), Job("sgd", 3)});
    const Admission admission = Admit(input);
    REQUIRE(admission.foreground.size() == 2);
    CHECK(admission.foreground[0].job_id == "adamw");
    CHECK(admission.foreground[0].devices == std::vector<DeviceKey>{{"b", "d0"}, {"b", "d1"}});
    CHECK(admission.foreground[1].job_id == "sgd");  // version 1: the old node runs it
    CHECK(admission.foreground[1].devices.front().first == "a");
    CHECK(admission.pending.empty());
  }
  SECTION("BG: the idlest device it can run on, not the idlest one") {
    input.ledger.HoldForeground({"b", "d0"}, "fg");
    input.ledger.SetIdleFraction({"b", "d0"}, 0.5);
    input.running_fg_ranks = {{"b", "d0"}};
    input.ledger.HoldBackground({"b", "d1"}, "other-bg");
    input.pending = Snapshots({AdamW(Job("bg", 1, JobRole::kBg))});
    const Admission admission = Admit(input);
    REQUIRE(admission.background.size() == 1);
    CHECK(admission.background[0].device == DeviceKey{"b", "d0"});
  }
}

TEST_CASE("an adamw job no node can run waits saying which nodes to upgrade, blocking nobody",
          "[admission]") {
  AdmissionInput input;
  input.nodes = {NodeSpeaking("a", 2, 1, 1), NodeSpeaking("b", 2, 1, 1), NodeSpeaking("c", 2, 1, 1),
                 NodeSpeaking("d", 1, 1, 2)};
  input.pending =
      Snapshots({AdamW(Job("adamw", 2)), Job("sgd", 2), AdamW(Job("bg", 1, JobRole::kBg))});
  input.ledger.HoldBackground({"d", "d0"}, "other-bg");
  const Admission admission = Admit(input);
  REQUIRE(admission.foreground.size() == 1);
  CHECK(admission.foreground[0].job_id == "sgd");  // not queued behind the adamw job
  REQUIRE(admission.pending.size() == 2);
  CHECK(admission.pending[0].job_id == "adamw");
  CHECK(admission.pending[0].code == ReasonCode::kWorkerProtocol);
  CHECK(admission.pending[0].message ==
        "needs workers that speak executor protocol 2 (adamw); 3 of 4 nodes speak only 1: "
        "upgrade them");
  // The BG job has a node that speaks 2, whose one device has a BG job already.
  CHECK(admission.pending[1].job_id == "bg");
  CHECK(admission.pending[1].code == ReasonCode::kWaitingForBgSlot);

  input.nodes.pop_back();  // no node speaks 2 at all
  input.ledger = DeviceLedger();
  input.pending = Snapshots({AdamW(Job("bg", 1, JobRole::kBg))});
  const Admission bg_only = Admit(input);
  CHECK(bg_only.background.empty());
  REQUIRE(bg_only.pending.size() == 1);
  CHECK(bg_only.pending[0].code == ReasonCode::kWorkerProtocol);
  CHECK(bg_only.pending[0].message ==
        "needs workers that speak executor protocol 2 (adamw); 3 of 3 nodes speak only 1: "
        "upgrade them");
}

TEST_CASE("a job that fits nowhere by size is told so whatever the protocol", "[admission]") {
  AdmissionInput input;
  input.nodes = {NodeSpeaking("a", 2, 1, 1)};
  input.pending = Snapshots({AdamW(Job("adamw", 3))});
  const Admission admission = Admit(input);
  REQUIRE(admission.pending.size() == 1);
  CHECK(admission.pending[0].code == ReasonCode::kNotEnoughDevices);
}

TEST_CASE("nodes that no longer read a job's version take none of it", "[admission]") {
  AdmissionInput input;
  // A worker of a later release that reads only protocol 2 and newer: this coordinator writes an
  // SGD job's run spec at version 1, which it would refuse.
  input.nodes = {NodeSpeaking("new", 4, 2, 2), NodeSpeaking("old", 1, 1, 2)};
  input.pending = Snapshots({Job("sgd", 2), Job("sgd-small", 1)});
  const Admission admission = Admit(input);
  REQUIRE(admission.foreground.size() == 1);
  CHECK(admission.foreground[0].job_id == "sgd-small");
  CHECK(admission.foreground[0].devices == std::vector<DeviceKey>{{"old", "d0"}});
  REQUIRE(admission.pending.size() == 1);
  CHECK(admission.pending[0].code == ReasonCode::kWorkerProtocol);
  CHECK(admission.pending[0].message ==
        "needs workers that speak executor protocol 1 (sgd); 1 of 2 nodes no longer read it: "
        "upgrade the coordinator");
}

}  // namespace
}  // namespace deepool::coordinator
