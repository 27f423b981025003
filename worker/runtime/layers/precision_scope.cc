#include "worker/runtime/layers/precision_scope.h"

#include <ATen/autocast_mode.h>

namespace deepool::worker {

torch::ScalarType ComputeDtype(planner::Precision precision) {
  switch (precision) {
    case planner::Precision::kBf16:
      return torch::kBFloat16;
    case planner::Precision::kFp16:
      return torch::kHalf;
    case planner::Precision::kFp32:
    case planner::Precision::kTf32:
      break;
  }
  return torch::kFloat;
}

bool UsesAutocast(planner::Precision precision) {
  return precision == planner::Precision::kBf16 || precision == planner::Precision::kFp16;
}

AutocastScope::AutocastScope(planner::Precision precision, const torch::Device& device)
    : active_(UsesAutocast(precision)), device_type_(device.type()) {
  if (!active_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, ComputeDtype(precision));
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

void SetMathMode(planner::Precision precision, const torch::Device& device) {
  if (!device.is_cuda()) return;
  const bool tf32 = precision != planner::Precision::kFp32;
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
}

torch::Tensor ToFloatIfHalf(const torch::Tensor& tensor) {
  const auto dtype = tensor.scalar_type();
  return dtype == torch::kBFloat16 || dtype == torch::kHalf ? tensor.to(torch::kFloat) : tensor;
}

}  // namespace deepool::worker
