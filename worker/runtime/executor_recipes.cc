// Executor: the optimizer's training recipes before each step (executor.h, ApplyRecipes):
// the learning-rate schedule and clipping by the global gradient norm. In its own file:
// executor.cc was near 800 lines.
#include <set>

#include "planner/tied_parameters.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/gradient_clipping.h"
#include "worker/runtime/layers/lr_schedule.h"

namespace deepool::worker {

Status Executor::ApplyRecipes() {
  const OptimizerSpec& spec = options_.optimizer;
  if (optimizer_) {
    SetLearningRate(*optimizer_, ScheduledLr(spec, iteration_, options_.total_iterations));
  }
  if (spec.clip_grad_norm <= 0) return Status::Ok();
  // Every rank of a layer's device set holds the same summed gradients; only the lowest counts
  // them, so that each layer enters the global norm once whatever the plan. (Plan::Validate
  // gives every device of a layer samples, so the lowest one runs it.) A tied parameter's
  // copies all hold the sum of both uses' gradients (executor_tied.cc): only its source layer's
  // copy counts, as torch counts the one shared tensor once.
  std::set<const c10::TensorImpl*> tied_copies;
  for (const auto& [id, k] : planner::AllTies(graph_)) {
    const torch::Tensor copy = HeldParameter(id, graph_.layer(id).tied[k].parameter);
    if (copy.defined()) tied_copies.insert(copy.unsafeGetTensorImpl());
  }
  std::vector<torch::Tensor> counted, grads;
  for (const LayerState& state : layers_) {
    if (!state.runs) continue;
    for (const auto& param : state.params) {
      grads.push_back(param.grad());
      if (state.group.front() == rank_ && tied_copies.count(param.unsafeGetTensorImpl()) == 0) {
        counted.push_back(param.grad());
      }
    }
  }
  torch::Tensor squared_norm = SquaredGradientNorm(counted, options_.device);
  if (comm_->world_size() > 1) {
    RankGroup world(static_cast<size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
    SpanScope span(options_.spans, SpanKind::kWait, [] { return std::string("gradient norm"); });
    ASSIGN_OR_RETURN(auto work, comm_->AllReduceSum(squared_norm, world));
    auto start = clock_->Now();
    Status summed = work->Wait(comm_->timeout());
    idle_ += clock_->Now() - start;
    RETURN_IF_ERROR(summed.WithContext("summing the gradient norm"));
  }
  ClipGradients(grads, squared_norm, spec.clip_grad_norm);
  return Status::Ok();
}

}  // namespace deepool::worker
