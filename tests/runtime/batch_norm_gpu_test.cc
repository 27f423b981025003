// Synchronised batch norm's CUDA path (torch's fused SyncBatchNorm kernels) on a real GPU (label
// "gpu"; skipped without one): with a group of one, SyncBatchNormTrain on cuda:0 must equal
// torch's training batch norm on the same GPU, forward, backward and running statistics; with a
// group of two members holding the same rows (a sum that doubles), torch's batch norm over both
// copies, so the group's count reaches the statistics, the running variance and the input
// gradient. The group sum itself is the communicator's (tested over NCCL with two GPUs in
// executor_gpu_test); the CPU path has its own tests (executor_batchnorm_test).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/layers/batch_norm.h"

namespace deepool::worker {
namespace {

// fp32 on a GPU: torch's kernel and deepool's reduce in different orders.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

struct NormResult {
  torch::Tensor out, dx, dweight, dbias, running_mean, running_var;
};

template <typename Norm>
NormResult Run(const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& weight,
               const torch::Tensor& bias, Norm norm) {
  NormResult result;
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor w = weight.clone().requires_grad_(true);
  torch::Tensor b = bias.clone().requires_grad_(true);
  result.running_mean = torch::zeros({x.size(1)}, x.options());
  result.running_var = torch::ones({x.size(1)}, x.options());
  torch::Tensor out = norm(input, w, b, result.running_mean, result.running_var);
  out.backward(dy);
  result.out = out.detach();
  result.dx = input.grad();
  result.dweight = w.grad();
  result.dbias = b.grad();
  return result;
}

TEST_CASE("synchronised batch norm on a GPU equals torch's batch norm there", "[gpu][batchnorm]") {
  if (!testing::HaveGpus(1)) return;
  torch::manual_seed(7);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  const int64_t channels = 16;
  torch::Tensor x = (torch::randn({6, channels, 7, 7}) * 2 + 0.5).to(cuda.device());
  torch::Tensor dy = torch::randn({6, channels, 7, 7}).to(cuda.device());
  torch::Tensor weight = (torch::rand({channels}) + 0.5).to(cuda.device());
  torch::Tensor bias = torch::randn({channels}).to(cuda.device());

  NormResult want = Run(x, dy, weight, bias, [](auto& in, auto& w, auto& b, auto& rm, auto& rv) {
    return torch::batch_norm(in, w, b, rm, rv, true, 0.1, 1e-5, /*cudnn_enabled=*/true);
  });
  const GroupSum group_of_one = [](torch::Tensor&) { return Status::Ok(); };
  NormResult got = Run(x, dy, weight, bias, [&](auto& in, auto& w, auto& b, auto& rm, auto& rv) {
    return SyncBatchNormTrain(in, BatchNormArgs{w, b, rm, rv, 0.1, 1e-5}, group_of_one);
  });
  torch::cuda::synchronize();

  CHECK(got.out.device() == x.device());
  CHECK(torch::allclose(got.out, want.out, kRtol, kAtol));
  CHECK(torch::allclose(got.dx, want.dx, kRtol, kAtol));
  CHECK(torch::allclose(got.dweight, want.dweight, kRtol, kAtol));
  CHECK(torch::allclose(got.dbias, want.dbias, kRtol, kAtol));
  CHECK(torch::allclose(got.running_mean, want.running_mean, kRtol, kAtol));
  CHECK(torch::allclose(got.running_var, want.running_var, kRtol, kAtol));
}

TEST_CASE("synchronised batch norm on a GPU counts the group's samples", "[gpu][batchnorm]") {
  if (!testing::HaveGpus(1)) return;
  torch::manual_seed(8);
  const auto device = torch::Device(torch::kCUDA, 0);
  const int64_t channels = 12, rows = 5;
  torch::Tensor x = (torch::randn({rows, channels, 6, 6}) * 3 - 1).to(device);
  torch::Tensor dy = torch::randn({rows, channels, 6, 6}).to(device);
  torch::Tensor weight = (torch::rand({channels}) + 0.5).to(device);
  torch::Tensor bias = torch::randn({channels}).to(device);

  // A group of two members holding the same rows: the sum doubles this rank's values. Torch's
  // batch norm over both copies is the reference (its running variance is unbiased over 2n).
  NormResult want = Run(torch::cat({x, x}), torch::cat({dy, dy}), weight, bias,
                        [](auto& in, auto& w, auto& b, auto& rm, auto& rv) {
                          return torch::batch_norm(in, w, b, rm, rv, true, 0.1, 1e-5, true);
                        });
  const GroupSum two_alike = [](torch::Tensor& tensor) {
    tensor.mul_(2);
    return Status::Ok();
  };
  NormResult got = Run(x, dy, weight, bias, [&](auto& in, auto& w, auto& b, auto& rm, auto& rv) {
    return SyncBatchNormTrain(in, BatchNormArgs{w, b, rm, rv, 0.1, 1e-5}, two_alike);
  });
  torch::cuda::synchronize();

  CHECK(torch::allclose(got.out, want.out.narrow(0, 0, rows), kRtol, kAtol));
  CHECK(torch::allclose(got.dx, want.dx.narrow(0, 0, rows), kRtol, kAtol));
  // The executor sums parameter gradients over the set: here two equal shares.
  CHECK(torch::allclose(2 * got.dweight, want.dweight, kRtol, kAtol));
  CHECK(torch::allclose(2 * got.dbias, want.dbias, kRtol, kAtol));
  CHECK(torch::allclose(got.running_mean, want.running_mean, kRtol, kAtol));
  CHECK(torch::allclose(got.running_var, want.running_var, kRtol, kAtol));
}

}  // namespace
}  // namespace deepool::worker
