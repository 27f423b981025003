// Mixed precision in the runtime (docs/runtime.md, "Precision"): the dtype a precision computes
// and moves activations in, the scope that runs a layer's forward under autocast, and the math
// mode a device is set to.
//
// bf16 and fp16 run under libtorch's autocast: parameters stay fp32 (the master weights the
// optimizer steps), autocast casts them, cached for the scope, to the compute dtype for the ops
// on its lower-precision list (convolutions, matrix multiplies) and keeps the ops on its fp32
// list in fp32; autograd's backward runs each op in its forward's dtype, so parameter gradients
// come back fp32. fp32 and tf32 compute in fp32 (tf32 only changes the CUDA math mode).
// Threading: autocast's state and cast cache are thread-local, so a scope covers the calling
// thread only; SetMathMode sets process-wide flags.
#pragma once

#include <torch/torch.h>

#include "planner/precision.h"

namespace deepool::worker {

// kBFloat16 for bf16, kHalf for fp16, kFloat for fp32 and tf32: the dtype of activations (and
// their gradients) that cross between device sets.
torch::ScalarType ComputeDtype(planner::Precision precision);

// Whether the precision runs under autocast (bf16, fp16).
bool UsesAutocast(planner::Precision precision);

// While alive, the calling thread's ops on `device` run under autocast at the precision's
// compute dtype (nothing for fp32 and tf32). On leaving the outermost scope, autocast's cache of
// cast weights is cleared: the optimizer changes the fp32 weights between iterations, so a
// cached copy must not outlive the forward that made it. Restores the previous state.
class AutocastScope {
 public:
  AutocastScope(planner::Precision precision, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat;
};

// On CUDA, lets cuBLAS and cuDNN use TF32 tensor cores for fp32 math under tf32, bf16 and fp16
// (fp32 work that autocast leaves in fp32), and forbids it under fp32. Process-wide; a no-op on
// CPU devices.
void SetMathMode(planner::Precision precision, const torch::Device& device);

// `tensor` in fp32 when it is a 16-bit float (bf16, fp16), else itself: for the statistics of
// batch norm and the loss, which stay fp32 whatever the precision.
torch::Tensor ToFloatIfHalf(const torch::Tensor& tensor);

}  // namespace deepool::worker
