// The scheduler with the real InProcessPlanningBackend: a job's profile is measured on the very
// graph it is planned with (every model option applied) and cached under a key naming those
// options, once a plan was made from it; specs whose global batch cannot train the model are
// refused at submission.
#include "coordinator/in_process_planning.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/limits.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"
#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

// A measured profile with no layers: planning falls back to the CPU preset for every layer.
constexpr const char* kEmptyProfile =
    R"({"format":"deepool.profile","version":1,"device":"cpu","model":"small_cnn","layers":[]})";

JobSpec SmallCnn(int64_t num_classes) {
  JobSpec spec = Fg(1);
  spec.model = "small_cnn";
  spec.profile = "measured";
  spec.num_classes = num_classes;
  return spec;
}

// The profile task the scheduler sent for `job_id`, and the number of classes of its graph.
struct SentProfile {
  std::string task_id;
  std::string model;
  int64_t classes = 0;
};

SentProfile TakeProfileTask(Harness& h, const std::string& job_id) {
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::TaskAssignment& assign = commands[0].assign();
  REQUIRE(assign.has_profile());
  REQUIRE(assign.job_id() == job_id);
  StatusOr<planner::Graph> graph = planner::ParseGraphJson(assign.profile().graph_json());
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  REQUIRE(graph->output_ids().size() == 1);
  return {assign.task_id(), assign.profile().model(),
          graph->layer(graph->output_ids()[0]).output_shape.at(0)};
}

// Completes a PROFILING job: the profile comes back, it is planned, runs and succeeds.
void ProfileAndFinish(Harness& h, const JobRecord& job, const std::string& profile_task) {
  h.Exit("node-a", profile_task, v1::TASK_OUTCOME_SUCCEEDED, "", kEmptyProfile);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kRunning);
  h.Commands("node-a");
  h.Exit("node-a", h.Get(job.id).task_ids[0], v1::TASK_OUTCOME_SUCCEEDED);
}

bool WasProfiled(const JobRecord& job) {
  for (const StateChange& change : job.history) {
    if (change.state == JobState::kProfiling) return true;
  }
  return false;
}

TEST_CASE("a profile that does not parse fails its own job and is not cached for the next",
          "[scheduler][profile]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("a", 1);
  JobRecord first = h.Submit(SmallCnn(10));
  h.scheduler.Tick();
  REQUIRE(h.Get(first.id).state == JobState::kProfiling);
  // A worker's profiler that wrote half a file (or a worker that lies).
  h.Exit("node-a", TakeProfileTask(h, first.id).task_id, v1::TASK_OUTCOME_SUCCEEDED, "", "{");
  h.scheduler.Tick();
  CHECK(h.Get(first.id).state == JobState::kFailed);
  CHECK(h.Get(first.id).reason_code == ReasonCode::kPlanningFailed);
  CHECK_FALSE(h.store->LoadProfile(backend.ModelKey(SmallCnn(10)), "cpu")->has_value());
  // The next job of the model is measured again, and plans.
  JobRecord second = h.Submit(SmallCnn(10));
  h.scheduler.Tick();
  REQUIRE(h.Get(second.id).state == JobState::kProfiling);
  ProfileAndFinish(h, h.Get(second.id), TakeProfileTask(h, second.id).task_id);
}

