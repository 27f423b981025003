// The devices a worker offers: parsed from --devices (cuda:all, cuda:0,1, cpu:N) and described
// (type, model, memory) for registration with the coordinator.
// Threading: pure functions plus a probe interface; the system probe reads /proc and runs
// nvidia-smi, so call it once at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::worker::daemon {

struct LocalDevice {
  std::string name;   // "cuda:0", "cpu:1": unique on this node
  std::string kind;   // "cuda" or "cpu"
  int index = 0;      // CUDA ordinal, or the CPU device's number
  std::string model;  // "NVIDIA A100-SXM4-80GB", "cpu"
  std::string type;   // profile/device-model name: "a100", "h100", "v100", "cpu", or the model
  int64_t memory_bytes = 0;
  // The executor's --device value: "cuda:K", or "cpu".
  std::string ExecutorDevice() const { return kind == "cuda" ? name : "cpu"; }
};

struct GpuInfo {
  int index = 0;
  std::string model;
  int64_t memory_bytes = 0;
};

// What the machine has; injected so parsing is tested without GPUs.
class DeviceProbe {
 public:
  virtual ~DeviceProbe() = default;
  virtual std::vector<GpuInfo> Gpus() const = 0;
  virtual int64_t HostMemoryBytes() const = 0;
};

// nvidia-smi when present (falling back to /proc/driver/nvidia/gpus), /proc/meminfo for RAM.
class SystemDeviceProbe final : public DeviceProbe {
 public:
  std::vector<GpuInfo> Gpus() const override;
  int64_t HostMemoryBytes() const override;
};

// "a100" for "NVIDIA A100-SXM4-80GB", "h100", "v100"; otherwise the model lower-cased with
// spaces as dashes.
std::string DeviceTypeForModel(std::string_view model);

// libtorch intra-op threads for an executor on one of `devices`' CPU devices: `host_cores`
// divided among the CPU devices, at least 1; 0 when there is no CPU device.
int CpuThreadsPerDevice(const std::vector<LocalDevice>& devices, int host_cores);

// The GPUs CUDA numbers for the executors, from the driver's (nvidia-smi's, in PCI bus order):
// the executors read CUDA_VISIBLE_DEVICES from the worker's environment, so ordinal K is the
// K-th GPU it lists, and the others are not this worker's to offer. `visible` null: all, as
// numbered. The worker sets CUDA_DEVICE_ORDER=PCI_BUS_ID for its executors, so that CUDA's order
// is nvidia-smi's. INVALID_ARGUMENT for entries that are not the driver's indices (GPU UUIDs
// and MIG instances are not supported) or name a GPU the driver does not list.
StatusOr<std::vector<GpuInfo>> GpusVisibleToCuda(std::vector<GpuInfo> gpus, const char* visible);

// Parses --devices. cuda:all needs at least one GPU (FAILED_PRECONDITION otherwise, saying so);
// cuda:0,1 needs those ordinals to exist; cpu:N (1 <= N <= 256) gives N CPU devices sharing the
// host memory equally. INVALID_ARGUMENT for anything else.
StatusOr<std::vector<LocalDevice>> ParseDevices(std::string_view spec, const DeviceProbe& probe);

}  // namespace deepool::worker::daemon
