#include "worker/runtime/background/background_trainer.h"

#include "planner/plan.h"
#include "worker/runtime/background/background_checkpoints.h"
#include "worker/runtime/layers/loss.h"
#include "worker/runtime/layers/optimizer.h"
#include "worker/runtime/layers/precision_scope.h"

namespace deepool::worker {

StatusOr<std::unique_ptr<BackgroundTrainer>> BackgroundTrainer::Create(const BackgroundSpec& spec,
                                                                       torch::Device device) {
  RETURN_IF_ERROR(ValidateBackgroundSpec(spec));
  std::unique_ptr<BackgroundTrainer> trainer(new BackgroundTrainer());
  trainer->spec_ = spec;
  trainer->graph_ = spec.graph;
  trainer->batch_size_ = spec.batch_size;
  trainer->device_ = device;
  const planner::Graph& graph = *spec.graph;
  try {
    ASSIGN_OR_RETURN(trainer->modules_, BuildAllLayerModules(graph, spec.seed));
    for (auto& module : trainer->modules_) {
      module->to(device);
      module->train();
      for (auto& param : module->parameters()) {
        if (param.requires_grad()) trainer->params_.push_back(param);
      }
    }
  } catch (const std::exception& e) {
    return InternalError(std::string("building the background model: ") + e.what());
  }
  ASSIGN_OR_RETURN(trainer->optimizer_, MakeOptimizer(spec.optimizer, trainer->params_));
  ASSIGN_OR_RETURN(trainer->data_, MakeDataSource(spec.data, graph, spec.batch_size));
  trainer->layers_.resize(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto& inputs = graph.layer(id).input_ids;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k] == planner::kGraphInputId) continue;
      trainer->layers_[static_cast<size_t>(inputs[k])].consumers.push_back(
          Consumer{id, static_cast<int>(k)});
    }
  }
  for (const auto& output : graph.outputs()) {
    auto id = graph.FindLayer(output.layer);
    if (!id)
      return InvalidArgumentError("background graph output " + output.layer + " is not a layer");
    trainer->layers_[static_cast<size_t>(*id)].loss_weight += output.loss_weight;
  }
  if (spec.checkpoints) {
    ASSIGN_OR_RETURN(trainer->first_iteration_, ResumeBackgroundTrainer(*trainer));
    trainer->iteration_ = trainer->first_iteration_;
  }
  return trainer;
}

std::map<std::string, torch::Tensor> BackgroundTrainer::NamedParameters() const {
  std::map<std::string, torch::Tensor> named;
  for (size_t id = 0; id < modules_.size(); ++id) {
    for (const auto& item : modules_[id]->named_parameters()) {
      named[StateKey(graph_->layer(static_cast<int>(id)).name, item.key())] = item.value();
    }
  }
  return named;
}

std::map<int, std::shared_ptr<LayerModule>> BackgroundTrainer::ModulesById() const {
  std::map<int, std::shared_ptr<LayerModule>> by_id;
  for (size_t id = 0; id < modules_.size(); ++id) by_id[static_cast<int>(id)] = modules_[id];
  return by_id;
}

void BackgroundTrainer::BeginIteration(const Batch& batch) {
  ZeroGradients();
  UseBatch(batch, 0);
}

void BackgroundTrainer::ZeroGradients() {
  for (auto& param : params_) {
    if (param.grad().defined()) {
      param.mutable_grad().detach_();
      param.mutable_grad().zero_();
    }
  }
  loss_sum_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
}

void BackgroundTrainer::UseBatch(const Batch& batch, int64_t offset) {
  batch_ = batch;
  batch_.inputs = ModelInputs(batch.inputs);  // on the device already
  micro_batch_offset_ = offset;
  for (auto& layer : layers_) {
    layer.inputs.clear();
    layer.output = torch::Tensor();
    layer.loss = torch::Tensor();
  }
}

void BackgroundTrainer::ForwardLayer(int id) {
  const planner::Layer& layer = graph_->layer(id);
  LayerState& state = layers_[static_cast<size_t>(id)];
  state.inputs.clear();
  for (int producer : layer.input_ids) {
    if (producer == planner::kGraphInputId) {
      state.inputs.push_back(batch_.inputs);
    } else {
      // A leaf per consumer: backward runs through one layer at a time.
      torch::Tensor input = layers_[static_cast<size_t>(producer)].output.detach();
      input.requires_grad_(true);
      state.inputs.push_back(input);
    }
  }
  LayerModule& module = *modules_[static_cast<size_t>(id)];
  // A micro-batch's rows keep their place in the batch (e.g. for dropout's per-sample masks).
  module.set_step(StepContext{iteration_, micro_batch_offset_});
  {
    // The BG job's own precision (docs/runtime.md, "Precision"), whatever its host's.
    AutocastScope autocast(spec_.precision, device_);
    state.output = module.Forward(state.inputs);
  }
  if (state.loss_weight > 0) {  // in fp32 whatever the precision
    state.loss =
        LossPart(ToFloatIfHalf(state.output), batch_.labels, state.loss_weight, batch_size_);
  }
}