TEST_CASE("a job's profile is measured on its own graph and cached under its options",
          "[scheduler][profile]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("a", 1);

  // num_classes = 10: the worker is sent the 10-class graph, not the model's 1000-class default.
  JobRecord ten = h.Submit(SmallCnn(10));
  h.scheduler.Tick();
  REQUIRE(h.Get(ten.id).state == JobState::kProfiling);
  SentProfile sent = TakeProfileTask(h, ten.id);
  CHECK(sent.model == "small_cnn");
  CHECK(sent.classes == 10);
  ProfileAndFinish(h, h.Get(ten.id), sent.task_id);
  const std::string ten_key = backend.ModelKey(SmallCnn(10));
  CHECK(ten_key == "small_cnn/classes=10/image=16/aux_logits=1");
  CHECK(h.store->LoadProfile(ten_key, "cpu")->has_value());

  // The default (1000 classes) does not reuse the 10-class profile: it is measured on its graph.
  JobRecord fallback = h.Submit(SmallCnn(0));
  h.scheduler.Tick();
  REQUIRE(h.Get(fallback.id).state == JobState::kProfiling);
  sent = TakeProfileTask(h, fallback.id);
  CHECK(sent.classes == 1000);
  CHECK(backend.ModelKey(SmallCnn(0)) != ten_key);
  ProfileAndFinish(h, h.Get(fallback.id), sent.task_id);

  // Options that build the same graph share it: 1000 classes given explicitly.
  JobRecord explicit_default = h.Submit(SmallCnn(1000));
  h.scheduler.Tick();
  CHECK(h.Get(explicit_default.id).state == JobState::kRunning);
  CHECK_FALSE(WasProfiled(h.Get(explicit_default.id)));
}

TEST_CASE("a job's optimizer goes to its profile task and keys the profile cache",
          "[scheduler][profile]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("a", 1);
  // The default step (SGD with momentum, no weight decay) keeps the key it always had; any
  // momentum is the same step.
  JobSpec sgd = SmallCnn(10);
  CHECK(backend.ModelKey(sgd) == "small_cnn/classes=10/image=16/aux_logits=1");
  sgd.optimizer.momentum = 0.5;
  CHECK(backend.ModelKey(sgd) == "small_cnn/classes=10/image=16/aux_logits=1");
  // Steps that cost differently are measured and cached apart.
  JobSpec plain = SmallCnn(10);
  plain.optimizer.momentum = 0;
  JobSpec decayed = SmallCnn(10);
  decayed.optimizer.weight_decay = 1e-4;
  JobSpec adam = SmallCnn(10);
  adam.optimizer.name = "adam";
  adam.optimizer.momentum = 0;
  CHECK(backend.ModelKey(plain) == "small_cnn/classes=10/image=16/aux_logits=1/optimizer=sgd");
  CHECK(backend.ModelKey(decayed) ==
        "small_cnn/classes=10/image=16/aux_logits=1/optimizer=sgd+momentum+weight_decay");
  CHECK(backend.ModelKey(adam) == "small_cnn/classes=10/image=16/aux_logits=1/optimizer=adam");

  JobRecord job = h.Submit(adam);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kProfiling);
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const v1::ProfileTask& sent = commands[0].assign().profile();
  CHECK(sent.optimizer().name() == "adam");
  CHECK(sent.optimizer().momentum() == 0);
  CHECK(sent.optimizer().weight_decay() == 0);
}

TEST_CASE("cifar10 data means 10 classes for planning, profiling and the cache key alike",
          "[scheduler][profile]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  h.AddNode("a", 1);
  JobSpec cifar = SmallCnn(0);
  cifar.data.kind = "cifar10";
  cifar.data.path = "/data/cifar";
  CHECK(backend.ModelKey(cifar) == backend.ModelKey(SmallCnn(10)));
  JobRecord job = h.Submit(cifar);
  h.scheduler.Tick();
  REQUIRE(h.Get(job.id).state == JobState::kProfiling);
  CHECK(TakeProfileTask(h, job.id).classes == 10);
  StatusOr<PlannedJob> planned = backend.PlanForeground(cifar, ClusterShape{"cpu", 1, 1, 1}, "");
  REQUIRE(planned.ok());
  StatusOr<planner::Graph> graph = planner::ParseGraphJson(planned->graph_json);
  REQUIRE(graph.ok());
  CHECK(planner::GraphToJson(*graph, -1) == *backend.ProfileGraphJson(cifar));
}

