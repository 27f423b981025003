// The CUDA adapter of device_streams.h: dedicated streams made with cudaStreamCreateWithPriority
// and wrapped for c10 with getStreamFromExternal, c10's events, and at::cuda::CUDAGraph captures
// that are undone completely when they fail. Real only with DEEPOOL_HAVE_CUDA.
#include "worker/runtime/devices/device_streams.h"

#if DEEPOOL_HAVE_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "common/logging.h"
#endif

namespace deepool::worker {

#if DEEPOOL_HAVE_CUDA

namespace {

std::string FirstLine(const std::exception& e) {
  std::string message = e.what();
  if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
  return message;
}

Status CudaError(const std::string& what, cudaError_t error) {
  return InternalError(what + ": " + cudaGetErrorString(error));
}

// For clean-up steps that may legitimately fail because an earlier step already did them.
void IgnoreFailure(const char* what, const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    DP_LOG_DEBUG("CUDA graph clean-up, {}: {}", what, FirstLine(e));
  }
}

class CudaStream final : public DeviceStream {
 public:
  CudaStream(c10::DeviceIndex device, cudaStream_t raw, StreamPriority priority)
      : raw_(raw), stream_(c10::cuda::getStreamFromExternal(raw, device)), priority_(priority) {}
  ~CudaStream() override {
    c10::cuda::CUDAGuard guard(stream_.device_index());
    cudaError_t error = cudaStreamDestroy(raw_);
    if (error != cudaSuccess) DP_LOG_WARN("cudaStreamDestroy: {}", cudaGetErrorString(error));
  }
  StreamPriority priority() const override { return priority_; }
  const c10::cuda::CUDAStream& stream() const { return stream_; }

 private:
  cudaStream_t raw_;
  c10::cuda::CUDAStream stream_;
  StreamPriority priority_;
};

// `to` waits for the work queued on `from` so far.
void Order(const c10::cuda::CUDAStream& from, const c10::cuda::CUDAStream& to) {
  if (from == to) return;
  at::cuda::CUDAEvent event;
  event.record(from);
  event.block(to);
}

class CudaScope final : public StreamScope {
 public:
  CudaScope(const c10::cuda::CUDAStream& previous, const c10::cuda::CUDAStream& next)
      : previous_(previous), next_(next), guard_(next) {
    Order(previous_, next_);
  }
  ~CudaScope() override {
    try {
      Order(next_, previous_);
    } catch (const std::exception& e) {
      DP_LOG_WARN("leaving a CUDA stream: {}", FirstLine(e));
    }
  }

 private:
  c10::cuda::CUDAStream previous_;
  c10::cuda::CUDAStream next_;
  c10::cuda::CUDAStreamGuard guard_;
};

class CudaEvent final : public DeviceEvent {
 public:
  mutable at::cuda::CUDAEvent event;  // block() is non-const in c10
};

// Whether a CUDA generator state keeps one "capturing" flag for all captures (torch up to 2.11)
// rather than a state per capture id (2.12 on, which CUDAGraph's reset removes).
template <typename State, typename = void>
struct HasCapturingFlag : std::false_type {};
template <typename State>
struct HasCapturingFlag<State, std::void_t<decltype(std::declval<State&>().capturing_)>>
    : std::true_type {};

// at::cuda::CUDAGraph, with the state its failure paths leave behind made readable.
class RecoverableGraph final : public at::cuda::CUDAGraph {
 public:
  bool capture_ended() const { return capture_ended_; }
  c10::MempoolId_t pool_id() const { return mempool_id_; }

  // capture_begin put the generators it registered in capture mode, and only a successful
  // capture_end takes them out; with the flag left set, torch 2.11 refuses every later random
  // number drawn from the device's generator, whoever draws it ("Offset increment outside graph
  // capture encountered unexpectedly"). Seen on an H100 with torch 2.11; not yet run on a GPU
  // with this fix. torch 2.12 keeps no such flag, and this compiles to nothing there.
  void LeaveGeneratorCapture() {
    for (auto& entry : captured_generator_states_) ClearCapturingFlag(*entry.first);
  }

