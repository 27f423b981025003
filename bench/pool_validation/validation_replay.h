// Replays a workload trace on a real cluster (issue 44, point 6): each job is submitted through
// the coordinator's gRPC API as its user at its arrival time (seconds after the replay starts),
// then every job is watched until it ends, and its submit, first start and finish times are read
// from the coordinator's job record (the state transitions' wall-clock times). Also the
// calibration the simulator is given: each job kind run alone, its iteration time as the
// executors report it and the rest of its submit-to-finish time as its per-job overhead.
// Threading: called from one thread; the stubs are gRPC's (thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "simulator/workload.h"

namespace deepool::bench {

// The stub that submits and reads jobs as `user`.
using StubForUser = std::function<v1::CoordinatorService::Stub&(const std::string& user)>;

// Where the replay sends its jobs.
struct ReplayTarget {
  StubForUser stub_for;
  std::string checkpoint_root;  // BG jobs' checkpoints go under it (ValidationSpecJson)
  double timeout_s = 600;
};

// A job's spec for the coordinator: the trace row's fields, an analytical profile (no profiling
// run before the plan), SGD and synthetic data. A BG job also keeps periodic checkpoints in
// CHECKPOINT_ROOT/NAME every 50 iterations: without them the coordinator restarts a BG job from
// iteration 0 whenever its FG host ends, and gives it up after 20 such restarts, while the
// simulator moves BG jobs through checkpoints.
std::string ValidationSpecJson(const simulator::WorkloadJob& job, const std::string& name,
                               const std::string& checkpoint_root);

// What happened to one job on the cluster, seconds from the replay's start (wall clock).
struct RealJobRecord {
  int64_t id = 0;
  std::string job_id;   // the coordinator's
  double submit_s = 0;  // the job record's submitted_ms
  double start_s = 0;   // its first RUNNING transition
  double finish_s = 0;  // its SUCCEEDED transition
  // The executors' last report: rank 0's iteration time (a BG job: its batch over its
  // samples/s), and rank 0's busy share of it (1 when not reported).
  double iteration_s = 0;
  double busy_fraction = 1;
};

// Submits every job at its arrival_s (named name_prefix + id) and waits until all have ended,
// polling each pending one every 200 ms. DEADLINE_EXCEEDED after the target's timeout; INTERNAL
// naming the job when one fails or is cancelled (its reason quoted) or a submission is refused
// (the RPC's message).
StatusOr<std::vector<RealJobRecord>> ReplayOnCluster(
    const std::vector<simulator::WorkloadJob>& jobs, const ReplayTarget& target,
    const std::string& name_prefix = "job-");

// A job kind's speed and overhead on this cluster, measured alone: two runs, of `iterations` and
// of three times as many.
struct KindCalibration {
  int64_t iterations = 0;  // the shorter run's
  double short_s = 0;      // the shorter run's submit to finish
  double long_s = 0;       // the longer run's
  // Seconds per iteration: (long_s - short_s) / (2 x iterations).
  double iteration_s = 0;
  double reported_iteration_s = 0;  // the longer run's last iteration as the executors report it
  double busy_fraction = 1;         // the longer run's rank 0 (RealJobRecord::busy_fraction)
  // short_s - iterations x iteration_s: scheduling, planning, starting the executors, their
  // rendezvous, first-iteration warm-up, the final checkpoint and the report.
  double overhead_s = 0;
};

// A kind's calibration from its two runs' durations (iteration_s and overhead_s derived), the
// executors' report left as default.
KindCalibration KindFromDurations(int64_t iterations, double short_s, double long_s);

// A kind measured by the median of its repetitions' shorter runs and, separately, of their longer
// runs (of an even count the upper middle, as bench_util.h's Median), its iteration time and
// overhead derived from the two medians: one run slowed for a moment by other work on the machine
// is left out of both, where keeping a repetition whole would carry its slow half into the
// overhead or the iteration time. The executors' report is the one of the repetition whose longer
// run is the median. INVALID_ARGUMENT for no repetitions, repetitions of different iteration
// counts, or medians whose longer run took no longer than the shorter (a machine too busy to
// calibrate on).
StatusOr<KindCalibration> MedianKindCalibration(const std::vector<KindCalibration>& repetitions);

// Runs each of `jobs` alone (one after another), once as given and once with three times its
// iterations, `repetitions` times (at least 1), and returns every repetition's measurement of its
// kind (validation_trace.h KindKey), in the order measured. The jobs are named after
// `name_prefix`, which must differ between calls on one cluster: a BG job's checkpoints are kept
// by name, and a second job of the same name would resume from the first one's last checkpoint
// (after the replay, that measured nothing). Errors as ReplayOnCluster's; INVALID_ARGUMENT for
// repetitions < 1.
StatusOr<std::map<std::string, std::vector<KindCalibration>>> MeasureKinds(
    const std::vector<simulator::WorkloadJob>& jobs, const ReplayTarget& target, int repetitions,
    const std::string& name_prefix);

// Each kind measured by the medians of its repetitions (MedianKindCalibration): a run on a
// machine shared with other work can be slowed for a moment. The kinds' errors, naming the kind.
StatusOr<std::map<std::string, KindCalibration>> MedianKinds(
    const std::map<std::string, std::vector<KindCalibration>>& repetitions);

// Each kind's repetitions of `before`, then those of `after`: the calibration on both sides of a
// replay, so that a machine that slows down or speeds up while the replay runs is measured at
// both ends of it, not only at the start.
std::map<std::string, std::vector<KindCalibration>> BothSides(
    std::map<std::string, std::vector<KindCalibration>> before,
    const std::map<std::string, std::vector<KindCalibration>>& after);

}  // namespace deepool::bench
