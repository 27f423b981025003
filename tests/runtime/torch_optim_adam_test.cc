// The runtime's Adam and AdamW take torch.optim's steps bit for bit (torch_optim_adam.h): the
// operations of torch.optim's single-tensor step written out here on float32 weights, checked
// with torch::equal after several steps, where libtorch's own AdamW (mul_ + add_ for the first
// moment) is shown to differ.
#include "worker/runtime/layers/torch_optim_adam.h"

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "worker/runtime/layers/optimizer.h"

namespace deepool::worker {
namespace {

constexpr double kLr = 0.003;
constexpr double kWeightDecay = 0.01;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;
constexpr int kSteps = 6;

// Gradients with much cancellation in them: tiny, of mixed signs, as a batch norm's bias gets.
std::vector<torch::Tensor> Gradients() {
  torch::manual_seed(7);
  std::vector<torch::Tensor> grads;
  for (int t = 0; t < kSteps; ++t) grads.push_back(torch::randn({257}) * 1e-3);
  return grads;
}

// torch.optim's _single_tensor_adam (torch/optim/adam.py), written out in its order.
torch::Tensor PythonSteps(torch::Tensor w, bool decoupled) {
  torch::Tensor m = torch::zeros_like(w), v = torch::zeros_like(w);
  int step = 0;
  for (const torch::Tensor& g0 : Gradients()) {
    ++step;
    torch::Tensor g = g0;
    if (decoupled) {
      w.mul_(1 - kLr * kWeightDecay);
    } else {
      g = g.add(w, kWeightDecay);
    }
    m.lerp_(g, 1 - kBeta1);
    v.mul_(kBeta2).addcmul_(g, g, 1 - kBeta2);
    const double bias_correction1 = 1 - std::pow(kBeta1, step);
    const double bias_correction2_sqrt = std::pow(1 - std::pow(kBeta2, step), 0.5);
    torch::Tensor denom = (v.sqrt() / bias_correction2_sqrt).add_(kEps);
    w.addcdiv_(m, denom, -(kLr / bias_correction1));
  }
  return w;
}

torch::Tensor Stepped(torch::optim::Optimizer& optimizer, torch::Tensor& w) {
  for (const torch::Tensor& g : Gradients()) {
    optimizer.zero_grad();
    w.mutable_grad() = g.clone();
    optimizer.step();
  }
  return w.detach();
}

torch::Tensor Start() {
  torch::manual_seed(3);
  return torch::randn({257}) * 0.1;
}

TEST_CASE("AdamW takes torch.optim's steps bit for bit where libtorch's own does not") {
  torch::Tensor expected = PythonSteps(Start(), /*decoupled=*/true);
  const auto options =
      torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWeightDecay);

  torch::Tensor w = Start().requires_grad_();
  TorchOptimAdamW ours({w}, options);
  CHECK(torch::equal(Stepped(ours, w), expected));

  torch::Tensor w_libtorch = Start().requires_grad_();
  torch::optim::AdamW libtorch({w_libtorch}, options);
  CHECK_FALSE(torch::equal(Stepped(libtorch, w_libtorch), expected));
}

TEST_CASE("Adam takes torch.optim's steps bit for bit with L2 weight decay") {
  torch::Tensor expected = PythonSteps(Start(), /*decoupled=*/false);
  torch::Tensor w = Start().requires_grad_();
  TorchOptimAdam ours(
      {w},
      torch::optim::AdamOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWeightDecay));
  CHECK(torch::equal(Stepped(ours, w), expected));
}

TEST_CASE("The run spec's adam and adamw are built as torch.optim's") {
  OptimizerSpec spec;
  spec.lr = kLr;
  spec.weight_decay = kWeightDecay;
  spec.betas = {kBeta1, kBeta2};
  spec.eps = kEps;
  for (const char* name : {"adam", "adamw"}) {
    spec.name = name;
    torch::Tensor w = Start().requires_grad_();
    auto made = MakeOptimizer(spec, {w});
    REQUIRE(made.ok());
    torch::Tensor expected = PythonSteps(Start(), spec.name == "adamw");
    CHECK(torch::equal(Stepped(**made, w), expected));
  }
}

}  // namespace
}  // namespace deepool::worker
