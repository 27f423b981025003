// Gradient accumulation's view of a data source (ExecutorOptions::accumulation_steps): each
// iteration's batch of B rows split into `steps` micro-batches of B / steps rows, each presented
// as an iteration of its own. Iteration i * steps + m of the view is micro-batch m of the source's
// iteration i: its row r is the source's row m * (B / steps) + r of iteration i. So the passes of
// an iteration read exactly the rows, in the same order, that the iteration reads without
// accumulation, and checkpoints' data positions and epochs (counted in the source's iterations)
// are unchanged. A prefetching wrapper (WithPrefetch) around the view fetches the next pass.
// Threading: as the source's (one thread at a time).
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/runtime/data/data.h"

namespace deepool::worker {

// INVALID_ARGUMENT unless steps >= 1 and divides source->global_batch() ("a global batch of 30
// does not split into 4 micro-batches of equal size"). steps 1 returns the source itself.
StatusOr<std::unique_ptr<DataSource>> MicroBatches(std::unique_ptr<DataSource> source,
                                                   int64_t steps);

}  // namespace deepool::worker
