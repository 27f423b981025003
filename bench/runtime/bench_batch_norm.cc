// Benchmark: synchronised batch norm's own compute against torch's training batch norm, forward
// plus backward, at ResNet-50's batch norm shapes. The group sum is a group of one (it returns the
// statistics unchanged), so only compute is timed: what a layer on several ranks costs beyond its
// all-reduces, which the layer profile (torch's kernel) does not see. Cases alternate, one
// repetition each in turn, so both see the same machine; prints medians in ms and their ratio.
// On a GPU (--device cuda) each repetition ends with a device synchronisation, and torch's side
// is cuDNN's batch norm.
//   build-*/bin/deepool-bench-batch_norm [--batch N] [--image-size S] [--reps R] [--device D]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "worker/runtime/layers/batch_norm.h"
#include "worker/runtime/devices/device.h"

namespace dw = deepool::worker;
using deepool::bench::Check;
using deepool::bench::Median;

namespace {

// Forward and backward of one training-mode batch norm; returns wall ms.
double TimeOnce(const std::function<torch::Tensor(const torch::Tensor&)>& norm,
                const torch::Tensor& x, const torch::Tensor& dy) {
  torch::Tensor input = x.detach().requires_grad_(true);
  const bool cuda = x.is_cuda();
  if (cuda) torch::cuda::synchronize();
  const auto begin = std::chrono::steady_clock::now();
  torch::Tensor out = norm(input);
  out.backward(dy);
  if (cuda) torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 8;
  int64_t image = 64;
  int reps = 21;
  int threads = 1;
  std::string device_name = "cpu";
  CLI::App app{
      "Synchronised batch norm (a group of one) against torch's batch_norm, forward + backward, "
      "at ResNet-50's shapes"};
  app.add_option("--batch", batch, "samples per rank")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  app.add_option("--image-size", image, "input image side (ResNet-50 stages are 1/4 to 1/32)")
      ->capture_default_str()
      ->check(CLI::Range(32, 1024));
  app.add_option("--reps", reps, "repetitions per case")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--threads", threads, "torch intra-op threads (ranks use 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--device", device_name, "cpu or cuda[:K]")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const torch::Device device = Check(dw::ParseDevice(device_name)).torch_device();
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "deepool-bench-batch_norm: no CUDA device visible\n");
    return 1;
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);

  struct Shape {
    int64_t channels, divisor;
  };
  std::printf("| shape | torch batch_norm ms | synchronised ms | ratio |\n|---|---|---|---|\n");
  for (const Shape& s : {Shape{64, 4}, Shape{256, 4}, Shape{128, 8}, Shape{512, 8}, Shape{256, 16},
                         Shape{1024, 16}, Shape{512, 32}, Shape{2048, 32}}) {
    const int64_t side = image / s.divisor;
    const auto on = torch::TensorOptions().device(device);
    torch::Tensor x = torch::randn({batch, s.channels, side, side}, on);
    torch::Tensor dy = torch::randn_like(x);
    torch::Tensor weight = torch::ones({s.channels}, on).requires_grad_(true);
    torch::Tensor bias = torch::zeros({s.channels}, on).requires_grad_(true);
    torch::Tensor running_mean = torch::zeros({s.channels}, on);
    torch::Tensor running_var = torch::ones({s.channels}, on);
    auto torch_norm = [&](const torch::Tensor& input) {
      return torch::batch_norm(input, weight, bias, running_mean, running_var, true, 0.1, 1e-5,
                               /*cudnn_enabled=*/device.is_cuda());
    };
    const dw::GroupSum group_of_one = [](torch::Tensor&) { return deepool::Status::Ok(); };
    auto sync_norm = [&](const torch::Tensor& input) {
      return dw::SyncBatchNormTrain(
          input, dw::BatchNormArgs{weight, bias, running_mean, running_var, 0.1, 1e-5},
          group_of_one);
    };
    TimeOnce(torch_norm, x, dy);  // warm-up: the allocator's first pages
    TimeOnce(sync_norm, x, dy);
    std::vector<double> torch_ms, sync_ms;
    for (int r = 0; r < reps; ++r) {
      torch_ms.push_back(TimeOnce(torch_norm, x, dy));
      sync_ms.push_back(TimeOnce(sync_norm, x, dy));
    }
    std::printf("| %lldx%lldx%lldx%lld | %.3f | %.3f | %.2f |\n", static_cast<long long>(batch),
                static_cast<long long>(s.channels), static_cast<long long>(side),
                static_cast<long long>(side), Median(torch_ms), Median(sync_ms),
                Median(sync_ms) / Median(torch_ms));
  }
  return 0;
}
