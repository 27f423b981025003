// Parameter shapes by torch.nn name, and tied parameters: one tensor used by two layers.
//
// A layer's Layer::tied entries name one of its own parameters and the state_dict key of another
// layer's parameter that it *is* (GPT-2's lm_head.weight is transformer.wte.weight). Graph::Create
// resolves and checks them with ResolveTiedParameters: the key must be a parameter of another
// layer, with the same shape; a parameter is tied at most once, and a source is not itself tied
// (no chains). Bare parameters (class_token, a bare position_embedding) cannot be tied.
// The runtime keeps one copy per layer and sums both uses' gradients after each step's
// per-layer sums (worker/runtime/executor_tied.cc); the cost model charges that sum
// (gradient_sync.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::planner {

struct ParameterShape {
  std::string name;  // as torch.nn names it inside the layer: "weight", "out_proj.bias"
  Shape shape;
};

// The trainable parameters of `layer` given its input shapes, in torch.nn's registration order;
// bare parameters are left out. Their elements add up to Layer::params for every op but
// class_token and a bare position_embedding.
std::vector<ParameterShape> LayerParameterShapes(const Layer& layer,
                                                 const std::vector<const Shape*>& inputs);

// The same for layer `id` of a built graph.
std::vector<ParameterShape> LayerParameterShapes(const Graph& graph, int id);

// Fills every tie's source_layer, source_parameter and elements, or says which layer's tie is
// wrong and why. `layers` are topologically ordered with input_ids and output shapes filled in.
Status ResolveTiedParameters(std::vector<Layer>& layers, const Shape& graph_input);

// Every tie of the graph as (layer id, index into Layer::tied), in layer order.
std::vector<std::pair<int, size_t>> AllTies(const Graph& graph);

}  // namespace deepool::planner
