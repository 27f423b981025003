// The "deepool" policy: FG jobs sized by their speed-up curves within their amplification limits;
// BG jobs in the idle time.
#include "coordinator/policy/deepool_policy.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "coordinator/policy/policy.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

std::unique_ptr<Policy> Deepool() {
  StatusOr<std::unique_ptr<Policy>> policy = MakePolicy("deepool");
  REQUIRE(policy.ok());
  return std::move(*policy);
}

TEST_CASE("deepool: devices go to the job whose completion they shorten most", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  // "scales" halves its iteration time with twice the devices; "flat" gains only from a second.
  PolicyJob& scales = pool.Submit("scales", "alice", 8);
  scales.remaining_iterations = 100;
  scales.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / g; });
  PolicyJob& flat = pool.Submit("flat", "bob", 8);
  flat.remaining_iterations = 100;
  flat.curves["cpu"] = CurveOf(8, [](int g) { return g == 1 ? 1.0 : 0.5; });
  const Decisions decisions = pool.Round(*Deepool());
  REQUIRE(GrantOf(decisions, "scales") != nullptr);
  REQUIRE(GrantOf(decisions, "flat") != nullptr);
  CHECK(GrantOf(decisions, "scales")->devices.size() == 6);
  CHECK(GrantOf(decisions, "flat")->devices.size() == 2);
  CHECK(pool.DoublyHeld() == 0);
}

TEST_CASE("deepool: a job grows no further than its amplification limit allows", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  // Iteration time 1/sqrt(g): g devices cost sqrt(g) single-device iterations' GPU time, so an
  // amplification limit of 2 allows 4 devices.
  PolicyJob& job = pool.Submit("job", "alice", 8);
  job.amplification_limit = 2;
  job.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / std::sqrt(g); });
  CHECK(WithinAmplification(job, "cpu", 4));
  CHECK_FALSE(WithinAmplification(job, "cpu", 5));
  Decisions decisions = pool.Round(*Deepool());
  REQUIRE(GrantOf(decisions, "job") != nullptr);
  CHECK(GrantOf(decisions, "job")->devices.size() == 4);

  // Without a limit it takes what it asks for.
  PoolHarness unlimited;
  unlimited.AddNode("n1", 8);
  PolicyJob& free_job = unlimited.Submit("job", "alice", 8);
  free_job.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / std::sqrt(g); });
  decisions = unlimited.Round(*Deepool());
  REQUIRE(GrantOf(decisions, "job") != nullptr);
  CHECK(GrantOf(decisions, "job")->devices.size() == 8);
}

TEST_CASE("deepool: placed jobs keep their devices and BG jobs fill the idle time", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2);
  PolicyJob& running = pool.Submit("running", "alice", 2);
  running.devices = {pool.snapshot.devices[0].key, pool.snapshot.devices[1].key};
  running.device_type = "cpu";
  pool.snapshot.devices[0].fg_rank_running = true;
  pool.snapshot.devices[0].idle_fraction = 0.7;
  pool.snapshot.devices[1].fg_rank_running = true;
  pool.snapshot.devices[1].idle_fraction = 0.1;
  pool.Submit("waiting", "bob", 2);
  pool.Submit("bg", "carol", 1, Role::kBg);
  const Decisions decisions = pool.Round(*Deepool());
  CHECK(decisions.preemptions.empty());
  REQUIRE(WaitOf(decisions, "waiting") != nullptr);
  CHECK(WaitOf(decisions, "waiting")->code == WaitCode::kWaitingForDevices);
  REQUIRE(GrantOf(decisions, "bg") != nullptr);
  CHECK(GrantOf(decisions, "bg")->devices.front() == pool.snapshot.devices[0].key);
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing
