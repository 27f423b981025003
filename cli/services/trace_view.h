// `deepool trace`: the coordinator's TraceJob answer as a Timeline (common/timeline.h), ready to
// write as a Chrome trace or SVG, and a short text summary of where each rank's time went.
// Threading: pure functions.
#pragma once

#include <string>

#include "common/status.h"
#include "common/timeline.h"
#include "deepool/v1/coordinator.pb.h"

namespace deepool::cli {

// One track per rank that answered ("rank 2 (node-b cpu:1)"), and for a rank that ran BG units
// one more after it for them ("rank 2 BG"); times from the earliest span
// (ranks' clocks are each host's wall clock, so ranks on different hosts line up only as well
// as those clocks agree). INVALID_ARGUMENT for a span of an unknown kind.
StatusOr<Timeline> TimelineOfTrace(const v1::TraceJobResponse& trace);

// Per rank: the iterations recorded, the mean iteration time, and the share of it in each kind
// of span (waits are the rank's idle time; BG units apart); ranks that sent nothing or not all
// are named.
std::string TraceSummary(const v1::TraceJobResponse& trace);

}  // namespace deepool::cli
