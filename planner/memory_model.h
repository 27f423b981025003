// Per-device memory model: the bytes a device holds at its peak in a training iteration, for a
// placement of the graph's layers, so the search returns only plans that fit (docs/planner.md,
// "Memory"). Pure arithmetic over the graph; no torch.
//
// A device that runs layer l on g devices with a share of s samples holds, for that layer:
//   state:       weights (fp32 master), their gradients (fp32) and the optimizer's state (SGD
//                with momentum: one fp32 copy; Adam and AdamW: two), independent of s;
//   activations: what autograd keeps for backward, per sample x s, at the precision's
//                activation width (BytesPerElement), per op (memory_model.cc); each tensor once,
//                charged to the layer that made it, however many layers keep it. At
//                bf16/fp16 the 16-bit copy of a conv/linear/attention weight that autocast makes
//                is kept for backward too (2 bytes per parameter). Attention keeps its H x T x T
//                weights only when it has dropout (the runtime then computes them itself);
//                without dropout it runs scaled_dot_product_attention, assumed flash or
//                memory-efficient (CUDA) or the fused CPU kernel, which keeps O(T) per head;
//   workspace:   transient, the largest over the device's layers: the gradients of a layer's
//                output and inputs in backward plus, for a convolution, an im2col-sized buffer;
//   communication: per device set of more than one device with parameters, one gradient bucket
//                (the smaller of the cap and the set's gradients) being flattened and summed.
// All activations of an iteration are alive at the end of forward, so the peak is
// state + activations + the largest workspace + communication. The model leaves out the
// process's own footprint (CUDA context, libtorch, the data set): DeviceCapacityBytes takes a
// headroom off the device's memory for it.
// Threading: MemoryModel is immutable after construction and may be shared between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/precision.h"

namespace deepool::planner {

// What the optimizer keeps per parameter, in fp32 copies.
enum class OptimizerMemory {
  kSgd = 0,          // plain SGD: nothing
  kSgdMomentum = 1,  // one momentum buffer
  kAdam = 2,         // Adam and AdamW: exp_avg and exp_avg_sq
};
// By a job's optimizer: "sgd" with momentum > 0 -> kSgdMomentum, "sgd" without -> kSgd,
// "adam"/"adamw" -> kAdam; INVALID_ARGUMENT naming the optimizer otherwise.
StatusOr<OptimizerMemory> OptimizerMemoryFor(const std::string& name, double momentum);

struct MemoryModelOptions {
  Precision precision = Precision::kFp32;
  OptimizerMemory optimizer = OptimizerMemory::kSgdMomentum;
  int64_t gradient_bucket_bytes = 25 << 20;  // GradientSyncOptions::bucket_bytes
};

// One layer's parts (see the file comment).
struct LayerMemory {
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t fixed_saved_bytes = 0;           // kept for backward whatever the share (bf16 weights)
  int64_t saved_bytes_per_sample = 0;      // kept for backward, per sample
  int64_t workspace_bytes_per_sample = 0;  // transient in backward, per sample
  int64_t state_bytes() const { return weight_bytes + gradient_bytes + optimizer_bytes; }
};
LayerMemory EstimateLayerMemory(const Graph& graph, int layer_id,
                                const MemoryModelOptions& options);

// One device's predicted peak, by part.
struct DeviceMemory {
  int64_t state_bytes = 0;  // weights, gradients, optimizer
  int64_t activation_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t communication_bytes = 0;
  int64_t total() const {
    return state_bytes + activation_bytes + workspace_bytes + communication_bytes;
  }
};

class MemoryModel {
 public:
  MemoryModel(const Graph& graph, int64_t global_batch, MemoryModelOptions options);

  const Graph& graph() const { return graph_; }
  const LayerMemory& layer(int layer_id) const { return layers_.at(static_cast<size_t>(layer_id)); }
  // The most samples one of `devices` devices holds: ceil(B / devices) (NearEqualShares' first).
  int64_t LargestShare(int devices) const;
  // Layer `layer_id` alone on the device of the largest share among `devices`: its state, its
  // activations and its workspace, without communication.
  int64_t LayerBytes(int layer_id, int devices) const;

  // The peak of the device that runs every layer, layer i on counts[i] devices with the largest
  // share of each: rank 0 of the search's plans, whose device sets all start at rank 0 (and
  // whose first ranks get the larger shares), so the most loaded device of such a plan.
  DeviceMemory PeakOfCounts(const std::vector<int>& counts) const;
  // Every rank 0..plan.num_devices-1 of a plan over this graph (by its devices and shares).
  // Requires CheckPlanMatchesGraph(plan, graph).
  std::vector<DeviceMemory> PerDevice(const Plan& plan) const;

 private:
  const Graph& graph_;
  int64_t global_batch_;
  MemoryModelOptions options_;
  std::vector<LayerMemory> layers_;
};

// The bytes of a device of `memory_gb` GiB that a plan may use: 92% of it, the rest left to the
// CUDA context and the caching allocator's fragmentation (neither is in what PyTorch counts as
// allocated). 0 for memory_gb <= 0 (unknown: unchecked).
int64_t DeviceCapacityBytes(double memory_gb);

// Bytes as GiB with two decimals, for messages: "12.34 GiB".
std::string GiBString(int64_t bytes);

}  // namespace deepool::planner
