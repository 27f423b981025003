#include "weights/state_dict_check.h"

#include <unordered_map>

#include "planner/state_dict_shapes.h"

namespace deepool::weights {
namespace {

// "N key(s)...: a, b, c, d, e, ..." lists the first five.
std::string FirstKeys(const std::vector<std::string>& keys) {
  std::string list;
  for (size_t i = 0; i < keys.size() && i < 5; ++i) list += (i ? ", " : "") + keys[i];
  return list + (keys.size() > 5 ? ", ..." : "");
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

Status CheckStateDict(const WeightsIndex& file, const planner::Graph& graph,
                      const std::vector<bool>* held) {
  if (held != nullptr && held->size() != static_cast<size_t>(graph.num_layers())) {
    return InvalidArgumentError("CheckStateDict: " + std::to_string(held->size()) + " flags for " +
                                std::to_string(graph.num_layers()) + " layers");
  }
  std::unordered_map<std::string, const TensorIndexEntry*> by_key;
  for (const TensorIndexEntry& tensor : file) by_key[tensor.key] = &tensor;

  std::vector<std::vector<planner::StateTensorShape>> expected;
  std::unordered_map<std::string, int> graph_keys;
  for (int id = 0; id < graph.num_layers(); ++id) {
    expected.push_back(planner::LayerStateShapes(graph, id));
    for (const auto& tensor : expected.back()) graph_keys[tensor.key] = id;
  }
  std::vector<std::string> unexpected;
  for (const TensorIndexEntry& tensor : file) {
    if (graph_keys.count(tensor.key) == 0) unexpected.push_back(tensor.key);
  }
  if (!unexpected.empty()) {
    return InvalidArgumentError("checkpoint has " + std::to_string(unexpected.size()) +
                                " key(s) that graph '" + graph.name() +
                                "' does not have: " + FirstKeys(unexpected));
  }
  std::vector<std::string> missing;
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (held != nullptr && !(*held)[static_cast<size_t>(id)]) continue;
    for (const planner::StateTensorShape& tensor : expected[static_cast<size_t>(id)]) {
      auto it = by_key.find(tensor.key);
      if (it == by_key.end()) {
        missing.push_back(tensor.key);
      } else if (it->second->shape != tensor.shape) {
        return InvalidArgumentError("checkpoint tensor '" + tensor.key + "' has shape " +
                                    ShapeText(it->second->shape) + ", the model expects " +
                                    ShapeText(tensor.shape));
      }
    }
  }
  if (!missing.empty()) {
    return InvalidArgumentError("checkpoint lacks " + std::to_string(missing.size()) +
                                " tensor(s) of graph '" + graph.name() +
                                "': " + FirstKeys(missing));
  }
  return Status::Ok();
}

StatusOr<WeightsFileCheck> CheckWeightsFile(const std::string& path, const planner::Graph& graph) {
  StatusOr<WeightsIndex> index = ReadWeightsIndex(path);
  if (!index.ok()) {
    const StatusCode code = index.status().code();
    if (code == StatusCode::kNotFound || code == StatusCode::kPermissionDenied ||
        code == StatusCode::kUnimplemented) {
      return WeightsFileCheck{false, index.status().message()};
    }
    return index.status();
  }
  RETURN_IF_ERROR(CheckStateDict(*index, graph));
  return WeightsFileCheck{true, ""};
}

}  // namespace deepool::weights
