// The node contention the simulator is given for the validation cluster (simulator/
// node_contention.h; docs/simulator.md, "Node contention"): its two CPU devices share the 2-core
// VM with the coordinator, the worker and the harness, so two jobs side by side each run slower
// than one alone. Measured in the calibration phase: each one-device FG kind runs alone (the
// kinds' calibration, validation_replay.h) and then two copies at once, one on each device, as
// the kinds alone are: n and 3n iterations, so the per-job start overhead (which two jobs
// started at the same instant contend for harder than jobs started apart, as in the replay)
// drops out of the iteration time. The pairs run several times and each kind keeps the median:
// one pair of short runs cannot tell contention from a moment's noise on a shared machine (one
// such pair once measured 1.84 where the replay minutes later showed none).
// Threading: called from one thread (the replay's).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/pool_validation/validation_replay.h"
#include "common/status.h"
#include "simulator/node_contention.h"
#include "simulator/workload.h"

namespace deepool::bench {

struct ContentionCalibration {
  // Per one-device FG kind: its iteration time with two copies side by side (the difference of
  // the n- and 3n-iteration pairs' mean submit-to-finish times over 2n) over its iteration time
  // alone: the median of pair_samples' ratios.
  std::map<std::string, double> pair_ratio;
  // Per kind, each repetition's ratio, in the order measured; a repetition whose pairs gave no
  // positive iteration time (PairRatio's error) is left out.
  std::map<std::string, std::vector<double>> pair_samples;
  // slowdown(2): the kinds' mean ratio, at least 1 (a ratio below 1 is noise: two jobs do not
  // speed each other up).
  double two_devices = 1;
};

// One kind's ratio from its pairs of `iterations` (n) and 3n iterations and its time alone.
// INVALID_ARGUMENT for an empty pair or an iteration time alone or side by side <= 0.
StatusOr<double> PairRatio(const std::vector<RealJobRecord>& short_pair,
                           const std::vector<RealJobRecord>& long_pair,
                           const KindCalibration& alone, int64_t iterations);

// A kind's ratio from its repetitions: the median of those that measured (bench_util.h's Median:
// of an even count, the upper middle one). INVALID_ARGUMENT, the first repetition's error, when
// none did.
StatusOr<double> MedianPairRatio(const std::vector<StatusOr<double>>& repetitions);

// Runs two copies of each one-device FG job of `jobs` side by side, with its iterations and with
// three times as many, `repetitions` times (at least 1), and compares them with `kinds`.
// NOT_FOUND when a kind has no calibration, FAILED_PRECONDITION when no job is a one-device FG
// job, INVALID_ARGUMENT when no repetition of a kind measured (MedianPairRatio); the replay's
// errors.
StatusOr<ContentionCalibration> CalibrateContention(
    const std::vector<simulator::WorkloadJob>& jobs,
    const std::map<std::string, KindCalibration>& kinds, const ReplayTarget& target,
    int repetitions);

// The simulator's model of the calibrated node: slowdown {1, two_devices} on `device_type`.
simulator::NodeContention ContentionModel(const ContentionCalibration& calibration,
                                          const std::string& device_type, int devices_per_node);

}  // namespace deepool::bench
