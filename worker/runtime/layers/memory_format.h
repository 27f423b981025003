// A run's memory format on tensors (planner/memory_format.h; docs/runtime.md, "Memory
// format"): which tensors go channels_last, and how a channels_last tensor crosses the
// communicator, which moves the bytes of tensors contiguous in PyTorch's default (NCHW) sense.
//
// Only 4-D tensors have a channels_last layout; every function leaves other tensors as they are
// (contiguous where it says so). A "wire" tensor is dense in the format's memory order and
// contiguous in the default sense, so the communicator can send it or receive into it: for a
// channels_last [N, C, H, W] tensor, the [N, H, W, C] permutation of its storage (a view, no
// copy, when it is already channels_last), for any other tensor the tensor made contiguous. Both
// ends of a transfer and every rank of an all-reduce use the same format (the run's), so they
// agree on the order of the bytes.
// Threading: pure functions.
#pragma once

#include <torch/torch.h>

#include "planner/memory_format.h"

namespace deepool::worker {

// The tensor in the format: channels_last-contiguous when the format is channels_last and the
// tensor 4-D (a copy unless it already is); the tensor itself otherwise.
torch::Tensor InMemoryFormat(const torch::Tensor& tensor, planner::MemoryFormat format);

// Puts the module's 4-D parameters and buffers (convolution weights) in the format, in place
// (the parameters stay the same tensors, as an optimizer created later sees them).
void ModuleToMemoryFormat(torch::nn::Module& module, planner::MemoryFormat format);

// An empty tensor of `sizes` in the format (channels_last when 4-D).
torch::Tensor EmptyInMemoryFormat(at::IntArrayRef sizes, const torch::TensorOptions& options,
                                  planner::MemoryFormat format);

// The wire view of a tensor (above): what a send posts, or a receive fills. A view of the
// tensor's storage when it is already dense in the format, so receiving into the wire view of a
// buffer made by EmptyInMemoryFormat fills the buffer.
torch::Tensor WireView(const torch::Tensor& tensor, planner::MemoryFormat format);

// The tensor's elements, 1-D, in the format's memory order (a gradient entering an all-reduce
// bucket); UnflattenLike turns a slice of such a bucket back into a tensor with `like`'s sizes,
// a view of the slice laid out in the format.
torch::Tensor FlattenInMemoryOrder(const torch::Tensor& tensor, planner::MemoryFormat format);
torch::Tensor UnflattenLike(const torch::Tensor& flat, const torch::Tensor& like,
                            planner::MemoryFormat format);

}  // namespace deepool::worker
