// What a pool simulation measures (issue 44, docs/simulator.md, "Pool simulation"), from the
// per-job records of a PoolRun.
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>

#include "simulator/pool_simulator.h"

namespace deepool::simulator {

struct PoolMetrics {
  int64_t jobs = 0;
  int64_t fg_jobs = 0;
  // Job completion time (finish - arrival), seconds: over all jobs, then FG and BG apart.
  // Percentiles are nearest-rank.
  double mean_jct_s = 0;
  double p99_jct_s = 0;
  double fg_mean_jct_s = 0;
  double bg_mean_jct_s = 0;
  double makespan_s = 0;  // the last completion (the trace starts at 0)
  // Devices held / devices computing, each over total devices x makespan.
  double allocated_utilisation = 0;
  double busy_utilisation = 0;
  // Samples trained (iterations x global batch, summed over jobs) per second of makespan.
  double throughput_samples_per_s = 0;
  // While jobs arrive (PoolRun::window_s; 0 when they all arrive at once): devices computing
  // over devices, and samples trained per second.
  double window_busy_utilisation = 0;
  // Devices held over devices while jobs arrive: near 1 when the pool is saturated (jobs queue
  // for devices), whatever the held devices' busy fraction.
  double window_allocated_utilisation = 0;
  double window_samples_per_s = 0;
  // A FG job's slowdown: its completion time over its isolated time (alone, data parallel on the
  // devices it asked for, of its fastest allowed type: PoolJobInput::isolated_s); mean and p99 over
  // FG jobs.
  double fg_mean_slowdown = 0;
  double fg_p99_slowdown = 0;
  // Seconds from arrival to first start (queueing before a job first runs), mean over all jobs.
  double mean_wait_s = 0;
  int64_t moves = 0;        // allocation changes of running jobs, preemptions included
  int64_t preemptions = 0;  // of those, the ones that stopped a job
  int64_t decisions = 0;
};

PoolMetrics ComputePoolMetrics(const PoolRun& run);

}  // namespace deepool::simulator