TEST_CASE("a job's per-device batch norm is planned for and reaches its ranks' run spec",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  // ResNet-50 on 8 A100s: without the statistics all-reduces the plan is predicted faster.
  JobSpec resnet = Fg(8);
  resnet.model = "resnet50";
  resnet.global_batch = 32;
  resnet.batch_norm = "per_device";
  const ClusterShape a100{"a100", 1, 8, 8};
  StatusOr<PlannedJob> per_device = backend.PlanForeground(resnet, a100, "");
  resnet.batch_norm = "synchronized";
  StatusOr<PlannedJob> synced = backend.PlanForeground(resnet, a100, "");
  REQUIRE(per_device.ok());
  REQUIRE(synced.ok());
  CHECK(per_device->iteration_ms < synced->iteration_ms * 0.9);
  // And the dispatched run spec tells the ranks.
  h.AddNode("a", 4);
  JobSpec spec = Fg(4);
  spec.model = "small_cnn";
  spec.batch_norm = "per_device";
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  const auto run = nlohmann::json::parse(commands[0].assign().train().run_spec_json());
  CHECK(run["batch_norm"] == "per_device");
}

TEST_CASE("a job's gradient bucket size is planned for and reaches its ranks' run spec",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  // VGG-16 on 8 A100s: one bucket as large as all its gradients hides none of their sum behind
  // backward, so the plan is predicted slower than with DDP's 25 MiB.
  JobSpec vgg = Fg(8);
  vgg.model = "vgg16";
  vgg.global_batch = 64;
  vgg.profile = "analytical";
  const ClusterShape a100{"a100", 1, 8, 8};
  StatusOr<PlannedJob> standard = backend.PlanForeground(vgg, a100, "");
  vgg.gradient_bucket_mb = 4096;
  StatusOr<PlannedJob> one_bucket = backend.PlanForeground(vgg, a100, "");
  REQUIRE(standard.ok());
  REQUIRE(one_bucket.ok());
  CHECK(standard->iteration_ms != one_bucket->iteration_ms);
  // And the dispatched run spec carries the job's size, or the one default.
  h.AddNode("a", 4);
  JobSpec spec = Fg(4);
  spec.model = "small_cnn";
  spec.gradient_bucket_mb = 0.5;
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(nlohmann::json::parse(commands[0].assign().train().run_spec_json())["gradient_bucket_mb"] ==
        0.5);
  CHECK(JobSpec().gradient_bucket_mb == planner::kDefaultGradientBucketMb);
  CHECK(protocol::RunSpec().gradient_bucket_mb == planner::kDefaultGradientBucketMb);
}

TEST_CASE("a node of H200s plans on its own preset and links", "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  JobSpec vgg = Fg(8);
  vgg.model = "vgg16";
  vgg.global_batch = 32;
  vgg.profile = "analytical";
  StatusOr<PlannedJob> planned = backend.PlanForeground(vgg, ClusterShape{"h200", 1, 8, 8}, "");
  INFO(planned.status().ToString());
  REQUIRE(planned.ok());
  // What the planner gives on the h200 preset over dgx-h200's links, and over dgx-a100's.
  StatusOr<planner::Graph> graph = planner::zoo::BuildModel("vgg16");
  REQUIRE(graph.ok());
  auto profile = planner::MakeAnalyticalProfile(*planner::DevicePreset("h200"));
  planner::PlanOptions options;
  options.global_batch = vgg.global_batch;
  options.devices = 8;
  options.amplification_limit = vgg.amplification_limit;
  auto plan_on = [&](const char* preset) {
    StatusOr<planner::Plan> plan =
        planner::PlanBurstParallel(*graph, *profile, *planner::ClusterPreset(preset), options);
    REQUIRE(plan.ok());
    return plan->totals.iteration_ms;
  };
  CHECK(planned->iteration_ms == Approx(plan_on("dgx-h200")).epsilon(1e-9));
  CHECK(planned->iteration_ms != Approx(plan_on("dgx-a100")).epsilon(1e-3));
}

