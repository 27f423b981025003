// Optimizers from the run spec: SGD (momentum, weight decay), Adam and AdamW, via torch::optim,
// with torch.optim's param groups when spec.decay_1d is false (optimizer.cc).
// Threading: an optimizer belongs to its executor's thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/training_spec.h"

namespace deepool::worker {

// The run spec's optimizer object, from the executor protocol (protocol/training_spec.h).
using protocol::OptimizerSpec;
using protocol::ValidateOptimizer;

// An optimizer over `params`; nullptr when there are none (a rank that holds no parameters).
StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const OptimizerSpec& spec,
                                                                 std::vector<torch::Tensor> params);

// Sets every param group's learning rate (the schedule's lr of an iteration, lr_schedule.h).
void SetLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace deepool::worker
