// libtorch modules built from IR layers: one module per graph layer.
//
// Parameter and buffer names inside a module follow torch.nn ("weight", "bias",
// "running_mean", "running_var", "num_batches_tracked"), so "<layer name>.<param name>" is the
// torchvision state_dict key for zoo models. Weights are initialised deterministically from
// (seed, layer name) with torch.nn's default distributions: every plan, on every rank, and in
// any build order, starts from the same weights. Modules are built on the CPU; move them with
// module->to(device).
//
// Dropout draws its mask from (seed, layer name, iteration, global sample index), so a sample
// gets the same mask whichever rank holds it: set the step with set_step() before Forward.
//
// Threading: a module is used by one executor thread at a time.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::worker {

// Which training step a forward pass belongs to and which slice of the global batch it sees.
// Only layers with randomness (dropout) read it.
struct StepContext {
  int64_t iteration = 0;
  int64_t first_sample = 0;  // global index of the local batch's first sample
};

class LayerModule : public torch::nn::Module {
 public:
  // inputs are the layer's inputs in IR order, each with a leading batch dimension.
  virtual torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) = 0;

  void set_step(const StepContext& step) { step_ = step; }
  const StepContext& step() const { return step_; }

 protected:
  StepContext step_;
};

StatusOr<std::shared_ptr<LayerModule>> BuildLayerModule(const planner::Graph& graph, int layer_id,
                                                        uint64_t seed);

// Every layer of the graph, indexed by layer id.
StatusOr<std::vector<std::shared_ptr<LayerModule>>> BuildAllLayerModules(
    const planner::Graph& graph, uint64_t seed);

// The seed a layer's weights are drawn from: a stable 64-bit mix of `seed` and the layer name
// (the same on every platform and in every process).
uint64_t LayerSeed(uint64_t seed, std::string_view layer_name);

// Runs the whole graph on one device: input has a leading batch dimension; returns the graph
// outputs' tensors in Graph::outputs() order. modules[i] is layer i's module (as from
// BuildAllLayerModules). A single-device reference for tests and tools; libtorch errors come
// back as a Status.
StatusOr<std::vector<torch::Tensor>> ForwardGraph(
    const planner::Graph& graph, const std::vector<std::shared_ptr<LayerModule>>& modules,
    const torch::Tensor& input, const StepContext& step = {});

}  // namespace deepool::worker
