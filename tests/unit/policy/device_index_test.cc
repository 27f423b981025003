// DeviceIndex (positions of a snapshot's devices) and the rounds that use one: a caller's index,
// kept between rounds, gives the decisions a round's own index gives; BG jobs that wait share one
// scan per need (protocol version and device type), never another need's answer.
#include "coordinator/policy/device_index.h"

#include <catch2/catch.hpp>

#include "coordinator/policy/policy.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

std::unique_ptr<Policy> Make(const std::string& name) {
  StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name);
  REQUIRE(policy.ok());
  return std::move(*policy);
}

// Grants, preemptions and waits as one comparable text.
std::string Describe(const Decisions& decisions) {
  std::string text;
  for (const Grant& grant : decisions.grants) {
    text += "grant " + grant.job_id + " " + grant.device_type;
    for (const DeviceKey& key : grant.devices) text += " " + key.first + "/" + key.second;
    text += "\n";
  }
  for (const Preemption& preemption : decisions.preemptions) {
    text += "preempt " + preemption.job_id + " for " + preemption.for_job + "\n";
  }
  for (const Wait& wait : decisions.waits)
    text += "wait " + wait.job_id + ": " + wait.message + "\n";
  return text;
}

TEST_CASE("DeviceIndex finds positions and ranks nodes and types by name", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n2", 2, "v100");
  pool.AddNode("n1", 1, "a100");
  pool.AddNode("n3", 1, "v100");
  const DeviceIndex index(pool.snapshot.devices);
  CHECK(index.size() == 4);
  CHECK(index.Find({"n1", "d0"}) == 2);
  CHECK(index.Find({"n2", "d1"}) == 1);
  CHECK(index.Find({"n1", "d1"}) == -1);
  CHECK(index.Types() == std::vector<std::string>{"a100", "v100"});
  CHECK(index.TypeId("v100") == 1);
  CHECK(index.TypeId("h100") == -1);
  CHECK(index.TypeOf(0) == 1);
  CHECK(index.NodeRankOf(0) == 1);  // n2 after n1, though listed first
  CHECK(index.NodeRankOf(2) == 0);
  CHECK(index.NodeRankOf(3) == 2);
  CHECK(index.OfType(1) == std::vector<int>{0, 1, 3});
}

TEST_CASE("A caller's device index gives the decisions a round's own index gives", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n2", 3, "v100");
  pool.AddNode("n1", 4, "v100");
  pool.AddNode("n3", 4, "a100");
  pool.snapshot.devices[5].idle_fraction = 0.4;
  pool.snapshot.devices[5].fg_rank_running = true;
  pool.snapshot.devices[6].idle_fraction = 0.4;
  pool.snapshot.devices[6].fg_rank_running = true;
  PolicyJob& placed = pool.Submit("placed", "alice", 2);
  placed.devices = {pool.snapshot.devices[5].key, pool.snapshot.devices[6].key};
  placed.device_type = "v100";
  pool.Submit("bg1", "bob", 1, Role::kBg).devices = {pool.snapshot.devices[0].key};
  pool.Submit("big", "bob", 4);
  pool.Submit("small", "carol", 2);
  pool.Submit("bg2", "carol", 1, Role::kBg);
  pool.Submit("bg3", "dave", 1, Role::kBg).required_device_type = "a100";
  for (const std::string& name : PolicyNames()) {
    const std::unique_ptr<Policy> policy = Make(name);
    PolicySnapshot without = pool.snapshot;
    PolicySnapshot with = pool.snapshot;
    with.device_index = std::make_shared<const DeviceIndex>(with.devices);
    const std::string expected = Describe(policy->Decide(without));
    INFO(name << ":\n" << expected);
    CHECK_FALSE(expected.empty());
    CHECK(Describe(policy->Decide(with)) == expected);
  }
}

TEST_CASE("BG jobs that wait share an answer only with jobs of the same needs", "[policy]") {
  PoolHarness pool;
  pool.AddNode("a", 1, "a100");
  pool.AddNode("v", 1, "v100");
  pool.Submit("on-a", "alice", 1, Role::kBg).devices = {pool.snapshot.devices[0].key};
  pool.Submit("wait-a1", "bob", 1, Role::kBg).required_device_type = "a100";
  pool.Submit("wait-a2", "bob", 1, Role::kBg).required_device_type = "a100";
  pool.Submit("to-v", "carol", 1, Role::kBg).required_device_type = "v100";
  pool.Submit("wait-v", "carol", 1, Role::kBg).required_device_type = "v100";
  pool.Submit("new-protocol", "dave", 1, Role::kBg).protocol_version = 7;
  pool.snapshot.devices[1].protocol_newest = 3;
  pool.snapshot.devices[0].protocol_newest = 3;
  const Decisions decisions = pool.Round(*Make("fifo"));
  REQUIRE(WaitOf(decisions, "wait-a1") != nullptr);
  CHECK(WaitOf(decisions, "wait-a1")->code == WaitCode::kWaitingForBgSlot);
  REQUIRE(WaitOf(decisions, "wait-a2") != nullptr);
  CHECK(WaitOf(decisions, "wait-a2")->code == WaitCode::kWaitingForBgSlot);
  REQUIRE(GrantOf(decisions, "to-v") != nullptr);
  CHECK(GrantOf(decisions, "to-v")->devices == std::vector<DeviceKey>{{"v", "d0"}});
  REQUIRE(WaitOf(decisions, "wait-v") != nullptr);
  CHECK(WaitOf(decisions, "wait-v")->code == WaitCode::kWaitingForBgSlot);
  REQUIRE(WaitOf(decisions, "new-protocol") != nullptr);
  CHECK(WaitOf(decisions, "new-protocol")->code == WaitCode::kWorkerProtocol);
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing
