#include "worker/runtime/layers/optimizer.h"

#include <utility>

#include "worker/runtime/layers/torch_optim_adam.h"

namespace deepool::worker {
namespace {

// torch.optim's param groups: one group of all the parameters, or, without decay_1d, the
// parameters of two or more dimensions first and those of at most one (biases, norm weights)
// second with weight_decay 0. Empty groups are left out.
template <typename Optimizer, typename Options>
std::unique_ptr<torch::optim::Optimizer> Grouped(const OptimizerSpec& spec,
                                                 std::vector<torch::Tensor> params,
                                                 const Options& options) {
  if (spec.decay_1d) return std::make_unique<Optimizer>(std::move(params), options);
  std::vector<torch::Tensor> decayed, not_decayed;
  for (auto& param : params) (param.dim() <= 1 ? not_decayed : decayed).push_back(param);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decayed.empty()) {
    groups.emplace_back(std::move(decayed), std::make_unique<Options>(options));
  }
  if (!not_decayed.empty()) {
    Options without_decay = options;
    without_decay.weight_decay(0);
    groups.emplace_back(std::move(not_decayed), std::make_unique<Options>(without_decay));
  }
  return std::make_unique<Optimizer>(std::move(groups), options);
}

}  // namespace

StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerSpec& spec, std::vector<torch::Tensor> params) {
  RETURN_IF_ERROR(ValidateOptimizer(spec));
  if (params.empty()) return std::unique_ptr<torch::optim::Optimizer>();
  if (spec.name == "sgd") {
    auto options =
        torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weight_decay);
    return Grouped<torch::optim::SGD>(spec, std::move(params), options);
  }
  if (spec.name == "adamw") {
    // Decoupled weight decay: AdamW shrinks the weights by lr * weight_decay apart from the
    // adaptive step, where Adam adds weight_decay * w to the gradient the moments see.
    auto options = torch::optim::AdamWOptions(spec.lr)
                       .betas({spec.betas[0], spec.betas[1]})
                       .eps(spec.eps)
                       .weight_decay(spec.weight_decay);
    return Grouped<TorchOptimAdamW>(spec, std::move(params), options);
  }
  auto options = torch::optim::AdamOptions(spec.lr)
                     .betas({spec.betas[0], spec.betas[1]})
                     .eps(spec.eps)
                     .weight_decay(spec.weight_decay);
  return Grouped<TorchOptimAdam>(spec, std::move(params), options);
}

void SetLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace deepool::worker
