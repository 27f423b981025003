// PROFILE tasks at a job's precision (issue 43, point 3; docs/coordinator.md, "Scheduling"): a
// 16-bit job with no cached profile at its precision is profiled at it by a worker of executor
// protocol 8 or later, the profile is cached under a key naming the precision, and later jobs at
// that precision plan with it; fp32 jobs and older workers are profiled as before.
#include <catch2/catch.hpp>
#include <string>

#include "coordinator/profile_cache_key.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

using planner::Precision;

constexpr const char* kBf16Profile =
    R"({"format":"deepool.profile","version":1,"device":"cpu","model":"tiny",)"
    R"("precision":"bf16","layers":[]})";

JobSpec Measured(std::optional<Precision> precision) {
  JobSpec spec = Fg(1);
  spec.profile = "measured";
  spec.precision = precision;
  return spec;
}

// The PROFILE task `node` got for `job_id`.
v1::TaskAssignment ProfileTaskOf(Harness& h, const std::string& node, const std::string& job_id) {
  std::vector<v1::TaskCommand> commands = h.Commands(node);
  REQUIRE(commands.size() == 1);
  REQUIRE(commands[0].assign().has_profile());
  REQUIRE(commands[0].assign().job_id() == job_id);
  return commands[0].assign();
}

TEST_CASE("a bf16 job on CPU devices is profiled at bf16 and its profile cached at bf16",
          "[scheduler][precision][profile]") {
  Harness h;
  h.AddNode("a", 1);
  JobRecord job = h.Submit(Measured(Precision::kBf16));
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kProfiling);
  CHECK_THAT(h.Get(job.id).reason, Catch::EndsWith("node-a/cpu:0 at bf16"));
  const v1::TaskAssignment task = ProfileTaskOf(h, "node-a", job.id);
  CHECK(task.profile().precision() == "bf16");

  h.Exit("node-a", task.task_id(), v1::TASK_OUTCOME_SUCCEEDED, "", kBf16Profile);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.planner.last_profile_json == kBf16Profile);
  const std::string key = h.planner.ModelKey(Measured(Precision::kBf16));
  CHECK(ProfileCacheKey(h.planner, Measured(Precision::kBf16), Precision::kBf16) ==
        key + "/precision=bf16");
  CHECK(*h.store->LoadProfile(key + "/precision=bf16", "cpu") == kBf16Profile);
  CHECK_FALSE(h.store->LoadProfile(key, "cpu")->has_value());  // not the fp32 profile's key
  h.Exit("node-a", h.Get(job.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
  h.Commands("node-a");

  // The next bf16 job plans with the cached profile; an fp32 job is measured (fp32, no field).
  JobRecord again = h.Submit(Measured(Precision::kBf16));
  h.scheduler.Tick();
  REQUIRE(h.Get(again.id).state == JobState::kRunning);
  CHECK(h.planner.last_profile_json == kBf16Profile);
  h.Exit("node-a", h.Get(again.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
  h.Commands("node-a");
  JobRecord fp32 = h.Submit(Measured(std::nullopt));
  h.scheduler.Tick();
  REQUIRE(h.Get(fp32.id).state == JobState::kProfiling);
  CHECK(ProfileTaskOf(h, "node-a", fp32.id).profile().precision().empty());
}

TEST_CASE("a worker before protocol 8 is not asked for a bf16 profile", "[scheduler][precision]") {
  Harness h;
  h.AddNode("a", 1, "cpu", {}, protocol::ProtocolRange{1, 7});
  JobRecord job = h.Submit(Measured(Precision::kBf16));
  h.scheduler.Tick();
  // It would measure fp32: the job is planned with the CPU's analytical model at bf16 instead.
  CHECK(h.Get(job.id).state == JobState::kRunning);
  CHECK(h.planner.last_profile_json.empty());
}

}  // namespace
}  // namespace deepool::coordinator::testing
