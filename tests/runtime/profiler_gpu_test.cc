// The profiler's CUDA timer on a real GPU (label "gpu"; skipped without one): with queued
// launches (CudaTiming::kDevice) a run of tiny kernels counts the GPU's time, well below the
// time the host takes to issue them, while a long kernel measures the same in both modes (the
// spin kernel ahead of the start event is not counted).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/profiler.h"

namespace deepool::worker {
namespace {

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

}  // namespace
}  // namespace deepool::worker
