// The trace generator: a workload of options.jobs jobs drawn as Gavel's simulator draws its
// traces (docs/simulator.md, "Workload traces"), from one seed. The same options give the same
// jobs, and WriteWorkload the same bytes, on every platform (random_draws.h).
// Threading: pure function.
#pragma once

#include "common/status.h"
#include "simulator/workload_file.h"
#include "simulator/workload_options.h"

namespace deepool::simulator {

// Validates the options (an empty model mix means DefaultModelMix()) and draws the jobs, in
// arrival order with ids 0, 1, 2, ...; the header records the options.
StatusOr<Workload> GenerateWorkload(WorkloadOptions options);

}  // namespace deepool::simulator
