// Device-specific parts of sharing a device with a BG job, over the DeviceStreams interface
// (device_streams.h; CUDA adapter in device_streams_cuda.cc). Device-independent itself, so it
// runs on CPU against a fake.
//
//   - Streams: the FG rank and the BG job each compute on a dedicated stream, never one of c10's
//     pool streams (ProcessGroupNCCL takes its streams from that pool, so a pool stream could be
//     an NCCL stream or the other job's). With priority_streams on, FG's is high priority and
//     BG's low; off (the naive collocation baseline), both default priority, still separate.
//   - The BG stepper: on a device with streams a GraphStepper (background_graph_stepper.h), which
//     captures the BG iteration as a graph where CudaGraphCapturable allows it, and runs it in
//     eager layer units otherwise. A job that runs eagerly (refused, or after a failed capture)
//     waits for FG idle periods even in concurrent mode (the autograd device thread is shared;
//     the stepper's header says why), unless the mode was set to concurrent explicitly.
//   - CPU devices have no streams (MakeSharingStreams gives nullptr): streams are no-ops and the
//     BG stepper is the eager trainer, gated by the gate's mode alone.
//
// Threading: EnterForegroundStream affects the calling thread only; call it on the FG thread and
// destroy the result there. The BG stepper enters its stream on the BG thread (EnterThread).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "common/clock.h"
#include "common/status.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/devices/device_streams.h"

namespace deepool::worker {

// The streams of `device`: nullptr for CPU devices, the CUDA adapter for cuda:K.
StatusOr<std::shared_ptr<DeviceStreams>> MakeSharingStreams(const torch::Device& device);

// FG: high, or default with priority_streams off. BG: low, or default.
StreamPriority SharingStreamPriority(bool foreground, const SharingOptions& options);

// Makes a dedicated FG stream current on the calling thread until the result is destroyed (on
// that thread). nullptr when `streams` is null (CPU devices).
StatusOr<std::unique_ptr<ScopedStream>> EnterForegroundStream(
    std::shared_ptr<DeviceStreams> streams, const SharingOptions& options);

// The stepper the BG thread drives, with the BG job's trainer (built here). Without streams:
// the eager trainer itself. With streams: a GraphStepper that owns a new BG stream, with the
// trainer built while that stream is current; eager from the start (logged) when cuda_graphs
// is off or CudaGraphCapturable refuses. With spec.checkpoints, wrapped in a
// CheckpointingStepper timed by `clock` (background_checkpoints.h).
StatusOr<std::unique_ptr<BackgroundStepper>> MakeBackgroundStepper(
    const BackgroundSpec& spec, torch::Device device, std::shared_ptr<DeviceStreams> streams,
    const Clock* clock);

// Whether MakeBackgroundStepper would capture this job as a graph on a device with streams, and
// if not, why (for logs and docs; pure).
Status CudaGraphCapturable(const BackgroundSpec& spec);

}  // namespace deepool::worker
