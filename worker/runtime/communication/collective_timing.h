// Timing this host's collectives for link calibration (planner/link_calibration.h): every rank
// of a communicator calls TimeCollectives together; rank 0 gets the samples.
//
// Measured: all-reduces of float tensors over ranks {0..g-1} for g = 2..world size, and messages
// from rank 0 to rank 1 (half a ping-pong's round trip), at sizes from min_bytes to max_bytes
// in steps of 4x; each summarised over `repeats` runs after two warm-up runs (by default their
// trimmed mean, CollectiveStatistic). With busy_ms > 0 every rank does the same work before each
// all-reduce (matrix products on its thread, as many as take busy_ms, averaged over the ranks), as
// training ranks do between their collectives, so the time includes waking the waiting rank and
// its transport threads and waiting for a rank that finished its work late; before each message
// only its sender works while the receiver waits, as a re-split's receiver waits for the layer
// that produces it, so the time includes waking the receiver but no lag of its own. Back to back
// (busy_ms 0) they stay hot.
//
// Threading: one thread per rank, as the communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "planner/link_calibration.h"
#include "worker/runtime/communication/communicator.h"

namespace deepool::worker {

// How a size's timed runs become its one figure. A rank that waits on a blocking collective in
// training pays, over an iteration's many collectives, their mean; on a busy host the times are
// often bimodal (a woken transport thread or a descheduled peer: 0.7 or 2.9 ms for the same 4 KiB
// all-reduce on this 2-vCPU VM), and a median then lands on either mode from one calibration to
// the next. The trimmed mean drops the fastest and slowest tenth of the runs (at least one each
// from 10 runs on), so one stall of the VM does not set the link.
enum class CollectiveStatistic { kTrimmedMean, kMedian };

// The figure `statistic` makes of `times_ms` (non-empty).
double SummariseMs(std::vector<double> times_ms, CollectiveStatistic statistic);

struct CollectiveTimingOptions {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 16 << 20;
  int repeats = 20;
  CollectiveStatistic statistic = CollectiveStatistic::kTrimmedMean;
  // About how long each rank computes before each timed run (0: runs back to back). Back to
  // back, this 2-vCPU VM's small all-reduces measured 0.3 or 2 ms from run to run; after about
  // 5 ms of equal work, six calibrations fitted latencies of 0.98-1.63 ms (about 2-3.3 ms for a
  // small all-reduce over two ranks), near the 2-3 ms a blocking collective costs in training.
  double busy_ms = 5;
  // The work `rank` does before a timed run: `products` of busy_ms's size (none when busy_ms is
  // 0). Empty: matrix products on the calling thread. Tests observe who works before what.
  std::function<void(int rank, int64_t products)> work;
};

// Rank 0: the samples, all-reduces by device count then size, then the messages by size. Other
// ranks: empty. Errors (a failed collective) on any rank.
StatusOr<std::vector<planner::CollectiveSample>> TimeCollectives(
    Communicator& comm, const CollectiveTimingOptions& options);

}  // namespace deepool::worker
