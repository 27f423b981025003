// Attaching a BG job to an FG executor rank, in one object the executor process holds: it wraps
// the rank's communicator (so waits mark the FG rank idle), puts the FG thread on its dedicated
// stream (multiplex_device.h),
// builds the BG trainer/stepper and its thread, adds the sharing fields to progress lines, and
// stops the BG job when the FG rank is done.
//
// Threading: Attach, Start, Decorate and Finish are called by the FG (executor) thread; the BG
// job runs on the runner's own thread.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/devices/device_streams.h"
#include "worker/runtime/background/multiplex_gate.h"

namespace deepool::worker {

// A BG job ready to run on a device: its stepper, and the runner whose thread drives it through
// `gate` (demoted to the idle scheduling class as `spec.sharing` asks, and on the stepper's BG
// stream). Not started. `streams`: the device's (multiplex_device.h), null on CPU. Shared by
// DeviceSharing (a run spec's BG job) and BackgroundHost (one attached at run time). Destroy the
// runner before the stepper.
struct BackgroundJobThread {
  std::unique_ptr<BackgroundStepper> stepper;
  std::unique_ptr<BackgroundRunner> runner;
};
StatusOr<BackgroundJobThread> BuildBackgroundJobThread(const BackgroundSpec& spec,
                                                       torch::Device device, DeviceGate* gate,
                                                       const Clock* clock,
                                                       std::shared_ptr<DeviceStreams> streams);

class DeviceSharing {
 public:
  // Replaces *comm by a SharingCommunicator around it and makes the FG stream current on the
  // calling thread, which must be the FG thread. Call before the executor is created (its
  // modules then live on the FG stream). `streams`: null for the device's own (none on CPU);
  // tests pass a fake.
  static StatusOr<std::unique_ptr<DeviceSharing>> Attach(
      const BackgroundSpec& spec, torch::Device device, std::unique_ptr<Communicator>* comm,
      const Clock* clock, bool record_events = false,
      std::shared_ptr<DeviceStreams> streams = nullptr);
  // Stops the BG job, frees it (after its stream's work finished), then leaves the FG stream:
  // destroy it on the FG thread, after the executor.
  ~DeviceSharing();

  // Marks the BG job's units in `spans` while it records (`deepool trace`). Before Start.
  void TraceUnits(SpanRecorder* spans);
  // Starts the BG thread (after the executor was built, so that BG does not compete with it).
  void Start();
  // An "iteration" line with the window since the previous call (AddSharingFields).
  std::string Decorate(const std::string& iteration_line);
  // Stops the BG job and reports its progress (its failure, if any, in progress.status).
  BackgroundProgress Finish();

  DeviceGate& gate() { return *gate_; }

 private:
  DeviceSharing() = default;

  // Destroyed bottom up: the BG thread, the BG job, then the FG stream.
  std::unique_ptr<DeviceGate> gate_;
  std::unique_ptr<ScopedStream> fg_stream_;
  std::unique_ptr<BackgroundStepper> stepper_;
  std::unique_ptr<BackgroundRunner> runner_;
  std::string job_id_;
};

}  // namespace deepool::worker
