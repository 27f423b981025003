#include "worker/runtime/checkpoints/training_state.h"

#include <functional>
#include <unordered_map>

namespace deepool::worker {
namespace {

std::vector<std::shared_ptr<LayerModule>> ByLayerId(
    const planner::Graph& graph, const std::map<int, std::shared_ptr<LayerModule>>& modules,
    const std::vector<int>& layers) {
  std::vector<std::shared_ptr<LayerModule>> by_id(static_cast<size_t>(graph.num_layers()));
  for (int id : layers) {
    auto found = modules.find(id);
    if (found != modules.end()) by_id[static_cast<size_t>(id)] = found->second;
  }
  return by_id;
}

// Adam and AdamW keep the same per-parameter state in types of their own.
template <typename AdamState>
void AddAdamFields(const AdamState& adam, std::vector<std::pair<std::string, torch::Tensor>>* out) {
  out->emplace_back("step", torch::tensor(adam.step(), torch::kInt64));
  if (adam.exp_avg().defined()) out->emplace_back("exp_avg", adam.exp_avg());
  if (adam.exp_avg_sq().defined()) out->emplace_back("exp_avg_sq", adam.exp_avg_sq());
  if (adam.max_exp_avg_sq().defined()) out->emplace_back("max_exp_avg_sq", adam.max_exp_avg_sq());
}

// The optimizer's state fields of one parameter, by field name; empty before its first step.
std::vector<std::pair<std::string, torch::Tensor>> StateFields(
    const torch::optim::OptimizerParamState& state) {
  std::vector<std::pair<std::string, torch::Tensor>> fields;
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    if (sgd->momentum_buffer().defined()) {
      fields.emplace_back("momentum_buffer", sgd->momentum_buffer());
    }
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    AddAdamFields(*adam, &fields);
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    AddAdamFields(*adamw, &fields);
  }
  return fields;
}

using Field = std::function<torch::Tensor(const char* name)>;

// Adam's or AdamW's state of the parameter `key` from its fields; nullptr when it has none.
template <typename AdamState>
StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MakeAdamState(const Field& field,
                                                                           const std::string& key,
                                                                           const char* optimizer) {
  torch::Tensor step = field("step");
  if (!step.defined()) return std::unique_ptr<torch::optim::OptimizerParamState>();
  auto state = std::make_unique<AdamState>();
  state->step(step.item<int64_t>());
  state->exp_avg(field("exp_avg"));
  state->exp_avg_sq(field("exp_avg_sq"));
  if (torch::Tensor m = field("max_exp_avg_sq"); m.defined()) state->max_exp_avg_sq(m);
  if (!state->exp_avg().defined() || !state->exp_avg_sq().defined()) {
    return InvalidArgumentError("checkpoint has " + std::string(optimizer) + "'s step for '" + key +
                                "' but not its moments");
  }
  return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
}

// A parameter's optimizer state from its fields in the checkpoint (tensors on the CPU), moved
// to the parameter's device; nullptr when the optimizer has no state of this kind.
StatusOr<std::unique_ptr<torch::optim::OptimizerParamState>> MakeParamState(
    const torch::optim::Optimizer& optimizer, const std::string& key,
    const std::unordered_map<std::string, const torch::Tensor*>& by_key,
    const torch::Tensor& param) {
  const Field field = [&](const char* name) -> torch::Tensor {
    auto found = by_key.find(kOptimizerKeyPrefix + key + "." + name);
    if (found == by_key.end()) return {};
    return found->second->to(param.device()).clone();
  };
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) {
    torch::Tensor buffer = field("momentum_buffer");
    if (!buffer.defined()) return std::unique_ptr<torch::optim::OptimizerParamState>();
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(buffer);
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(state));
  }
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) {
    return MakeAdamState<torch::optim::AdamParamState>(field, key, "Adam");
  }
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) {
    return MakeAdamState<torch::optim::AdamWParamState>(field, key, "AdamW");
  }
  return UnimplementedError("checkpoints of this optimizer's state");
}

}  // namespace

std::vector<int> LayersWrittenBy(const planner::Graph& graph, const planner::Plan& plan, int rank) {
  std::vector<int> layers;
  for (const planner::LayerPlacement& placement : plan.layers) {
    std::optional<int> id = graph.FindLayer(placement.layer);
    if (!id || placement.devices.empty()) continue;
    const size_t writer = static_cast<size_t>(*id) % placement.devices.size();
    if (placement.devices[writer] == rank) layers.push_back(*id);
  }
  return layers;
}

StatusOr<StateDict> CollectTrainingState(const planner::Graph& graph,
                                         const std::map<int, std::shared_ptr<LayerModule>>& modules,
                                         const std::vector<int>& layers,
                                         const torch::optim::Optimizer* optimizer) {
  ASSIGN_OR_RETURN(StateDict state, CollectStateDict(graph, ByLayerId(graph, modules, layers)));
  if (optimizer == nullptr) return state;
  for (int id : layers) {
    auto module = modules.find(id);
    if (module == modules.end()) continue;
    for (const auto& p : module->second->named_parameters(/*recurse=*/true)) {
      auto found = optimizer->state().find(p.value().unsafeGetTensorImpl());
      if (found == optimizer->state().end()) continue;
      const std::string key = StateKey(graph.layer(id).name, p.key());
      for (auto& [field, tensor] : StateFields(*found->second)) {
        state.emplace_back(kOptimizerKeyPrefix + key + "." + field, tensor);
      }
    }
  }
  return state;
}

Status LoadTrainingState(const StateDict& state, const planner::Graph& graph,
                         const std::map<int, std::shared_ptr<LayerModule>>& modules,
                         torch::optim::Optimizer* optimizer) {
  StateDict model;
  std::unordered_map<std::string, const torch::Tensor*> optimizer_state;
  for (const auto& [key, tensor] : state) {
    if (key.rfind(kOptimizerKeyPrefix, 0) == 0) {
      optimizer_state[key] = &tensor;
    } else {
      model.emplace_back(key, tensor);
    }
  }
  std::vector<int> held;
  for (const auto& [id, module] : modules) held.push_back(id);
  RETURN_IF_ERROR(LoadStateDictInto(model, graph, ByLayerId(graph, modules, held)));
  if (optimizer == nullptr || optimizer_state.empty()) return Status::Ok();
  for (const auto& [id, module] : modules) {
    for (const auto& p : module->named_parameters(/*recurse=*/true)) {
      const std::string key = StateKey(graph.layer(id).name, p.key());
      ASSIGN_OR_RETURN(auto param_state,
                       MakeParamState(*optimizer, key, optimizer_state, p.value()));
      if (param_state == nullptr) {
        return InvalidArgumentError("checkpoint has no optimizer state for '" + key + "'");
      }
      optimizer->state()[p.value().unsafeGetTensorImpl()] = std::move(param_state);
    }
  }
  return Status::Ok();
}

}  // namespace deepool::worker
