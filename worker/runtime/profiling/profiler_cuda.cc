// The profiler's CUDA-event timer; the only profiler code that needs CUDA.
#include <memory>

#include "worker/runtime/profiling/profiler.h"

#if DEEPOOL_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace deepool::worker::internal {

#if DEEPOOL_HAVE_CUDA

namespace {

// About 1 ms at an H100's or A100's boost clock (longer at lower clocks): more than the host
// takes to issue one layer's forward or backward, so the GPU is still spinning when the last
// launch arrives.
constexpr int64_t kQueueSpinCycles = 2'000'000;

// Events recorded on the device's current stream around the work; StopMs waits for the stop
// event only, so the host does not serialise with unrelated streams. With CudaTiming::kDevice,
// a spin kernel ahead of the start event holds the stream while the work is issued.
class CudaEventTimer final : public DeviceTimer {
 public:
  CudaEventTimer(int index, CudaTiming timing)
      : index_(static_cast<c10::DeviceIndex>(index)),
        timing_(timing),
        start_(cudaEventDefault),  // timing enabled (the default CUDAEvent disables it)
        stop_(cudaEventDefault) {}

  void Start() override {
    c10::cuda::CUDAGuard guard(index_);
    if (timing_ == CudaTiming::kDevice) at::cuda::sleep(kQueueSpinCycles);  // current stream
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
  CudaTiming timing_;
  at::cuda::CUDAEvent start_;
  at::cuda::CUDAEvent stop_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceTimer>> MakeCudaEventTimer(int index, CudaTiming timing) {
  return std::unique_ptr<DeviceTimer>(std::make_unique<CudaEventTimer>(index, timing));
}

#else

StatusOr<std::unique_ptr<DeviceTimer>> MakeCudaEventTimer(int index, CudaTiming /*timing*/) {
  return UnimplementedError("cuda:" + std::to_string(index) +
                            " timing requested but this build of deepool has no CUDA support");
}

#endif

}  // namespace deepool::worker::internal
