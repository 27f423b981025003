// Optimizers from the run spec: SGD (momentum, weight decay) and Adam, via torch::optim.
// Threading: an optimizer belongs to its executor's thread.
#pragma once

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::worker {

struct OptimizerSpec {
  std::string name = "sgd";  // "sgd" or "adam"
  double lr = 0.01;
  double momentum = 0.0;  // sgd
  double weight_decay = 0.0;
  std::array<double, 2> betas{0.9, 0.999};  // adam
  double eps = 1e-8;                        // adam
  bool operator==(const OptimizerSpec& o) const;
};

// Names the offending field: "optimizer.lr must be > 0".
Status ValidateOptimizer(const OptimizerSpec& spec);

// An optimizer over `params`; nullptr when there are none (a rank that holds no parameters).
StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const OptimizerSpec& spec,
                                                                 std::vector<torch::Tensor> params);

}  // namespace deepool::worker