 private:
  template <typename State>
  static void ClearCapturingFlag(State& state) {
    if constexpr (HasCapturingFlag<State>::value) state.capturing_ = false;
  }
};

class CudaGraph final : public DeviceGraph {
 public:
  enum class State { kIdle, kCapturing, kReady, kDiscarded };

  explicit CudaGraph(const c10::cuda::CUDAStream& stream)
      : stream_(stream), impl_(std::make_unique<RecoverableGraph>()) {}
  ~CudaGraph() override {
    if (state_ == State::kCapturing) Discard();
  }

  // Undoes whatever part of a capture happened: CUDAGraph's own capture_end and destructor leave
  // the stream capturing, the allocators allocating to the graph's private pool, and the pool
  // referenced, when cudaStreamEndCapture fails (an invalidated capture) or is never reached.
  void Discard() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_.stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;  // an invalidated capture ends with an error and no graph
      (void)cudaStreamEndCapture(stream_.stream(), &partial);
      if (partial != nullptr) (void)cudaGraphDestroy(partial);
    }
    (void)cudaGetLastError();  // capture errors are not sticky: keep them from later checks
    const c10::MempoolId_t pool = impl_->pool_id();
    if (!impl_->capture_ended() && (pool.first != 0 || pool.second != 0)) {
      const c10::DeviceIndex device = stream_.device_index();
      using c10::cuda::CUDACachingAllocator::endAllocateToPool;
      using c10::cuda::CUDACachingAllocator::releasePool;
      IgnoreFailure("device pool", [&] { endAllocateToPool(device, pool); });
      IgnoreFailure("host pool",
                    [&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); });
      IgnoreFailure("device pool ref", [&] { releasePool(device, pool); });
      IgnoreFailure("host pool ref", [&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
    }
    if (!impl_->capture_ended()) impl_->LeaveGeneratorCapture();
    // CUDAGraph::reset (in its destructor) drops the graph from the registry of capturing graphs
    // and the random generators' per-capture state.
    impl_.reset();
    state_ = State::kDiscarded;
  }

  const c10::cuda::CUDAStream& stream() const { return stream_; }
  RecoverableGraph& impl() { return *impl_; }
  State state() const { return state_; }
  void set_state(State state) { state_ = state; }

 private:
  c10::cuda::CUDAStream stream_;
  std::unique_ptr<RecoverableGraph> impl_;
  State state_ = State::kIdle;
};

class CudaDeviceStreams final : public DeviceStreams {
 public:
  explicit CudaDeviceStreams(c10::DeviceIndex device) : device_(device) {}

  StatusOr<std::unique_ptr<DeviceStream>> CreateStream(StreamPriority priority) override {
    c10::cuda::CUDAGuard guard(device_);
    int least = 0, greatest = 0;
    cudaError_t error = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (error != cudaSuccess) return CudaError("cudaDeviceGetStreamPriorityRange", error);
    const int value = priority == StreamPriority::kHigh  ? greatest
                      : priority == StreamPriority::kLow ? least
                                                         : 0;
    // Non-blocking: no implicit ordering with the legacy default stream, like c10's streams.
    cudaStream_t raw = nullptr;
    error = cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, value);
    if (error != cudaSuccess) return CudaError("cudaStreamCreateWithPriority", error);
    return std::unique_ptr<DeviceStream>(std::make_unique<CudaStream>(device_, raw, priority));
  }

  StatusOr<std::unique_ptr<StreamScope>> MakeCurrent(DeviceStream& stream) override {
    try {
      auto previous = c10::cuda::getCurrentCUDAStream(device_);
      return std::unique_ptr<StreamScope>(std::make_unique<CudaScope>(previous, Cuda(stream)));
    } catch (const std::exception& e) {
      return InternalError("entering a CUDA stream: " + FirstLine(e));
    }
  }

  StatusOr<std::unique_ptr<DeviceEvent>> RecordEvent(DeviceStream& stream) override {
    try {
      auto event = std::make_unique<CudaEvent>();
      event->event.record(Cuda(stream));
      return std::unique_ptr<DeviceEvent>(std::move(event));
    } catch (const std::exception& e) {
      return InternalError("recording a CUDA event: " + FirstLine(e));
    }
  }

  Status WaitEvent(DeviceStream& stream, const DeviceEvent& event) override {
    try {
      static_cast<const CudaEvent&>(event).event.block(Cuda(stream));
    } catch (const std::exception& e) {
      return InternalError("waiting for a CUDA event: " + FirstLine(e));
    }
    return Status::Ok();
  }

  Status Synchronize(DeviceStream& stream) override {
    try {
      Cuda(stream).synchronize();
    } catch (const std::exception& e) {
      return InternalError("synchronising a CUDA stream: " + FirstLine(e));
    }
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<DeviceGraph>> BeginCapture(DeviceStream& stream) override;
  Status EndCapture(DeviceGraph& graph) override;
  Status Replay(DeviceGraph& graph, DeviceStream& stream) override;

 private:
  static const c10::cuda::CUDAStream& Cuda(DeviceStream& stream) {
    return static_cast<CudaStream&>(stream).stream();
  }

  c10::DeviceIndex device_;
};

