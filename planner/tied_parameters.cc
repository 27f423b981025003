#include "planner/tied_parameters.h"

#include <map>
#include <set>
#include <utility>

namespace deepool::planner {
namespace {

Status TieError(const Layer& layer, const TiedParameter& tie, const std::string& what) {
  return InvalidArgumentError("layer \"" + layer.name + "\" (" + OpName(layer.op) +
                              "): field \"tied\": parameter \"" + tie.parameter + "\" tied to \"" +
                              tie.source + "\": " + what);
}

std::vector<const Shape*> InputShapes(const std::vector<Layer>& layers, const Layer& layer,
                                      const Shape& graph_input) {
  std::vector<const Shape*> shapes;
  for (int id : layer.input_ids) {
    shapes.push_back(id == kGraphInputId ? &graph_input
                                         : &layers[static_cast<size_t>(id)].output_shape);
  }
  return shapes;
}

}  // namespace

std::vector<ParameterShape> LayerParameterShapes(const Layer& layer,
                                                 const std::vector<const Shape*>& inputs) {
  const LayerAttrs& a = layer.attrs;
  const Shape& in = *inputs.front();
  std::vector<ParameterShape> shapes;
  auto with_bias = [&](Shape weight, int64_t out, bool bias) {
    shapes.push_back({"weight", std::move(weight)});
    if (bias) shapes.push_back({"bias", {out}});
  };
  switch (layer.op) {
    case Op::kConv2d:
      with_bias({a.out_channels, in[0] / a.groups, a.kernel_size[0], a.kernel_size[1]},
                a.out_channels, a.bias);
      break;
    case Op::kBatchNorm2d:
      if (a.affine) with_bias({in[0]}, in[0], true);
      break;
    case Op::kLayerNorm:
      if (a.affine) {
        shapes.push_back({"weight", a.normalized_shape});
        shapes.push_back({"bias", a.normalized_shape});
      }
      break;
    case Op::kLinear:
      with_bias({a.out_features, in.back()}, a.out_features, a.bias);
      break;
    case Op::kEmbedding:
      shapes.push_back({"weight", {a.num_embeddings, a.embedding_dim}});
      break;
    case Op::kPositionEmbedding:
      if (!a.bare_parameter) shapes.push_back({"weight", {a.max_positions, in[1]}});
      break;
    case Op::kMultiheadAttention: {
      const int64_t d = in[1];
      shapes.push_back({"in_proj_weight", {3 * d, d}});
      if (a.bias) shapes.push_back({"in_proj_bias", {3 * d}});
      shapes.push_back({"out_proj.weight", {d, d}});
      if (a.bias) shapes.push_back({"out_proj.bias", {d}});
      break;
    }
    default:
      break;
  }
  return shapes;
}

std::vector<ParameterShape> LayerParameterShapes(const Graph& graph, int id) {
  const Shape& graph_input = graph.input_shape();
  return LayerParameterShapes(graph.layer(id),
                              InputShapes(graph.layers(), graph.layer(id), graph_input));
}

Status ResolveTiedParameters(std::vector<Layer>& layers, const Shape& graph_input) {
  // Every parameter's state_dict key -> (layer, parameter name, shape).
  struct Source {
    int layer;
    std::string parameter;
    Shape shape;
  };
  std::map<std::string, Source> by_key;
  for (size_t id = 0; id < layers.size(); ++id) {
    for (auto& p : LayerParameterShapes(layers[id], InputShapes(layers, layers[id], graph_input))) {
      by_key[layers[id].name + "." + p.name] =
          Source{static_cast<int>(id), p.name, std::move(p.shape)};
    }
  }
  std::set<std::string> tied_keys;
  for (const Layer& layer : layers) {
    for (const TiedParameter& tie : layer.tied) tied_keys.insert(layer.name + "." + tie.parameter);
  }
  for (size_t id = 0; id < layers.size(); ++id) {
    Layer& layer = layers[id];
    const auto own = LayerParameterShapes(layer, InputShapes(layers, layer, graph_input));
    std::set<std::string> seen;
    for (TiedParameter& tie : layer.tied) {
      const ParameterShape* mine = nullptr;
      for (const auto& p : own) {
        if (p.name == tie.parameter) mine = &p;
      }
      if (mine == nullptr) return TieError(layer, tie, "the layer has no such parameter");
      if (!seen.insert(tie.parameter).second) return TieError(layer, tie, "tied twice");
      auto source = by_key.find(tie.source);
      if (source == by_key.end()) {
        return TieError(layer, tie, "no layer has a parameter with that state_dict key");
      }
      if (source->second.layer == static_cast<int>(id)) {
        return TieError(layer, tie, "a parameter of the same layer");
      }
      if (tied_keys.count(tie.source)) {
        return TieError(layer, tie, "which is itself tied (tie to its source instead)");
      }
      if (source->second.shape != mine->shape) {
        return TieError(layer, tie,
                        "shapes differ: " + ShapeToString(mine->shape) + " and " +
                            ShapeToString(source->second.shape));
      }
      tie.source_layer = source->second.layer;
      tie.source_parameter = source->second.parameter;
      tie.elements = NumElements(mine->shape);
    }
  }
  return Status::Ok();
}

std::vector<std::pair<int, size_t>> AllTies(const Graph& graph) {
  std::vector<std::pair<int, size_t>> ties;
  for (int id = 0; id < graph.num_layers(); ++id) {
    for (size_t k = 0; k < graph.layer(id).tied.size(); ++k) ties.emplace_back(id, k);
  }
  return ties;
}

}  // namespace deepool::planner
