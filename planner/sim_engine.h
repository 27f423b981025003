// The cluster simulator's discrete-event engine: one foreground (FG) job's iteration as a
// sequence of gang steps over device sets, background (BG) jobs as per-device sequences of
// non-preemptible kernels, and a model of how the two share a device (docs/simulator.md).
//
// FG timeline. An FG iteration is a set of gang steps over device sets, each waiting for the
// steps it depends on (FgStep::after): per layer in topological order, the forward activation
// re-split from each producer on a different device set (on the union of both sets), then the
// layer's forward compute and, for batch norm on several devices, its statistics all-reduce (on
// its devices); then per layer in reverse order its backward compute (and batch norm's
// gradient-statistics all-reduce) and the backward re-split of the activation gradients to
// each producer; then, per gradient bucket in the order they run, the part of its all-reduce
// that the cost model finds exposed after backward (gradient_sync.h; the part hidden behind
// backward holds no device in this model). A step starts when the steps it waits for have
// ended, every device of its set is free and the iteration has begun (the previous one has
// ended). The cost model schedules the same steps the same way (cost_model.h), so without BG
// work the simulated iteration time equals the plan's predicted iteration time; plans whose
// layers all hold rank 0 run their steps one after another, concurrent branches side by side.
//
// Interference model (InterferenceModel):
//  - FG has priority: a BG kernel never starts while the device has FG work ready.
//  - BG work is non-preemptive at kernel granularity: a BG kernel that has started runs to its
//    end, so an FG step whose device is running one waits for that kernel's remaining time (and
//    the whole gang step waits for the slowest of its devices). A BG layer's forward and its
//    backward are one kernel each, or pieces of at most max_bg_kernel_ms (a stand-in for
//    block-level preemption by CUDA stream priorities).
//  - kGreedy starts the next BG kernel whenever the device is FG-idle (what a low-priority
//    stream does: it cannot know when FG work will arrive). kFitGaps starts it only if it ends
//    before the device's next FG step (a scheduler that knows the static FG plan); it never
//    delays FG.
//  - fg_slowdown >= 1 stretches every FG step that involves a device with a collocated BG job
//    (shared memory bandwidth, caches and SMs when both run; the CUDA runtime's own overheads).
//    BG kernels run at their profiled speed.
// Threading: pure functions over plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/cost_model.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace deepool::planner {

// One step of the FG iteration: devices busy together for duration_ms.
struct FgStep {
  std::string label;         // e.g. "conv1 fw", "fc2 resplit bw", "fc1 allreduce"
  std::vector<int> devices;  // ranks, ascending, distinct
  double duration_ms = 0;
  std::vector<int> after;  // indices of earlier steps of the iteration whose end it waits for
};

struct FgTimeline {
  int num_devices = 0;        // ranks 0..num_devices-1 exist
  int64_t global_batch = 0;   // samples per FG iteration
  std::vector<FgStep> steps;  // one iteration, in an order that respects `after`
  // The iteration time without BG work: when the last step ends (the file comment's rule).
  double iteration_ms() const;
  // Summed duration of the steps `device` takes part in.
  double BusyMs(int device) const;
};

// The FG timeline of `plan` (which must match `graph`), timed by `model` at the plan's device
// counts. Zero-length steps are left out.
StatusOr<FgTimeline> BuildFgTimeline(const Plan& plan, const CostModel& model);

struct BgKernel {
  std::string label;  // e.g. "conv1 fw", "conv1 bw 2/3"
  double duration_ms = 0;
};

// One iteration of a BG job (a whole model on one device) as its kernels in order: every
// layer's forward in topological order, then every backward in reverse. Zero-length kernels are
// left out; the optimizer step is not profiled and not modelled.
struct BgIteration {
  std::string model;
  int64_t batch = 0;  // per-device batch: samples per BG iteration
  std::vector<BgKernel> kernels;
  double iteration_ms() const;  // sum of the kernels
};

// max_kernel_ms > 0 splits each layer's forward and backward into equal pieces of at most that
// length; 0 keeps one kernel per layer and direction.
StatusOr<BgIteration> BuildBgIteration(const Graph& graph, const Profile& profile, int64_t batch,
                                       double max_kernel_ms = 0);

enum class BgPolicy { kGreedy, kFitGaps };
const char* BgPolicyName(BgPolicy policy);  // "greedy", "fit-gaps"

struct InterferenceModel {
  BgPolicy policy = BgPolicy::kGreedy;
  double fg_slowdown = 1.0;     // >= 1
  double max_bg_kernel_ms = 0;  // 0: one kernel per BG layer and direction
};

struct EngineOptions {
  int warmup_iterations = 3;  // FG iterations simulated before measuring
  int iterations = 40;        // FG iterations measured (>= 1)
  InterferenceModel interference;
};

// Per device, averaged over the measured FG iterations.
struct DeviceUsage {
  int device = 0;
  std::string bg_model;   // empty: no BG job on this device
  double fg_busy_ms = 0;  // per FG iteration
  double bg_busy_ms = 0;  // per FG iteration
  double idle_ms = 0;     // per FG iteration: neither FG nor BG
  double bg_samples_per_s = 0;
};

struct MultiplexResult {
  double fg_iteration_ms = 0;
  double fg_samples_per_s = 0;
  double bg_samples_per_s = 0;  // summed over devices
  double fg_delay_ms = 0;       // per iteration: fg_iteration_ms minus the BG-free iteration
  double window_ms = 0;         // simulated time the averages are taken over
  std::vector<DeviceUsage> devices;
};

// Runs the FG timeline for warmup + measured iterations with bg[d] (nullptr: none) on device d;
// bg must have fg.num_devices entries. BG kernels are counted by the part of them that falls in
// the measured window, so BG throughput counts fractional iterations.
StatusOr<MultiplexResult> SimulateMultiplexing(const FgTimeline& fg,
                                               const std::vector<const BgIteration*>& bg,
                                               const EngineOptions& options);

}  // namespace deepool::planner
