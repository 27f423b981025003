// Adam and AdamW that round as torch.optim's do, so deepool trains a model as the user's own
// PyTorch loop does to the last bit on one device (tests/python/exact_training_test.py).
//
// libtorch's C++ Adam and AdamW update the first moment as m.mul_(beta1).add_(g, 1 - beta1);
// torch.optim (the Python loop users run, single-tensor on CPU, foreach on CUDA, both per element
// alike) writes m.lerp_(g, 1 - beta1), which rounds differently. One ulp a step is enough: AdamW
// divides a gradient by its own running size, so where a gradient is mostly cancellation (a
// batch norm's bias, a conv in front of batch norm) the ulp grows to 1e-3 of the weights in five
// steps. These classes are torch::optim::Adam and AdamW (same options, parameter states and
// checkpoints) with torch.optim's step: weight decay (decoupled for AdamW, added to the gradient
// for Adam), m.lerp_(g, 1 - beta1), v.mul_(beta2).addcmul_(g, g, 1 - beta2), the bias
// corrections 1 - beta^step in double, denom = sqrt(v) / (1 - beta2^step)^0.5 + eps and
// p.addcdiv_(m, denom, -lr / (1 - beta1^step)); amsgrad keeps the running maximum of v.
// Threading: as any torch::optim optimizer, one thread at a time.
#pragma once

#include <torch/torch.h>

namespace deepool::worker {

class TorchOptimAdam final : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class TorchOptimAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace deepool::worker
