#include "worker/runtime/layers/loss.h"

namespace deepool::worker {

torch::Tensor LossPart(const torch::Tensor& logits, const torch::Tensor& labels, double weight,
                       int64_t global_batch) {
  namespace F = torch::nn::functional;
  auto sum = F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  return sum * (weight / static_cast<double>(global_batch));
}

}  // namespace deepool::worker
