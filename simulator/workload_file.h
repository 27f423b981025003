// The workload replay file (docs/simulator.md, "Workload traces"): JSON Lines. Line 1 is the
// header {"format": "deepool.workload", "version": 1, "reference_device": ..., "devices": ...,
// "jobs": ..., "generator": {the options and seed}}; every further line is one job
// (WorkloadJob, with its fields' names), in arrival order. The generator writes these files and
// the pool simulator replays them; hand-written ones (a few jobs for the real daemons) leave
// "generator", "devices" and "jobs" out.
// Threading: plain values and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "simulator/workload.h"
#include "simulator/workload_options.h"

namespace deepool::simulator {

inline constexpr std::string_view kWorkloadFormat = "deepool.workload";
inline constexpr int kWorkloadVersion = 1;

struct WorkloadHeader {
  // The device type each job's duration_s is timed on.
  std::string reference_device = "v100";
  // The pool capacity the trace's load was computed against; 0: not stated.
  int devices = 0;
  // The options (with the seed) that generated the trace; absent in hand-written traces.
  std::optional<WorkloadOptions> generator;
};

struct Workload {
  WorkloadHeader header;
  std::vector<WorkloadJob> jobs;  // in arrival order, ids unique
};

// The file's text: the header line, then one line per job, each ending in '\n'. Fields at their
// empty value (iterations 0, duration_s 0, device_type "") are left out.
std::string WriteWorkload(const Workload& workload);

// Reads and checks every line: the header's format and version, every job's fields (unknown
// ones refused) and ranges (ValidateWorkloadJob), unique ids, arrival order, and the header's
// job count when given. Errors are INVALID_ARGUMENT and name the line and the field:
// "line 12: gpus: must be in [1, 4096]", "line 3: missing field model",
// "line 1: generator.load: must be in (0, 10]".
StatusOr<Workload> ParseWorkload(std::string_view text);

}  // namespace deepool::simulator
