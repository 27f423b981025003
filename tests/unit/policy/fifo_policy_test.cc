// The "fifo" policy on its own (Admit runs through it: tests/service/admission_test.cc holds the
// coordinator's rules; these check the policy's own snapshot semantics).
#include <catch2/catch.hpp>

#include "coordinator/policy/policy.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

std::unique_ptr<Policy> Fifo() {
  StatusOr<std::unique_ptr<Policy>> policy = MakePolicy("fifo");
  REQUIRE(policy.ok());
  return std::move(*policy);
}

TEST_CASE("fifo: priority then submission order and a job that does not fit blocks the rest",
          "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 4);
  pool.Submit("a", "alice", 2);
  pool.Submit("b", "bob", 4);
  pool.Submit("c", "carol", 1);
  pool.Submit("urgent", "dave", 1).priority = 5;
  const Decisions decisions = pool.Round(*Fifo());
  REQUIRE(decisions.grants.size() == 2);
  CHECK(decisions.grants[0].job_id == "urgent");
  CHECK(decisions.grants[1].job_id == "a");
  REQUIRE(WaitOf(decisions, "b") != nullptr);
  CHECK(WaitOf(decisions, "b")->code == WaitCode::kWaitingForDevices);
  REQUIRE(WaitOf(decisions, "c") != nullptr);
  CHECK(WaitOf(decisions, "c")->code == WaitCode::kQueuedBehind);
  CHECK(decisions.preemptions.empty());
}

TEST_CASE("fifo: a job larger than any device type waits and blocks nobody", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2, "a100");
  pool.AddNode("n2", 2, "v100");
  pool.Submit("huge", "alice", 3);
  pool.Submit("small", "bob", 2);
  const Decisions decisions = pool.Round(*Fifo());
  REQUIRE(WaitOf(decisions, "huge") != nullptr);
  CHECK(WaitOf(decisions, "huge")->code == WaitCode::kNotEnoughDevices);
  REQUIRE(GrantOf(decisions, "small") != nullptr);
  CHECK(GrantOf(decisions, "small")->devices.size() == 2);
}

TEST_CASE("fifo: BG jobs take the idlest device and make way for a FG job", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2);
  pool.snapshot.devices[0].idle_fraction = 0.2;
  pool.snapshot.devices[0].fg_rank_running = true;
  pool.snapshot.devices[1].idle_fraction = 0.6;
  pool.snapshot.devices[1].fg_rank_running = true;
  PolicyJob& fg = pool.Submit("fg", "alice", 2);
  fg.devices = {pool.snapshot.devices[0].key, pool.snapshot.devices[1].key};
  pool.Submit("bg", "bob", 1, Role::kBg);
  Decisions decisions = pool.Round(*Fifo());
  REQUIRE(GrantOf(decisions, "bg") != nullptr);
  CHECK(GrantOf(decisions, "bg")->devices.front() == pool.snapshot.devices[1].key);
  CHECK(GrantOf(decisions, "bg")->idle_fraction == Approx(0.6));

  // The FG job ends; another takes both devices and the BG job makes way.
  pool.snapshot.jobs.erase(pool.snapshot.jobs.begin());
  pool.Submit("fg2", "carol", 2);
  decisions = pool.Round(*Fifo());
  REQUIRE(decisions.preemptions.size() == 1);
  CHECK(decisions.preemptions[0].job_id == "bg");
  CHECK(decisions.preemptions[0].for_job == "fg2");
}

// Heterogeneity-aware as the FG jobs' choices: of equally idle devices a BG job takes the type it
// trains fastest on (its one-device curve), not the first in the pool's order; a job without a
// curve on a type trains alike on every type and keeps that order.
TEST_CASE("fifo: a BG job takes the free device of the type it trains fastest on", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 1, "v100");
  pool.AddNode("n2", 1, "h100");
  pool.AddNode("n3", 1, "a100");
  PolicyJob& bg = pool.Submit("bg", "bob", 1, Role::kBg);
  bg.curves["v100"] = CurveOf(1, [](int) { return 3.0; });
  bg.curves["h100"] = CurveOf(1, [](int) { return 1.0; });
  bg.curves["a100"] = CurveOf(1, [](int) { return 1.6; });
  pool.Submit("plain", "carol", 1, Role::kBg);
  const Decisions decisions = pool.Round(*Fifo());
  REQUIRE(GrantOf(decisions, "bg") != nullptr);
  CHECK(GrantOf(decisions, "bg")->device_type == "h100");
  REQUIRE(GrantOf(decisions, "plain") != nullptr);
  CHECK(GrantOf(decisions, "plain")->device_type == "v100");
}