TEST_CASE("a CPU profile's measured links are what its job is planned on", "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  JobSpec cnn = SmallCnn(10);
  cnn.gpus = 2;
  cnn.global_batch = 1024;
  const ClusterShape two_workers{"cpu", 2, 1, 2};  // `deepool up` on a 2-core machine
  StatusOr<PlannedJob> preset = backend.PlanForeground(cnn, two_workers, kEmptyProfile);
  REQUIRE(preset.ok());
  // The same profile with the links a loaded 2-core host measured: all-reduces of 1.7 ms.
  const std::string measured_links =
      std::string(kEmptyProfile).substr(0, std::string(kEmptyProfile).size() - 1) +
      R"(,"links":{"bandwidth_gbps":2.6,"latency_us":1300,"collective_bandwidth_gbps":0.8,)"
      R"("collective_latency_us":1700}})";
  StatusOr<PlannedJob> measured = backend.PlanForeground(cnn, two_workers, measured_links);
  INFO(measured.status().ToString());
  REQUIRE(measured.ok());
  // What the planner gives on the cluster with those links.
  StatusOr<planner::Graph> graph = planner::ParseGraphJson(measured->graph_json);
  REQUIRE(graph.ok());
  auto profile = planner::MakeAnalyticalProfile(*planner::DevicePreset("cpu"));
  planner::Cluster cluster = *planner::ClusterPreset("cpu-1");
  cluster.name = "coordinator:cpu";
  cluster.nodes = 2;
  planner::Link link{2.6, 1300};
  link.collective_bandwidth_gbps = 0.8;
  link.collective_latency_us = 1700;
  planner::PlanOptions options;
  options.global_batch = cnn.global_batch;
  options.devices = 2;
  options.amplification_limit = cnn.amplification_limit;
  StatusOr<planner::Plan> plan = planner::PlanBurstParallel(
      *graph, *profile, planner::WithMeasuredLink(cluster, link), options);
  REQUIRE(plan.ok());
  CHECK(measured->iteration_ms == Approx(plan->totals.iteration_ms).epsilon(1e-9));
  // On the preset's 30 us links both devices pay; measured, the collectives cost more.
  CHECK(planner::ParsePlanJson(preset->plan_json)->totals.devices_used == 2);
  CHECK(measured->iteration_ms > preset->iteration_ms);
}

TEST_CASE("a job's concurrent branches reach the planner, and its plan runs towers side by side",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  // Inception-v3, B = 64 on 64 A100s, no limit: the one setting of docs/benchmarks.md
  // ("Concurrent branches") where packing finds towers side by side faster.
  JobSpec inception = Fg(64);
  inception.model = "inception_v3";
  inception.global_batch = 64;
  inception.amplification_limit = 0;
  const ClusterShape a100{"a100", 8, 8, 64};
  StatusOr<PlannedJob> serial = backend.PlanForeground(inception, a100, "");
  inception.concurrent_branches = true;
  StatusOr<PlannedJob> packed = backend.PlanForeground(inception, a100, "");
  REQUIRE(serial.ok());
  REQUIRE(packed.ok());
  CHECK(packed->iteration_ms < serial->iteration_ms * (1 - 1e-3));
  // Some layer's ranks start above rank 0 only in the packed plan.
  const auto starts_above_zero = [](const PlannedJob& job) {
    const auto plan = nlohmann::json::parse(job.plan_json.str());
    for (const auto& layer : plan["layers"]) {
      if (layer["devices"][0].get<int>() > 0) return true;
    }
    return false;
  };
  CHECK(starts_above_zero(*packed));
  CHECK_FALSE(starts_above_zero(*serial));
}

TEST_CASE("an inline graph is profiled as given", "[scheduler][profile]") {
  Harness h;  // the fake backend: ProfileGraphJson returns the spec's graph
  h.AddNode("a", 1);
  JobSpec spec = Fg(1);
  spec.profile = "measured";
  spec.model.clear();
  spec.graph_json = R"({"format":"deepool.graph","name":"inline"})";
  JobRecord job = h.Submit(spec);
  h.scheduler.Tick();
  std::vector<v1::TaskCommand> commands = h.Commands("node-a");
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].assign().profile().graph_json() == spec.graph_json);
}

