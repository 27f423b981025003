// The only file that touches ProcessGroupNCCL; compiled to a stub without CUDA.
#include "worker/runtime/communicator_nccl.h"

#if DEEPOOL_HAVE_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/runtime/communicator_c10d.h"
#endif

namespace deepool::worker {

#if DEEPOOL_HAVE_CUDA

bool NcclAvailable() { return true; }

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready) {
  ASSIGN_OR_RETURN(auto store, internal::ConnectStore(options, on_store_ready));
  auto timeout = options.timeout;
  internal::GroupFactory make_group = [timeout](const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size) {
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    // Bounds how long a collective may run before it is reported as failed, instead of hanging.
    nccl_options->timeout = timeout;
    // NCCL's own streams keep normal priority (the multiplexed jobs' streams carry the priorities).
    nccl_options->is_high_priority_stream = false;
    return c10::intrusive_ptr<internal::C10dGroup>(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl_options));
  };
  return internal::C10dCommunicator::Create(options, std::move(store), std::move(make_group),
                                            "nccl");
}

#else

bool NcclAvailable() { return false; }

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const CommOptions&,
                                                    const std::function<void(int port)>&) {
  return UnimplementedError("this build of deepool has no CUDA: NCCL is unavailable");
}

#endif

}  // namespace deepool::worker
