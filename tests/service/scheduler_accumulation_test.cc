// Gradient accumulation and bf16 gradient all-reduces through the coordinator (docs/coordinator.md,
// "Gradient accumulation"): a job of N accumulation steps is planned, profiled and memory-checked
// for one pass of global_batch / N, predicted at N passes per iteration, and its run spec carries
// accumulation_steps and gradient_precision at executor protocol 8, so it waits for workers that
// read it. The scheduler harness with the real InProcessPlanningBackend (FakeClock, fake workers).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/in_process_planning.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

using planner::Precision;

// small_cnn, which the real backend plans, at an iteration of 32 samples.
JobSpec SmallCnn(int gpus, int64_t accumulation_steps) {
  JobSpec spec = Fg(gpus);
  spec.model = "small_cnn";
  spec.global_batch = 32;
  spec.accumulation_steps = accumulation_steps;
  return spec;
}

nlohmann::json OnlyRunSpec(Harness& h, const std::string& node) {
  std::vector<v1::TaskCommand> commands = h.Commands(node);
  REQUIRE(commands.size() == 1);
  REQUIRE(commands[0].assign().has_train());
  return nlohmann::json::parse(commands[0].assign().train().run_spec_json());
}

TEST_CASE("a job of 4 accumulation steps is planned at a quarter of its batch on protocol 8",
          "[scheduler][accumulation]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("old", 2, "cpu", {}, protocol::ProtocolRange{1, 7});
  JobSpec spec = SmallCnn(2, 4);
  spec.gradient_precision = Precision::kBf16;
  const JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kPending);
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 8 (gradient accumulation); 1 of 1 nodes "
        "speak only 7: upgrade them");
  CHECK(h.Commands("node-old").empty());

  h.AddNode("a", 2);  // this build's whole range
  h.scheduler.Tick();
  const JobRecord running = h.Get(job.id);
  REQUIRE(running.state == JobState::kRunning);
  const nlohmann::json run_spec = OnlyRunSpec(h, "node-a");
  CHECK(run_spec["version"] == protocol::kAccumulationProtocolVersion);
  CHECK(run_spec["accumulation_steps"] == 4);
  CHECK(run_spec["gradient_precision"] == "bf16");
  // The plan is for one pass of 8 samples; the iteration is 4 of them.
  const nlohmann::json plan = nlohmann::json::parse(running.plan_json.str());
  CHECK(plan["global_batch"] == 8);
  CHECK(run_spec["plan"]["global_batch"] == 8);
  const double pass_ms = plan["totals"]["iteration_ms"].get<double>();
  REQUIRE(pass_ms > 0);
  CHECK(running.predicted_iteration_ms == Approx(4 * pass_ms));
}

TEST_CASE("a job without accumulation is planned at its whole batch at protocol 1",
          "[scheduler][accumulation]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("old", 2, "cpu", {}, protocol::ProtocolRange{1, 7});
  const JobRecord job = h.Submit(SmallCnn(2, 1));
  h.scheduler.Tick();
  const JobRecord running = h.Get(job.id);
  REQUIRE(running.state == JobState::kRunning);
  const nlohmann::json run_spec = OnlyRunSpec(h, "node-old");
  CHECK(run_spec["version"] == 1);
  CHECK_FALSE(run_spec.contains("accumulation_steps"));
  CHECK_FALSE(run_spec.contains("gradient_precision"));
  const nlohmann::json plan = nlohmann::json::parse(running.plan_json.str());
  CHECK(plan["global_batch"] == 32);
  CHECK(running.predicted_iteration_ms == Approx(plan["totals"]["iteration_ms"].get<double>()));
}

TEST_CASE("bf16 gradients alone need protocol 8 and name the feature",
          "[scheduler][accumulation]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("old", 2, "cpu", {}, protocol::ProtocolRange{1, 7});
  JobSpec spec = SmallCnn(2, 1);
  spec.gradient_precision = Precision::kBf16;
  const JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  CHECK(h.Get(job.id).reason ==
        "needs workers that speak executor protocol 8 (bf16 gradient all-reduce); 1 of 1 nodes "
        "speak only 7: upgrade them");
}

TEST_CASE("the planning backend profiles and plans one pass and times N of them",
          "[scheduler][accumulation]") {
  InProcessPlanningBackend backend;
  const JobSpec whole = SmallCnn(2, 1);
  const JobSpec quarter = SmallCnn(2, 4);
  CHECK(backend.ProfileBatchSizes(whole) == std::vector<int64_t>{1, 2, 4, 8, 16, 32});
  CHECK(backend.ProfileBatchSizes(quarter) == std::vector<int64_t>{1, 2, 4, 8});
  const ClusterShape pool{"cpu", 1, 4, 4};
  StatusOr<policy::SpeedCurve> curve = backend.SpeedupCurve(quarter, pool, "");
  REQUIRE(curve.ok());
  StatusOr<PlannedJob> one = backend.PlanForeground(quarter, ClusterShape{"cpu", 1, 1, 1}, "");
  REQUIRE(one.ok());
  REQUIRE_FALSE(curve->iteration_s.empty());
  CHECK(curve->iteration_s[0] == Approx(one->iteration_ms / 1000));
  JobSpec pass = SmallCnn(1, 1);
  pass.global_batch = 8;
  StatusOr<PlannedJob> single_pass = backend.PlanForeground(pass, ClusterShape{"cpu", 1, 1, 1}, "");
  REQUIRE(single_pass.ok());
  CHECK(one->iteration_ms == Approx(4 * single_pass->iteration_ms));
}

TEST_CASE("bf16 gradient all-reduces are planned as half the bytes", "[scheduler][accumulation]") {
  InProcessPlanningBackend backend;
  JobSpec fp32 = Fg(2);
  fp32.model = "resnet50";
  fp32.global_batch = 64;
  JobSpec bf16 = fp32;
  bf16.gradient_precision = Precision::kBf16;
  // Two nodes of one a100 each: every gradient crosses the slow inter-node link.
  const ClusterShape two_nodes{"a100", 2, 1, 2};
  StatusOr<PlannedJob> wide = backend.PlanForeground(fp32, two_nodes, "");
  StatusOr<PlannedJob> narrow = backend.PlanForeground(bf16, two_nodes, "");
  REQUIRE(wide.ok());
  REQUIRE(narrow.ok());
  const auto data_parallel_ms = [](const PlannedJob& planned) {
    return nlohmann::json::parse(planned.plan_json.str())["data_parallel"]["iteration_ms"]
        .get<double>();
  };
  CHECK(data_parallel_ms(*narrow) < data_parallel_ms(*wide));
}

}  // namespace
}  // namespace deepool::coordinator::testing
