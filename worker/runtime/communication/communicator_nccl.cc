// The only file that touches ProcessGroupNCCL; compiled to a stub without CUDA.
//
// Every group's NCCL communicator is created eagerly, when the group is made (not lazily inside
// the first operation of iteration 0), in non-blocking mode so that its creation is bounded by
// the communicator's timeout: a peer that never joins becomes an error status, not a hang.
// Asynchronous NCCL errors and timed-out operations are handled by c10d's watchdog in
// "clean up only" mode: it aborts the communicators, and the failure surfaces as an exception
// from the next wait or operation (converted to a Status by the c10d communicator), instead of
// the default of tearing the whole process down.
#include "worker/runtime/communication/communicator_nccl.h"

#if DEEPOOL_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/runtime/communication/communicator_c10d.h"

// The NCCL header compiled against must be the one torch was built with (cmake/torch.cmake
// checks the version at configure time; this checks that the header actually included is it).
static_assert(NCCL_VERSION_CODE ==
                  NCCL_VERSION(DEEPOOL_NCCL_MAJOR, DEEPOOL_NCCL_MINOR, DEEPOOL_NCCL_PATCH),
              "nccl.h is not the NCCL version torch was built with: check the include order");
#endif

namespace deepool::worker {

#if DEEPOOL_HAVE_CUDA

namespace {

// c10d reads these once, when the first ProcessGroupNCCL is built. A value the operator set in
// the environment wins.
void ConfigureNcclErrorHandling(std::chrono::milliseconds timeout) {
  // 2 = CleanUpOnly: abort the communicators on an error or timeout, keep the process.
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
  // Bounds non-blocking communicator creation (seconds).
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
  setenv("TORCH_NCCL_NONBLOCKING_TIMEOUT", std::to_string(std::max<int64_t>(1, seconds)).c_str(),
         /*overwrite=*/0);
}

}  // namespace

bool NcclAvailable() { return true; }

Status CheckLoadedNccl() {
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess) return InternalError("ncclGetVersion failed");
  if (loaded != NCCL_VERSION_CODE) {
    return FailedPreconditionError(
        "the loaded NCCL library is version code " + std::to_string(loaded) + ", but torch was " +
        "built with " + std::to_string(NCCL_VERSION_CODE) +
        ": check LD_LIBRARY_PATH (the wheel's nvidia-nccl package must be the one loaded)");
  }
  return Status::Ok();
}

std::string LoadedNcclVersion() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "";
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z since 2.9 (X * 1000 + Y * 100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready) {
  RETURN_IF_ERROR(CheckLoadedNccl());
  ConfigureNcclErrorHandling(options.timeout);
  ASSIGN_OR_RETURN(auto store, internal::ConnectStore(options, on_store_ready));
  const at::Device device(at::kCUDA, c10::cuda::current_device());
  auto timeout = options.timeout;
  bool high_priority = options.high_priority_streams;
  internal::GroupFactory make_group = [timeout, high_priority, device](
                                          const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                          int size) {
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create(high_priority);
    // Bounds how long an operation may run before the watchdog reports it as failed.
    nccl_options->timeout = timeout;
    // Non-blocking communicator creation, polled by c10d with TORCH_NCCL_NONBLOCKING_TIMEOUT.
    nccl_options->config.blocking = 0;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl_options);
    // Creates the communicator now, on the rank's device, so that iteration 0 does not pay for
    // it and a missing peer fails here (an exception, turned into a Status by the caller).
    group->setBoundDeviceId(device);
    group->eagerConnectSingleDevice(device);
    return c10::intrusive_ptr<internal::C10dGroup>(group);
  };
  return internal::C10dCommunicator::Create(options, std::move(store), std::move(make_group),
                                            "nccl");
}

#else

bool NcclAvailable() { return false; }

Status CheckLoadedNccl() { return UnimplementedError("this build of deepool has no CUDA"); }

std::string LoadedNcclVersion() { return ""; }

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const CommOptions&,
                                                    const std::function<void(int port)>&) {
  return UnimplementedError("this build of deepool has no CUDA: NCCL is unavailable");
}

#endif

}  // namespace deepool::worker
