// The "deepool" policy's growth of running jobs: devices left free once waiting jobs are sized grow
// a running job that keeps checkpoints, after its minimum slice, where the time saved exceeds the
// move's cost; the jobs gaining most per device first.
#include <catch2/catch.hpp>
#include <cmath>

#include "coordinator/policy/deepool_policy.h"
#include "coordinator/policy/policy.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

// Min slice 300 s; growths pay once they save more than the move costs (`min_growth_saving_s`:
// the default's, 20 h per added device, where given).
std::unique_ptr<Policy> Deepool(double min_growth_saving_s = 0) {
  PolicyOptions options;
  options.min_growth_saving_s = min_growth_saving_s;
  StatusOr<std::unique_ptr<Policy>> policy = MakePolicy("deepool", options);
  REQUIRE(policy.ok());
  return std::move(*policy);
}

// A FG job asking for 8 devices, 1 s per iteration on one, scaling perfectly, placed on `count`
// devices of the pool from `first` since the harness's now.
PolicyJob& Running(PoolHarness& pool, const std::string& id, int first, int count,
                   int64_t remaining = 1000) {
  PolicyJob& job = pool.Submit(id, "alice", 8);
  job.remaining_iterations = remaining;
  job.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / g; });
  for (int i = first; i < first + count; ++i) {
    job.devices.push_back(pool.snapshot.devices[static_cast<size_t>(i)].key);
  }
  job.device_type = "cpu";
  job.placed_at_s = pool.snapshot.now_s;
  return job;
}

TEST_CASE("deepool: a running job grows onto free devices once its slice has passed", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  Running(pool, "long", 0, 2);
  const std::vector<DeviceKey> before = pool.Job("long").devices;
  const std::unique_ptr<Policy> policy = Deepool();

  pool.Advance(100);  // within its 300 s slice: it keeps its 2 devices
  Decisions decisions = pool.Round(*policy);
  CHECK(decisions.resizes.empty());
  CHECK(decisions.preemptions.empty());

  pool.Advance(250);
  decisions = pool.Round(*policy);
  REQUIRE(ResizeOf(decisions, "long") != nullptr);
  const Resize& resize = *ResizeOf(decisions, "long");
  CHECK(resize.from_devices == 2);
  REQUIRE(resize.devices.size() == 8);
  CHECK(std::vector<DeviceKey>(resize.devices.begin(), resize.devices.begin() + 2) == before);
  // Carried out as a preemption where jobs move only through checkpoints (the coordinator).
  REQUIRE(decisions.preemptions.size() == 1);
  CHECK(decisions.preemptions.front().job_id == "long");
  CHECK_THAT(decisions.preemptions.front().message, Catch::Contains("grows from 2 to 8 cpu"));
  CHECK(pool.resizes == 1);
  CHECK(pool.moves == 1);
  CHECK(pool.DoublyHeld() == 0);
  REQUIRE(!decisions.shares.empty());
  CHECK(decisions.shares.front().devices == 8);

  // At its request it stays put.
  pool.Advance(1000);
  CHECK(pool.Round(*policy).resizes.empty());
  CHECK(pool.moves == 1);
}

TEST_CASE("deepool: a resized job keeps its new devices for a slice before it grows again",
          "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  Running(pool, "long", 0, 2);
  Running(pool, "other", 2, 3).requested_devices = 3;
  const std::unique_ptr<Policy> policy = Deepool();
  pool.Advance(400);
  REQUIRE(ResizeOf(pool.Round(*policy), "long") != nullptr);  // onto the 3 free devices
  CHECK(pool.Job("long").devices.size() == 5);
  // "other" ends 100 s later: its devices free up, but "long" moved 100 s ago.
  pool.snapshot.jobs.erase(pool.snapshot.jobs.begin() + 1);
  pool.Advance(100);
  CHECK(pool.Round(*policy).resizes.empty());
  pool.Advance(250);
  REQUIRE(ResizeOf(pool.Round(*policy), "long") != nullptr);
  CHECK(pool.Job("long").devices.size() == 8);
  CHECK(pool.resizes == 2);
}

