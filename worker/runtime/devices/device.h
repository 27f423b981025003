// The device an executor computes on: "cpu" or "cuda:K". CUDA specifics (selecting the device,
// stream synchronisation) live in device_cuda.cc, compiled for real only with DEEPOOL_HAVE_CUDA;
// the streams, events and graphs of device sharing are behind device_streams.h.
// Threading: a DeviceContext belongs to one executor thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deepool::worker {

struct DeviceSpec {
  bool cuda = false;
  int index = 0;
  std::string ToString() const;  // "cpu" or "cuda:K"
  torch::Device torch_device() const;
};

// Accepts "cpu", "cuda" (= cuda:0) and "cuda:K".
StatusOr<DeviceSpec> ParseDevice(std::string_view text);

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  virtual torch::Device device() const = 0;
  // Blocks until the work the calling thread queued on its current stream finished (a no-op on
  // CPU); timing points call it. With a BG job sharing the device that is the FG stream, so the
  // FG rank never waits for BG work here (a device-wide synchronisation would).
  virtual void Synchronize() = 0;
};

// Fails when the device is CUDA and this build or machine has none.
StatusOr<std::unique_ptr<DeviceContext>> MakeDeviceContext(const DeviceSpec& spec);

// The most memory this process has held on `device` so far, what the planner's memory model
// predicts (iteration lines' peak_memory_bytes, docs/runtime.md): on a GPU the CUDA caching
// allocator's peak of allocated bytes (torch.cuda.max_memory_allocated); on CPU the process's peak
// resident set (VmHWM of /proc/self/status, getrusage's ru_maxrss where there is none), which
// includes libtorch and the data. 0 when unknown.
int64_t PeakMemoryBytes(const torch::Device& device);

namespace internal {
// device_cuda.cc: selects the CUDA device and returns its context; UNIMPLEMENTED without CUDA.
StatusOr<std::unique_ptr<DeviceContext>> MakeCudaContext(int index);
// device_cuda.cc: the caching allocator's peak allocated bytes on cuda:index; 0 without CUDA.
int64_t CudaPeakAllocatedBytes(int index);
}  // namespace internal

}  // namespace deepool::worker
