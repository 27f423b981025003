// Optimizers from the run spec: SGD (momentum, weight decay), Adam and AdamW, via torch::optim.
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

}  // namespace deepool::worker
