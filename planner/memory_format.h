// The memory format a run keeps its 4-D tensors in (docs/runtime.md, "Memory format"): the
// parameters of convolutions and the activations that enter them, NCHW ("contiguous", PyTorch's
// default) or NHWC ("channels_last", where cuDNN's tensor-core convolutions run without
// transposes). One type for the job spec, the run spec, deepool-train and the executor.
//
//   auto:          the runtime chooses (ResolveMemoryFormat): channels_last on CUDA for a model
//                  with convolutions at bf16 or fp16, contiguous otherwise
//   contiguous:    NCHW everywhere
//   channels_last: NHWC storage for 4-D parameters of convolutions, the data batch and the
//                  activations; the result equals contiguous training up to float rounding
// Threading: plain values and pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/precision.h"

namespace deepool::planner {

enum class MemoryFormat { kAuto, kContiguous, kChannelsLast };

// "auto", "contiguous", "channels_last".
const char* MemoryFormatName(MemoryFormat format);
// The names above (exactly, lower case); INVALID_ARGUMENT naming the value and the known names.
StatusOr<MemoryFormat> ParseMemoryFormat(std::string_view name);

// Whether the graph has a 2-D convolution (the layers channels_last is for).
bool HasConvolutions(const Graph& graph);

// The format a run uses: `requested` unless it is kAuto; then channels_last on a CUDA device for
// a graph with convolutions at bf16 or fp16 (tensor-core convolutions, whose NHWC kernels skip
// the layout transposes NCHW costs them), contiguous otherwise (the CPU measurement:
// docs/benchmarks.md, "channels_last against contiguous"). The CUDA default rests on NVIDIA's
// guidance for tensor-core convolutions until scripts/gpu-node-test.sh measures it on a GPU
// node (docs/runtime.md, "Memory format"). Never kAuto.
MemoryFormat ResolveMemoryFormat(MemoryFormat requested, bool cuda, Precision precision,
                                 const Graph& graph);

}  // namespace deepool::planner
