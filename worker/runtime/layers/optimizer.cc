#include "worker/runtime/layers/optimizer.h"

namespace deepool::worker {

StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerSpec& spec, std::vector<torch::Tensor> params) {
  RETURN_IF_ERROR(ValidateOptimizer(spec));
  if (params.empty()) return std::unique_ptr<torch::optim::Optimizer>();
  if (spec.name == "sgd") {
    auto options =
        torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weight_decay);
    return std::unique_ptr<torch::optim::Optimizer>(
        new torch::optim::SGD(std::move(params), options));
  }
  if (spec.name == "adamw") {
    // Decoupled weight decay: AdamW shrinks the weights by lr * weight_decay apart from the
    // adaptive step, where Adam adds weight_decay * w to the gradient the moments see.
    auto options = torch::optim::AdamWOptions(spec.lr)
                       .betas({spec.betas[0], spec.betas[1]})
                       .eps(spec.eps)
                       .weight_decay(spec.weight_decay);
    return std::unique_ptr<torch::optim::Optimizer>(
        new torch::optim::AdamW(std::move(params), options));
  }
  auto options = torch::optim::AdamOptions(spec.lr)
                     .betas({spec.betas[0], spec.betas[1]})
                     .eps(spec.eps)
                     .weight_decay(spec.weight_decay);
  return std::unique_ptr<torch::optim::Optimizer>(
      new torch::optim::Adam(std::move(params), options));
}

}  // namespace deepool::worker
