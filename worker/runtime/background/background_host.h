// An FG executor rank that accepts BG jobs while it runs: the worker daemon sends
// attach_background / detach_background commands on the executor's stdin (docs/formats.md,
// "Executor commands"), and the rank trains the attached job in its idle time, as a run spec's
// `background` field would (DeviceSharing), reporting it with "background" and
// "background_done" lines.
//
// Created before the executor, it wraps the rank's communicator so that waits mark the FG rank
// idle. While no BG job is attached that costs one uncontended mutex lock per wait and nothing
// else: no BG thread exists, and iteration lines are not decorated. At most one BG job at a time.
//
// Threading: Attach and Detach are called by the command thread; AfterIteration and Finish by
// the FG (executor) thread; the BG job runs on its runner's thread. mu_ guards the attached job.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/executor_events.h"
#include "worker/runtime/background/background_runner.h"
#include "worker/runtime/background/background_spec.h"
#include "worker/runtime/background/multiplex_gate.h"
#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/devices/device_streams.h"

namespace deepool::worker {

class BackgroundHost {
 public:
  // Replaces *comm by a SharingCommunicator around it and makes the FG stream current on the
  // calling thread, which must be the FG thread. `options` fix the gate's mode for every job
  // this rank will host, the eager units' wait for FG idle periods included (a job's own
  // `sharing` field only sets its BG thread's priority and its stream priority and graph use).
  // `streams`: null for the device's own (none on CPU); tests pass a fake.
  static StatusOr<std::unique_ptr<BackgroundHost>> Create(
      torch::Device device, SharingOptions options, std::unique_ptr<Communicator>* comm,
      const Clock* clock, std::shared_ptr<DeviceStreams> streams = nullptr);
  // Stops an attached job, then leaves the FG stream: destroy it on the FG thread.
  ~BackgroundHost();

  // Marks the units of every job attached from now on in `spans` while it records
  // (`deepool trace`); `spans` must outlive the host.
  void TraceUnits(SpanRecorder* spans);
  // Builds the job's trainer and starts its BG thread. FAILED_PRECONDITION when a job is
  // attached or the FG rank has finished; the spec's validation errors otherwise.
  Status Attach(const BackgroundSpec& spec);
  // Stops the attached job (status "detached"). NOT_FOUND when `job_id` is not attached.
  Status Detach(const std::string& job_id);
  // A job that could not be attached: its "background_done" line with status "error" is
  // reported after the next iteration.
  void Reject(const std::string& job_id, const std::string& message);

  // After each FG iteration: the iteration line (with the sharing fields while a job is
  // attached), then the attached job's "background" progress line, then any "background_done"
  // lines (job finished its iterations, failed, or was detached).
  std::vector<std::string> AfterIteration(const std::string& iteration_line);
  // After the FG rank's last iteration: stops an attached job, which ends with status
  // "host_ended" unless it had finished; returns the remaining "background_done" lines. Later
  // Attach calls fail.
  std::vector<std::string> Finish();

  DeviceGate& gate() { return *gate_; }

 private:
  struct Job {
    BackgroundSpec spec;
    std::unique_ptr<BackgroundStepper> stepper;
    std::unique_ptr<BackgroundRunner> runner;
  };
  BackgroundHost() = default;
  // Stops `job`, reopens the gate for the next one and returns the job's background_done line:
  // "error" if it failed, "ok" if it reached its iterations, else `why`. Call without mu_ (it
  // joins the BG thread).
  std::string End(Job& job, protocol::BackgroundEnd why);

  torch::Device device_{torch::kCPU};
  SharingOptions options_;
  const Clock* clock_ = nullptr;
  std::unique_ptr<DeviceGate> gate_;
  std::shared_ptr<DeviceStreams> streams_;  // null on CPU
  std::unique_ptr<ScopedStream> fg_stream_;
  SpanRecorder* spans_ = nullptr;  // guarded by mu_

  std::mutex mu_;
  std::unique_ptr<Job> job_;             // guarded by mu_
  std::vector<std::string> done_lines_;  // guarded by mu_: detached jobs, reported next
  bool finished_ = false;                // guarded by mu_
};

// A hosted BG job's progress and end as executor event lines (protocol/executor_events.h, whose
// writer they use: invalid UTF-8 in a message, such as a data file's name, is replaced):
// {"event":"background","job_id":J,"iterations":K,"samples_per_s":S,"loss":L|null}
std::string BackgroundProgressLine(const std::string& job_id, const BackgroundProgress& p);
// {"event":"background_done","job_id":J,"status":"ok"|"error"|"detached"|"host_ended",
//  "iterations":K,"samples_per_s":S,"loss":L|null,"message":M}
std::string BackgroundDoneLine(const std::string& job_id, protocol::BackgroundEnd status,
                               const BackgroundProgress& p, const std::string& message);

}  // namespace deepool::worker
