// The per-device memory model (memory_model.h); the rules per op are documented in
// docs/planner.md, "Memory".
#include "planner/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace deepool::planner {
namespace {

constexpr int64_t kFp32Bytes = 4;
constexpr int64_t kIndexBytes = 8;  // max pooling's indices, token ids
constexpr int64_t kMaskBytes = 1;   // dropout's bool mask

// Elements per sample of everything the layer reads.
int64_t InputElements(const Graph& graph, const Layer& layer) {
  int64_t elements = 0;
  for (int input : layer.input_ids) {
    elements += input == kGraphInputId ? NumElements(graph.input_shape())
                                       : NumElements(graph.layer(input).output_shape);
  }
  return elements;
}

// A convolution's input channels: the first dimension of what it reads.
int64_t InputChannels(const Graph& graph, const Layer& layer) {
  if (layer.input_ids.empty()) return 0;
  const int input = layer.input_ids.front();
  const Shape& shape =
      input == kGraphInputId ? graph.input_shape() : graph.layer(input).output_shape;
  return shape.empty() ? 0 : shape.front();
}

// Whether autocast runs the layer's math in 16 bits on a cast copy of its weights, which
// autograd keeps for backward.
bool CastsWeights(Op op) {
  return op == Op::kConv2d || op == Op::kLinear || op == Op::kMultiheadAttention;
}

// Whether the op's backward needs its input (so autograd keeps the tensor it read).
bool SavesInput(Op op) {
  switch (op) {
    case Op::kConv2d:
    case Op::kLinear:
    case Op::kBatchNorm2d:
    case Op::kAvgPool2d:
    case Op::kAdaptiveAvgPool2d:
    case Op::kGelu:
    case Op::kMaxPool2d:
    case Op::kLayerNorm:
    case Op::kMultiheadAttention:
      return true;
    default:
      return false;  // relu keeps its result; views, sums, copies and selects keep nothing
  }
}

// Whether layer `id`'s output is kept for backward: relu keeps its own result, and any consumer
// that saves its input keeps it. One tensor, counted once, however many keep it.
bool OutputKept(const Graph& graph, int id) {
  if (graph.layer(id).op == Op::kRelu) return true;
  for (int consumer : graph.consumers(id)) {
    if (SavesInput(graph.layer(consumer).op)) return true;
  }
  return false;
}

// Bytes per sample autograd keeps for backward that are charged to this layer, at `width` bytes
// per activation element: its output when kept (OutputKept), the graph input when it reads
// and keeps it, and what the op keeps besides its input and output.
int64_t SavedPerSample(const Graph& graph, int id, int64_t width) {
  const Layer& layer = graph.layer(id);
  const int64_t out = NumElements(layer.output_shape);
  const LayerAttrs& a = layer.attrs;
  int64_t saved = OutputKept(graph, id) ? out * width : 0;
  for (int input : layer.input_ids) {
    if (input != kGraphInputId) continue;
    if (layer.op == Op::kEmbedding) {
      saved += NumElements(graph.input_shape()) * kIndexBytes;  // the ids
    } else if (SavesInput(layer.op)) {
      saved += NumElements(graph.input_shape()) * width;
    }
  }
  switch (layer.op) {
    case Op::kMaxPool2d:
      return saved + out * kIndexBytes;
    case Op::kDropout:
      return saved + (a.p > 0 ? out * kMaskBytes : 0);
    case Op::kLayerNorm: {
      int64_t normalized = 1;
      for (int64_t d : a.normalized_shape) normalized *= d;
      return saved + (normalized > 0 ? out / normalized : 0) * 2 * kFp32Bytes;  // mean, rstd
    }
    case Op::kMultiheadAttention: {
      const int64_t tokens = layer.output_shape.empty() ? 0 : layer.output_shape.front();
      const int64_t dim = out / std::max<int64_t>(tokens, 1);
      const int64_t heads = std::max<int64_t>(a.num_heads, 1);
      // q, k, v, the attended values and out_proj's input (the layer's input is kept above).
      saved += (3 + 1 + 1) * tokens * dim * width;
      if (a.dropout > 0) {
        // Computed weights: softmax's result, the mask and the dropped weights, each H x T x T.
        return saved + heads * tokens * tokens * (2 * width + kMaskBytes);
      }
      return saved + heads * tokens * kFp32Bytes;  // the fused kernel's log-sum-exp
    }
    default:
      return saved;
  }
}

// Transient bytes per sample while the layer's backward runs: the gradients of its output and
// inputs, and for a convolution an im2col-sized buffer (cuDNN's workspace, bounded by what the
// unfolded input would take).
int64_t WorkspacePerSample(const Graph& graph, const Layer& layer, int64_t width) {
  const int64_t in = InputElements(graph, layer);
  const int64_t out = NumElements(layer.output_shape);
  int64_t bytes = (in + out) * width;
  if (layer.op == Op::kConv2d && layer.output_shape.size() == 3) {
    const LayerAttrs& a = layer.attrs;
    const int64_t spatial = layer.output_shape[1] * layer.output_shape[2];
    const int64_t per_group = InputChannels(graph, layer) / std::max<int64_t>(a.groups, 1);
    bytes += per_group * a.kernel_size[0] * a.kernel_size[1] * spatial * width;
  }
  return bytes;
}

}  // namespace

