// The BG trainer (single-device training in layer units), its run-spec description, the stepper
// choice on CPU devices, and the progress-line fields.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/background/multiplex_device.h"

namespace deepool::worker {
namespace {

std::shared_ptr<const planner::Graph> Model(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  return std::make_shared<const planner::Graph>(std::move(graph).value());
}

BackgroundSpec Spec(const std::string& model, int64_t batch) {
  BackgroundSpec spec;
  spec.job_id = "bg-test";
  spec.graph = Model(model);
  spec.batch_size = batch;
  spec.seed = 11;
  spec.optimizer.name = "sgd";
  spec.optimizer.lr = 0.05;
  spec.optimizer.momentum = 0.9;
  spec.data = DataSpec{"synthetic", 5, ""};
  return spec;
}

TEST_CASE("BG trainer in layer units equals single-device training", "[multiplex]") {
  // small_cnn has a branch-and-concat and a residual add: layers with several consumers.
  BackgroundSpec spec = Spec("small_cnn", 8);
  auto trainer = BackgroundTrainer::Create(spec, torch::kCPU);
  REQUIRE(trainer.ok());
  const int units = (*trainer)->units_per_iteration();
  REQUIRE(units == 2 * spec.graph->num_layers() + 1);
  std::vector<double> losses;
  for (int it = 0; it < 3; ++it) {
    for (int u = 0; u < units; ++u) {
      auto result = (*trainer)->RunUnit();
      REQUIRE(result.ok());
      REQUIRE(result->iteration == it);
      REQUIRE(result->iteration_done == (u == units - 1));
      if (result->iteration_done) losses.push_back(result->loss);
    }
  }
  auto reference = testing::TrainSingleDevice(*spec.graph, spec.batch_size, 3, spec.optimizer,
                                              spec.seed, spec.data.seed);
  auto params = (*trainer)->NamedParameters();
  REQUIRE(params.size() == reference.params.size());
  for (const auto& [name, expected] : reference.params) {
    INFO(name);
    REQUIRE(torch::allclose(params.at(name), expected, 1e-5, 1e-6));
  }
  for (int i = 0; i < 3; ++i) REQUIRE(losses[i] == Approx(reference.losses[i]).epsilon(1e-5));
}

TEST_CASE("BG trainer's loss falls on the synthetic task", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 32);
  auto trainer = BackgroundTrainer::Create(spec, torch::kCPU);
  REQUIRE(trainer.ok());
  std::vector<double> losses;
  while (losses.size() < 60) {
    auto result = (*trainer)->RunUnit();
    REQUIRE(result.ok());
    if (result->iteration_done) losses.push_back(result->loss);
  }
  double first = (losses[0] + losses[1] + losses[2] + losses[3] + losses[4]) / 5;
  double last = (losses[55] + losses[56] + losses[57] + losses[58] + losses[59]) / 5;
  INFO("first " << first << " last " << last);
  REQUIRE(std::isfinite(last));
  REQUIRE(last < 0.8 * first);
}

TEST_CASE("BG trainer reports libtorch failures as a status", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 4);
  spec.data = DataSpec{"cifar10", 0, "/nonexistent/cifar"};
  auto trainer = BackgroundTrainer::Create(spec, torch::kCPU);
  REQUIRE_FALSE(trainer.ok());
}

