// What a measurement ran on (planner::ProfileEnvironment): the device's model, the NVIDIA
// driver, the torch, CUDA and NCCL versions, torch's CPU threads, and the deepool commit the
// caller names. The profiler records it in every profile it writes.
// Threading: call from the thread that uses the device (it reads torch's thread count).
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <string_view>

#include "planner/profile_environment.h"

namespace deepool::worker {

// CUDA devices: the GPU's name, the driver, CUDA and NCCL; the CPU: the processor's model name
// and torch's intra-op threads. Fields it cannot read stay empty.
planner::ProfileEnvironment DescribeDevice(const c10::Device& device,
                                           const std::string& deepool_commit);

// The pieces it reads, testable on any text.
// The first "model name" of /proc/cpuinfo text; "" when there is none.
std::string CpuModelName(std::string_view cpuinfo);
// The version in /proc/driver/nvidia/version text ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Tue Mar  5 ..." gives "550.54.15"); "" when it has none.
std::string NvidiaDriverVersion(std::string_view proc_version);

namespace internal {
// device_cuda.cc: the CUDA device's name ("NVIDIA H200") and the CUDA runtime's version
// ("12.8"); empty strings without CUDA.
struct CudaDescription {
  std::string device_name;
  std::string runtime_version;
};
CudaDescription DescribeCudaDevice(int index);
}  // namespace internal

}  // namespace deepool::worker
