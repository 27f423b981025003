// The pool simulator on the validation trace (issue 44, point 6): the same jobs, policy and
// device count as the real replay, every job's speed taken from this cluster's calibration
// (validation_replay.h MeasureKinds, MedianKinds) instead of the planner's analytical device
// models.
//
// The simulator charges nothing for a job's first start, while the real system spends a few
// seconds on every job (scheduling, planning, starting executors, their rendezvous, the final
// checkpoint). Each job's measured overhead is therefore spread over its iterations: its curve
// point's iteration time is iteration_s + overhead_s / iterations, so a job that runs without
// moving holds its devices for exactly overhead_s + iterations x iteration_s, as measured alone.
// Threading: pure functions of their inputs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/pool_validation/validation_replay.h"
#include "common/status.h"
#include "simulator/pool_simulator.h"
#include "simulator/workload_file.h"

namespace deepool::bench {

struct ValidationSimOptions {
  int devices = 2;                               // CPU devices of the cluster, one type "cpu"
  std::string configuration = "deeppool-bp-bg";  // pool_configurations.h: the coordinator's fifo
  // A moved or resumed job's restore (PoolOptions::checkpoint_restore_s); the harness sets it
  // to the mean measured start overhead (a restore restarts the executors).
  double restore_s = 0;
  // The node's host contention (validation_contention.h); empty: devices independent.
  std::vector<simulator::NodeContention> node_contention;
};

// Simulates `workload` (the run keeps no pointers into it).
// NOT_FOUND naming the kind when a job's kind has no calibration; the simulator's errors.
StatusOr<simulator::PoolRun> SimulateValidation(const simulator::Workload& workload,
                                                const std::map<std::string, KindCalibration>& kinds,
                                                const ValidationSimOptions& options);

// How much the simulated mean JCT moves when every kind is `slower` (0.05: 5 %) slower: its
// runs, iteration time, overhead and the restore all (1 + slower) times as long; the relative
// change of the mean JCT. How well the comparison is conditioned: a trace that keeps its devices
// nearly always busy queues every job behind the ones before, so a small error in the calibrated
// speeds becomes a large one in the waits (2026-12-07: at an arrival window of 180 s, 5 % slower
// moved the mean JCT of seed 1's 40 jobs by 22 %). INVALID_ARGUMENT for slower <= -1; the
// simulator's errors.
StatusOr<double> MeanJctSensitivity(const simulator::Workload& workload,
                                    const std::map<std::string, KindCalibration>& kinds,
                                    const ValidationSimOptions& options, double slower);

}  // namespace deepool::bench
