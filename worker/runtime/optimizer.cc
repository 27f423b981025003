#include "worker/runtime/optimizer.h"

namespace deepool::worker {

bool OptimizerSpec::operator==(const OptimizerSpec& o) const {
  return name == o.name && lr == o.lr && momentum == o.momentum && weight_decay == o.weight_decay &&
         betas == o.betas && eps == o.eps;
}

Status ValidateOptimizer(const OptimizerSpec& spec) {
  if (spec.name != "sgd" && spec.name != "adam") {
    return InvalidArgumentError("optimizer.name \"" + spec.name + "\" is not sgd or adam");
  }
  if (!(spec.lr > 0)) return InvalidArgumentError("optimizer.lr must be > 0");
  if (spec.momentum < 0) return InvalidArgumentError("optimizer.momentum must be >= 0");
  if (spec.weight_decay < 0) return InvalidArgumentError("optimizer.weight_decay must be >= 0");
  for (double beta : spec.betas) {
    if (beta < 0 || beta >= 1) return InvalidArgumentError("optimizer.betas must be in [0, 1)");
  }
  if (!(spec.eps > 0)) return InvalidArgumentError("optimizer.eps must be > 0");
  return Status::Ok();
}

StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerSpec& spec, std::vector<torch::Tensor> params) {
  RETURN_IF_ERROR(ValidateOptimizer(spec));
  if (params.empty()) return std::unique_ptr<torch::optim::Optimizer>();
  if (spec.name == "sgd") {
    auto options =
        torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weight_decay);
    return std::unique_ptr<torch::optim::Optimizer>(
        new torch::optim::SGD(std::move(params), options));
  }
  auto options = torch::optim::AdamOptions(spec.lr)
                     .betas({spec.betas[0], spec.betas[1]})
                     .eps(spec.eps)
                     .weight_decay(spec.weight_decay);
  return std::unique_ptr<torch::optim::Optimizer>(
      new torch::optim::Adam(std::move(params), options));
}

}  // namespace deepool::worker
