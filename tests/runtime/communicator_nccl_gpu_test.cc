// The NCCL communicator with real NCCL calls in a world of one rank (label "gpu"; each test
// returns early with a warning where no GPU is visible, or where the build has no CUDA):
//   - Wait only orders the current stream: behind a long kernel it returns while the stream is
//     still busy; WaitHost blocks until the operation (and so the kernel before it) finished;
//   - an all-reduce posted from a parameter's gradient hook and one posted from a custom
//     autograd function's backward (both on autograd's device thread, as the executor's gradient
//     buckets and synchronised batch norm post them) sum correctly and reach what runs next.
// A sum over one rank is the tensor itself, so the values check that the result lands in order,
// behind the kernels that produced it, not that ranks were added (executor_shared_gpu_test.cc
// adds ranks on one GPU over Gloo; executor_gpu_test.cc over NCCL on several GPUs).
// scripts/gpu-node-test.sh runs them. Never yet run on a GPU (docs/runtime.md).
#include <catch2/catch.hpp>
#include <chrono>

#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/communication/communicator_nccl.h"

#if DEEPOOL_HAVE_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace deepool::worker {
namespace {

using testing::HaveGpus;

#if DEEPOOL_HAVE_CUDA

constexpr std::chrono::milliseconds kTimeout{std::chrono::seconds(60)};

// A world of one over NCCL on cuda:0.
std::unique_ptr<Communicator> ConnectAlone() {
  c10::cuda::set_device(0);
  CommOptions options;
  options.rank = 0;
  options.world_size = 1;
  options.timeout = kTimeout;
  auto comm = ConnectNccl(options);
  INFO(comm.status().ToString());
  REQUIRE(comm.ok());
  return std::move(comm).value();
}

const RankGroup kWorld{0};

// About a second of GPU time on current GPUs (a ~1-2 GHz clock), far longer than posting an
// all-reduce and waiting on it takes the host.
constexpr int64_t kLongKernelCycles = int64_t{2'000'000'000};

bool CurrentStreamIdle() { return c10::cuda::getCurrentCUDAStream().query(); }

TEST_CASE("NCCL alone: Wait orders the stream without blocking the host, WaitHost blocks",
          "[gpu][communicator][nccl]") {
  if (!HaveGpus(1)) return;
  auto comm = ConnectAlone();
  torch::Tensor tensor = torch::arange(8, torch::dtype(torch::kFloat).device(torch::kCUDA, 0));
  torch::cuda::synchronize();

  at::cuda::sleep(kLongKernelCycles);  // a long kernel queued before the all-reduce
  tensor.mul_(3);                      // the value the all-reduce must see
  auto work = comm->AllReduceSum(tensor, kWorld);
  REQUIRE(work.ok());
  const auto start = std::chrono::steady_clock::now();
  REQUIRE((*work)->Wait(kTimeout).ok());
  const auto waited = std::chrono::steady_clock::now() - start;
  const double waited_ms = std::chrono::duration<double, std::milli>(waited).count();
  INFO("Wait took " << waited_ms << " ms");
  // Returned while the kernel before it still runs: the host was not blocked.
  REQUIRE_FALSE(CurrentStreamIdle());
  // What the stream runs next sees the sum.
  torch::Tensor after = tensor + 1;

  auto second = comm->AllReduceSum(tensor, kWorld);
  REQUIRE(second.ok());
  REQUIRE((*second)->WaitHost(kTimeout).ok());
  // The value reached the host, in order behind both all-reduces.
  REQUIRE(torch::equal(after.cpu(), torch::arange(8, torch::kFloat) * 3 + 1));
  torch::cuda::synchronize();
  REQUIRE(CurrentStreamIdle());
}

TEST_CASE("NCCL alone: WaitHost returns only once the all-reduce finished",
          "[gpu][communicator][nccl]") {
  if (!HaveGpus(1)) return;
  auto comm = ConnectAlone();
  torch::Tensor tensor = torch::ones({4}, torch::dtype(torch::kFloat).device(torch::kCUDA, 0));
  torch::cuda::synchronize();
  at::cuda::sleep(kLongKernelCycles);
  auto work = comm->AllReduceSum(tensor, kWorld);
  REQUIRE(work.ok());
  REQUIRE((*work)->WaitHost(kTimeout).ok());
  // NCCL's stream waited for the long kernel on the current stream before the all-reduce, so
  // the host could only return after it: nothing is left queued.
  REQUIRE(CurrentStreamIdle());
}

// y = x * w; an all-reduce of w's gradient posted (and waited on, stream only) by its hook.
TEST_CASE("NCCL alone: an all-reduce posted from a parameter's gradient hook sums correctly",
          "[gpu][communicator][nccl]") {
  if (!HaveGpus(1)) return;
  auto comm = ConnectAlone();
  const auto cuda = torch::dtype(torch::kFloat).device(torch::kCUDA, 0);
  torch::Tensor w = torch::full({16}, 2.0, cuda).requires_grad_(true);
  torch::Tensor x = torch::arange(16, cuda);
  Status hook_status = InternalError("the hook did not run");
  w.register_hook([&](torch::Tensor grad) -> torch::Tensor {
    at::cuda::sleep(kLongKernelCycles / 8);  // the gradient is late on the stream
    torch::Tensor summed = grad * 5;
    auto work = comm->AllReduceSum(summed, kWorld);
    hook_status = work.ok() ? (*work)->Wait(kTimeout) : work.status();
    return summed;
  });
  (x * w).sum().backward();
  INFO(hook_status.ToString());
  REQUIRE(hook_status.ok());
  REQUIRE(torch::equal(w.grad().cpu(), torch::arange(16, torch::kFloat) * 5));
}

// A custom function whose backward all-reduces its incoming gradient, as synchronised batch
// norm's backward sums its statistics' gradients.
Communicator* g_backward_comm = nullptr;
Status g_backward_status;

struct AllReducingBackward : public torch::autograd::Function<AllReducingBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor input) {
    return input.clone();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext*,
                                               torch::autograd::tensor_list grads) {
    torch::Tensor summed = grads[0].contiguous() * 7;
    auto work = g_backward_comm->AllReduceSum(summed, kWorld);
    g_backward_status = work.ok() ? (*work)->Wait(kTimeout) : work.status();
    return {summed};
  }
};

TEST_CASE("NCCL alone: an all-reduce posted from a custom backward sums correctly",
          "[gpu][communicator][nccl]") {
  if (!HaveGpus(1)) return;
  auto comm = ConnectAlone();
  g_backward_comm = comm.get();
  g_backward_status = InternalError("the backward did not run");
  const auto cuda = torch::dtype(torch::kFloat).device(torch::kCUDA, 0);
  torch::Tensor x = torch::arange(12, cuda).requires_grad_(true);
  torch::Tensor y = AllReducingBackward::apply(x * 2);
  (y * 3).sum().backward();
  g_backward_comm = nullptr;
  INFO(g_backward_status.ToString());
  REQUIRE(g_backward_status.ok());
  // d/dx of 3 * (2x), the backward's gradient scaled by 7 and summed over the world of one.
  REQUIRE(torch::equal(x.grad().cpu(), torch::full({12}, 3.0 * 7 * 2)));
}

#else

TEST_CASE("NCCL alone: Wait and WaitHost, hooks and custom backwards",
          "[gpu][communicator][nccl]") {
  if (!HaveGpus(1)) return;
  WARN("skipped: needs a build with CUDA (this one has none)");
}

#endif

}  // namespace
}  // namespace deepool::worker
