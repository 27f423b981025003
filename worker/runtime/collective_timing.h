// Timing this host's collectives for link calibration (planner/link_calibration.h): every rank
// of a communicator calls TimeCollectives together; rank 0 gets the samples.
//
// Measured: all-reduces of float tensors over ranks {0..g-1} for g = 2..world size, and messages
// from rank 0 to rank 1 (half a ping-pong's round trip), at sizes from min_bytes to max_bytes
// in steps of 4x; each the median of `repeats` runs after two warm-up runs. With busy_ms > 0
// every rank computes (matrix products on its thread) for that long before each run, as a
// training rank does between its collectives, so the time includes waking the waiting rank
// and its transport threads; back to back (0) they stay hot.
//
// Threading: one thread per rank, as the communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "planner/link_calibration.h"
#include "worker/runtime/communicator.h"

namespace deepool::worker {

struct CollectiveTimingOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 16 << 20;
  int repeats = 10;
  // Compute before each timed run (0: runs back to back). Back to back, this 2-vCPU VM's small
  // all-reduces measured 0.3 or 2 ms from run to run; after 5 ms of compute, five runs fitted
  // 1.28-1.62 ms, near the 1.5-2 ms a blocking collective costs in training here.
  double busy_ms = 5;
};

// Rank 0: the samples, all-reduces by device count then size, then the messages by size. Other
// ranks: empty. Errors (a failed collective) on any rank.
StatusOr<std::vector<planner::CollectiveSample>> TimeCollectives(
    Communicator& comm, const CollectiveTimingOptions& options);

}  // namespace deepool::worker
