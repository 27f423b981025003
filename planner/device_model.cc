// Roofline device model: per-op work rules, presets and the analytical profile.
#include "planner/device_model.h"

#include <algorithm>
#include <cmath>

#include "planner/transformer_work.h"

namespace deepool::planner {
namespace {

constexpr double kWeightBytesPerElement = 4;  // weights and their gradients stay fp32
constexpr double kIndexBytesPerElement = 8;   // max pooling's int64 argmax indices

// Presets. Peaks are public spec-sheet numbers, dense (the sheets' tensor-core figures marked
// "with sparsity" halved); 0: the device has no such math. The efficiency factors and the launch
// cost are global numbers per device (not per layer), fitted at the default precision. The
// A100's were tuned on the measured VGG-16 file (bench/profile_validation), the H100's and
// H200's on the H200's profiles; v100 and cpu are assumed (docs/formats.md). Other precisions
// use the same factors (not validated).
//  - a100: A100 SXM4 40GB: fp32 19.5, TF32 tensor-core 156 (cuDNN/cuBLAS use TF32 for fp32
//    training by default on Ampere: the default), bf16 and fp16 312 TFLOPS; HBM2 1555 GB/s.
//  - h100: H100 SXM5 80GB: fp32 67, TF32 495 (the default), bf16 and fp16 989 TFLOPS; HBM3
//    3350 GB/s.
//  - h200: H200 SXM 141GB: the H100's GH100 at the same peaks, HBM3e 4800 GB/s. The factors
//    of both were fitted on the four zoo profiles measured on an H200 with device timing
//    (docs/results/profiles-h200-2026-11-28/, one batch size each; docs/benchmarks.md, "H100
//    and H200 presets").
//  - v100: V100 SXM2 32GB: no TF32 and no bf16, so fp32 training runs on the FP32 units: 15.7
//    TFLOPS (the default); fp16 on its tensor cores 125; HBM2 900 GB/s. cuDNN's fp32 kernels get
//    closer to their (much lower) peak than TF32 ones do.
//  - cpu: a nominal server socket: 16 cores x 2 AVX-512 FMA units x 16 fp32 lanes x 2 x 2.5 GHz
//    = 1.28 TFLOPS for fp32 (the default), tf32 (no such math on CPUs: it runs fp32) and fp16
//    (converted, computed in fp32); bf16 twice that (AVX-512 BF16 dot products: two bf16
//    products per fp32 lane); 8 channels of DDR4-3200 = 204.8 GB/s. Per-op dispatch ~10 us in
//    libtorch.
struct DevicePresetRow {
  const char* name;
  double peak_tflops[4];  // by Precision: fp32, tf32, bf16, fp16; 0: not supported
  Precision default_precision;
  double memory_bandwidth_gbps;
  double compute_efficiency;
  double memory_efficiency;
  double launch_us;
  double gemm_half_depth;
  double memory_gb;
  double gemm_half_outputs;
};

constexpr Precision kTf32 = Precision::kTf32;
constexpr Precision kFp32 = Precision::kFp32;
constexpr DevicePresetRow kDevicePresets[] = {
    // name  TFLOPS fp32 tf32 bf16 fp16  default  GB/s  compute  memory  launch  gemm_half_depth
    //                                                                   memory_gb  half_outputs
    {"a100", {19.5, 156.0, 312.0, 312.0}, kTf32, 1555.0, 0.68, 0.90, 7.0, 750.0, 40.0, 0.0},
    {"h100", {67.0, 495.0, 989.0, 989.0}, kTf32, 3350.0, 0.44, 0.90, 5.0, 250.0, 80.0, 1e6},
    {"h200", {67.0, 495.0, 989.0, 989.0}, kTf32, 4800.0, 0.44, 0.90, 5.0, 250.0, 141.0, 1e6},
    {"v100", {15.7, 0.0, 0.0, 125.0}, kFp32, 900.0, 0.90, 0.90, 7.0, 250.0, 32.0, 0.0},
    {"cpu", {1.28, 1.28, 2.56, 1.28}, kFp32, 204.8, 0.70, 0.60, 10.0, 64.0, 256.0, 0.0},
};

const DevicePresetRow* FindPresetRow(std::string_view name) {
  for (const DevicePresetRow& row : kDevicePresets) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

Status UnknownPreset(std::string_view name) {
  std::string known;
  for (const std::string& preset : DevicePresetNames())
    known += (known.empty() ? "" : ", ") + preset;
  return NotFoundError("unknown device preset \"" + std::string(name) + "\" (known: " + known +
                       ")");
}

double PeakOf(const DevicePresetRow& row, Precision precision) {
  return row.peak_tflops[static_cast<int>(precision)];
}

std::string PrecisionList(const std::vector<Precision>& precisions) {
  std::string list;
  for (Precision precision : precisions) {
    list += (list.empty() ? "" : ", ") + std::string(PrecisionName(precision));
  }
  return list;
}

std::vector<Precision> SupportedBy(const DevicePresetRow& row) {
  std::vector<Precision> supported;
  for (Precision precision : AllPrecisions()) {
    if (PeakOf(row, precision) > 0) supported.push_back(precision);
  }
  return supported;
}

DeviceModel FromPresetRow(const DevicePresetRow& row, Precision precision) {
  DeviceModel device;
  device.name = row.name;
  device.precision = precision;
  device.peak_tflops = PeakOf(row, precision);
  device.memory_bandwidth_gbps = row.memory_bandwidth_gbps;
  device.compute_efficiency = row.compute_efficiency;
  device.memory_efficiency = row.memory_efficiency;
  device.launch_us = row.launch_us;
  device.gemm_half_depth = row.gemm_half_depth;
  device.gemm_half_outputs = row.gemm_half_outputs;
  device.memory_gb = row.memory_gb;
  return device;
}

const Shape& InputShapeOf(const Graph& graph, const Layer& layer, size_t index) {
  const int id = layer.input_ids.at(index);
  return id == kGraphInputId ? graph.input_shape() : graph.layer(id).output_shape;
}

double InputElementsPerSample(const Graph& graph, const Layer& layer) {
  double elements = 0;
  for (size_t i = 0; i < layer.input_ids.size(); ++i) {
    elements += static_cast<double>(NumElements(InputShapeOf(graph, layer, i)));
  }
  return elements;
}

bool ReadsGraphInputOnly(const Layer& layer) {
  return std::all_of(layer.input_ids.begin(), layer.input_ids.end(),
                     [](int id) { return id == kGraphInputId; });
}

class AnalyticalProfile : public Profile {
 public:
  explicit AnalyticalProfile(DeviceModel device) : device_(std::move(device)) {}
  std::string source() const override {
    const StatusOr<Precision> preset_default = DefaultPrecision(device_.name);
    if (preset_default.ok() && *preset_default == device_.precision) {
      return "analytical:" + device_.name;
    }
    return "analytical:" + device_.name + " (" + PrecisionName(device_.precision) + ")";
  }
  std::optional<Precision> precision() const override { return device_.precision; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    if (layer_id < 0 || layer_id >= graph.num_layers()) {
      return InvalidArgumentError("layer id " + std::to_string(layer_id) + " is not in graph " +
                                  graph.name());
    }
    if (batch < 1) {
      return InvalidArgumentError("layer " + graph.layer(layer_id).name +
                                  ": batch must be >= 1, got " + std::to_string(batch));
    }
    return RooflineTime(device_, EstimateLayerWork(graph, layer_id, batch, device_.precision));
  }
  // The layer's rule once, then the roofline at each batch (Time's answers, to the bit).
  Status Times(const Graph& graph, int layer_id, const std::vector<int64_t>& batches,
               std::vector<LayerTime>* times) const override;

 private:
  DeviceModel device_;
};

}  // namespace

Status DeviceModel::Validate() const {
  auto positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (name.empty()) return InvalidArgumentError("device model: name must not be empty");
  if (!positive(peak_tflops)) return InvalidArgumentError("device model: peak_tflops must be > 0");
  if (!positive(memory_bandwidth_gbps)) {
    return InvalidArgumentError("device model: memory_bandwidth_gbps must be > 0");
  }
  if (!positive(compute_efficiency) || compute_efficiency > 1) {
    return InvalidArgumentError("device model: compute_efficiency must be in (0, 1]");
  }
  if (!positive(memory_efficiency) || memory_efficiency > 1) {
    return InvalidArgumentError("device model: memory_efficiency must be in (0, 1]");
  }
  if (!std::isfinite(launch_us) || launch_us < 0) {
    return InvalidArgumentError("device model: launch_us must be >= 0");
  }
  if (!std::isfinite(gemm_half_depth) || gemm_half_depth < 0) {
    return InvalidArgumentError("device model: gemm_half_depth must be >= 0");
  }
  if (!std::isfinite(gemm_half_outputs) || gemm_half_outputs < 0) {
    return InvalidArgumentError("device model: gemm_half_outputs must be >= 0");
  }
  return Status::Ok();
}

StatusOr<DeviceModel> DevicePreset(std::string_view name) {
  const DevicePresetRow* row = FindPresetRow(name);
  if (row == nullptr) return UnknownPreset(name);
  return FromPresetRow(*row, row->default_precision);
}

StatusOr<DeviceModel> DevicePreset(std::string_view name, Precision precision) {
  const DevicePresetRow* row = FindPresetRow(name);
  if (row == nullptr) return UnknownPreset(name);
  if (PeakOf(*row, precision) <= 0) {
    return InvalidArgumentError("device preset \"" + std::string(name) + "\" has no " +
                                PrecisionName(precision) + " math (it supports " +
                                PrecisionList(SupportedBy(*row)) + ")");
  }
  return FromPresetRow(*row, precision);
}

double DeviceMemoryGbOr(double known_gb, std::string_view device_type) {
  if (known_gb > 0) return known_gb;
  const DevicePresetRow* row = FindPresetRow(device_type);
  return row == nullptr ? 0 : row->memory_gb;
}

StatusOr<Precision> DefaultPrecision(std::string_view name) {
  const DevicePresetRow* row = FindPresetRow(name);
  if (row == nullptr) return UnknownPreset(name);
  return row->default_precision;
}

StatusOr<std::vector<Precision>> SupportedPrecisions(std::string_view name) {
  const DevicePresetRow* row = FindPresetRow(name);
  if (row == nullptr) return UnknownPreset(name);
  return SupportedBy(*row);
}

std::vector<std::string> DevicePresetNames() {
  std::vector<std::string> names;
  for (const DevicePresetRow& row : kDevicePresets) names.emplace_back(row.name);
  return names;
}

namespace {

// What a layer's work is apart from the batch: its per-sample and fixed parts, worked out once
// so that a profile asked for several batches of one layer (the cost model's shares) repeats
// only the products with the batch. LayerWorkAt multiplies them by the batch in the order the
// rules always have, so the work is the same to the bit.
struct LayerWorkRule {
  const Graph* graph = nullptr;
  int layer_id = 0;
  const Layer* layer = nullptr;
  double element_bytes = 0;
  double flops_per_sample = 0;  // the layer's forward flops
  double in_elements = 0;       // per sample, over every input
  double out_elements = 0;      // per sample
  double weights = 0;           // bytes
  // Convolutions and linear layers: the GEMMs' reduction lengths and flops.
  bool first = false;  // reads the graph input only: no grad-input
  double forward_depth = 0;
  double weight_grad_depth_per_sample = 0;  // output positions (conv) or rows (linear)
  double gemm_flops_per_sample = 0;
};

LayerWorkRule LayerWorkRuleOf(const Graph& graph, int layer_id, Precision precision) {
  const Layer& layer = graph.layer(layer_id);
  LayerWorkRule rule;
  rule.graph = &graph;
  rule.layer_id = layer_id;
  rule.layer = &layer;
  rule.element_bytes = BytesPerElement(precision);
  rule.flops_per_sample = static_cast<double>(layer.forward_flops);
  rule.in_elements = InputElementsPerSample(graph, layer);
  rule.out_elements = static_cast<double>(NumElements(layer.output_shape));
  rule.weights = static_cast<double>(layer.params) * kWeightBytesPerElement;
  if (layer.op != Op::kConv2d && layer.op != Op::kLinear) return rule;
  // GEMM reduction lengths: forward in_channels/groups x kernel area (in_features),
  // grad-weight the number of output positions in the batch.
  rule.first = ReadsGraphInputOnly(layer);
  const LayerAttrs& a = layer.attrs;
  const Shape& in_shape = InputShapeOf(graph, layer, 0);
  const Shape& out_shape = layer.output_shape;
  if (layer.op == Op::kConv2d) {
    const double area = static_cast<double>(a.kernel_size[0] * a.kernel_size[1]);
    const double groups = static_cast<double>(std::max<int64_t>(a.groups, 1));
    const double in_channels = in_shape.empty() ? 1.0 : static_cast<double>(in_shape[0]);
    rule.forward_depth = in_channels / groups * area;
    rule.weight_grad_depth_per_sample = static_cast<double>(NumElements(out_shape)) /
                                        std::max(static_cast<double>(a.out_channels), 1.0);
    rule.gemm_flops_per_sample =
        2.0 * static_cast<double>(NumElements(out_shape)) * rule.forward_depth;
  } else {
    const double in_features = in_shape.empty() ? 1.0 : static_cast<double>(in_shape.back());
    const double rows = static_cast<double>(NumElements(in_shape)) / in_features;
    rule.forward_depth = in_features;
    rule.weight_grad_depth_per_sample = rows;
    rule.gemm_flops_per_sample = 2.0 * rows * in_features * static_cast<double>(a.out_features);
  }
  return rule;
}

LayerWork LayerWorkAt(const LayerWorkRule& rule, int64_t batch_size) {
  const Layer& layer = *rule.layer;
  const double batch = static_cast<double>(batch_size);
  const double flops = rule.flops_per_sample * batch;
  const double element_bytes = rule.element_bytes;
  const double in = rule.in_elements * batch * element_bytes;
  const double out_elements = rule.out_elements * batch;
  const double out = out_elements * element_bytes;
  const double weights = rule.weights;
  LayerWork work;
  switch (layer.op) {
    case Op::kConv2d:
    case Op::kLinear: {
      // Backward = grad-input + grad-weight, each as much math as the forward; a layer reading
      // the graph input needs no grad-input. Weights: read once forward; backward reads them
      // (grad-input), writes grad-weight and accumulates it into .grad (read, read, write).
      const bool first = rule.first;
      const bool bias = layer.attrs.bias;
      const double forward_depth = rule.forward_depth;
      const double weight_grad_depth = batch * rule.weight_grad_depth_per_sample;
      const double gemm_flops = std::min(rule.gemm_flops_per_sample * batch, flops);
      work.forward_flops = flops;
      work.forward_gemms[0] = {gemm_flops, forward_depth};
      work.backward_flops = first ? gemm_flops : 2 * gemm_flops;
      // Both backward GEMMs run at the forward's efficiency (cuDNN's gradient kernels are not
      // faster than the forward ones in the A100 measurements), except that grad-weight's
      // reduction over the batch's output positions is the short side for linear layers at
      // small batches.
      work.backward_gemms[0] = {gemm_flops, std::min(forward_depth, weight_grad_depth)};
      if (!first) work.backward_gemms[1] = {gemm_flops, forward_depth};
      work.forward_bytes = in + out + weights;
      work.backward_bytes = (first ? in + out : 2 * (in + out)) + 4 * weights;
      work.forward_kernels = bias ? 2 : 1;
      work.backward_kernels = (first ? 1 : 2) + (bias ? 1 : 0);
      break;
    }
    case Op::kBatchNorm2d:
    case Op::kLayerNorm:
      // Training-mode normalisation: a statistics pass and a normalise pass forward; backward
      // reads input and output gradient twice (reductions, then the input gradient).
      work.forward_flops = flops;
      work.backward_flops = 2 * flops;
      work.forward_bytes = 2 * in + out;
      work.backward_bytes = 2 * in + 2 * out + in;
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
    case Op::kRelu:
    case Op::kGelu:
    case Op::kDropout:
      // Dropout with p = 0 (torchvision ViT's) hands its input on: no work at all.
      if (layer.op == Op::kDropout && layer.attrs.p <= 0) break;
      // Elementwise: forward reads and writes once; backward reads gradient and saved tensor and
      // writes the input gradient (1.5x the forward's traffic).
      work.forward_flops = flops;
      work.backward_flops = flops;
      work.forward_bytes = in + out;
      work.backward_bytes = 1.5 * (in + out);
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
    case Op::kMaxPool2d: {
      // Forward also writes int64 argmax indices (2x the output's bytes at fp32); backward
      // zero-fills the input gradient, then reads gradient and indices and scatters into it.
      const double indices = out_elements * kIndexBytesPerElement;
      work.forward_flops = flops;
      work.backward_flops = flops;
      work.forward_bytes = in + out + indices;
      work.backward_bytes = 2 * in + out + indices;
      work.forward_kernels = 1;
      work.backward_kernels = 2;
      break;
    }
    case Op::kAvgPool2d:
    case Op::kAdaptiveAvgPool2d:
      work.forward_flops = flops;
      work.backward_flops = flops;
      work.forward_bytes = in + out;
      work.backward_bytes = in + out;
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
    case Op::kAdd:
    case Op::kConcat:
      // Forward reads every input and writes the output. Backward hands each input its slice of
      // the gradient; counted as one copy of the output gradient.
      work.forward_flops = flops;
      work.backward_flops = 0;
      work.forward_bytes = in + out;
      work.backward_bytes = 2 * out;
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
    case Op::kEmbedding:
    case Op::kPositionEmbedding:
    case Op::kMultiheadAttention:
    case Op::kTranspose:
    case Op::kClassToken:
    case Op::kSelect:
    case Op::kMean:
      return TransformerLayerWork(*rule.graph, rule.layer_id, batch_size, element_bytes);
    case Op::kFlatten:
      // A view: no data moves, but the framework still dispatches an op each way.
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
  }
  return work;
}

Status AnalyticalProfile::Times(const Graph& graph, int layer_id,
                                const std::vector<int64_t>& batches,
                                std::vector<LayerTime>* times) const {
  times->resize(batches.size());
  if (batches.empty()) return Status::Ok();
  // Time's checks, in its order: the layer, then each batch.
  const bool layer_known = layer_id >= 0 && layer_id < graph.num_layers();
  const bool batches_valid =
      std::all_of(batches.begin(), batches.end(), [](int64_t batch) { return batch >= 1; });
  if (!layer_known || !batches_valid) return Profile::Times(graph, layer_id, batches, times);
  const LayerWorkRule rule = LayerWorkRuleOf(graph, layer_id, device_.precision);
  for (size_t i = 0; i < batches.size(); ++i) {
    (*times)[i] = RooflineTime(device_, LayerWorkAt(rule, batches[i]));
  }
  return Status::Ok();
}

}  // namespace

LayerWork EstimateLayerWork(const Graph& graph, int layer_id, int64_t batch_size,
                            Precision precision) {
  return LayerWorkAt(LayerWorkRuleOf(graph, layer_id, precision), batch_size);
}

LayerTime RooflineTime(const DeviceModel& device, const LayerWork& work) {
  const double flops_per_ms = device.peak_tflops * 1e9 * device.compute_efficiency;
  const double bytes_per_ms = device.memory_bandwidth_gbps * 1e6 * device.memory_efficiency;
  auto compute_ms = [&](double flops, const std::array<GemmPart, 2>& gemms) {
    double ms = 0;
    double rest = flops;
    for (const GemmPart& gemm : gemms) {
      if (gemm.flops <= 0) continue;
      const double depth = std::max(gemm.depth, 1.0);
      const double outputs = gemm.flops / (2 * depth);
      ms += gemm.flops / (flops_per_ms * depth / (depth + device.gemm_half_depth) * outputs /
                          (outputs + device.gemm_half_outputs));
      rest -= gemm.flops;
    }
    return ms + std::max(rest, 0.0) / flops_per_ms;
  };
  auto time = [&](double compute, double bytes, int kernels) {
    return std::max(compute, bytes / bytes_per_ms) + kernels * device.launch_us / 1e3;
  };
  return {time(compute_ms(work.forward_flops, work.forward_gemms), work.forward_bytes,
               work.forward_kernels),
          time(compute_ms(work.backward_flops, work.backward_gemms), work.backward_bytes,
               work.backward_kernels)};
}

std::unique_ptr<Profile> MakeAnalyticalProfile(const DeviceModel& device) {
  return std::make_unique<AnalyticalProfile>(device);
}

}  // namespace deepool::planner
