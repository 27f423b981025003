// NCCL communicator for CUDA tensors (c10d ProcessGroupNCCL behind the same interface as Gloo).
// Built for real only where libtorch has CUDA (DEEPOOL_HAVE_CUDA); elsewhere ConnectNccl returns
// UNIMPLEMENTED, so callers need no #ifdef.
// Threading: as Communicator (one driving thread).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "worker/runtime/communication/communicator_gloo.h"

namespace deepool::worker {

// True when this build can create NCCL communicators.
bool NcclAvailable();

// OK when the NCCL library loaded at run time is the version torch was built with (a different
// libnccl earlier on the library path would otherwise be used silently); FAILED_PRECONDITION
// naming both versions otherwise. Needs no GPU. ConnectNccl checks it first.
Status CheckLoadedNccl();

// The loaded NCCL library's version ("2.27.3"); "" when this build has no CUDA or the call fails.
std::string LoadedNcclVersion();

// Same rendezvous as ConnectGloo; groups are ProcessGroupNCCL over the rank's current CUDA
// device (the caller selects it first).
StatusOr<std::unique_ptr<Communicator>> ConnectNccl(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready = {});

}  // namespace deepool::worker
