// Device memory through the coordinator (docs/coordinator.md, "Device memory"): a plan is made
// for the least memory among its devices (each device's report, else its type preset's), a job
// that fits nowhere is refused at submission, and one whose devices are too small when it is
// placed FAILS with the planner's message instead of being dispatched to run out of memory.
#include <catch2/catch.hpp>
#include <string>

#include "coordinator/device_memory.h"
#include "coordinator/in_process_planning.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A node `name` of `count` devices of `type`, each reporting `memory_bytes` (0: none).
// The fake planner plans it from the analytical model (no PROFILE task first).
void AddNodeWithMemory(Harness& h, const std::string& name, int count, const std::string& type,
                       int64_t memory_bytes) {
  h.planner.analytical_types.insert(type);
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    devices.push_back({"cuda:" + std::to_string(i), type, memory_bytes});
  }
  REQUIRE(h.scheduler.RegisterNode(name, "10.0.0." + name + ":7000", devices, {}).ok());
}

bool WasPlannedOrDispatched(const JobRecord& job) {
  for (const StateChange& change : job.history) {
    if (change.state == JobState::kRunning) return true;
  }
  return false;
}

TEST_CASE("a device's memory is its report, else its type preset's", "[scheduler][memory]") {
  CHECK(DeviceMemoryBytes({"cuda:0", "a100", 3 * kGiB}) == 3 * kGiB);
  CHECK(DeviceMemoryBytes({"cuda:0", "a100", 0}) == 40 * kGiB);  // the a100 preset's 40 GB
  CHECK(DeviceMemoryBytes({"cuda:0", "t4", 0}) == 0);            // no preset: unknown
}

TEST_CASE("a plan is made for the least memory among its devices", "[scheduler][memory]") {
  Harness h;
  h.planner.analytical_types.insert("a100");
  // One node whose two devices report 6 and 4 GiB.
  std::vector<DeviceInfo> devices{{"cuda:0", "a100", 6 * kGiB}, {"cuda:1", "a100", 4 * kGiB}};
  REQUIRE(h.scheduler.RegisterNode("a", "10.0.0.a:7000", devices, {}).ok());
  JobSpec spec = Fg(2);
  h.Submit(spec);
  h.scheduler.Tick();
  CHECK(h.planner.last_shape().devices == 2);
  CHECK(h.planner.last_shape().device_memory_bytes == 4 * kGiB);

  // Devices that report none are planned for with their type preset's memory.
  Harness preset;
  AddNodeWithMemory(preset, "b", 1, "a100", 0);
  preset.Submit(Fg(1));
  preset.scheduler.Tick();
  CHECK(preset.planner.last_shape().device_memory_bytes == 40 * kGiB);

  // A BG job's one device too.
  Harness bg;
  AddNodeWithMemory(bg, "c", 1, "a100", 3 * kGiB);
  bg.Submit(Bg());
  bg.scheduler.Tick();
  CHECK(bg.planner.last_shape().devices == 1);
  CHECK(bg.planner.last_shape().device_memory_bytes == 3 * kGiB);
}

TEST_CASE("a job no plan fits when placed fails with the planner's message, once",
          "[scheduler][memory]") {
  Harness h;
  h.planner.memory_needed_bytes = 6 * kGiB;
  const bool background = GENERATE(false, true);
  // Submitted before any device is known: nothing to refuse it against yet.
  JobRecord job = h.Submit(background ? Bg() : Fg(2));
  AddNodeWithMemory(h, "a", 2, "a100", 4 * kGiB);
  h.scheduler.Tick();
  JobRecord failed = h.Get(job.id);
  CHECK(failed.state == JobState::kFailed);
  CHECK(failed.reason_code == ReasonCode::kPlanningFailed);
  CHECK_THAT(failed.reason, Catch::Contains("RESOURCE_EXHAUSTED") &&
                                Catch::Contains("layer 'fc' does not fit in device memory"));
  // Not dispatched, and not planned again: it stays FAILED and its devices are free.
  const int plans = h.planner.foreground_plans;
  for (int i = 0; i < 3; ++i) h.scheduler.Tick();
  CHECK(h.Get(job.id).state == JobState::kFailed);
  CHECK_FALSE(WasPlannedOrDispatched(h.Get(job.id)));
  CHECK(h.planner.foreground_plans == plans);
  CHECK(h.Commands("node-a").empty());
  CHECK(h.scheduler.DeviceUses().empty());
}

TEST_CASE("a job not even the largest registered device fits is refused at submission",
          "[scheduler][memory]") {
  Harness h;
  h.planner.memory_needed_bytes = 10 * kGiB;
  AddNodeWithMemory(h, "small", 2, "a100", 4 * kGiB);
  AddNodeWithMemory(h, "large", 2, "a100", 8 * kGiB);
  StatusOr<JobRecord> refused = h.scheduler.Submit(Fg(2));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("the largest registered device, cuda:0 on large (a100, 8.0 GiB)") &&
                 Catch::Contains("on its 2 gpus") && Catch::Contains("layer 'fc'"));
  h.planner.memory_needed_bytes = 6 * kGiB;  // the large node's devices hold it
  CHECK(h.scheduler.Submit(Fg(2)).ok());
}

