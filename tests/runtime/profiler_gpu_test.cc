// The profiler on a real GPU (label "gpu"; skipped without one): with queued launches
// (CudaTiming::kDevice) a run of tiny kernels counts the GPU's time, well below the time the
// host takes to issue them, while a long kernel measures the same in both modes (the spin kernel
// ahead of the start event is not counted); the iteration overhead runs a one-rank executor on
// the GPU (NCCL, pinned batches).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "planner/zoo/zoo.h"
#include "tests/runtime/gpu_test_util.h"
#include "tests/runtime/uniform_profile.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/profiling/iteration_overhead.h"
#include "worker/runtime/profiling/profiler.h"

namespace deepool::worker {
namespace {

using testing::UniformProfile;

bool HaveGpu() { return testing::HaveGpus(1); }

// The median of five timed runs of `work` with a timer of `timing` on cuda:0.
double TimeMs(CudaTiming timing, const std::function<void()>& work) {
  auto timer = MakeDeviceTimer(c10::Device(torch::kCUDA, 0), *SystemClock::Get(), timing);
  INFO(timer.status().ToString());
  REQUIRE(timer.ok());
  std::vector<double> runs;
  for (int run = 0; run < 7; ++run) {
    (*timer)->Start();
    work();
    double ms = (*timer)->StopMs();
    if (run >= 2) runs.push_back(ms);  // the first two warm up
  }
  return Median(runs);
}

TEST_CASE("CUDA timer: queued launches leave the host's launch latency out", "[gpu][profiler]") {
  if (!HaveGpu()) return;
  torch::Tensor small = torch::zeros({256}, torch::kCUDA);
  auto tiny_kernels = [&] {
    for (int i = 0; i < 100; ++i) small.add_(1);
  };
  const double device_ms = TimeMs(CudaTiming::kDevice, tiny_kernels);
  const double with_launch_ms = TimeMs(CudaTiming::kWithLaunch, tiny_kernels);
  INFO("100 tiny kernels: device " << device_ms << " ms, with launch " << with_launch_ms << " ms");
  CHECK(device_ms > 0);
  CHECK(device_ms < 0.7 * with_launch_ms);

  torch::Tensor a = torch::randn({4096, 4096}, torch::kCUDA);
  torch::Tensor b = torch::randn({4096, 4096}, torch::kCUDA);
  auto long_kernel = [&] { torch::mm(a, b); };
  const double long_device_ms = TimeMs(CudaTiming::kDevice, long_kernel);
  const double long_with_launch_ms = TimeMs(CudaTiming::kWithLaunch, long_kernel);
  INFO("4096^3 matrix product: device " << long_device_ms << " ms, with launch "
                                        << long_with_launch_ms << " ms");
  CHECK(long_device_ms == Approx(long_with_launch_ms).epsilon(0.25));
}

TEST_CASE("iteration overhead on a GPU: a one-rank NCCL executor's iteration", "[gpu][profiler]") {
  if (!HaveGpu()) return;
  auto graph = planner::zoo::BuildModel("small_cnn");
  REQUIRE(graph.ok());
  auto device = ParseDevice("cuda:0");
  REQUIRE(device.ok());
  auto context = MakeDeviceContext(*device);
  INFO(context.status().ToString());
  REQUIRE(context.ok());
  OverheadOptions options;
  options.warmup = 1;
  options.repeats = 3;
  options.device = context->get();
  // With layers that take no time the overhead is the whole iteration; with layers that take
  // far longer than it, 0.
  auto whole =
      MeasureIterationOverhead(*graph, UniformProfile(*graph, {8, 32}, 0), {8, 32}, options);
  INFO(whole.status().ToString());
  REQUIRE(whole.ok());
  REQUIRE(whole->size() == 2);
  CHECK((*whole)[0].batch == 8);
  CHECK((*whole)[0].ms > 0);
  CHECK((*whole)[1].ms > 0);
  auto clamped = MeasureIterationOverhead(*graph, UniformProfile(*graph, {8}, 1e6), {8}, options);
  REQUIRE(clamped.ok());
  CHECK((*clamped)[0].ms == 0);
}

}  // namespace
}  // namespace deepool::worker
