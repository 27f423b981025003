// libtorch modules built from IR layers: one module per graph layer.
//
// Parameter and buffer names inside a module follow torch.nn ("weight", "bias",
// "running_mean", "running_var", "num_batches_tracked"; multihead_attention's "in_proj_weight",
// "in_proj_bias", "out_proj.weight", "out_proj.bias"), so "<layer name>.<param name>" is the
// torchvision state_dict key for zoo models; a layer that is a bare nn.Parameter in PyTorch
// (class_token; position_embedding with bare_parameter, torchvision's encoder.pos_embedding)
// registers its one parameter as kBareParameterName, whose key is the layer's name alone
// (StateKey). Weights are initialised deterministically from
// (seed, layer name) with torch.nn's default distributions (embeddings N(0, 1) as nn.Embedding;
// attention as nn.MultiheadAttention's _reset_parameters): every plan, on every rank, and in
// any build order, starts from the same weights. Modules are built on the CPU; move them with
// module->to(device). An embedding reads int64 token ids; every other module reads float.
//
// Dropout, and multihead attention's dropout on its attention weights, draw their masks from
// (seed, layer name, iteration, global sample index), so a sample gets the same mask whichever
// rank holds it: set the step with set_step() before Forward.
//
// Batch norm in training normalises with the statistics of every sample its device set holds
// when it is given a group sum (set_group_sum; the executor does so for layers on several ranks):
// synchronised batch norm, batch_norm.h. Without one (a single device, ForwardGraph) it is
// torch's batch_norm on the local batch. Other layers ignore the group sum.
//
// Threading: a module is used by one executor thread at a time.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::worker {

// Which training step a forward pass belongs to and which slice of the global batch it sees.
// Only layers with randomness (dropout, attention dropout) read it.
struct StepContext {
  int64_t iteration = 0;
  int64_t first_sample = 0;  // global index of the local batch's first sample
};

// Sums a tensor in place over the ranks that hold a layer (its device set), so that the result is
// the same on every member; blocks (or, on CUDA, orders the current stream) until the sum is
// usable. Every member calls it at the same point of its communication order. Errors come back
// as a Status that names the layer.
using GroupSum = std::function<Status(torch::Tensor& tensor)>;

class LayerModule : public torch::nn::Module {
 public:
  // inputs are the layer's inputs in IR order, each with a leading batch dimension.
  virtual torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) = 0;

  void set_step(const StepContext& step) { step_ = step; }
  const StepContext& step() const { return step_; }
  // The sum over the layer's device set, for layers whose training statistics span it (batch
  // norm); empty (the default) means the layer's ranks do not communicate.
  void set_group_sum(GroupSum sum) { group_sum_ = std::move(sum); }

 protected:
  StepContext step_;
  GroupSum group_sum_;
};

StatusOr<std::shared_ptr<LayerModule>> BuildLayerModule(const planner::Graph& graph, int layer_id,
                                                        uint64_t seed);

// Every layer of the graph, indexed by layer id.
StatusOr<std::vector<std::shared_ptr<LayerModule>>> BuildAllLayerModules(
    const planner::Graph& graph, uint64_t seed);

// The module parameter name of a layer that is one bare nn.Parameter in PyTorch.
inline constexpr char kBareParameterName[] = "bare_parameter";

// The state_dict key of a layer module's parameter or buffer `tensor_name`: "<layer>.<name>",
// or the layer's name for kBareParameterName. Checkpoints and optimizer state use it.
std::string StateKey(const std::string& layer_name, const std::string& tensor_name);

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
