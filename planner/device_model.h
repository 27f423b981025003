// Analytical (roofline) device model: per-layer time from FLOPs and bytes moved against a
// device's peak compute and memory bandwidth, plus a fixed cost per kernel launch, so plans can
// be made for hardware nobody has measured. Rules per op and the presets' numbers (with
// sources) are in docs/formats.md, section "Profiles"; validation against the measured A100
// VGG-16 file is in docs/benchmarks.md ("Device model validation").
//
//   time = max(compute, bytes / (memory_bandwidth_gbps * memory_efficiency)) + kernels * launch_us
//   compute = sum over GEMM-shaped parts (conv, linear) of
//               flops / (peak_tflops * compute_efficiency * depth / (depth + gemm_half_depth)
//                        * outputs / (outputs + gemm_half_outputs))
//             + other flops / (peak_tflops * compute_efficiency)
// evaluated separately for forward and backward at the per-device batch. `depth` is the GEMM's
// reduction length (e.g. in_channels x kernel area for a forward convolution): a short reduction
// cannot amortise a tile's fixed costs (loading and writing its output, pipeline fill), so it
// runs further from peak. `outputs` is the GEMM's output elements (flops / (2 x depth)): one with
// few cannot fill the GPU's SMs with tiles (e.g. Inception-v3's convolutions on 8x8 maps).
// Precision (precision.h): a preset has a dense peak per precision it supports; the model is
// evaluated at one, whose peak is peak_tflops and whose element width sizes the activations and
// their gradients in the bytes moved (weights, their gradients and the optimizer stay fp32).
// Threading: DeviceModel is a plain value; the analytical profile is immutable and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/precision.h"
#include "planner/profile.h"

namespace deepool::planner {

struct DeviceModel {
  std::string name;  // "a100", ...
  // The precision the model times: its math (peak_tflops) and its activations' width.
  Precision precision = Precision::kFp32;
  double peak_tflops = 0;            // dense peak at `precision`
  double memory_bandwidth_gbps = 0;  // GB/s of device memory
  double compute_efficiency = 1;     // fraction of peak_tflops that large conv/linear reach
  double memory_efficiency = 1;      // fraction of the bandwidth that streaming kernels reach
  double launch_us = 0;              // fixed cost of one kernel launch
  double gemm_half_depth = 0;        // reduction length at which a GEMM reaches half efficiency
  double gemm_half_outputs = 0;      // output elements at which a GEMM reaches half; 0: no term
  double memory_gb = 0;              // capacity (DeviceMemoryGbOr's default)

  Status Validate() const;
};

// Presets "a100", "h100", "h200", "v100", "cpu" (numbers and sources in docs/formats.md), at
// the preset's default precision: what deepool's runtime trains at (fp32 tensors, TF32
// convolutions on Ampere and later): tf32 on a100, h100 and h200, fp32 on v100 and cpu.
// NOT_FOUND naming the known presets for another name.
StatusOr<DeviceModel> DevicePreset(std::string_view name);
// The preset at `precision`, with that precision's peak; INVALID_ARGUMENT naming the preset,
// the precision and the ones it supports when the device has no such math (V100: no TF32, no
// bf16).
StatusOr<DeviceModel> DevicePreset(std::string_view name, Precision precision);
std::vector<std::string> DevicePresetNames();
// The GiB of memory of one device of `device_type`: `known_gb` when > 0 (a cluster file's
// device_memory_gb, the memory a worker reports for its device), else the type's preset's
// memory_gb; 0 (unknown) for a type that is no preset. `deepool plan` and the coordinator both
// size plans by it (docs/planner.md, "Memory").
double DeviceMemoryGbOr(double known_gb, std::string_view device_type);
// The preset's default precision (the one DevicePreset(name) uses); NOT_FOUND as DevicePreset.
StatusOr<Precision> DefaultPrecision(std::string_view name);
// The precisions the preset supports, in Precision's order; NOT_FOUND as DevicePreset.
StatusOr<std::vector<Precision>> SupportedPrecisions(std::string_view name);

// A matrix-multiply-shaped part of a layer's work.
struct GemmPart {
  double flops = 0;
  double depth = 0;  // reduction length
};

// The work of one layer at a batch: what the roofline is evaluated on.
struct LayerWork {
  double forward_flops = 0;   // all forward math, GEMM parts included
  double backward_flops = 0;  // all backward math, GEMM parts included
  // GEMM-shaped parts of the flops above (unused entries have zero flops); the rest of the
  // flops run at plain compute efficiency.
  std::array<GemmPart, 2> forward_gemms{};
  std::array<GemmPart, 2> backward_gemms{};
  double forward_bytes = 0;
  double backward_bytes = 0;
  int forward_kernels = 0;
  int backward_kernels = 0;
};

// Work of graph layer `layer_id` at `batch` samples, by the per-op rules, with activations and
// their gradients of BytesPerElement(precision) bytes per element (weights, their
// gradients and max pooling's int64 indices keep their widths).
LayerWork EstimateLayerWork(const Graph& graph, int layer_id, int64_t batch,
                            Precision precision = Precision::kFp32);
// The roofline time of `work` on `device`.
LayerTime RooflineTime(const DeviceModel& device, const LayerWork& work);

// A Profile answering every layer at every batch >= 1 from the model, at device.precision
// (Profile::precision()). Source: "analytical:<name>", followed by " (<precision>)" unless the
// precision is the preset's default (a model not named after a preset always names it).
std::unique_ptr<Profile> MakeAnalyticalProfile(const DeviceModel& device);

}  // namespace deepool::planner