// The wait names the device whose rank it waits for: the coordinator words it anew when that
// device is only reserved for the job the snapshot shows holding it (admission.cc).
TEST_CASE("fifo: a BG job waiting for a FG rank to start is told which device", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2);
  pool.snapshot.devices[0].idle_fraction = 0.2;
  pool.snapshot.devices[1].idle_fraction = 0.6;
  PolicyJob& fg = pool.Submit("fg", "alice", 2);
  fg.devices = {pool.snapshot.devices[0].key, pool.snapshot.devices[1].key};
  pool.Submit("bg", "bob", 1, Role::kBg);
  pool.Submit("bg2", "bob", 1, Role::kBg);
  const Decisions decisions = pool.Round(*Fifo());
  for (const char* id : {"bg", "bg2"}) {
    INFO(id);
    REQUIRE(WaitOf(decisions, id) != nullptr);
    CHECK(WaitOf(decisions, id)->code == WaitCode::kWaitingForFgRank);
    CHECK(WaitOf(decisions, id)->device == pool.snapshot.devices[1].key);
  }
}

// A BG job inside a rank that its plan keeps busy (a one-device rank: always) would hardly train,
// and would hold that device's one BG place while a free device went to a later BG job. Every
// policy places BG jobs through the same rule.
TEST_CASE("policies: a BG job does not run inside a FG rank predicted to leave no idle time",
          "[policy]") {
  for (const std::string& name : PolicyNames()) {
    INFO(name);
    PoolHarness pool;
    pool.AddNode("n1", 2);
    for (auto& device : pool.snapshot.devices) device.fg_rank_running = true;
    pool.snapshot.devices[0].idle_fraction = 0.0;
    pool.snapshot.devices[1].idle_fraction = 0.03;
    PolicyJob& fg = pool.Submit("fg", "alice", 2);
    fg.devices = {pool.snapshot.devices[0].key, pool.snapshot.devices[1].key};
    fg.device_type = pool.snapshot.devices[0].type;
    pool.Submit("bg", "bob", 1, Role::kBg);

    StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name);  // min_bg_idle_fraction 0.05
    REQUIRE(policy.ok());
    Decisions decisions = pool.Round(**policy);
    CHECK(GrantOf(decisions, "bg") == nullptr);
    REQUIRE(WaitOf(decisions, "bg") != nullptr);
    CHECK(WaitOf(decisions, "bg")->code == WaitCode::kWaitingForBgSlot);
    CHECK(WaitOf(decisions, "bg")->message ==
          "waiting for a device with idle time: every device without a bg job runs a FG rank "
          "predicted idle less than 5% of each iteration");

    // While the rank's plan is unknown its idleness is no reason to pass it by: the job waits
    // for the rank, as before a plan is known.
    pool.snapshot.devices[1].idle_known = false;
    pool.snapshot.devices[1].fg_rank_running = false;
    decisions = pool.Round(**policy);
    REQUIRE(WaitOf(decisions, "bg") != nullptr);
    CHECK(WaitOf(decisions, "bg")->code == WaitCode::kWaitingForFgRank);
    CHECK(WaitOf(decisions, "bg")->device == pool.snapshot.devices[1].key);
    pool.snapshot.devices[1].idle_known = true;
    pool.snapshot.devices[1].fg_rank_running = true;

    // A rank predicted idle the threshold's fraction takes it.
    pool.snapshot.devices[1].idle_fraction = 0.05;
    decisions = pool.Round(**policy);
    REQUIRE(GrantOf(decisions, "bg") != nullptr);
    CHECK(GrantOf(decisions, "bg")->devices.front() == pool.snapshot.devices[1].key);

    // With the threshold at 0 a BG job runs inside a busy rank, the idler first, as before the
    // rule.
    pool.Job("bg").devices.clear();
    pool.snapshot.devices[1].idle_fraction = 0.03;
    PolicyOptions anywhere;
    anywhere.min_bg_idle_fraction = 0;
    StatusOr<std::unique_ptr<Policy>> lenient = MakePolicy(name, anywhere);
    REQUIRE(lenient.ok());
    decisions = pool.Round(**lenient);
    REQUIRE(GrantOf(decisions, "bg") != nullptr);
    CHECK(GrantOf(decisions, "bg")->devices.front() == pool.snapshot.devices[1].key);
  }
}

TEST_CASE("policies: MakePolicy names the choices", "[policy]") {
  for (const std::string& name : PolicyNames()) {
    StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(name);
    REQUIRE(policy.ok());
    CHECK((*policy)->Name() == name);
  }
  StatusOr<std::unique_ptr<Policy>> unknown = MakePolicy("lottery");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "policy: must be fifo, max-min or deepool, not \"lottery\"");
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing
