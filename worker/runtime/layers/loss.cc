#include "worker/runtime/layers/loss.h"

namespace deepool::worker {

torch::Tensor LossPart(const torch::Tensor& logits, const torch::Tensor& labels, double weight,
                       int64_t global_batch) {
  namespace F = torch::nn::functional;
  const auto sum_options = F::CrossEntropyFuncOptions().reduction(torch::kSum);
  if (labels.dim() == 1) {
    return F::cross_entropy(logits, labels, sum_options) *
           (weight / static_cast<double>(global_batch));
  }
  TORCH_CHECK(labels.dim() == 2 && logits.dim() == 3 && logits.size(0) == labels.size(0) &&
                  logits.size(1) == labels.size(1),
              "sequence loss expects logits [n, T, C] and labels [n, T], got ", logits.sizes(),
              " and ", labels.sizes());
  const int64_t tokens = labels.size(1);
  auto sum = F::cross_entropy(logits.reshape({-1, logits.size(2)}), labels.reshape({-1}),
                              sum_options);
  return sum * (weight / (static_cast<double>(global_batch) * static_cast<double>(tokens)));
}

}  // namespace deepool::worker