TEST_CASE("a global batch that leaves batch norm one value per channel is refused by layer",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  JobSpec spec = Fg(1);
  spec.model = "inception_v3";
  spec.global_batch = 1;
  StatusOr<JobRecord> refused = h.scheduler.Submit(spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(),
             Catch::StartsWith("global_batch") && Catch::Contains("'AuxLogits.conv1.bn'"));
  spec.global_batch = 2;
  CHECK(h.scheduler.Submit(spec).ok());
}

TEST_CASE("a model no device could hold, or too many layers, is refused at submission",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  auto refusal = [&](const JobSpec& spec) {
    StatusOr<JobRecord> refused = h.scheduler.Submit(spec);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    return refused.status().message();
  };
  JobSpec spec = Fg(1);
  spec.model = "resnet50";
  SECTION("activations of the per-device batch") {
    spec.global_batch = 1 << 20;
    CHECK_THAT(refusal(spec),
               Catch::StartsWith("global_batch") && Catch::Contains("1048576 samples per device"));
    spec.gpus = 4096;  // 256 samples per device fit
    CHECK(h.scheduler.Submit(spec).ok());
  }
  SECTION("weights with their gradients and optimizer state") {
    planner::Layer wide;  // 10^12 weights
    wide.name = "wide";
    wide.op = planner::Op::kLinear;
    wide.inputs = {std::string(planner::kGraphInputName)};
    wide.attrs.out_features = 1'000'000;
    StatusOr<planner::Graph> graph = planner::Graph::Create("wide", {1'000'000}, {wide});
    REQUIRE(graph.ok());
    spec.model.clear();
    spec.graph_json = planner::GraphToJson(*graph, -1);
    CHECK_THAT(refusal(spec), Catch::StartsWith("model") && Catch::Contains("optimizer state"));
  }
  SECTION("layers") {
    std::vector<planner::Layer> layers;
    for (int i = 0; i <= kMaxGraphLayers; ++i) {
      planner::Layer relu;
      relu.name = "relu" + std::to_string(i);
      relu.op = planner::Op::kRelu;
      relu.inputs = {i == 0 ? std::string(planner::kGraphInputName) : layers.back().name};
      layers.push_back(relu);
    }
    StatusOr<planner::Graph> graph = planner::Graph::Create("chain", {16}, layers);
    REQUIRE(graph.ok());
    spec.model.clear();
    spec.graph_json = planner::GraphToJson(*graph, -1);
    CHECK_THAT(refusal(spec), Catch::StartsWith("graph") && Catch::Contains("5001 layers"));
  }
}

// The break-it run's job: an input batch far larger than the registered devices. Refused at
// submission by the planner's memory model, naming the device, the layer and the bytes, rather
// than dispatched to fail with a stack trace.
TEST_CASE("a job whose per-device share cannot fit the registered devices is refused at submit",
          "[scheduler][planner]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  JobSpec spec = Fg(2);
  spec.model = "resnet50";
  spec.global_batch = 1024;              // 512 samples a device: tens of GiB of activations
  CHECK(h.scheduler.Submit(spec).ok());  // no device registered yet: nothing to hold it against

  std::vector<DeviceInfo> small{{"cuda:0", "a100", int64_t{23} << 29},
                                {"cuda:1", "a100", int64_t{23} << 29}};  // 11.5 GiB each
  REQUIRE(h.scheduler.RegisterNode("w1", "10.0.0.1:7000", small, {}).ok());
  StatusOr<JobRecord> refused = h.scheduler.Submit(spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("the largest registered device, cuda:0 on w1 (a100, 11.5 GiB)") &&
                 Catch::Contains("no plan fits in device memory") &&
                 Catch::Contains("'conv1', 3.58 GiB on 2 devices") &&
                 Catch::Contains("512 samples per device"));
  spec.global_batch = 64;  // 32 a device: fits
  CHECK(h.scheduler.Submit(spec).ok());
}

}  // namespace
}  // namespace deepool::coordinator::testing
