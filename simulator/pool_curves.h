// The pool simulator's inputs from a workload and the planner: every job's speed-up curves on
// each device type of the pool (planner/speedup_curve.h, cached per model, batch and
// amplification limit), the iterations it trains and its isolated time. docs/simulator.md,
// "Pool simulation".
// Each type is timed by its analytical device model (planner/device_model.h) at the preset's
// default precision, on its default cluster preset's links (DefaultClusterPresetFor).
// Threading: pure functions; the cache is thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "planner/speedup_curve_cache.h"
#include "simulator/pool_simulator.h"
#include "simulator/workload_file.h"

namespace deepool::simulator {

struct PoolCurveOptions {
  std::vector<std::string> device_types = {"a100", "h100", "v100"};
  // Curves cover 1..max_devices; 0: the most devices any job of the workload asks for.
  int max_devices = 0;
};

// One input per workload job, in the workload's order, pointing into `workload` (which must
// outlive them). A job's iterations are IterationsFor its duration at the data-parallel
// iteration time on its `gpus` devices of the reference type (as the trace's durations are
// timed), and its isolated time those iterations data parallel on `gpus` devices of the fastest
// type it may use. Errors name the model and device type (an unknown zoo model, a batch
// the planner refuses).
StatusOr<std::vector<PoolJobInput>> PlanPoolInputs(const Workload& workload,
                                                   const PoolCurveOptions& options,
                                                   planner::SpeedupCurveCache& cache);

// The pool's device types with `devices` split evenly over them (the first types take the
// remainder).
std::vector<PoolDeviceType> EvenPool(const std::vector<std::string>& device_types, int devices);

}  // namespace deepool::simulator
