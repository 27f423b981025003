#include "worker/runtime/checkpoints/initial_weights.h"

#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/safetensors.h"

namespace deepool::worker {

StatusOr<int> LoadInitialWeights(const std::string& path, const planner::Graph& graph,
                                 const Executor& executor) {
  ASSIGN_OR_RETURN(const StateDict state, LoadStateDictFile(path));
  std::vector<std::shared_ptr<LayerModule>> modules(static_cast<size_t>(graph.num_layers()));
  for (const auto& [id, module] : executor.modules()) modules[static_cast<size_t>(id)] = module;
  RETURN_IF_ERROR(LoadStateDictInto(state, graph, modules).WithContext("init " + path));
  return static_cast<int>(state.size());
}

}  // namespace deepool::worker
