// The comparison of a real replay with its simulation (issue 44, point 6): per job the real and
// simulated completion times (finish - submit on the cluster, finish - arrival in the
// simulator), and over the trace mean and p99 (nearest rank) completion time and makespan (the
// last finish, from the replay's start), each with the simulation's relative error.
// Threading: pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/pool_validation/validation_replay.h"
#include "simulator/pool_simulator.h"
#include "simulator/workload.h"

namespace deepool::bench {

struct JctSummary {
  // A job's completion time is its wait (submit to first start) plus its run (first start to
  // finish); the means of both say where an error in the mean JCT comes from.
  double mean_wait_s = 0;
  double mean_run_s = 0;
  double mean_jct_s = 0;
  double p99_jct_s = 0;
  double makespan_s = 0;
};

struct ValidationComparison {
  JctSummary real;
  JctSummary simulated;
  // (simulated - real) / real.
  double mean_wait_error = 0;
  double mean_run_error = 0;
  double mean_jct_error = 0;
  double p99_jct_error = 0;
  double makespan_error = 0;
};

// INVALID_ARGUMENT when the lists differ in length or order of ids, or hold no job.
StatusOr<ValidationComparison> CompareRuns(const std::vector<RealJobRecord>& real,
                                           const simulator::PoolRun& simulated);

// The table: one row per job (id, kind, user, arrival, real wait and JCT, simulated wait and
// JCT, relative error), then the summary rows.
std::string FormatComparison(const std::vector<simulator::WorkloadJob>& jobs,
                             const std::vector<RealJobRecord>& real,
                             const simulator::PoolRun& simulated,
                             const ValidationComparison& comparison);

}  // namespace deepool::bench
