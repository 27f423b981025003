#include "planner/state_dict_shapes.h"

#include "planner/tied_parameters.h"

namespace deepool::planner {

std::vector<StateTensorShape> LayerStateShapes(const Graph& graph, int id) {
  const Layer& layer = graph.layer(id);
  const int input = layer.input_ids.front();
  const Shape& in = input == kGraphInputId ? graph.input_shape() : graph.layer(input).output_shape;
  std::vector<StateTensorShape> state;
  for (ParameterShape& p : LayerParameterShapes(graph, id)) {
    state.push_back({layer.name + "." + p.name, std::move(p.shape), true});
  }
  // The bare parameters LayerParameterShapes leaves out: their key is the layer's name.
  if (layer.op == Op::kClassToken) state.push_back({layer.name, {1, 1, in.back()}, true});
  if (layer.op == Op::kPositionEmbedding && layer.attrs.bare_parameter) {
    state.push_back({layer.name, {1, layer.attrs.max_positions, in.back()}, true});
  }
  if (layer.op == Op::kBatchNorm2d) {
    state.push_back({layer.name + ".running_mean", {in.front()}, false});
    state.push_back({layer.name + ".running_var", {in.front()}, false});
    state.push_back({layer.name + ".num_batches_tracked", {}, false});
  }
  return state;
}

std::vector<StateTensorShape> GraphStateShapes(const Graph& graph) {
  std::vector<StateTensorShape> state;
  for (int id = 0; id < graph.num_layers(); ++id) {
    for (StateTensorShape& tensor : LayerStateShapes(graph, id)) state.push_back(std::move(tensor));
  }
  return state;
}

}  // namespace deepool::planner
