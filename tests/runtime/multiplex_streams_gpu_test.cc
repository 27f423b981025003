// The CUDA adapter of DeviceStreams on a real GPU (skipped without one): dedicated streams at
// the device's greatest and least priorities, made current per thread and ordered by events; a
// graph captured and replayed on the BG stream; and a capture that fails inside (a host
// synchronisation) undone so completely that eager work, random numbers and a new capture work
// on the same stream afterwards; and a BG job whose replayed graph trains as its eager run does.
// The CPU tests cover the logic above this adapter with a fake.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "planner/zoo/zoo.h"
#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/background/background_graph_stepper.h"
#include "worker/runtime/devices/device_streams.h"
#include "worker/runtime/background/multiplex_device.h"

namespace deepool::worker {
namespace {

bool HaveGpu() { return testing::HaveGpus(1); }

std::shared_ptr<DeviceStreams> Streams() {
  auto streams = MakeSharingStreams(torch::Device(torch::kCUDA, 0));
  INFO(streams.status().ToString());
  REQUIRE(streams.ok());
  REQUIRE(*streams != nullptr);
  return *streams;
}

TEST_CASE("CUDA streams: dedicated, at the device's priorities, current per thread",
          "[gpu][multiplex]") {
  if (!HaveGpu()) return;
  auto streams = Streams();
  // The device's own range: c10's priority_range() is clamped to the priorities PyTorch's
  // stream pools use (-3 on an H100 whose device range goes to -5), and the adapter asks CUDA.
  int least = 0, greatest = 0;
  REQUIRE(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
  auto high = streams->CreateStream(StreamPriority::kHigh);
  auto low = streams->CreateStream(StreamPriority::kLow);
  REQUIRE(high.ok());
  REQUIRE(low.ok());
  const auto before = c10::cuda::getCurrentCUDAStream(0);

  auto fg = streams->MakeCurrent(**high);
  REQUIRE(fg.ok());
  const auto fg_stream = c10::cuda::getCurrentCUDAStream(0);
  REQUIRE(fg_stream.priority() == greatest);
  torch::Tensor x = torch::full({1 << 20}, 2.0f, torch::kCUDA);

  c10::cuda::CUDAStream bg_stream = before;
  std::thread bg([&] {
    auto scope = streams->MakeCurrent(**low);
    if (!scope.ok()) return;
    bg_stream = c10::cuda::getCurrentCUDAStream(0);
  });
  bg.join();
  REQUIRE(bg_stream.priority() == least);
  REQUIRE(bg_stream != fg_stream);
  REQUIRE(fg_stream != c10::cuda::getDefaultCUDAStream(0));
  REQUIRE(c10::cuda::getCurrentCUDAStream(0) == fg_stream);  // the other thread's scope is its own

  // An event orders the BG stream after the FG stream's work, without the host waiting.
  auto event = streams->RecordEvent(**high);
  REQUIRE(event.ok());
  REQUIRE(streams->WaitEvent(**low, **event).ok());
  REQUIRE(streams->Synchronize(**high).ok());
  REQUIRE(x.sum().item<float>() == Approx(2.0 * (1 << 20)));
  fg->reset();
  REQUIRE(c10::cuda::getCurrentCUDAStream(0) == before);
}

TEST_CASE("CUDA graphs: capture and replay, and a failed capture is undone", "[gpu][multiplex]") {
  if (!HaveGpu()) return;
  auto streams = Streams();
  auto low = streams->CreateStream(StreamPriority::kLow);
  REQUIRE(low.ok());
  auto scope = streams->MakeCurrent(**low);
  REQUIRE(scope.ok());
  torch::Tensor x = torch::zeros({256}, torch::kCUDA);
  torch::Tensor y = x * 2 + 1;  // warm-up outside the capture

  auto graph = streams->BeginCapture(**low);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  y = x * 2 + 1;
  REQUIRE(streams->EndCapture(**graph).ok());
  x.fill_(3);
  REQUIRE(streams->Replay(**graph, **low).ok());
  REQUIRE(streams->Synchronize(**low).ok());
  REQUIRE(torch::allclose(y.cpu(), torch::full({256}, 7.0f)));

  // A host synchronisation inside the capture throws (or invalidates it); EndCapture undoes it.
  auto failing = streams->BeginCapture(**low);
  REQUIRE(failing.ok());
  bool threw = false;
  try {
    torch::Tensor z = torch::rand({64}, torch::kCUDA) + x[0];
    (void)z.sum().item<float>();
  } catch (const std::exception&) {
    threw = true;
  }
  Status ended = streams->EndCapture(**failing);
  INFO(ended.ToString());
  REQUIRE((threw || !ended.ok()));
  failing->reset();

  // The stream, the allocator and the random generator work as before, eagerly and captured.
  torch::Tensor eager = x + torch::rand({256}, torch::kCUDA);
  REQUIRE(streams->Synchronize(**low).ok());
  REQUIRE(eager.min().item<float>() >= 3.0f);
  auto again = streams->BeginCapture(**low);
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  torch::Tensor w = x * 3;
  REQUIRE(streams->EndCapture(**again).ok());
  REQUIRE(streams->Replay(**again, **low).ok());
  REQUIRE(torch::allclose(w.cpu(), torch::full({256}, 9.0f)));
  REQUIRE(streams->Replay(**graph, **low).ok());  // the first graph still replays
  REQUIRE(streams->Synchronize(**low).ok());
}

// cuDNN picks convolution algorithms per call (benchmarking, TF32, atomics in some backward
// kernels), so two runs of the same job need not agree bit for bit; the first GPU run saw the
// eager/replay comparison fail once in four for that reason. While alive, this pins cuDNN to
// deterministic, non-TF32 algorithms, so a difference left is the capture's own.
class DeterministicCudnn {
 public:
  DeterministicCudnn()
      : deterministic_(at::globalContext().deterministicCuDNN()),
        benchmark_(at::globalContext().benchmarkCuDNN()),
        tf32_(at::globalContext().allowTF32CuDNN()) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  ~DeterministicCudnn() {
    at::globalContext().setDeterministicCuDNN(deterministic_);
    at::globalContext().setBenchmarkCuDNN(benchmark_);
    at::globalContext().setAllowTF32CuDNN(tf32_);
  }
  DeterministicCudnn(const DeterministicCudnn&) = delete;
  DeterministicCudnn& operator=(const DeterministicCudnn&) = delete;

 private:
  bool deterministic_, benchmark_, tf32_;
};

// Trains `iterations` iterations of `spec` on cuda:0 through a GraphStepper on its own stream.
struct GpuRun {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  GraphStepper::Mode mode = GraphStepper::Mode::kEager;
};
GpuRun TrainOnGpu(const BackgroundSpec& spec, int iterations) {
  auto stepper =
      MakeBackgroundStepper(spec, torch::Device(torch::kCUDA, 0), Streams(), SystemClock::Get());
  INFO(stepper.status().ToString());
  REQUIRE(stepper.ok());
  auto* graph = dynamic_cast<GraphStepper*>(stepper->get());
  REQUIRE(graph != nullptr);
  GpuRun run;
  {
    auto hold = graph->EnterThread();
    while (static_cast<int>(run.losses.size()) < iterations) {
      auto unit = graph->RunUnit();
      INFO(unit.status().ToString());
      REQUIRE(unit.ok());
      if (unit->iteration_done) run.losses.push_back(unit->loss);
    }
  }
  run.mode = graph->mode();
  for (auto& [name, tensor] : graph->trainer().NamedParameters()) run.params[name] = tensor.cpu();
  return run;
}

TEST_CASE("BG job on CUDA: the replayed graph trains as the eager run does", "[gpu][multiplex]") {
  if (!HaveGpu()) return;
  DeterministicCudnn deterministic;
  for (const char* model : {"mlp", "small_cnn"}) {
    INFO(model);
    auto graph = planner::zoo::BuildModel(model, planner::zoo::ModelOptions{10});
    REQUIRE(graph.ok());
    BackgroundSpec spec;
    spec.job_id = "bg-gpu";
    spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
    spec.batch_size = 16;
    spec.seed = 5;
    spec.optimizer.lr = 0.05;
    spec.optimizer.momentum = 0.9;
    spec.data = DataSpec{"synthetic", 2, ""};
    BackgroundSpec eager_spec = spec;
    eager_spec.sharing.cuda_graphs = false;
    GpuRun replayed = TrainOnGpu(spec, 8);
    GpuRun eager = TrainOnGpu(eager_spec, 8);
    REQUIRE(replayed.mode == GraphStepper::Mode::kReplay);  // captured, not fallen back
    REQUIRE(eager.mode == GraphStepper::Mode::kEager);
    for (size_t i = 0; i < replayed.losses.size(); ++i) {
      REQUIRE(replayed.losses[i] == Approx(eager.losses[i]).epsilon(1e-3));
    }
    for (const auto& [name, tensor] : eager.params) {
      INFO(name);
      REQUIRE(torch::allclose(replayed.params.at(name), tensor, 1e-3, 1e-5));
    }
  }
}

}  // namespace
}  // namespace deepool::worker
