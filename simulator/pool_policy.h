// What the pool simulator (pool_simulator.h) shows a scheduling policy and what it takes back
// (issue 44): a snapshot of the pool in, one allocation per job out. The simulator calls
// Decide at every decision point (an arrival, a completion, the round timer) and applies the
// answer; the coordinator's policies (coordinator/policy*) plug in through an adapter, so a
// simulated result is a result of the code that schedules the cluster. docs/simulator.md,
// "Pool simulation".
// Threading: plain values; a PoolPolicy is called from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "simulator/workload.h"

namespace deepool::simulator {

// What `devices` devices of one type give a job, from the planner's speed-up curve.
struct PoolCurvePoint {
  int devices = 0;
  double burst_iteration_s = 0;  // the burst-parallel plan's iteration time on `devices`
  double dp_iteration_s = 0;     // data parallelism's on `devices`
  // The mean fraction of an iteration each of the `devices` devices computes under each plan;
  // the rest is idle time a BG job can fill (multiplexing).
  double burst_busy_fraction = 1;
  double dp_busy_fraction = 1;
};

// A job's curve on one device type, points by ascending device count.
struct PoolCurve {
  std::string device_type;
  std::vector<PoolCurvePoint> points;
  // The point for exactly `devices`, or nullptr.
  const PoolCurvePoint* At(int devices) const;
};

// A job's curves on every device type of the pool (shared by all jobs of one model, batch and
// amplification limit).
struct JobCurves {
  std::vector<PoolCurve> per_type;
  const PoolCurve* For(std::string_view device_type) const;  // nullptr for an unknown type
};

enum class Parallelism { kBurst, kDataParallel };
const char* ParallelismName(Parallelism parallelism);  // "burst", "dp"

// Where a job runs. A FG job holds `devices` devices of `device_type` (a point of its curve).
// A BG job either holds one device of its own (devices = 1, host_job = -1) or runs inside the
// idle time of a running FG job's devices (devices = 0, host_job = that job's id), at most one
// BG job per host device.
struct PoolAllocation {
  std::string device_type;  // empty: the job waits
  int devices = 0;
  Parallelism parallelism = Parallelism::kBurst;
  int64_t host_job = -1;

  bool running() const { return !device_type.empty(); }
  bool operator==(const PoolAllocation& other) const;
  bool operator!=(const PoolAllocation& other) const { return !(*this == other); }
};

// One job that has arrived and not finished.
struct PoolJobView {
  const WorkloadJob* job = nullptr;  // the trace's row (id, user, role, priority, gpus, ...)
  const JobCurves* curves = nullptr;
  int64_t total_iterations = 0;
  double done_iterations = 0;
  PoolAllocation allocation;      // the current one (waiting: device_type empty)
  double allocated_since_s = -1;  // when the current allocation began; -1 never ran
  double attained_device_s = 0;   // device-seconds held so far (multiplexed BG: 0)
  double run_s = 0;               // seconds it has held an allocation
  int moves = 0;                  // allocation changes while it ran, preemptions included
};

struct PoolDeviceType {
  std::string name;
  int devices = 0;
};

struct PoolSnapshot {
  double now_s = 0;
  // Seconds a moved job spends restoring before it progresses again (PoolOptions::
  // checkpoint_restore_s): what a move costs, for a policy that weighs it.
  double restart_s = 60;
  std::vector<PoolDeviceType> device_types;
  std::vector<PoolJobView> jobs;  // in arrival order
};

struct PoolDecision {
  int64_t job_id = 0;
  PoolAllocation allocation;
};

// The allocation of every job that runs until the next decision; a job not listed waits (a
// running job left out is preempted through a checkpoint).
struct PoolDecisions {
  std::vector<PoolDecision> run;
};

class PoolPolicy {
 public:
  virtual ~PoolPolicy() = default;
  virtual std::string name() const = 0;
  // Errors end the simulation (the simulator returns them with the time of the decision).
  virtual StatusOr<PoolDecisions> Decide(const PoolSnapshot& snapshot) = 0;
};

}  // namespace deepool::simulator