// The real planner: gpt2 and vgg16 on devices of little memory.

JobSpec ZooJob(const std::string& model, int gpus, int64_t global_batch, double limit) {
  JobSpec spec = Fg(gpus);
  spec.model = model;
  spec.global_batch = global_batch;
  spec.amplification_limit = limit;
  spec.precision = planner::Precision::kTf32;  // what `deepool plan --device a100` plans at
  return spec;
}

TEST_CASE("a job no plan of fits 2 GiB devices is refused naming the layer",
          "[scheduler][memory][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  AddNodeWithMemory(h, "w1", 8, "a100", 2 * kGiB);
  // gpt2 at B = 32 on 8 devices: lm_head alone needs 1.98 GiB on each of its 8 devices, more than
  // the 1.84 GiB a 2 GiB device has for a plan (`deepool plan --model gpt2 --global-batch 32
  // --gpus 8 --device a100 --device-memory-gb 2` says the same).
  StatusOr<JobRecord> refused = h.scheduler.Submit(ZooJob("gpt2", 8, 32, 0));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("cuda:0 on w1 (a100, 2.0 GiB)") &&
                 Catch::Contains("layer 'lm_head' does not fit in device memory: on 8 devices") &&
                 Catch::Contains("1.98 GiB on each") && Catch::Contains("1.84 GiB"));
  // vgg16 at B = 32: every layer fits alone, all of them together do not.
  StatusOr<JobRecord> vgg = h.scheduler.Submit(ZooJob("vgg16", 8, 32, 2));
  REQUIRE_FALSE(vgg.ok());
  CHECK_THAT(vgg.status().message(),
             Catch::Contains("no plan fits in device memory") &&
                 Catch::Contains("the layer that needs the most is 'classifier.0', 1.15 GiB on 8"));
  // On the a100 preset's 40 GB (no report) both are accepted.
  Harness roomy(nullptr, &backend);
  AddNodeWithMemory(roomy, "w2", 8, "a100", 0);
  CHECK(roomy.scheduler.Submit(ZooJob("gpt2", 8, 32, 0)).ok());
  CHECK(roomy.scheduler.Submit(ZooJob("vgg16", 8, 32, 2)).ok());
}

TEST_CASE("a job whose fastest plan does not fit its devices runs a plan that does",
          "[scheduler][memory][planner]") {
  InProcessPlanningBackend backend;
  // vgg16 at B = 64 on 8 A100s within amplification 1.05: unchecked, rank 0 of its plan needs
  // 4.78 GiB; on 4 GiB devices (3.68 GiB for a plan) the planner finds one that fits.
  const JobSpec spec = ZooJob("vgg16", 8, 64, 1.05);
  StatusOr<planner::Graph> graph = planner::zoo::BuildModel("vgg16");
  REQUIRE(graph.ok());
  auto profile = planner::MakeAnalyticalProfile(*planner::DevicePreset("a100"));
  planner::PlanOptions options;
  options.global_batch = 64;
  options.devices = 8;
  options.amplification_limit = 1.05;
  options.precision = planner::Precision::kTf32;
  auto plan_within = [&](double memory_gb) {
    options.device_memory_bytes = planner::DeviceCapacityBytes(memory_gb);
    StatusOr<planner::Plan> plan =
        planner::PlanBurstParallel(*graph, *profile, *planner::ClusterPreset("dgx-a100"), options);
    REQUIRE(plan.ok());
    return *plan;
  };
  const auto rank0_peak = [&](const planner::Plan& plan) {
    const planner::MemoryModel model(*graph, 64,
                                     planner::PlanMemoryModelOptions(options, *profile));
    return model.PerDevice(plan)[0].total();
  };
  const planner::Plan unchecked = plan_within(0);
  const planner::Plan within_4 = plan_within(4);  // `deepool plan ... --device-memory-gb 4`
  CHECK(rank0_peak(unchecked) > planner::DeviceCapacityBytes(4));
  CHECK(rank0_peak(within_4) <= planner::DeviceCapacityBytes(4));

  Harness h(nullptr, &backend);
  AddNodeWithMemory(h, "w1", 8, "a100", 4 * kGiB);
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  JobRecord running = h.Get(job.id);
  INFO(running.reason);
  REQUIRE(running.state == JobState::kRunning);
  StatusOr<planner::Plan> dispatched = planner::ParsePlanJson(running.plan_json.str());
  REQUIRE(dispatched.ok());
  CHECK(dispatched->totals.iteration_ms == Approx(within_4.totals.iteration_ms).epsilon(1e-9));
  CHECK(dispatched->totals.iteration_ms != Approx(unchecked.totals.iteration_ms).epsilon(1e-3));
  CHECK(rank0_peak(*dispatched) <= planner::DeviceCapacityBytes(4));
}

}  // namespace
}  // namespace deepool::coordinator::testing
