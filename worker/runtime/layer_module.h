// libtorch modules built from IR layers: one module per graph layer.
//
// Parameter and buffer names inside a module follow torch.nn ("weight", "bias",
// "running_mean", "running_var", "num_batches_tracked"), so "<layer name>.<param name>" is the
// torchvision state_dict key for zoo models. Weights are initialised deterministically from
// (seed, layer name): every plan, on every rank, starts from the same weights.
// Threading: a module is used by one executor thread at a time.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::worker {

class LayerModule : public torch::nn::Module {
 public:
  // inputs are the layer's inputs in IR order, each with a leading batch dimension.
  virtual torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) = 0;
};

StatusOr<std::shared_ptr<LayerModule>> BuildLayerModule(const planner::Graph& graph, int layer_id,
                                                        uint64_t seed);

}  // namespace deepool::worker