TEST_CASE("background field: JSON round trip and errors naming the field", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 16);
  spec.iterations = 50;
  spec.sharing.mode = SharingMode::kConcurrent;
  spec.sharing.cuda_graphs = false;
  spec.sharing.idle_thread_priority = false;
  spec.sharing.max_fg_wait_ms = 7.5;
  spec.sharing.unit_bound_fraction = 0.5;
  spec.sharing.split_units = false;
  spec.ranks = {1, 3};
  spec.checkpoints = PeriodicCheckpoints{"/ckpt/bg", 10, 3, 60};
  auto parsed = ParseBackgroundJson(BackgroundToJson(spec));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->job_id == "bg-test");
  REQUIRE(parsed->graph->num_layers() == spec.graph->num_layers());
  REQUIRE(parsed->batch_size == 16);
  REQUIRE(parsed->iterations == 50);
  REQUIRE(parsed->seed == 11);
  REQUIRE(parsed->optimizer == spec.optimizer);
  REQUIRE(parsed->data == spec.data);
  REQUIRE(parsed->sharing == spec.sharing);
  REQUIRE(parsed->ranks == std::vector<int>{1, 3});
  REQUIRE(parsed->checkpoints == spec.checkpoints);
  REQUIRE(parsed->SharesRank(3));
  REQUIRE_FALSE(parsed->SharesRank(0));
  REQUIRE(BackgroundSpec{}.SharesRank(0));
  REQUIRE(BackgroundToJson(*parsed) == BackgroundToJson(spec));

  auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json doc = BackgroundToJson(spec);
    edit(doc);
    auto result = ParseBackgroundJson(doc);
    REQUIRE_FALSE(result.ok());
    return result.status().message();
  };
  REQUIRE_THAT(error([](auto& d) { d["batch_size"] = 0; }),
               Catch::Contains("background.batch_size must be >= 1"));
  REQUIRE_THAT(error([](auto& d) { d.erase("batch_size"); }),
               Catch::Contains("background.batch_size"));
  REQUIRE_THAT(error([](auto& d) { d["iterations"] = -1; }),
               Catch::Contains("background.iterations"));
  REQUIRE_THAT(error([](auto& d) { d["graph"] = 3; }), Catch::Contains("background.graph"));
  REQUIRE_THAT(error([](auto& d) { d["optimizer"]["lr"] = "x"; }),
               Catch::Contains("background.optimizer.lr"));
  REQUIRE_THAT(error([](auto& d) { d["optimizer"]["lr"] = -1; }),
               Catch::Contains("background") && Catch::Contains("lr"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["mode"] = "fifo"; }),
               Catch::Contains("background.sharing.mode"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["cuda_graphs"] = "yes"; }),
               Catch::Contains("background.sharing.cuda_graphs"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["idle_thread_priority"] = 1; }),
               Catch::Contains("background.sharing.idle_thread_priority"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["max_fg_wait_ms"] = 0; }),
               Catch::Contains("background.sharing.max_fg_wait_ms must be in (0, 60000]"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["unit_bound_fraction"] = 1.5; }),
               Catch::Contains("background.sharing.unit_bound_fraction must be in (0, 1]"));
  REQUIRE_THAT(error([](auto& d) { d["sharing"]["split_units"] = "no"; }),
               Catch::Contains("background.sharing.split_units"));
  REQUIRE_THAT(error([](auto& d) { d["ranks"] = {1, -2}; }), Catch::Contains("background.ranks"));
  REQUIRE_THAT(error([](auto& d) { d["checkpoint"]["keep"] = 0; }),
               Catch::Contains("background.checkpoint.keep must be >= 1"));
  REQUIRE_THAT(error([](auto& d) { d["checkpoint"]["path"] = "/x.pt"; }),
               Catch::Contains("background.checkpoint.path"));
  REQUIRE_THAT(error([](auto& d) { d["checkpoint"] = "/ckpt"; }),
               Catch::Contains("background.checkpoint must be an object"));
  REQUIRE_THAT(error([](auto& d) { d["data"]["kind"] = "imagenet"; }),
               Catch::Contains("background"));

  // Defaults: idle_only on CPU devices, concurrent on CUDA.
  SharingOptions defaults;
  REQUIRE(defaults.ModeFor(false) == SharingMode::kIdleOnly);
  REQUIRE(defaults.ModeFor(true) == SharingMode::kConcurrent);
}

TEST_CASE("CUDA graph capture is refused with a reason where it cannot replay", "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 4);
  REQUIRE(CudaGraphCapturable(spec).ok());
  spec.sharing.cuda_graphs = false;
  REQUIRE_THAT(CudaGraphCapturable(spec).message(), Catch::Contains("cuda_graphs is off"));
  spec.sharing.cuda_graphs = true;
  spec.optimizer.name = "adam";
  REQUIRE_THAT(CudaGraphCapturable(spec).message(), Catch::Contains("Adam"));
  BackgroundSpec vgg = Spec("vgg16", 1);  // has dropout in its classifier
  REQUIRE_THAT(CudaGraphCapturable(vgg).message(), Catch::Contains("dropout"));
}

TEST_CASE("on a CPU device the BG stepper is the eager trainer and streams are no-ops",
          "[multiplex]") {
  BackgroundSpec spec = Spec("mlp", 4);
  auto streams = MakeSharingStreams(torch::kCPU);
  REQUIRE(streams.ok());
  REQUIRE(*streams == nullptr);
  auto stepper = MakeBackgroundStepper(spec, torch::kCPU, *streams, SystemClock::Get());
  REQUIRE(stepper.ok());
  REQUIRE(dynamic_cast<BackgroundTrainer*>(stepper->get()) != nullptr);
  REQUIRE((*stepper)->EnterThread() == nullptr);
  REQUIRE_FALSE((*stepper)->NextUnitNeedsFgIdle());  // the gate's mode alone decides on CPU
  auto fg = EnterForegroundStream(*streams, spec.sharing);
  REQUIRE(fg.ok());
  REQUIRE(*fg == nullptr);
}

TEST_CASE("iteration lines gain the device-sharing fields", "[multiplex]") {
  SharingWindow window;
  window.window_ms = 100;
  window.fg_wait_ms = 40;  // FG busy 60
  window.bg_busy_ms = 30;
  BackgroundProgress progress;
  progress.iterations = 7;
  progress.samples_per_s = 123.5;
  progress.last_loss = 1.25;
  std::string line = AddSharingFields(
      R"({"event":"iteration","rank":1,"iteration":3,"busy_ms":60.0,"idle_ms":40.0})", window,
      progress);
  auto event = nlohmann::json::parse(line);
  REQUIRE(event["event"] == "iteration");
  REQUIRE(event["rank"] == 1);
  REQUIRE(event["fg_busy_ms"].get<double>() == Approx(60));
  REQUIRE(event["bg_busy_ms"].get<double>() == Approx(30));
  REQUIRE(event["idle_ms"].get<double>() == Approx(10));
  REQUIRE(event["bg_samples_per_s"].get<double>() == Approx(123.5));
  REQUIRE(event["bg_iterations"] == 7);
  REQUIRE(event["bg_loss"].get<double>() == Approx(1.25));
  progress.iterations = 0;
  event = nlohmann::json::parse(AddSharingFields(R"({"event":"iteration"})", window, progress));
  REQUIRE(event["bg_loss"].is_null());
}

}  // namespace
}  // namespace deepool::worker
