// Calibrating a cluster's link from measurement: collectives timed on this host's ranks
// (deepool-calibrate) are fitted with the cost model's own formulas (AllReduceMs in
// gradient_sync.h, Link::MessageMs for a re-split's messages), so that a plan's predicted
// communication is what this host's communication library does, not a preset's guess.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"

namespace deepool::planner {

struct CollectiveSample {
  enum class Kind { kAllReduce, kMessage };
  Kind kind = Kind::kAllReduce;
  int devices = 2;         // the all-reduce's device set (ranks 0..devices-1); 2 for a message
  int64_t bytes = 0;       // the all-reduce's tensor, or the message
  double measured_ms = 0;  // summarised over repeated runs (collective_timing.h's statistic)
};
std::string CollectiveKindName(CollectiveSample::Kind kind);  // "all-reduce", "message"

// What the cost model predicts for `sample` over `link` (one node of sample.devices devices).
double PredictCollectiveMs(const Link& link, const CollectiveSample& sample);

struct LinkFit {
  // Fitted to the messages; with all-reduces too, those are fitted on their own and set as the
  // link's collective_* figures (one library's messages and all-reduces can differ by 10x).
  Link link;
  // Over the samples, |log(predicted / measured)|: its mean and its largest.
  double mean_abs_log_error = 0;
  double worst_abs_log_error = 0;
};

// For each kind of sample, the latency (0.01 us .. 1 s) and bandwidth (1e-4 .. 1e4 GB/s) whose
// predictions have the least mean absolute log error over that kind: a log-spaced grid, then finer
// grids around the best. INVALID_ARGUMENT without samples, or for a sample that is not positive
// and finite.
StatusOr<LinkFit> FitLink(const std::vector<CollectiveSample>& samples);

// The mean and largest |log(predicted / measured)| of `link` over the samples.
LinkFit ScoreLink(const Link& link, const std::vector<CollectiveSample>& samples);

}  // namespace deepool::planner
