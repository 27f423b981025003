// Starting a run from weights (the run spec's "init"): a state_dict file, a torch archive or a
// safetensors file (safetensors.h), loaded into this rank's layers before the first iteration.
// The check is strict, as torch's load_state_dict(strict=True): every parameter and buffer of
// every layer the rank holds must be in the file with its shape, and a key of no graph layer is
// refused (checkpoint.h, LoadStateDictInto); errors name the file and the first keys. A periodic
// checkpoint to resume from (periodic_checkpoints.h) is loaded after it and wins.
// Threading: the rank's training thread, before training starts.
#pragma once

#include <string>

#include "common/status.h"
#include "planner/graph.h"
#include "worker/runtime/executor.h"

namespace deepool::worker {

// Returns how many tensors the file held.
StatusOr<int> LoadInitialWeights(const std::string& path, const planner::Graph& graph,
                                 const Executor& executor);

}  // namespace deepool::worker
