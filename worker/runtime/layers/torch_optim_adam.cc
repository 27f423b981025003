#include "worker/runtime/layers/torch_optim_adam.h"

#include <cmath>
#include <memory>

namespace deepool::worker {
namespace {

// The moments of one parameter, created at its first step as libtorch creates them.
template <typename State>
State& StateOf(
    const torch::Tensor& param, bool amsgrad,
    ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>& states) {
  auto& slot = states[param.unsafeGetTensorImpl()];
  if (slot == nullptr) {
    auto state = std::make_unique<State>();
    state->step(0);
    state->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    if (amsgrad) state->max_exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    slot = std::move(state);
  }
  return static_cast<State&>(*slot);
}

// torch.optim's _single_tensor_adam after the weight decay (adam.py): the same operations in
// the same order, with the scalars computed in double as Python computes them.
template <typename State, typename Options>
void AdamUpdate(torch::Tensor& param, const torch::Tensor& grad, State& state,
                const Options& options) {
  state.step(state.step() + 1);
  const double beta1 = std::get<0>(options.betas());
  const double beta2 = std::get<1>(options.betas());
  const auto step = static_cast<double>(state.step());
  state.exp_avg().lerp_(grad, 1 - beta1);
  state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2_sqrt = std::pow(1 - std::pow(beta2, step), 0.5);
  torch::Tensor second = state.exp_avg_sq();
  if (options.amsgrad()) {
    torch::maximum_out(state.max_exp_avg_sq(), state.max_exp_avg_sq(), state.exp_avg_sq());
    second = state.max_exp_avg_sq();
  }
  torch::Tensor denom = (second.sqrt() / bias_correction2_sqrt).add_(options.eps());
  param.addcdiv_(state.exp_avg(), denom, -(options.lr() / bias_correction1));
}

// torch.optim's step around the update: the closure with gradients on, then every parameter
// that has a gradient, group by group, handed to `update` with its group's options.
template <typename Options, typename Update>
torch::Tensor StepEachParameter(std::vector<torch::optim::OptimizerParamGroup>& groups,
                                torch::optim::Optimizer::LossClosure closure, const char* name,
                                Update update) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      TORCH_CHECK(!param.grad().is_sparse(), name, " does not support sparse gradients");
      update(param, options);
    }
  }
  return loss;
}

}  // namespace

torch::Tensor TorchOptimAdam::step(LossClosure closure) {
  return StepEachParameter<torch::optim::AdamOptions>(
      param_groups_, std::move(closure), "Adam",
      [this](torch::Tensor& param, const torch::optim::AdamOptions& options) {
        torch::Tensor grad = param.grad();
        if (options.weight_decay() != 0) grad = grad.add(param, options.weight_decay());
        auto& state = StateOf<torch::optim::AdamParamState>(param, options.amsgrad(), state_);
        AdamUpdate(param, grad, state, options);
      });
}

torch::Tensor TorchOptimAdamW::step(LossClosure closure) {
  return StepEachParameter<torch::optim::AdamWOptions>(
      param_groups_, std::move(closure), "AdamW",
      [this](torch::Tensor& param, const torch::optim::AdamWOptions& options) {
        if (options.weight_decay() != 0) param.mul_(1 - options.lr() * options.weight_decay());
        auto& state = StateOf<torch::optim::AdamWParamState>(param, options.amsgrad(), state_);
        AdamUpdate(param, param.grad(), state, options);
      });
}

}  // namespace deepool::worker
