// CUDA device context (device.h). The other CUDA code of the runtime: communicator_nccl.cc,
// profiler_cuda.cc and device_streams_cuda.cc (streams, events and graphs for device sharing).
#include "worker/runtime/devices/device.h"
#include "worker/runtime/devices/device_description.h"

#if DEEPOOL_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace deepool::worker::internal {

#if DEEPOOL_HAVE_CUDA

namespace {

class CudaContext final : public DeviceContext {
 public:
  explicit CudaContext(int index) : index_(index) {}
  torch::Device device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index_));
  }
  void Synchronize() override {
    c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)).synchronize();
  }

 private:
  int index_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceContext>> MakeCudaContext(int index) {
  int count = static_cast<int>(c10::cuda::device_count());
  if (index >= count) {
    return FailedPreconditionError("cuda:" + std::to_string(index) + " requested but " +
                                   std::to_string(count) + " CUDA devices are visible");
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  return std::unique_ptr<DeviceContext>(new CudaContext(index));
}

int64_t CudaPeakAllocatedBytes(int index) {
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) return 0;
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

CudaDescription DescribeCudaDevice(int index) {
  CudaDescription out;
  if (index < 0 || index >= static_cast<int>(c10::cuda::device_count())) return out;
  out.device_name = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->name;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess && runtime > 0) {
    out.runtime_version =
        std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  }
  return out;
}

#else

int64_t CudaPeakAllocatedBytes(int /*index*/) { return 0; }

StatusOr<std::unique_ptr<DeviceContext>> MakeCudaContext(int index) {
  return UnimplementedError("cuda:" + std::to_string(index) +
                            " requested but this build of deepool has no CUDA support");
}

CudaDescription DescribeCudaDevice(int) { return {}; }

#endif

}  // namespace deepool::worker::internal
