// Executor: fp16's dynamic loss scaling at the end of an iteration (executor.h,
// ExecutorOptions::loss_scaling). In its own file: executor.cc was near 800 lines.
#include "worker/runtime/executor.h"

namespace deepool::worker {

StatusOr<bool> Executor::UnscaleGradients() {
  std::vector<torch::Tensor> grads;
  for (const LayerState& state : layers_) {
    if (!state.runs) continue;
    for (const auto& param : state.params) {
      if (param.grad().defined()) grads.push_back(param.grad());
    }
  }
  if (options_.before_unscale) options_.before_unscale(iteration_, grads);
  // 1 where this rank holds an inf or nan, summed over the world so every rank decides alike.
  torch::Tensor found =
      torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(options_.device));
  for (const auto& grad : grads) found.add_(grad.isfinite().logical_not().any());
  if (comm_->world_size() > 1) {
    RankGroup world(static_cast<size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
    ASSIGN_OR_RETURN(auto work, comm_->AllReduceSum(found, world));
    auto start = clock_->Now();
    Status summed = work->WaitHost(comm_->timeout());
    idle_ += clock_->Now() - start;
    RETURN_IF_ERROR(summed.WithContext("agreeing on inf or nan gradients"));
  }
  const double scale = loss_scaler_->scale();
  if (!loss_scaler_->Update(found.item<float>() > 0)) return false;
  for (auto& grad : grads) grad.mul_(1.0 / scale);
  return true;
}

}  // namespace deepool::worker
