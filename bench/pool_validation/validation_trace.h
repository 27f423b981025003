// The small trace the pool simulator is validated on against the real daemons (issue 44,
// point 6; docs/benchmarks.md, "Pool simulator against the real daemons"): short jobs of a few
// kinds, each seconds long on one CPU device of this 2-core machine, from several users,
// arriving at random over a window of a few minutes. Jobs are given in iterations, so the
// simulator and the cluster train exactly the same work.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/workload.h"
#include "simulator/workload_file.h"

namespace deepool::bench {

// One kind of job of the trace: a zoo model at a batch on `gpus` devices, FG or BG, with its
// iterations drawn uniformly in [min_iterations, max_iterations].
struct ValidationJobKind {
  std::string model;
  int64_t global_batch = 1;
  int gpus = 1;
  simulator::WorkloadRole role = simulator::WorkloadRole::kFg;
  int64_t min_iterations = 1;
  int64_t max_iterations = 1;
  double weight = 1;  // relative frequency in the trace
};

// "small_cnn/128/1/fg": what a calibration of one job is kept under.
std::string KindKey(const simulator::WorkloadJob& job);

// The kinds the validation trace draws from: small_cnn at batch 512 on one and on two devices
// and vit_tiny at batch 128 on one device (FG), vit_tiny at batch 64 (BG); each job 3-20 s alone
// on one CPU thread.
const std::vector<ValidationJobKind>& ValidationKinds();

struct ValidationTraceOptions {
  int jobs = 40;
  // Arrivals uniform over [0, window], sorted. 300 s keeps the two devices about half busy: at
  // 180 s they were nearly always busy and the mean JCT multiplied a speed error by about four
  // (validation_sim.h MeanJctSensitivity).
  double arrival_window_s = 300;
  int users = 4;  // user1..userN, drawn uniformly
  uint64_t seed = 1;
  // Every kind's iteration range scaled by this (at least 1 iteration): shorter jobs for the
  // harness's quick check.
  double iteration_scale = 1;
};

// The trace: `jobs` jobs drawn from ValidationKinds, ids 0.. in arrival order, arrival times
// rounded to milliseconds; the same options give the same trace.
simulator::Workload MakeValidationTrace(const ValidationTraceOptions& options);

// One job of each kind that `workload` holds, at its kind's smallest iteration count (scaled as
// the trace's), all arriving at 0: what the calibration runs alone.
std::vector<simulator::WorkloadJob> OneJobPerKind(const simulator::Workload& workload,
                                                  double iteration_scale);

}  // namespace deepool::bench
