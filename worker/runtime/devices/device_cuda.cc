// CUDA device context (device.h). The other CUDA code of the runtime: communicator_nccl.cc,
// profiler_cuda.cc and device_streams_cuda.cc (streams, events and graphs for device sharing).
#include "worker/runtime/devices/device.h"

#if DEEPOOL_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
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

#else

StatusOr<std::unique_ptr<DeviceContext>> MakeCudaContext(int index) {
  return UnimplementedError("cuda:" + std::to_string(index) +
                            " requested but this build of deepool has no CUDA support");
}

#endif

}  // namespace deepool::worker::internal