void BackgroundTrainer::BackwardLayer(int id) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  torch::Tensor grad;
  for (const Consumer& consumer : state.consumers) {
    const torch::Tensor& input = layers_[static_cast<size_t>(consumer.layer)]
                                     .inputs[static_cast<size_t>(consumer.input_index)];
    if (!input.grad().defined()) continue;
    grad = grad.defined() ? grad + input.grad() : input.grad();
  }
  std::vector<torch::Tensor> roots, root_grads;
  if (grad.defined()) {
    roots.push_back(state.output);
    root_grads.push_back(grad);
  }
  if (state.loss.defined()) {
    roots.push_back(state.loss);
    root_grads.push_back(torch::ones_like(state.loss));
    loss_sum_.add_(state.loss.detach().reshape({}));
  }
  if (!roots.empty() && state.output.requires_grad()) torch::autograd::backward(roots, root_grads);
  // The output and loss are done with (the consumers' backward already ran); the layer's input
  // leaves stay until its producers have read their gradients.
  state.output = torch::Tensor();
  state.loss = torch::Tensor();
}

void BackgroundTrainer::StepOptimizer() {
  if (optimizer_) optimizer_->step();
}

Status BackgroundTrainer::SetMicroBatches(int64_t count) {
  if (count < 1 || count > batch_size_) {
    return InvalidArgumentError("micro-batches must be in [1, " + std::to_string(batch_size_) +
                                "], not " + std::to_string(count));
  }
  if (count > 1) {
    for (const planner::Layer& layer : graph_->layers()) {
      if (layer.op == planner::Op::kBatchNorm2d) {
        return FailedPreconditionError("layer '" + layer.name +
                                       "' is batch norm: its statistics would be a "
                                       "micro-batch's, so the BG batch is not split");
      }
    }
  }
  next_micro_batches_ = count;
  return Status::Ok();
}

Status BackgroundTrainer::FetchMicroBatch() {
  if (micro_batch_ == 0) {
    micro_batches_ = next_micro_batches_;
    ZeroGradients();
  }
  int64_t offset = 0;
  const std::vector<int64_t> shares =
      planner::NearEqualShares(batch_size_, static_cast<int>(micro_batches_));
  for (int64_t i = 0; i < micro_batch_; ++i) offset += shares[static_cast<size_t>(i)];
  // The data source gives any range of the iteration's batch the rows the whole batch has.
  ASSIGN_OR_RETURN(Batch batch, data_->Samples(iteration_, offset,
                                               offset + shares[static_cast<size_t>(micro_batch_)]));
  batch.inputs = batch.inputs.to(device_);
  batch.labels = batch.labels.to(device_);
  UseBatch(batch, offset);
  return Status::Ok();
}

Status BackgroundTrainer::RunUnitUnguarded(BgUnitResult& result) {
  const int n = graph_->num_layers();
  result.iteration = iteration_;
  switch (phase_) {
    case Phase::kForward:
      result.splittable = true;
      if (cursor_ == 0) RETURN_IF_ERROR(FetchMicroBatch());
      ForwardLayer(cursor_);
      if (++cursor_ == n) {
        phase_ = Phase::kBackward;
        cursor_ = n - 1;
      }
      break;
    case Phase::kBackward:
      result.splittable = true;
      BackwardLayer(cursor_);
      if (--cursor_ >= 0) break;
      if (++micro_batch_ < micro_batches_) {
        phase_ = Phase::kForward;
        cursor_ = 0;
      } else {
        micro_batch_ = 0;
        phase_ = Phase::kStep;
      }
      break;
    case Phase::kStep:
      StepOptimizer();
      result.iteration_done = true;
      result.loss = loss_sum_.item<double>();
      for (auto& layer : layers_) layer.inputs.clear();
      ++iteration_;
      phase_ = Phase::kForward;
      cursor_ = 0;
      break;
  }
  return Status::Ok();
}

StatusOr<BgUnitResult> BackgroundTrainer::RunUnit() {
  BgUnitResult result;
  try {
    RETURN_IF_ERROR(RunUnitUnguarded(result));
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
    return InternalError("background iteration " + std::to_string(iteration_) + ": " + message);
  }
  return result;
}

}  // namespace deepool::worker
