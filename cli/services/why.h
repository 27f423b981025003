// `deepool status JOB --why`: why a job waits (or where it runs), in sentences. The scheduler's
// last decision comes as the job's reason code and sentence; this adds what stands behind it
// now: the job's place in the queue and the jobs ahead of it, the devices it needs against the
// free ones of each type, the nodes that take no work, and which jobs hold which devices.
// A pure function over what GetJob, ListJobs and ListNodes return, so it is tested without a
// coordinator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepool/v1/coordinator.pb.h"

namespace deepool::cli {

// `pending`: the PENDING jobs the caller may see (a user sees only their own; the job's queue
// position still counts everyone's). `nodes`: ListNodes. now_ms: for heartbeat ages. `summary`
// (ListJobs'): every user's share under the scheduling policy, beside the job's own standing
// (why_policy.h).
std::string WhyText(const v1::Job& job, const std::vector<v1::Job>& pending,
                    const std::vector<v1::Node>& nodes, int64_t now_ms,
                    const v1::ClusterSummary& summary = v1::ClusterSummary());

}  // namespace deepool::cli
