#include "worker/runtime/layers/gradient_clipping.h"

namespace deepool::worker {

torch::Tensor SquaredGradientNorm(const std::vector<torch::Tensor>& grads,
                                  const torch::Device& device) {
  torch::Tensor sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  for (const auto& grad : grads) {
    if (!grad.defined()) continue;
    // As torch's: each tensor's norm in its own dtype, then the norm of the norms (here squared
    // and summed, so that partial sums from several ranks add up).
    sum.add_(grad.detach().norm(2).to(torch::kFloat).square());
  }
  return sum;
}

torch::Tensor ClipGradients(std::vector<torch::Tensor>& grads, const torch::Tensor& squared_norm,
                            double max_norm) {
  torch::Tensor total = squared_norm.sqrt();
  torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& grad : grads) {
    if (grad.defined()) grad.detach().mul_(coefficient.to(grad.dtype()));
  }
  return total;
}

}  // namespace deepool::worker