StatusOr<std::unique_ptr<DeviceGraph>> CudaDeviceStreams::BeginCapture(DeviceStream& stream) {
  const c10::cuda::CUDAStream& cuda = Cuda(stream);
  auto graph = std::make_unique<CudaGraph>(cuda);
  try {
    if (c10::cuda::getCurrentCUDAStream(device_) != cuda) {
      return FailedPreconditionError("capture on a stream that is not the thread's current one");
    }
    graph->set_state(CudaGraph::State::kCapturing);
    // Thread-local: the FG thread keeps allocating and synchronising meanwhile.
    graph->impl().capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  } catch (const std::exception& e) {
    graph->Discard();
    return InternalError("beginning a CUDA graph capture: " + FirstLine(e));
  }
  return std::unique_ptr<DeviceGraph>(std::move(graph));
}

Status CudaDeviceStreams::EndCapture(DeviceGraph& base) {
  auto& graph = static_cast<CudaGraph&>(base);
  if (graph.state() != CudaGraph::State::kCapturing) {
    return FailedPreconditionError("no CUDA graph capture in progress");
  }
  try {
    // capture_end checks that the capturing stream is current (unwinding may have left another).
    c10::cuda::CUDAStreamGuard guard(graph.stream());
    graph.impl().capture_end();
  } catch (const std::exception& e) {
    graph.Discard();
    return InternalError("CUDA graph capture failed: " + FirstLine(e));
  }
  graph.set_state(CudaGraph::State::kReady);
  return Status::Ok();
}

Status CudaDeviceStreams::Replay(DeviceGraph& base, DeviceStream& stream) {
  auto& graph = static_cast<CudaGraph&>(base);
  if (graph.state() != CudaGraph::State::kReady) {
    return FailedPreconditionError("the CUDA graph has no successful capture to replay");
  }
  try {
    c10::cuda::CUDAStreamGuard guard(Cuda(stream));
    graph.impl().replay();
  } catch (const std::exception& e) {
    return InternalError("replaying a CUDA graph: " + FirstLine(e));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::shared_ptr<DeviceStreams>> MakeCudaDeviceStreams(int device_index) {
  const int count = static_cast<int>(c10::cuda::device_count());
  if (device_index < 0 || device_index >= count) {
    return FailedPreconditionError("cuda:" + std::to_string(device_index) + " requested but " +
                                   std::to_string(count) + " CUDA devices are visible");
  }
  return std::shared_ptr<DeviceStreams>(
      std::make_shared<CudaDeviceStreams>(static_cast<c10::DeviceIndex>(device_index)));
}

#else  // !DEEPOOL_HAVE_CUDA

StatusOr<std::shared_ptr<DeviceStreams>> MakeCudaDeviceStreams(int device_index) {
  return UnimplementedError("cuda:" + std::to_string(device_index) +
                            " streams requested but this build of deepool has no CUDA support");
}

#endif

}  // namespace deepool::worker
