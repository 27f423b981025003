// The profiler's CUDA-event timer; the only profiler code that needs CUDA.
#include <memory>

#include "worker/runtime/profiler.h"

#if DEEPOOL_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace deepool::worker::internal {

#if DEEPOOL_HAVE_CUDA

namespace {

// Events recorded on the device's current stream around the work; StopMs waits for the stop
// event only, so the host does not serialise with unrelated streams.
class CudaEventTimer final : public DeviceTimer {
 public:
  explicit CudaEventTimer(int index)
      : index_(static_cast<c10::DeviceIndex>(index)),
        start_(cudaEventDefault),  // timing enabled (the default CUDAEvent disables it)
        stop_(cudaEventDefault) {}

  void Start() override {
    c10::cuda::CUDAGuard guard(index_);
    start_.record(c10::cuda::getCurrentCUDAStream(index_));
  }

  double StopMs() override {
    c10::cuda::CUDAGuard guard(index_);
    stop_.record(c10::cuda::getCurrentCUDAStream(index_));
    stop_.synchronize();
    return static_cast<double>(start_.elapsed_time(stop_));
  }

 private:
  c10::DeviceIndex index_;
  at::cuda::CUDAEvent start_;
  at::cuda::CUDAEvent stop_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceTimer>> MakeCudaEventTimer(int index) {
  return std::unique_ptr<DeviceTimer>(std::make_unique<CudaEventTimer>(index));
}

#else

StatusOr<std::unique_ptr<DeviceTimer>> MakeCudaEventTimer(int index) {
  return UnimplementedError("cuda:" + std::to_string(index) +
                            " timing requested but this build of deepool has no CUDA support");
}

#endif

}  // namespace deepool::worker::internal
