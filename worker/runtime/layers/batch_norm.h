// Synchronised batch norm: training-mode batch normalisation whose statistics are those of every
// sample the layer's device set holds, not only this rank's share.
//
// Each rank computes its per-channel mean and (biased) variance in the input's dtype, turns them
// into float64 sums (count * mean, count * (var + mean^2)) beside its count, and sums the packed
// vector [sum_0..C-1, sum_sq_0..C-1, count] over the group with `group_sum`. The global mean and
// biased variance follow in float64, exact for uneven shares since the counts are summed too.
// The output is (x - mean) * rsqrt(var + eps) * weight + bias, computed by torch's fused
// inference-mode batch norm with the group's statistics. The whole layer is one autograd node:
// its backward takes this rank's per-channel sums of dy and dy * x_hat from torch's fused
// inference-mode batch norm backward, sums those 2C float64 values over the group (what torch's
// SyncBatchNorm all-reduces) and applies the two terms that flow through the statistics. The
// weight and bias gradients stay this rank's own, as the executor sums parameter gradients.
// Running statistics move towards the global mean and the unbiased global variance
// (var * n / (n - 1), as torch does), identically on every rank.
// On CUDA the same sums feed torch's fused kernels of torch.nn.SyncBatchNorm instead (the running
// update, the elementwise forward, the backward reduction and the elementwise backward, whose
// group sum of dy and dy * (x - mean) is in float32 there, as torch's is): about twenty
// launches a layer where the generic path's per-channel float64 bookkeeping issues about fifty;
// on an H200 that took the layer from 2.8-3.7x torch's own batch norm to 1.5-2.2x
// (docs/results/gpu-node.md, fourth session).
//
// When the sums run: once inside this call (forward) and once inside the autograd backward call
// that reaches the layer. Every member of the group must make both calls at the same point of
// its sequence of collectives (the executor's walk points, executor.h).
//
// Threading: the caller's thread runs the forward sum; the backward sum runs on the thread that
// autograd runs the node on (the caller's on CPU, the device's autograd thread on CUDA, while
// the caller blocks in backward), so `group_sum` is never called concurrently with its owner.
#pragma once

#include <torch/torch.h>

#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {

struct BatchNormArgs {
  torch::Tensor weight, bias;               // undefined when not affine
  torch::Tensor running_mean, running_var;  // updated in place (no autograd)
  double momentum = 0.1;
  double eps = 1e-5;
};

// Training-mode batch norm of `input` ([N, C, ...]) over the group that `group_sum` sums over.
// A failed sum throws (std::runtime_error with the Status's text): it happens inside forward or
// inside autograd's backward, where only exceptions can leave; the caller's edge converts them.
torch::Tensor SyncBatchNormTrain(const torch::Tensor& input, const BatchNormArgs& args,
                                 const GroupSum& group_sum);

}  // namespace deepool::worker
