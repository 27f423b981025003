// The pool simulator (issue 44): replays a workload trace on a pool of devices under a fake
// clock, with the planner's cost model standing in for execution, and asks a scheduling policy
// (pool_policy.h) for every job's allocation at each decision point: whenever jobs arrive or
// finish, and every `round_s` seconds while jobs are in the pool (Gavel's rounds).
//
// Between decisions every running job progresses at the rate of its allocation:
// - a FG job at 1 / (its plan's iteration time on its devices), burst parallel or data parallel
//   as allocated, slowed by fg_interference while BG jobs run inside its devices;
// - a BG job on a device of its own at 1 / (its one-device iteration time);
// - a BG job inside a FG job's devices (multiplexed) at multiplex_efficiency x the host plan's
//   idle fraction of one device / (its one-device iteration time on the host's type);
// each slowed further, on a type listed in node_contention, by its nodes' load.
// A job whose allocation changes while it runs (a move or a preemption) is checkpointed, so it
// loses no work, and when it runs again it first spends checkpoint_restore_s restoring (no
// progress, devices held). A job's first start costs nothing. BG jobs inside a host that moves
// move with it and pay the same. docs/simulator.md, "Pool simulation".
// Threading: SimulatePool is a pure function of its inputs and the policy's answers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "simulator/node_contention.h"
#include "simulator/pool_policy.h"
#include "simulator/workload.h"

namespace deepool::simulator {

struct PoolOptions {
  std::vector<PoolDeviceType> device_types;  // the pool: devices per type
  double round_s = 360;                      // the round timer (Gavel's 6-minute rounds)
  // Seconds a moved or resumed job spends writing and restoring its checkpoint before it
  // progresses again (an assumption, not a measurement: about a minute to save and reload a
  // few GB of weights and optimizer state and to rebuild the executors).
  double checkpoint_restore_s = 60;
  // The fraction of its host's idle device time a multiplexed BG job turns into training (low
  // priority streams and CUDA graphs recover most, not all, of it; an assumption).
  double multiplex_efficiency = 0.8;
  // How much slower a FG job runs while BG jobs share its devices (DeepPool reports a few per
  // cent; an assumption).
  double fg_interference = 0.03;
  // Device types whose devices share their node's host (CPU devices): every running job of such
  // a type is slowed by ContentionFactor while others compute on its nodes (node_contention.h).
  // Empty by default: GPUs do not contend so.
  std::vector<NodeContention> node_contention;
  // The simulation gives up (DEADLINE_EXCEEDED) when the fake clock passes this.
  double max_time_s = 1e9;
};

// One job of the trace as the simulator replays it.
struct PoolJobInput {
  const WorkloadJob* job = nullptr;
  std::shared_ptr<const JobCurves> curves;
  int64_t iterations = 0;  // what it trains (IterationsFor)
  // Seconds it takes alone, data parallel on its `gpus` devices of the fastest type it may use:
  // the yardstick of its slowdown.
  double isolated_s = 0;
};

// What happened to one job.
struct PoolJobRecord {
  int64_t id = 0;
  WorkloadRole role = WorkloadRole::kFg;
  double arrival_s = 0;
  double start_s = -1;   // first allocation
  double finish_s = -1;  // last iteration done
  double isolated_s = 0;
  int64_t iterations = 0;
  int64_t global_batch = 0;
  int moves = 0;        // allocation changes while it ran, preemptions included
  int preemptions = 0;  // of those, the ones that stopped it
  double device_s = 0;  // device-seconds held (multiplexed BG: 0)
};

struct PoolRun {
  std::vector<PoolJobRecord> jobs;  // in trace order
  int64_t decisions = 0;            // policy calls
  double end_s = 0;                 // the last completion
  double allocated_device_s = 0;    // devices held (FG and own-device BG) x seconds
  // Devices computing x seconds: FG jobs' busy fraction of their devices outside restores,
  // own-device BG jobs' whole device, multiplexed BG jobs' share of their host's idle time.
  double busy_device_s = 0;
  int total_devices = 0;
  // The same while jobs still arrive, [0, the last arrival]: the pool's steady state, before the
  // trace's tail of long jobs drains (what a cluster that never stops receiving jobs sees).
  double window_s = 0;
  double window_busy_device_s = 0;
  double window_allocated_device_s = 0;  // devices held x seconds in the window, restores included
  double window_samples = 0;             // iterations x global batch trained in the window
};

// Replays `inputs` (in arrival order, as the workload lists them) under `policy`.
// INVALID_ARGUMENT for inputs without curves or iterations; FAILED_PRECONDITION when the policy
// answers an impossible allocation (the message names the job, the time and the rule: an
// unknown job, a device type the job may not use, a device count its curve lacks, more devices
// than a type has, a BG host that is not a running FG job or holds more guests than devices)
// or leaves jobs waiting on an idle pool with no arrivals left; the policy's own errors as it
// gives them.
StatusOr<PoolRun> SimulatePool(const std::vector<PoolJobInput>& inputs, const PoolOptions& options,
                               PoolPolicy& policy);

}  // namespace deepool::simulator
