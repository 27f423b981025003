// Gradient clipping by the global L2 norm, as torch.nn.utils.clip_grad_norm_(params, max_norm):
//   total = sqrt(sum over every parameter p of |grad p|^2)
//   every gradient *= min(1, max_norm / (total + 1e-6))
// split in two so that the executor can sum the squares over the ranks of a plan (each layer
// counted once; executor.h) between them. Everything stays on the gradients' device: no host
// wait. Threading: pure functions on tensors.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace deepool::worker {

// The sum of the squared L2 norms of `grads` (undefined ones skipped), as a float32 [1] tensor
// on `device`; zeros when there are none.
torch::Tensor SquaredGradientNorm(const std::vector<torch::Tensor>& grads,
                                  const torch::Device& device);

// Scales `grads` in place by min(1, max_norm / (sqrt(squared_norm) + 1e-6)), torch's
// clip_grad_norm_ coefficient. Returns the total norm, sqrt(squared_norm) (still on the device).
torch::Tensor ClipGradients(std::vector<torch::Tensor>& grads, const torch::Tensor& squared_norm,
                            double max_norm);

}  // namespace deepool::worker
