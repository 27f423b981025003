// The iteration overhead of a profile (planner::OverheadPoint): what one training iteration costs
// beyond its layers' forward and backward times - loss, data, autograd's bookkeeping between
// segments, the optimizer step. The planner charges it once per iteration (cost_model.h); without
// it a small model's predicted iteration is a fraction of the measured one.
//
// Measured at each per-device batch b as a one-rank executor's iteration (the runtime's own
// loop: synthetic data with prefetch, the optimizer below, a one-rank group: Gloo on the CPU,
// NCCL on a GPU, where the batches are pinned and the iteration ends when the device has
// finished it, as deepool-executor's do), median over the timed iterations, minus the sum of
// the layers' forward and backward times at b from the layer profile, clamped at 0.
// Threading: runs on the calling thread (the data prefetch thread besides).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/profile_table.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/layers/optimizer.h"

namespace deepool::worker {

struct OverheadOptions {
  int warmup = 2;   // untimed iterations per batch
  int repeats = 5;  // timed iterations per batch; the median is used
  uint64_t seed = 0;
  // The optimizer whose step is part of the overhead: the job's (Adam's step costs more than
  // SGD's). The default is the job spec's: SGD with momentum 0.9.
  OptimizerSpec optimizer = [] {
    OptimizerSpec spec;
    spec.momentum = 0.9;
    return spec;
  }();
  // The precision the iteration trains at (ExecutorOptions::precision): the layers' profile's.
  planner::Precision precision = planner::Precision::kFp32;
  // Where the iteration runs (its device selected); null: the CPU.
  DeviceContext* device = nullptr;
};

// One point per batch of `batches` (each >= 1 and measured in `layers`, which must time every
// layer of `graph` at it). Errors name the batch.
StatusOr<std::vector<planner::OverheadPoint>> MeasureIterationOverhead(
    const planner::Graph& graph, const planner::ProfileData& layers,
    const std::vector<int64_t>& batches, const OverheadOptions& options);

}  // namespace deepool::worker
