// The layer profiler: warm-up and median bookkeeping against a scripted timer, a real CPU
// profile of small_cnn that the planner parses back, and the profile tool's file handling.
#include "worker/runtime/profiling/profiler.h"

#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "planner/graph.h"
#include "planner/profile_table.h"
#include "planner/zoo/zoo.h"
#include "tests/runtime/uniform_profile.h"
#include "tests/temp_dir.h"
#include "worker/runtime/profiling/iteration_overhead.h"

namespace deepool::worker {
namespace {

using deepool::testing::TempDir;

namespace fs = std::filesystem;
using planner::Graph;

// Returns scripted durations from StopMs, in order, and counts the calls.
class FakeTimer final : public DeviceTimer {
 public:
  explicit FakeTimer(std::deque<double> durations) : durations_(std::move(durations)) {}
  void Start() override { ++starts; }
  double StopMs() override {
    ++stops;
    REQUIRE(!durations_.empty());
    double d = durations_.front();
    durations_.pop_front();
    return d;
  }
  size_t left() const { return durations_.size(); }
  int starts = 0;
  int stops = 0;

 private:
  std::deque<double> durations_;
};

Graph MustBuild(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("Median picks the middle value", "[profiler]") {
  CHECK(Median({}) == 0);
  CHECK(Median({4}) == 4);
  CHECK(Median({9, 1, 5}) == 5);
  CHECK(Median({9, 1, 5, 3}) == 4);
}

TEST_CASE("warm-up runs are discarded and the median of the repeats is reported", "[profiler]") {
  Graph graph = MustBuild("mlp");
  const int fc2 = *graph.FindLayer("fc2");
  ProfilerOptions options;
  options.batch_sizes = {3};
  options.warmup = 2;
  options.repeats = 3;
  // Per run: forward, then backward. Two warm-up runs with outlandish times, then three.
  FakeTimer timer({1000, 2000, 1000, 2000, 1.0, 10.0, 3.0, 30.0, 2.0, 20.0});
  LayerProfiler profiler(torch::kCPU, &timer, options);
  auto time = profiler.MeasureLayer(graph, fc2, 3);
  INFO(time.status().ToString());
  REQUIRE(time.ok());
  CHECK(time->batch == 3);
  CHECK(time->forward_ms == 2.0);
  CHECK(time->backward_ms == 20.0);
  CHECK(timer.left() == 0);
  CHECK(timer.starts == timer.stops);

  SECTION("a layer that needs no gradient times no backward") {
    // fc1 reads the graph input (no gradient wanted) but has parameters: backward runs.
    FakeTimer fc1_timer({5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
    LayerProfiler fc1_profiler(torch::kCPU, &fc1_timer, options);
    REQUIRE(fc1_profiler.MeasureLayer(graph, *graph.FindLayer("fc1"), 3).ok());
    CHECK(fc1_timer.left() == 0);
    // A relu straight on the graph input has nothing to differentiate: forward only.
    planner::Layer relu;
    relu.name = "relu";
    relu.op = planner::Op::kRelu;
    relu.inputs = {"input"};
    auto relu_graph = Graph::Create("relu_only", {8}, {relu});
    REQUIRE(relu_graph.ok());
    FakeTimer relu_timer({7, 1, 9, 5, 3});
    LayerProfiler relu_profiler(torch::kCPU, &relu_timer, options);
    auto relu_time = relu_profiler.MeasureLayer(*relu_graph, 0, 2);
    REQUIRE(relu_time.ok());
    CHECK(relu_timer.left() == 0);
    CHECK(relu_time->forward_ms == 5);
    CHECK(relu_time->backward_ms == 0);
  }
}

TEST_CASE("the CPU timer reads the injected clock", "[profiler]") {
  FakeClock clock;
  auto timer = MakeCpuTimer(clock);
  timer->Start();
  clock.Advance(std::chrono::microseconds(2500));
  CHECK(timer->StopMs() == Approx(2.5));
  auto device_timer = MakeDeviceTimer(torch::kCPU, clock);
  REQUIRE(device_timer.ok());
  (*device_timer)->Start();
  CHECK((*device_timer)->StopMs() == 0);
#if !DEEPOOL_HAVE_CUDA
  CHECK(MakeDeviceTimer(c10::Device(torch::kCUDA, 0), clock).status().code() ==
        StatusCode::kUnimplemented);
#endif
}

TEST_CASE("small_cnn profiled on the CPU parses back as the planner's profile", "[profiler]") {
  Graph graph = MustBuild("small_cnn");
  auto timer = MakeCpuTimer(*SystemClock::Get());
  ProfilerOptions options;
  options.batch_sizes = {2, 1};
  options.warmup = 1;
  options.repeats = 3;
  options.device_name = "cpu";
  std::vector<std::string> progress;
  LayerProfiler profiler(torch::kCPU, timer.get(), options,
                         [&](int index, int count, const std::string& layer) {
                           CHECK(count == graph.num_layers());
                           CHECK(index == static_cast<int>(progress.size()));
                           progress.push_back(layer);
                         });
  auto data = profiler.Run(graph);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  CHECK(progress.size() == static_cast<size_t>(graph.num_layers()));
  CHECK(data->model == "small_cnn");
  CHECK(data->device == "cpu");
  REQUIRE(data->layers.size() == static_cast<size_t>(graph.num_layers()));
  double total = 0;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto& layer = data->layers[static_cast<size_t>(id)];
    CHECK(layer.name == graph.layer(id).name);
    CHECK(layer.op == planner::OpName(graph.layer(id).op));
    REQUIRE(layer.batches.size() == 2);
    CHECK(layer.batches[0].batch == 1);  // sorted
    CHECK(layer.batches[1].batch == 2);
    for (const auto& b : layer.batches) {
      CHECK(b.forward_ms >= 0);
      CHECK(b.backward_ms >= 0);
      total += b.forward_ms + b.backward_ms;
    }
  }
  CHECK(total > 0);

  const std::string json = planner::ProfileToJson(*data);
  auto profile = planner::ParseProfile(json, graph, {});
  INFO(profile.status().ToString());
  REQUIRE(profile.ok());
  for (int id = 0; id < graph.num_layers(); ++id) {
    for (int64_t batch : {1, 2}) {
      auto t = (*profile)->Time(graph, id, batch);
      INFO(graph.layer(id).name << " at " << batch << ": " << t.status().ToString());
      REQUIRE(t.ok());
      CHECK(t->total_ms() >= 0);
    }
  }
  // Measured range only: batch 3 is beyond what was profiled.
  CHECK((*profile)->Time(graph, 0, 3).status().code() == StatusCode::kOutOfRange);
}

TEST_CASE("batch norm on one value per channel is timed instead of failing", "[profiler]") {
  planner::Layer bn;
  bn.name = "bn";
  bn.op = planner::Op::kBatchNorm2d;
  bn.inputs = {"input"};
  auto graph = Graph::Create("bn_1x1", {4, 1, 1}, {bn});
  REQUIRE(graph.ok());
  FakeClock clock;
  auto timer = MakeCpuTimer(clock);
  ProfilerOptions options;
  options.batch_sizes = {1, 2};
  LayerProfiler profiler(torch::kCPU, timer.get(), options);
  auto data = profiler.Run(*graph);
  INFO(data.status().ToString());
  CHECK(data.ok());
}

TEST_CASE("gpt_tiny's layers are timed with token ids fed to its embedding", "[profiler][tokens]") {
  Graph graph = MustBuild("gpt_tiny");
  FakeClock clock;
  auto timer = MakeCpuTimer(clock);
  ProfilerOptions options;
  options.batch_sizes = {1};
  options.warmup = 0;
  options.repeats = 1;
  LayerProfiler profiler(torch::kCPU, timer.get(), options);
  auto data = profiler.Run(graph);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  CHECK(data->layers.size() == static_cast<size_t>(graph.num_layers()));
  CHECK(data->layers.front().op == "embedding");
}

TEST_CASE("vit_tiny's layers are timed, its class token and selects included", "[profiler][vit]") {
  Graph graph = MustBuild("vit_tiny");
  FakeClock clock;
  auto timer = MakeCpuTimer(clock);
  ProfilerOptions options;
  options.batch_sizes = {2};
  options.warmup = 0;
  options.repeats = 1;
  LayerProfiler profiler(torch::kCPU, timer.get(), options);
  auto data = profiler.Run(graph);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  REQUIRE(data->layers.size() == static_cast<size_t>(graph.num_layers()));
  std::set<std::string> ops;
  for (const auto& layer : data->layers) ops.insert(layer.op);
  for (const char* op : {"transpose", "class_token", "position_embedding", "select"}) {
    CHECK(ops.count(op) == 1);
  }
}

TEST_CASE("bad profiler options are refused", "[profiler]") {
  Graph graph = MustBuild("mlp");
  FakeClock clock;
  auto timer = MakeCpuTimer(clock);
  ProfilerOptions options;
  SECTION("no batch sizes") {}
  SECTION("a zero batch") { options.batch_sizes = {0, 1}; }
  SECTION("a repeated batch") { options.batch_sizes = {2, 2}; }
  SECTION("no repeats") {
    options.batch_sizes = {1};
    options.repeats = 0;
  }
  LayerProfiler profiler(torch::kCPU, timer.get(), options);
  CHECK(profiler.Run(graph).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the profile tool writes a file the planner reads", "[profiler]") {
  TempDir dir;
  std::ostringstream progress;
  ProfileToolOptions options;
  options.batch_sizes = {1, 2};
  options.warmup = 0;
  options.repeats = 1;
  options.output_path = dir.File("profile.json");

  SECTION("from a zoo model") {
    options.model = "small_cnn";
    Status status = RunProfileTool(options, progress);
    INFO(status.ToString());
    REQUIRE(status.ok());
    Graph graph = MustBuild("small_cnn");
    auto profile = planner::ParseProfile(ReadFile(options.output_path), graph, {});
    INFO(profile.status().ToString());
    CHECK(profile.ok());
    const std::string lines = progress.str();
    CHECK(lines.find("[1/" + std::to_string(graph.num_layers()) + "] stem.conv") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(options.output_path + ".tmp"));
  }
  SECTION("from a graph file") {
    Graph graph = MustBuild("mlp");
    std::ofstream(dir.File("mlp.json")) << planner::GraphToJson(graph);
    options.graph_path = dir.File("mlp.json");
    REQUIRE(RunProfileTool(options, progress).ok());
    auto data = planner::ParseProfileJson(ReadFile(options.output_path));
    REQUIRE(data.ok());
    CHECK(data->device == "cpu");
    CHECK(data->layers.size() == static_cast<size_t>(graph.num_layers()));
    REQUIRE(data->iteration_overhead.size() == 2);
    CHECK(data->iteration_overhead[0].batch == 1);
    CHECK(data->iteration_overhead[1].batch == 2);
  }
  SECTION("without the iteration overhead") {
    options.model = "mlp";
    options.iteration_overhead = false;
    REQUIRE(RunProfileTool(options, progress).ok());
    auto data = planner::ParseProfileJson(ReadFile(options.output_path));
    REQUIRE(data.ok());
    CHECK(data->iteration_overhead.empty());
  }
  SECTION("an unknown model, a missing file, both or neither") {
    options.model = "no_such_model";
    CHECK(RunProfileTool(options, progress).code() == StatusCode::kNotFound);
    options.model.clear();
    options.graph_path = dir.File("absent.json");
    CHECK(RunProfileTool(options, progress).code() == StatusCode::kNotFound);
    options.model = "mlp";
    CHECK(RunProfileTool(options, progress).code() == StatusCode::kInvalidArgument);
    options.model.clear();
    options.graph_path.clear();
    CHECK(RunProfileTool(options, progress).code() == StatusCode::kInvalidArgument);
    CHECK_FALSE(fs::exists(options.output_path));
  }
  SECTION("a bad optimizer for the iteration overhead") {
    options.model = "mlp";
    options.overhead_optimizer.momentum = -0.5;
    const Status status = RunProfileTool(options, progress);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(status.ToString(), Catch::Contains("optimizer.momentum must be >= 0"));
    CHECK(progress.str().empty());  // refused before any layer was timed
    CHECK_FALSE(fs::exists(options.output_path));
  }
  SECTION("a CUDA timing for a CPU device") {
    options.model = "mlp";
    options.cuda_timing = CudaTiming::kDevice;
    const Status status = RunProfileTool(options, progress);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(status.ToString(), Catch::Contains("--cuda-timing"));
    CHECK_FALSE(fs::exists(options.output_path));
  }
}

TEST_CASE("CUDA timings parse by name", "[profiler]") {
  CHECK(ParseCudaTiming("device").value() == CudaTiming::kDevice);
  CHECK(ParseCudaTiming("with-launch").value() == CudaTiming::kWithLaunch);
  CHECK(ParseCudaTiming("kernels").status().code() == StatusCode::kInvalidArgument);
}

using testing::UniformProfile;

TEST_CASE("the iteration overhead is a one-rank iteration minus the layers' times", "[profiler]") {
  const Graph graph = MustBuild("mlp");
  OverheadOptions options;
  options.warmup = 1;
  options.repeats = 3;
  // Layers that take no time: the whole iteration is overhead, and it is not free.
  auto whole = MeasureIterationOverhead(graph, UniformProfile(graph, {4, 8}, 0), {4, 8}, options);
  INFO(whole.status().ToString());
  REQUIRE(whole.ok());
  REQUIRE(whole->size() == 2);
  CHECK((*whole)[0].batch == 4);
  CHECK((*whole)[0].ms > 0);
  CHECK((*whole)[1].ms > 0);
  // Layers slower than any iteration: the difference is clamped at 0.
  auto clamped = MeasureIterationOverhead(graph, UniformProfile(graph, {4}, 1e6), {4}, options);
  REQUIRE(clamped.ok());
  CHECK((*clamped)[0].ms == 0);
  // A batch the layer profile does not time.
  auto missing = MeasureIterationOverhead(graph, UniformProfile(graph, {4}, 0), {2}, options);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().ToString(), Catch::Contains("batch 2"));
}

TEST_CASE("the iteration overhead includes the step of the optimizer it is given", "[profiler]") {
  // One wide linear layer at batch 1: 16M parameters, so the step dominates the iteration. Adam
  // reads and writes two more buffers per parameter than plain SGD, and does several times its
  // arithmetic.
  planner::Layer wide;
  wide.name = "fc";
  wide.op = planner::Op::kLinear;
  wide.inputs = {std::string(planner::kGraphInputName)};
  wide.attrs.out_features = 4096;
  const Graph graph = Graph::Create("wide", {4096}, {wide}).value();
  OverheadOptions options;
  options.warmup = 1;
  options.repeats = 3;
  auto overhead_ms = [&](const std::string& name) {
    options.optimizer = OptimizerSpec{};
    options.optimizer.name = name;
    auto points = MeasureIterationOverhead(graph, UniformProfile(graph, {1}, 0), {1}, options);
    INFO(points.status().ToString());
    REQUIRE(points.ok());
    return points->at(0).ms;
  };
  const double sgd = overhead_ms("sgd");
  const double adam = overhead_ms("adam");
  INFO("sgd " << sgd << " ms, adam " << adam << " ms");
  CHECK(adam > 1.5 * sgd);
}

}  // namespace
}  // namespace deepool::worker
