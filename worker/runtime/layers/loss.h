// The training loss, split so that per-rank parts add up to single-device training's loss.
//
// Single-device training minimises sum_o w_o * mean(CE(out_o, label)), the mean over the batch's
// samples (classification: logits [n, C], labels [n]) or over all its tokens (next-token
// prediction: logits [n, T, C], labels [n, T], as F.cross_entropy over the flattened [n*T, C]
// logits takes it). A rank that holds samples [first, last) of output o contributes
// w_o * sum_{its samples (and their tokens)} CE / (global_batch * T), T = 1 for classification;
// summing the parts over ranks (and summing parameter gradients over each layer's device set)
// reproduces the single-device loss and gradients exactly, up to fp32 rounding.
#pragma once

#include <torch/torch.h>

namespace deepool::worker {

// weight * sum(cross_entropy(logits, labels)) / (global_batch * T), a scalar tensor in logits'
// graph: labels [n] with logits [n, C] (T = 1), or labels [n, T] with logits [n, T, C].
torch::Tensor LossPart(const torch::Tensor& logits, const torch::Tensor& labels, double weight,
                       int64_t global_batch);

}  // namespace deepool::worker
