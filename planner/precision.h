// The numeric precision a model trains at: the math its convolutions and matrix multiplies run
// in and the width of its activations (and their gradients). One type for the planner's device
// model, profiles, cost model and `deepool plan --precision` (docs/planner.md, "Precision").
//
//   fp32: fp32 activations, fp32 math (no tensor-core TF32)
//   tf32: fp32 activations, convolutions and GEMMs on TF32 tensor cores (PyTorch's default for
//         cuDNN convolutions on Ampere and later)
//   bf16, fp16: 16-bit activations and math (autocast mixed precision); weights, their
//         gradients and the optimizer keep an fp32 master copy
//
// Gradient all-reduces stay fp32 whatever the precision (the master copy's gradients), unless a
// compression hook sends them narrower (GradientSyncOptions::precision, gradient_sync.h).
// Threading: plain values and pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::planner {

enum class Precision { kFp32, kTf32, kBf16, kFp16 };

// "fp32", "tf32", "bf16", "fp16".
const char* PrecisionName(Precision precision);
// The names above (exactly, lower case); INVALID_ARGUMENT naming the value and the known names.
StatusOr<Precision> ParsePrecision(std::string_view name);
// Every precision, in the enum's order.
std::vector<Precision> AllPrecisions();

// Bytes of one element stored at the precision (an activation, its gradient, an all-reduced
// gradient): 4 for fp32 and tf32 (TF32 is a math mode on fp32 storage), 2 for bf16 and fp16.
int BytesPerElement(Precision precision);

}  // namespace deepool::planner
