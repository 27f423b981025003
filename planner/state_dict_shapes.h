// The state_dict a graph's layers make: every tensor's key and shape, as torch.nn would list
// them for the module the graph describes. The one list that weights files are checked against
// (weights/state_dict_check.h), at submission and in the ranks, and that the runtime's modules
// register (tests/runtime/state_dict_shapes_test.cc holds them to it).
#pragma once

#include <string>
#include <vector>

#include "planner/graph.h"

namespace deepool::planner {

struct StateTensorShape {
  std::string key;        // "<layer>.<name>", or the layer's name for a bare nn.Parameter
  Shape shape;            // [] for a scalar (num_batches_tracked)
  bool trainable = true;  // false for buffers
};

// Layer `id`'s tensors: its parameters in torch.nn's registration order (LayerParameterShapes,
// a tied one included: torch.save stores it under both keys; class_token's and a bare
// position_embedding's one parameter under the layer's name), then its buffers (batchnorm2d's
// running_mean, running_var and num_batches_tracked).
std::vector<StateTensorShape> LayerStateShapes(const Graph& graph, int id);

// Every layer's, in layer order.
std::vector<StateTensorShape> GraphStateShapes(const Graph& graph);

}  // namespace deepool::planner
