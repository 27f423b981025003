// The layer profiler: measures every graph layer's forward and backward time at a list of
// per-device batch sizes on one device and fills the planner's ProfileData (written with
// planner::ProfileToJson, read back with planner::ParseProfile).
//
// Each layer is built on its own (BuildLayerModule), in training mode, fed random inputs of its
// IR input shapes (inputs that come from other layers require grad, the graph input does not,
// as in training), and timed `warmup + repeats` times: forward, then backward from a random
// output gradient. The reported time is the median of the `repeats` timed runs.
//
// At a precision (ProfilerOptions::precision) the layers run as the executor trains at it
// (layers/precision_scope.h): the device's math mode set for it, inputs from other layers (the
// activations that cross between layers and device sets) in its compute dtype, the graph input
// as the data gives it, the forward under autocast (bf16, fp16) and the backward after it,
// outside autocast, from an output gradient of the output's dtype; the profile records the
// precision. Unset: fp32 tensors in the device's default math mode, unrecorded, as before.
//
// Timing goes through DeviceTimer: on the CPU a clock read around the work, on CUDA a pair of
// CUDA events on the current stream, around the work as issued or, with CudaTiming::kDevice,
// with the launches queued behind a spin kernel so that only the GPU's time counts
// (profiler_cuda.cc, compiled only with DEEPOOL_HAVE_CUDA).
//
// Threading: a LayerProfiler is used from one thread; it runs its layers one after another.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "planner/graph.h"
#include "planner/precision.h"
#include "planner/profile_table.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/profiling/iteration_overhead.h"

namespace deepool::worker {

// Measures the time of work issued to a device between Start and StopMs.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void Start() = 0;
  // Waits for the work issued since Start to finish; returns its duration in milliseconds.
  virtual double StopMs() = 0;
};

// Wall time between Start and StopMs, read from `clock` (which must outlive the timer). CPU ops
// run synchronously on the calling thread and its intra-op pool, so no wait is needed.
std::unique_ptr<DeviceTimer> MakeCpuTimer(const Clock& clock);

// How a CUDA timer counts a layer's work.
enum class CudaTiming {
  // Events around the work as issued: each layer also pays the host's dispatch and launch
  // latency between the events (on an H100, 0.05-0.1 ms a layer): for a runtime that cannot
  // keep the GPU busy.
  kWithLaunch,
  // The kernels' time on the GPU: a short spin kernel (about 1 ms) is queued ahead of the start
  // event, so the layer's launches queue up behind it and the host's launch latency falls
  // outside the events, as in an iteration that keeps the GPU busy. A layer whose launches
  // take longer than the spin still counts the excess. The default: deepool's executor keeps an
  // H200 busy, and this timing predicted its one-GPU iterations far better (docs/results/
  // gpu-node.md, fourth session).
  kDevice,
};
// "device" / "with-launch"; INVALID_ARGUMENT otherwise.
StatusOr<CudaTiming> ParseCudaTiming(const std::string& name);

// The timer for `device`: MakeCpuTimer for the CPU, CUDA events for a CUDA device, counting as
// `cuda_timing` says (UNIMPLEMENTED when this build has no CUDA).
StatusOr<std::unique_ptr<DeviceTimer>> MakeDeviceTimer(
    const c10::Device& device, const Clock& clock, CudaTiming cuda_timing = CudaTiming::kDevice);

struct ProfilerOptions {
  std::vector<int64_t> batch_sizes;  // per-device batches, each >= 1
  int warmup = 2;                    // untimed runs per (layer, batch)
  int repeats = 5;                   // timed runs per (layer, batch); the median is reported
  uint64_t seed = 0;                 // weights and random inputs
  std::string device_name;           // the profile's "device" field, e.g. "cpu", "h100"
  // The precision to time the layers at and to record (see the file comment); unset: fp32,
  // unrecorded.
  std::optional<planner::Precision> precision;
};

// Called before each layer is measured: index in [0, count), the layer's name.
using ProfileProgress = std::function<void(int index, int count, const std::string& layer)>;

class LayerProfiler {
 public:
  // `timer` must outlive the profiler and time work on `device`.
  LayerProfiler(c10::Device device, DeviceTimer* timer, ProfilerOptions options,
                ProfileProgress progress = nullptr);

  // Profiles every layer of `graph`. Errors name the layer and batch.
  StatusOr<planner::ProfileData> Run(const planner::Graph& graph);

  // Profiles one layer at one batch.
  StatusOr<planner::BatchTime> MeasureLayer(const planner::Graph& graph, int layer_id,
                                            int64_t batch);

 private:
  Status Validate() const;

  c10::Device device_;
  DeviceTimer* timer_;
  ProfilerOptions options_;
  ProfileProgress progress_;
};

// What `deepool profile` / deepool-profile do: profile a zoo model or a graph file on a device
// and write the profile JSON.
struct ProfileToolOptions {
  std::string model;                         // zoo model name, or
  std::string graph_path;                    // a layer graph JSON file
  planner::zoo::ModelOptions model_options;  // zoo models; defaults: the zoo's (zoo.h)
  std::string device = "cpu";                // "cpu" or "cuda:K"
  std::string device_name;                   // the profile's "device" field; default: `device`
  std::vector<int64_t> batch_sizes;
  int warmup = 2;
  int repeats = 5;
  int threads = 0;  // torch intra-op threads on the CPU; 0: libtorch's default
  // The precision the layers and the iteration overhead are timed at, recorded in the profile
  // (ProfilerOptions::precision); unset: fp32, unrecorded.
  std::optional<planner::Precision> precision;
  // CUDA devices only (INVALID_ARGUMENT on the CPU); unset: CudaTiming::kDevice.
  std::optional<CudaTiming> cuda_timing;
  uint64_t seed = 0;
  // Also measure the iteration overhead at every batch (iteration_overhead.h), with this
  // optimizer's step in it.
  bool iteration_overhead = true;
  OptimizerSpec overhead_optimizer = OverheadOptions().optimizer;
  std::string output_path;
  // The profile's environment.deepool: the commit of the program that measures (its main passes
  // BuildCommit(); the runtime library itself does not link the build's commit).
  std::string deepool_commit;
  // CPU devices: deepool-calibrate's path, run with two ranks on this host to fit the profile's
  // "links" (its collectives cost what no preset knows: Gloo between processes sharing the
  // host's cores); empty: none measured. Its failure is a warning, not the profile's.
  std::string link_tool;
};

// Writes progress ("[i/n] layer") to `progress`, and what the profile was measured on
// (device_description.h) into it. INVALID_ARGUMENT / NOT_FOUND for bad options, models or files.
Status RunProfileTool(const ProfileToolOptions& options, std::ostream& progress);

// The median of `values` (the mean of the two middle ones for an even count); 0 when empty.
double Median(std::vector<double> values);

}  // namespace deepool::worker