StatusOr<OptimizerMemory> OptimizerMemoryFor(const std::string& name, double momentum) {
  if (name == "sgd") return momentum > 0 ? OptimizerMemory::kSgdMomentum : OptimizerMemory::kSgd;
  if (name == "adam" || name == "adamw") return OptimizerMemory::kAdam;
  return InvalidArgumentError("unknown optimizer \"" + name +
                              "\" for the memory model (known: sgd, adam, adamw)");
}

LayerMemory EstimateLayerMemory(const Graph& graph, int layer_id,
                                const MemoryModelOptions& options) {
  const Layer& layer = graph.layer(layer_id);
  const int64_t width = BytesPerElement(options.precision);
  LayerMemory memory;
  memory.weight_bytes = layer.params * kFp32Bytes;
  memory.gradient_bytes = layer.params * kFp32Bytes;
  memory.optimizer_bytes = layer.params * kFp32Bytes * static_cast<int64_t>(options.optimizer);
  if (width < kFp32Bytes && CastsWeights(layer.op)) memory.fixed_saved_bytes = layer.params * width;
  memory.saved_bytes_per_sample = SavedPerSample(graph, layer_id, width);
  // The loss keeps log-softmax's fp32 result of every output it reads.
  for (const GraphOutput& output : graph.outputs()) {
    if (output.layer == layer.name) memory.saved_bytes_per_sample += layer.output_bytes;
  }
  memory.workspace_bytes_per_sample = WorkspacePerSample(graph, layer, width);
  return memory;
}

MemoryModel::MemoryModel(const Graph& graph, int64_t global_batch, MemoryModelOptions options)
    : graph_(graph), global_batch_(global_batch), options_(options) {
  layers_.reserve(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    layers_.push_back(EstimateLayerMemory(graph, id, options_));
  }
}

int64_t MemoryModel::LargestShare(int devices) const {
  const int64_t g = std::max(devices, 1);
  return (global_batch_ + g - 1) / g;
}

int64_t MemoryModel::LayerBytes(int layer_id, int devices) const {
  const LayerMemory& m = layer(layer_id);
  const int64_t share = LargestShare(devices);
  return m.state_bytes() + m.fixed_saved_bytes +
         (m.saved_bytes_per_sample + m.workspace_bytes_per_sample) * share;
}

namespace {

// Adds one layer at `share` samples to a device's total; `bucket_of_set` collects the gradient
// bytes of each device set of more than one device (keyed by its first rank and count).
void AddLayer(const LayerMemory& m, int64_t share, DeviceMemory* device) {
  device->state_bytes += m.state_bytes();
  device->activation_bytes += m.fixed_saved_bytes + m.saved_bytes_per_sample * share;
  device->workspace_bytes = std::max(device->workspace_bytes, m.workspace_bytes_per_sample * share);
}

int64_t BucketBytes(int64_t set_gradient_bytes, int64_t cap) {
  // Cap 0 is one bucket per layer: the set's largest layer, bounded here by the whole set.
  return cap > 0 ? std::min(cap, set_gradient_bytes) : set_gradient_bytes;
}

}  // namespace

DeviceMemory MemoryModel::PeakOfCounts(const std::vector<int>& counts) const {
  DeviceMemory device;
  std::map<int, int64_t> gradients_of_set;  // by count: every set starts at rank 0
  for (size_t id = 0; id < counts.size() && id < layers_.size(); ++id) {
    const LayerMemory& m = layers_[id];
    AddLayer(m, LargestShare(counts[id]), &device);
    if (counts[id] > 1 && m.gradient_bytes > 0) gradients_of_set[counts[id]] += m.gradient_bytes;
  }
  for (const auto& [count, bytes] : gradients_of_set) {
    device.communication_bytes += BucketBytes(bytes, options_.gradient_bucket_bytes);
  }
  return device;
}

std::vector<DeviceMemory> MemoryModel::PerDevice(const Plan& plan) const {
  std::vector<DeviceMemory> devices(static_cast<size_t>(std::max(plan.num_devices, 0)));
  // Per rank, the gradient bytes of each device set it belongs to (by the set's ranks).
  std::vector<std::map<std::vector<int>, int64_t>> sets(devices.size());
  for (size_t id = 0; id < plan.layers.size() && id < layers_.size(); ++id) {
    const LayerPlacement& placement = plan.layers[id];
    const LayerMemory& m = layers_[id];
    for (size_t i = 0; i < placement.devices.size(); ++i) {
      const auto rank = static_cast<size_t>(placement.devices[i]);
      if (rank >= devices.size()) continue;
      AddLayer(m, placement.samples[i], &devices[rank]);
      if (placement.devices.size() > 1 && m.gradient_bytes > 0) {
        sets[rank][placement.devices] += m.gradient_bytes;
      }
    }
  }
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    for (const auto& [set, bytes] : sets[rank]) {
      devices[rank].communication_bytes += BucketBytes(bytes, options_.gradient_bucket_bytes);
    }
  }
  return devices;
}

int64_t DeviceCapacityBytes(double memory_gb) {
  if (!(memory_gb > 0)) return 0;
  return static_cast<int64_t>(memory_gb * 0.92 * static_cast<double>(int64_t{1} << 30));
}

std::string GiBString(int64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f GiB",
                static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return text;
}

}  // namespace deepool::planner
