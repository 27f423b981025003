// Runs a BG job's units on its own thread, each one only when the device gate allows it, until
// the job's iteration count is reached, Stop() is called, or a unit fails (the failure is kept
// and reported; it never touches the FG rank).
//
// Threading: the runner owns one BG thread that drives the stepper; progress() and Stop() may be
// called from any thread (progress is guarded by a mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "worker/runtime/background/background_trainer.h"
#include "worker/runtime/profiling/micro_batch_tuner.h"
#include "worker/runtime/background/multiplex_gate.h"
#include "worker/runtime/profiling/span_recorder.h"

namespace deepool::worker {

struct BackgroundProgress {
  int64_t iterations = 0;  // finished BG iterations (from the stepper's first_iteration)
  int64_t units = 0;
  int64_t micro_batches = 1;   // the stepper's split of its batch, for the next iteration
  double longest_unit_ms = 0;  // the longest forward or backward unit of the last iteration
  double unit_bound_ms = 0;    // the gate's bound when that iteration ended (0: none)
  int64_t samples = 0;  // trained since Start(): iterations of this run * batch size
  double last_loss = 0;
  double first_loss = 0;     // of this run's first iteration
  double elapsed_ms = 0;     // since Start()
  double samples_per_s = 0;  // samples / elapsed
  bool finished = false;     // stopped, done or failed
  Status status;
};

class BackgroundRunner {
 public:
  // `stepper`, `gate` and `clock` must outlive the runner. max_iterations 0: no limit; a job
  // counts its iterations from stepper->first_iteration() (a resumed job), and the limit is on
  // that count. The stepper's AfterUnit runs after each unit, outside the gate.
  // `thread_init` runs first on the BG thread (e.g. to lower its CPU priority); what it returns
  // is kept alive until the thread ends. Then the thread calls stepper->EnterThread() (e.g. the
  // BG stream becomes current), and asks the gate before each unit whether the stepper's next
  // unit needs the FG rank idle.
  BackgroundRunner(BackgroundStepper* stepper, DeviceGate* gate, const Clock* clock,
                   int64_t max_iterations, std::function<std::shared_ptr<void>()> thread_init = {});
  ~BackgroundRunner();  // stops and joins

  // Marks each unit as a "background" span named `unit_name` while `spans` records a window
  // (`deepool trace`). Call before Start; `spans` must outlive the runner.
  void TraceUnits(SpanRecorder* spans, std::string unit_name);
  // After each iteration, splits the stepper's batch into as many micro-batches as keep its
  // forward and backward units under the gate's UnitBoundMs() (micro_batch_tuner.h). A stepper
  // that refuses (batch norm, CUDA graphs) is told once, logged, and left whole. Call before
  // Start.
  void KeepUnitsUnderBound() { keep_units_under_bound_ = true; }
  // The clock units are timed with for the bound; default: the runner's clock. On a CPU device,
  // ThreadCpuClock: a unit's CPU time is what an FG rank waiting for it waits, whereas its wall
  // time also counts the FG rank computing while the OS holds the BG thread back. Call before
  // Start; `unit_clock` must outlive the runner.
  void TimeUnitsWith(const Clock* unit_clock) { unit_clock_ = unit_clock; }
  void Start();
  // Stops the gate and joins the thread: ends after the unit in progress.
  void Stop();
  // Blocks until the BG thread ended (iteration limit, failure, or Stop from elsewhere).
  void Join();
  BackgroundProgress progress() const;

 private:
  void Loop();
  // After an iteration whose longest splittable unit took `longest_ms`.
  void AdaptMicroBatches(double longest_ms);

  BackgroundStepper* stepper_;
  DeviceGate* gate_;
  const Clock* clock_;
  const int64_t max_iterations_;
  std::function<std::shared_ptr<void>()> thread_init_;
  SpanRecorder* spans_ = nullptr;
  std::string unit_name_;
  bool keep_units_under_bound_ = false;  // BG thread only after Start
  const Clock* unit_clock_;
  MicroBatchTuner tuner_;  // BG thread only
  Clock::TimePoint start_{};
  mutable std::mutex mu_;
  BackgroundProgress progress_;
  std::thread thread_;
};

// Puts the calling thread in Linux's SCHED_IDLE class (it runs only when no other thread of the
// machine wants its core); UNAVAILABLE where the OS refuses.
Status DemoteCurrentThreadToIdle();

// The iteration event's BG fields, added to an "iteration" line (executor_events.h) when a BG
// job shares the rank's device. With a BG job, "idle_ms" becomes the device's idle time (neither
// FG nor BG computing); "busy_ms" stays the FG rank's.
//   "fg_busy_ms", "bg_busy_ms", "idle_ms", "bg_samples_per_s" (since the BG job started),
//   "bg_iterations", "bg_loss" (the last finished BG iteration's, or null),
//   "fg_bg_overrun_ms" (the FG rank waiting for BG units), "fg_wait_timeouts",
//   "bg_micro_batches", "bg_unit_bound_ms", "bg_longest_unit_ms"
std::string AddSharingFields(const std::string& iteration_line, const SharingWindow& window,
                             const BackgroundProgress& progress);

}  // namespace deepool::worker
