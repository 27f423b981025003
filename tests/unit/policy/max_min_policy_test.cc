// The "max-min" policy: fairness across users, heterogeneity-aware placement, and the minimum
// time slice that keeps jobs from being moved back and forth.
#include <catch2/catch.hpp>

#include "coordinator/policy/policy.h"
#include "tests/unit/policy/pool_harness.h"

namespace deepool::coordinator::policy::testing {
namespace {

std::unique_ptr<Policy> MaxMin(double min_slice_s = 300) {
  PolicyOptions options;
  options.min_slice_s = min_slice_s;
  StatusOr<std::unique_ptr<Policy>> policy = MakePolicy("max-min", options);
  REQUIRE(policy.ok());
  return std::move(*policy);
}

TEST_CASE("max-min: a user with many jobs does not crowd out one with a single job", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 4);
  pool.Submit("a1", "alice", 2);
  pool.Submit("a2", "alice", 2);
  pool.Submit("a3", "alice", 2);
  pool.Submit("b1", "bob", 2);
  const Decisions decisions = pool.Round(*MaxMin());
  CHECK(GrantOf(decisions, "a1") != nullptr);
  CHECK(GrantOf(decisions, "b1") != nullptr);
  REQUIRE(WaitOf(decisions, "a2") != nullptr);
  CHECK(WaitOf(decisions, "a2")->code == WaitCode::kFairShare);
  REQUIRE(decisions.shares.size() == 2);
  CHECK(decisions.shares[0].user == "alice");
  CHECK(decisions.shares[0].devices == 2);
  CHECK(decisions.shares[0].share == Approx(1));
  CHECK(decisions.shares[1].devices == 2);
}

TEST_CASE("max-min: each job goes to the device type it gains most from", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 2, "a100");
  pool.AddNode("n2", 2, "v100");
  // "steady" runs alike on both (a100 10% faster); "eager" runs twice as fast on an a100.
  PolicyJob& steady = pool.Submit("steady", "alice", 2);
  steady.curves["a100"] = CurveOf(2, [](int g) { return 1.0 / g; });
  steady.curves["v100"] = CurveOf(2, [](int g) { return 1.1 / g; });
  PolicyJob& eager = pool.Submit("eager", "bob", 2);
  eager.curves["a100"] = CurveOf(2, [](int g) { return 1.0 / g; });
  eager.curves["v100"] = CurveOf(2, [](int g) { return 2.0 / g; });
  const Decisions decisions = pool.Round(*MaxMin());
  REQUIRE(GrantOf(decisions, "eager") != nullptr);
  CHECK(GrantOf(decisions, "eager")->device_type == "a100");
  REQUIRE(GrantOf(decisions, "steady") != nullptr);
  CHECK(GrantOf(decisions, "steady")->device_type == "v100");
  // Shares: eager at its best (1), steady at 1/1.1 of it.
  REQUIRE(decisions.shares.size() == 2);
  CHECK(decisions.shares[0].share == Approx(1 / 1.1));
  CHECK(decisions.shares[1].share == Approx(1));
}

TEST_CASE("max-min: a user below its share preempts a job only after the minimum slice",
          "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 4);
  pool.Submit("a", "alice", 4);
  pool.Round(*MaxMin());
  REQUIRE(pool.Job("a").placed());
  pool.Advance(100);
  pool.Submit("b", "bob", 4);
  Decisions decisions = pool.Round(*MaxMin());
  CHECK(decisions.preemptions.empty());
  REQUIRE(WaitOf(decisions, "b") != nullptr);
  CHECK(WaitOf(decisions, "b")->code == WaitCode::kFairShare);
  pool.Advance(200);  // alice's job has held its devices for 300 s
  decisions = pool.Round(*MaxMin());
  REQUIRE(decisions.preemptions.size() == 1);
  CHECK(decisions.preemptions[0].job_id == "a");
  CHECK(decisions.preemptions[0].for_job == "b");
  CHECK(decisions.preemptions[0].message ==
        "user alice has had its turn: 300 s on 4 cpu devices (minimum slice 300 s); the "
        "devices go to users with a smaller share");
  CHECK(pool.Job("b").placed());
  CHECK(pool.DoublyHeld() == 0);
}

TEST_CASE("max-min: a job without periodic checkpoints is never preempted", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 4);
  pool.Submit("a", "alice", 4).preemptible = false;
  pool.Round(*MaxMin());
  pool.Submit("b", "bob", 4);
  pool.Advance(10000);
  const Decisions decisions = pool.Round(*MaxMin());
  CHECK(decisions.preemptions.empty());
  CHECK(pool.Job("a").placed());
}

// Two users contend for one node for an hour, a round every 10 s: each is served in turn, and a
// job keeps its devices for the minimum slice, so the jobs move about once per slice, not once
// per round.
TEST_CASE("max-min: no thrashing between two users of one node", "[policy]") {
  PoolHarness pool;
  pool.AddNode("n1", 4);
  pool.Submit("a", "alice", 4);
  pool.Submit("b", "bob", 4);
  const std::unique_ptr<Policy> policy = MaxMin(/*min_slice_s=*/300);
  for (int round = 0; round < 360; ++round) {
    pool.Round(*policy);
    REQUIRE(pool.DoublyHeld() == 0);
    pool.Advance(10);
  }
  // 3600 s at 300 s a slice: at most 12 moves; each user ran about half the hour.
  CHECK(pool.moves >= 5);
  CHECK(pool.moves <= 12);
  CHECK(pool.Job("a").attained_s == Approx(1800).margin(310));
  CHECK(pool.Job("b").attained_s == Approx(1800).margin(310));
}

}  // namespace
}  // namespace deepool::coordinator::policy::testing
