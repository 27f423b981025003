// Device-specific parts of sharing a device with a BG job, behind one interface (the CUDA code
// is in background_cuda_mux.cc, compiled for real only with DEEPOOL_HAVE_CUDA):
//   - the stream a thread computes on: FG on a high-priority stream and BG on a low-priority
//     stream (both from c10's stream pool; with priority_streams off, both low priority, which is
//     naive collocation); a no-op on CPU devices;
//   - the BG stepper: on CUDA with cuda_graphs on, the BG iteration is captured once as a CUDA
//     graph (after warm-up iterations) and each unit replays it; otherwise the eager,
//     layer-by-layer trainer.
// Threading: EnterSharingStream affects the calling thread only; call it on the thread that
// computes and keep the returned object alive while it does.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "common/status.h"
#include "worker/runtime/background_spec.h"
#include "worker/runtime/background_trainer.h"

namespace deepool::worker {

// Makes the calling thread's current stream on `device` the FG (foreground = true) or BG stream
// until the returned object is destroyed. nullptr on CPU devices.
std::shared_ptr<void> EnterSharingStream(const torch::Device& device, bool foreground,
                                         const SharingOptions& options);

// The stepper the BG thread drives. Takes the trainer; returns it unchanged on CPU devices, when
// cuda_graphs is off, or when the model cannot be captured (dropout masks are drawn on the host,
// Adam keeps its step count on the host); those cases are logged.
StatusOr<std::unique_ptr<BackgroundStepper>> MakeBackgroundStepper(
    std::unique_ptr<BackgroundTrainer> trainer, const SharingOptions& options);

// Whether MakeBackgroundStepper would capture this job as a CUDA graph on a CUDA device, and if
// not, why (for logs and docs; pure, usable without CUDA).
Status CudaGraphCapturable(const BackgroundSpec& spec);

}  // namespace deepool::worker
