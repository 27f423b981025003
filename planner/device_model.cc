// Roofline device model: per-op work rules, presets and the analytical profile.
#include "planner/device_model.h"

#include <algorithm>
#include <cmath>

namespace deepool::planner {
namespace {

constexpr double kBytesPerElement = 4;  // fp32 activations and weights

// Presets. Peaks are public spec-sheet numbers; the efficiency factors and the launch cost are
// three global numbers per device (not per layer). The A100's were tuned on the measured VGG-16
// file (bench/profile_validation); the others carry the A100's over, except where noted in
// docs/formats.md.
DeviceModel A100() {
  // A100 SXM4 40GB: TF32 tensor-core dense peak 156 TFLOPS (cuDNN/cuBLAS use TF32 for fp32
  // training by default on Ampere), HBM2 1555 GB/s.
  return {"a100", 156.0, 1555.0, 0.32, 0.80, 6.0, 40.0};
}
DeviceModel H100() {
  // H100 SXM5 80GB: TF32 dense peak 495 TFLOPS, HBM3 3350 GB/s.
  return {"h100", 495.0, 3350.0, 0.32, 0.80, 6.0, 80.0};
}
DeviceModel V100() {
  // V100 SXM2 32GB: no TF32, so fp32 training runs on the FP32 units: 15.7 TFLOPS; HBM2 900 GB/s.
  // cuDNN's fp32 kernels get closer to their (much lower) peak than TF32 ones do: 0.6.
  return {"v100", 15.7, 900.0, 0.60, 0.80, 6.0, 32.0};
}
DeviceModel Cpu() {
  // A nominal server socket: 16 cores x 2 AVX-512 FMA units x 16 fp32 lanes x 2 x 2.5 GHz
  // = 1.28 TFLOPS; 8 channels of DDR4-3200 = 204.8 GB/s. Per-op dispatch ~10 us in libtorch.
  return {"cpu", 1.28, 204.8, 0.50, 0.60, 10.0, 256.0};
}

Shape InputShapeOf(const Graph& graph, const Layer& layer, size_t index) {
  const int id = layer.input_ids.at(index);
  return id == kGraphInputId ? graph.input_shape() : graph.layer(id).output_shape;
}

double InputBytesPerSample(const Graph& graph, const Layer& layer) {
  double bytes = 0;
  for (size_t i = 0; i < layer.input_ids.size(); ++i) {
    bytes += static_cast<double>(NumElements(InputShapeOf(graph, layer, i))) * kBytesPerElement;
  }
  return bytes;
}

bool ReadsGraphInputOnly(const Layer& layer) {
  return std::all_of(layer.input_ids.begin(), layer.input_ids.end(),
                     [](int id) { return id == kGraphInputId; });
}

class AnalyticalProfile : public Profile {
 public:
  explicit AnalyticalProfile(DeviceModel device) : device_(std::move(device)) {}
  std::string source() const override { return "analytical:" + device_.name; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override {
    if (layer_id < 0 || layer_id >= graph.num_layers()) {
      return InvalidArgumentError("layer id " + std::to_string(layer_id) + " is not in graph " +
                                  graph.name());
    }
    if (batch < 1) {
      return InvalidArgumentError("layer " + graph.layer(layer_id).name +
                                  ": batch must be >= 1, got " + std::to_string(batch));
    }
    return RooflineTime(device_, EstimateLayerWork(graph, layer_id, batch));
  }

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
  return Status::Ok();
}

StatusOr<DeviceModel> DevicePreset(std::string_view name) {
  if (name == "a100") return A100();
  if (name == "h100") return H100();
  if (name == "v100") return V100();
  if (name == "cpu") return Cpu();
  return NotFoundError("unknown device preset \"" + std::string(name) +
                       "\" (known: a100, h100, v100, cpu)");
}

std::vector<std::string> DevicePresetNames() { return {"a100", "h100", "v100", "cpu"}; }

LayerWork EstimateLayerWork(const Graph& graph, int layer_id, int64_t batch_size) {
  const Layer& layer = graph.layer(layer_id);
  const double batch = static_cast<double>(batch_size);
  const double flops = static_cast<double>(layer.forward_flops) * batch;
  const double in = InputBytesPerSample(graph, layer) * batch;
  const double out = static_cast<double>(layer.output_bytes) * batch;
  const double weights = static_cast<double>(layer.params) * kBytesPerElement;
  LayerWork work;
  switch (layer.op) {
    case Op::kConv2d:
    case Op::kLinear: {
      // Backward = grad-input + grad-weight, each as much math as the forward; a layer reading
      // the graph input needs no grad-input. Weights: read once forward; backward reads them
      // (grad-input), writes grad-weight and accumulates it into .grad (read, read, write).
      const bool first = ReadsGraphInputOnly(layer);
      const bool bias = layer.attrs.bias;
      work.forward_flops = flops;
      work.backward_flops = first ? flops : 2 * flops;
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
      // Elementwise: forward reads and writes once; backward reads gradient and saved tensor and
      // writes the input gradient (1.5x the forward's traffic).
      work.forward_flops = flops;
      work.backward_flops = flops;
      work.forward_bytes = in + out;
      work.backward_bytes = 1.5 * (in + out);
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
    case Op::kMaxPool2d:
      // Forward also writes int64 argmax indices (2x the output's bytes); backward zero-fills the
      // input gradient, then reads gradient and indices and scatters into it.
      work.forward_flops = flops;
      work.backward_flops = flops;
      work.forward_bytes = in + 3 * out;
      work.backward_bytes = 2 * in + 3 * out;
      work.forward_kernels = 1;
      work.backward_kernels = 2;
      break;
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
    case Op::kFlatten:
      // A view: no data moves, but the framework still dispatches an op each way.
      work.forward_kernels = 1;
      work.backward_kernels = 1;
      break;
  }
  return work;
}

LayerTime RooflineTime(const DeviceModel& device, const LayerWork& work) {
  const double flops_per_ms = device.peak_tflops * 1e9 * device.compute_efficiency;
  const double bytes_per_ms = device.memory_bandwidth_gbps * 1e6 * device.memory_efficiency;
  auto time = [&](double flops, double bytes, int kernels) {
    return std::max(flops / flops_per_ms, bytes / bytes_per_ms) + kernels * device.launch_us / 1e3;
  };
  return {time(work.forward_flops, work.forward_bytes, work.forward_kernels),
          time(work.backward_flops, work.backward_bytes, work.backward_kernels)};
}

std::unique_ptr<Profile> MakeAnalyticalProfile(const DeviceModel& device) {
  return std::make_unique<AnalyticalProfile>(device);
}

}  // namespace deepool::planner
