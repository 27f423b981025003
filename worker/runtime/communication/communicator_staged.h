// A communicator that runs a host backend (Gloo) on device tensors by staging them through host
// buffers: a test and benchmark path for several ranks on ONE GPU, where NCCL refuses two ranks
// on one device (`deepool-executor --share-gpu`, LaunchOptions::share_gpu). NCCL remains the
// production path for CUDA tensors: this one copies every transfer through host memory and
// blocks the host on each wait.
//
// Per operation, for each tensor the staging rule selects (by default: every tensor not on the
// CPU):
//   - at posting, a host copy of the tensor is taken after the work queued before it on the
//     calling thread's current stream (this blocks the host until the stream reached that point:
//     the device work it waits for is this rank's own, so no rank waits for another here), and
//     the inner communicator runs the operation on the host copy;
//   - Wait() waits for the inner operation (blocking the host, as Gloo does), then queues the
//     copies of the results (all-reduce sums, received tensors) back into the caller's tensors
//     on the calling thread's current stream, so what that stream runs next sees them; a send's
//     tensor is never written. WaitHost() also blocks until those copies finished.
//   - Results are copied back once, by the first successful wait; a failed inner wait copies
//     nothing and returns the inner status.
// Tensors the rule does not select go to the inner communicator as they are. The order and
// grouping of operations is the caller's, unchanged (each Exchange is one inner Exchange), so
// the matching rules of communicator.h hold as they do for the inner backend.
//
// Not for several ranks in one process on one GPU: the autograd engine runs every rank's CUDA
// backward on one device thread, and a wait inside backward (synchronised batch norm) would
// block the other ranks' backward behind it. Use one process per rank.
// Threading: as Communicator (one driving thread; its waits from that thread or the autograd
// thread it waits on).
#pragma once

#include <functional>
#include <memory>

#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/communication/communicator_gloo.h"

namespace deepool::worker {

struct StagingOptions {
  // Which tensors go through host buffers; unset: those not on the CPU. Tests stage CPU tensors
  // too, to check the staging on a machine without a GPU.
  std::function<bool(const torch::Tensor&)> stage;
};

// Wraps `inner`, a communicator on host tensors (Gloo, or a fake in tests).
std::unique_ptr<Communicator> MakeStagedCommunicator(std::unique_ptr<Communicator> inner,
                                                     StagingOptions options = {});

// ConnectGloo's rendezvous, wrapped in the staging communicator: for ranks that share a GPU.
StatusOr<std::unique_ptr<Communicator>> ConnectStaged(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready = {});

}  // namespace deepool::worker
