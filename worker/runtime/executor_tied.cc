// Executor: tied parameters (planner/tied_parameters.h), one tensor used by two layers that a
// plan may place on different device sets. Each layer that uses it holds its own copy (the
// copies start equal: BuildLayerModule draws a tied parameter as its source layer draws it).
// After the per-layer gradient sums, a copy's gradient is its own use's gradient over the whole
// batch; the parameter's gradient is the sum of both uses'. One all-reduce over the world carries
// every tie of the graph: the first rank of each use's device set adds that use's gradient, every
// other rank zeros, and every rank that holds a copy takes the sum as the copy's gradient. So
// all copies take the same optimizer step and stay equal, and training is the single-tensor
// training PyTorch does. The world rather than the union of the two device sets: it needs no
// communication group of its own, and it is one more walk point every rank reaches in the same
// place (executor.h: after the gradient sums, before the recipes and the step); ranks that hold
// neither use add zeros. The cost model charges it the same way (planner/gradient_sync.h).
// In its own file: executor.cc was near 800 lines.
#include <utility>

#include "planner/tied_parameters.h"
#include "worker/runtime/executor.h"

namespace deepool::worker {

torch::Tensor Executor::HeldParameter(int id, const std::string& name) const {
  auto module = modules_.find(id);
  if (module == modules_.end() || !layers_[static_cast<size_t>(id)].runs) return {};
  const auto params = module->second->named_parameters(/*recurse=*/true);
  const torch::Tensor* param = params.find(name);
  return param != nullptr ? *param : torch::Tensor();  // the same tensor, not a copy
}

Status Executor::SumTiedGradients() {
  const auto ties = planner::AllTies(graph_);
  if (ties.empty()) return Status::Ok();
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(options_.device);
  // Both uses of each tie: (layer id, parameter name).
  std::vector<std::pair<int, std::string>> uses;
  std::vector<torch::Tensor> parts;
  for (const auto& [id, k] : ties) {
    const planner::TiedParameter& tie = graph_.layer(id).tied[k];
    torch::Tensor part = torch::zeros({tie.elements}, options);
    for (auto use : {std::pair<int, std::string>{id, tie.parameter},
                     std::pair<int, std::string>{tie.source_layer, tie.source_parameter}}) {
      const torch::Tensor param = HeldParameter(use.first, use.second);
      // Plan::Validate gives every device of a set samples, so the first one computes the use.
      const bool first = layers_[static_cast<size_t>(use.first)].group.front() == rank_;
      if (param.defined() && first && param.grad().defined()) {
        part.add_(param.grad().reshape({-1}).to(torch::kFloat32));
      }
      uses.push_back(std::move(use));
    }
    parts.push_back(std::move(part));
  }
  torch::Tensor sum = parts.size() == 1 ? parts[0] : torch::cat(parts);
  if (comm_->world_size() > 1) {
    RankGroup world(static_cast<size_t>(comm_->world_size()));
    for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
    SpanScope span(options_.spans, SpanKind::kAllReduce,
                   [] { return std::string("tied parameter gradients"); });
    ASSIGN_OR_RETURN(auto work, comm_->AllReduceSum(sum, world));
    const auto start = clock_->Now();
    Status summed = work->Wait(comm_->timeout());
    idle_ += clock_->Now() - start;
    RETURN_IF_ERROR(summed.WithContext("summing tied parameters' gradients"));
  }
  int64_t offset = 0;
  for (size_t t = 0; t < ties.size(); ++t) {
    const int64_t elements = graph_.layer(ties[t].first).tied[ties[t].second].elements;
    for (size_t u = 2 * t; u < 2 * t + 2; ++u) {
      torch::Tensor param = HeldParameter(uses[u].first, uses[u].second);
      if (!param.defined()) continue;
      // A copy each: a recipe that scales gradients in place must scale each copy once.
      param.mutable_grad() =
          sum.narrow(0, offset, elements).view_as(param).to(param.scalar_type(), false, true);
    }
    offset += elements;
  }
  return Status::Ok();
}

}  // namespace deepool::worker
