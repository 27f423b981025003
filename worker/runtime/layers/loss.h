// The training loss, split so that per-rank parts add up to single-device training's loss.
//
// Single-device training minimises sum_o w_o * mean_over_batch(CE(out_o, label)). A rank that
// holds samples [first, last) of output o contributes w_o * sum_{its samples} CE / global_batch;
// summing the parts over ranks (and summing parameter gradients over each layer's device set)
// reproduces the single-device loss and gradients exactly, up to fp32 rounding.
#pragma once

#include <torch/torch.h>

namespace deepool::worker {

// weight * sum(cross_entropy(logits, labels)) / global_batch, a scalar tensor in logits' graph.
torch::Tensor LossPart(const torch::Tensor& logits, const torch::Tensor& labels, double weight,
                       int64_t global_batch);

}  // namespace deepool::worker