TEST_CASE("deepool: a growth must save more of the job's time than the move costs", "[policy]") {
  // From 2 to 8 devices saves remaining x (1/2 - 1/8) s: 37.5 s for 100 iterations, less than
  // the 60 s restart; 375 s for 1,000.
  PoolHarness few;
  few.AddNode("n1", 8);
  Running(few, "long", 0, 2, 100);
  few.Advance(400);
  CHECK(few.Round(*Deepool()).resizes.empty());

  PoolHarness many;
  many.AddNode("n1", 8);
  Running(many, "long", 0, 2, 1000);
  many.Advance(400);
  CHECK(ResizeOf(many.Round(*Deepool()), "long") != nullptr);

  // Work since its last checkpoint that the move would lose counts against it too.
  PoolHarness unsaved;
  unsaved.AddNode("n1", 8);
  Running(unsaved, "long", 0, 2, 1000).unsaved_s = 400;
  unsaved.Advance(400);
  CHECK(unsaved.Round(*Deepool()).resizes.empty());
}

TEST_CASE("deepool: by default a growth must save 20 hours per added device", "[policy]") {
  const double per_device_s = PolicyOptions().min_growth_saving_s;
  CHECK(per_device_s == 72000);
  // From 2 to 8 devices saves remaining x 0.375 s, less 60 s, over 6 added devices: 1e6
  // iterations save 62,490 s per device, 2e6 save 124,990.
  PoolHarness short_left;
  short_left.AddNode("n1", 8);
  Running(short_left, "long", 0, 2, 1000000);
  short_left.Advance(400);
  CHECK(short_left.Round(*Deepool(per_device_s)).resizes.empty());

  PoolHarness long_left;
  long_left.AddNode("n1", 8);
  Running(long_left, "long", 0, 2, 2000000);
  long_left.Advance(400);
  const Decisions decisions = long_left.Round(*Deepool(per_device_s));
  REQUIRE(ResizeOf(decisions, "long") != nullptr);
  CHECK(ResizeOf(decisions, "long")->devices.size() == 8);
}

TEST_CASE("deepool: waiting jobs take free devices before a running job grows", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  Running(pool, "long", 0, 2);
  pool.Advance(400);
  PolicyJob& waiting = pool.Submit("waiting", "bob", 8);
  waiting.remaining_iterations = 10;
  waiting.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / g; });
  const Decisions decisions = pool.Round(*Deepool());
  REQUIRE(GrantOf(decisions, "waiting") != nullptr);
  CHECK(GrantOf(decisions, "waiting")->devices.size() == 6);
  CHECK(decisions.resizes.empty());
  CHECK(decisions.preemptions.empty());
  CHECK(pool.DoublyHeld() == 0);
}

TEST_CASE("deepool: a running job without periodic checkpoints is never resized", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  Running(pool, "long", 0, 2).preemptible = false;
  pool.Advance(4000);
  const Decisions decisions = pool.Round(*Deepool());
  CHECK(decisions.resizes.empty());
  CHECK(decisions.preemptions.empty());
}

TEST_CASE("deepool: free devices grow first the job that gains most per device", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  Running(pool, "scales", 0, 2);
  // "flat" gains from a third device only: 1000 x (1/2 - 1/3) - 60 = 107 s for one device,
  // against "scales"' 1000 x (1/2 - 1/6) - 60 = 273 s for four (68 s each).
  PolicyJob& flat = Running(pool, "flat", 2, 2);
  flat.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / std::min(g, 3); });
  pool.Advance(400);
  const Decisions decisions = pool.Round(*Deepool());
  REQUIRE(ResizeOf(decisions, "flat") != nullptr);
  REQUIRE(ResizeOf(decisions, "scales") != nullptr);
  CHECK(ResizeOf(decisions, "flat")->devices.size() == 3);
  CHECK(ResizeOf(decisions, "scales")->devices.size() == 5);
  CHECK(pool.DoublyHeld() == 0);
}

TEST_CASE("deepool: a job grows within its amplification limit", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 8);
  // 1/sqrt(g): an amplification limit of 2 allows 4 devices.
  PolicyJob& job = Running(pool, "long", 0, 2, 100000);
  job.curves["cpu"] = CurveOf(8, [](int g) { return 1.0 / std::sqrt(g); });
  job.amplification_limit = 2;
  pool.Advance(400);
  const Decisions decisions = pool.Round(*Deepool());
  REQUIRE(ResizeOf(decisions, "long") != nullptr);
  CHECK(ResizeOf(decisions, "long")->devices.size() == 4);
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing
